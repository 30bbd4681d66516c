//! Stale UDP conntrack cleanup: `plan` decides, from a sync's before and after views, which
//! conntrack flows would keep following an old verdict (a cached reject, a removed endpoint);
//! `delete_flows` removes exactly the entries matching them, over ctnetlink, in the calling
//! thread's network namespace.
//!
//! UDP has no connection teardown, so a conntrack entry lives as long as packets keep coming.
//! A DNS client that retries every second against a ClusterIP that had no endpoints (rejected)
//! or whose endpoint died (DNATed to nowhere) would keep hitting the cached entry forever; the
//! kernel only consults the ruleset again for a new entry. kube-proxy deletes these entries
//! after every sync, and so does kubenft.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use netlink_packet_core::{DecodeError, Emitable, Nla, ParseableParametrized};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Tuple,
};

use crate::nft::netlink::socket::{Message, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NfHeader};
use crate::nft::netlink::{NetlinkSocket, SocketError};

/// Transport protocol of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    /// IP protocol number, as conntrack reports it.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Sctp => 132,
        }
    }

    fn name(number: u8) -> Option<&'static str> {
        match number {
            6 => Some("tcp"),
            17 => Some("udp"),
            132 => Some("sctp"),
            _ => None,
        }
    }
}

/// A class of conntrack flows that no longer reflect the ruleset and must be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StaleFlow {
    /// Flows originally addressed to `ip:port` (a ClusterIP, external IP or load-balancer IP).
    ToService { ip: IpAddr, port: u16, proto: Proto },
    /// Flows originally addressed to `port` on any address (a NodePort).
    ToNodePort { port: u16, proto: Proto },
    /// Flows DNATed to `endpoint` (its replies come from it): with `service_ip`, only those
    /// originally addressed to that IP; without, every flow whose original destination was not
    /// the endpoint itself (NodePort flows arrive on node addresses nobody can list).
    ToEndpoint {
        service_ip: Option<IpAddr>,
        endpoint: SocketAddr,
        proto: Proto,
    },
}

impl StaleFlow {
    /// True when the conntrack entry `flow` belongs to this class.
    pub fn matches(&self, flow: &Flow) -> bool {
        match *self {
            StaleFlow::ToService { ip, port, proto } => {
                flow.proto == proto.number() && flow.orig_dst == SocketAddr::new(ip, port)
            }
            StaleFlow::ToNodePort { port, proto } => {
                flow.proto == proto.number() && flow.orig_dst.port() == port
            }
            StaleFlow::ToEndpoint {
                service_ip,
                endpoint,
                proto,
            } => {
                flow.proto == proto.number()
                    && flow.reply_src == endpoint
                    && match service_ip {
                        Some(ip) => flow.orig_dst.ip() == ip,
                        // Not DNATed: traffic straight to the pod is none of our business.
                        None => flow.orig_dst != endpoint,
                    }
            }
        }
    }

    fn proto(&self) -> Proto {
        match *self {
            StaleFlow::ToService { proto, .. }
            | StaleFlow::ToNodePort { proto, .. }
            | StaleFlow::ToEndpoint { proto, .. } => proto,
        }
    }
}

/// What `plan` needs to know about one UDP service port at one point in time. The integrator
/// builds it from the cluster model: `endpoints` are the ones the ruleset actually sends
/// traffic to (after readiness and traffic-policy filtering), so "none" means "rejected".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UdpServiceView {
    /// Identity of the service port (e.g. `ns/name:port-name`), unique within one slice.
    pub name: String,
    /// ClusterIPs, external IPs and load-balancer IPs.
    pub service_ips: Vec<IpAddr>,
    pub port: u16,
    pub node_port: Option<u16>,
    pub endpoints: Vec<SocketAddr>,
}

/// The flows made stale by going from `before` to `after` (kube-proxy's rules), sorted and
/// without duplicates:
///
/// 1. a port that had no endpoints (or did not exist) and now has some: its flows to every
///    service IP and to its NodePort, which conntrack remembers as rejected;
/// 2. an endpoint that is gone (or whose port is gone): the flows DNATed to it, for every
///    service IP of its family, or all of them when the port has a NodePort.
pub fn plan(before: &[UdpServiceView], after: &[UdpServiceView]) -> Vec<StaleFlow> {
    let by_name = |views: &'_ [UdpServiceView]| -> BTreeMap<String, UdpServiceView> {
        views.iter().map(|v| (v.name.clone(), v.clone())).collect()
    };
    let old = by_name(before);
    let new = by_name(after);
    let proto = Proto::Udp;
    let mut stale = BTreeSet::new();

    for view in new.values() {
        let had_endpoints = old.get(&view.name).is_some_and(|o| !o.endpoints.is_empty());
        if view.endpoints.is_empty() || had_endpoints {
            continue;
        }
        for &ip in &view.service_ips {
            stale.insert(StaleFlow::ToService {
                ip,
                port: view.port,
                proto,
            });
        }
        if let Some(port) = view.node_port {
            stale.insert(StaleFlow::ToNodePort { port, proto });
        }
    }

    for view in old.values() {
        let kept: BTreeSet<SocketAddr> = new
            .get(&view.name)
            .map(|n| n.endpoints.iter().copied().collect())
            .unwrap_or_default();
        for &endpoint in view.endpoints.iter().filter(|e| !kept.contains(e)) {
            if view.node_port.is_some() {
                // Subsumes the per-IP entries below.
                stale.insert(StaleFlow::ToEndpoint {
                    service_ip: None,
                    endpoint,
                    proto,
                });
                continue;
            }
            for &ip in &view.service_ips {
                if ip.is_ipv4() == endpoint.is_ipv4() {
                    stale.insert(StaleFlow::ToEndpoint {
                        service_ip: Some(ip),
                        endpoint,
                        proto,
                    });
                }
            }
        }
    }
    stale.into_iter().collect()
}

/// One conntrack entry's two directions, as the kernel reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// IP protocol number.
    pub proto: u8,
    pub orig_src: SocketAddr,
    pub orig_dst: SocketAddr,
    pub reply_src: SocketAddr,
    pub reply_dst: SocketAddr,
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Proto::name(self.proto) {
            Some(name) => write!(f, "{name}")?,
            None => write!(f, "proto {}", self.proto)?,
        }
        write!(
            f,
            " {} -> {} (reply {} -> {})",
            self.orig_src, self.orig_dst, self.reply_src, self.reply_dst
        )
    }
}

/// What `delete_flows` did.
#[derive(Debug, Default)]
pub struct DeleteReport {
    /// Entries deleted.
    pub deleted: usize,
    /// Matching entries that expired or were deleted by someone else before we got to them.
    pub already_gone: usize,
    /// Matching entries the kernel refused to delete.
    pub failed: Vec<DeleteFailure>,
    /// Dumped entries that could not be decoded, and so were neither matched nor deleted.
    pub undecodable: usize,
}

/// One entry that could not be deleted, and why.
#[derive(Debug)]
pub struct DeleteFailure {
    pub flow: Flow,
    pub error: std::io::Error,
}

#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("opening the ctnetlink socket: {0}")]
    Open(#[source] SocketError),
    #[error("dumping the conntrack table: {0}")]
    Dump(#[source] SocketError),
    #[error("deleting conntrack entries: {0}")]
    Delete(#[source] SocketError),
}

// linux/netfilter/nfnetlink.h and nfnetlink_conntrack.h, named as in the headers.
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;
const AF_UNSPEC: u8 = 0;
/// Deletes sent per datagram: the kernel handles each message of a non-batch datagram in turn
/// and acknowledges each, so a cleanup of thousands of entries costs tens of round trips.
const DELETE_CHUNK: usize = 128;

/// Deletes every conntrack entry of the calling thread's network namespace that matches one
/// of `flows`. An entry that vanished in the meantime counts as `already_gone`, not an error.
/// Deletes carry the dumped entry's id, so the kernel refuses one whose tuple now belongs to
/// another entry; the id is derived from the entry's memory, so an entry re-created in the
/// same slot may still be deleted, which only makes its next packet consult the rules again.
pub fn delete_flows(flows: &[StaleFlow]) -> Result<DeleteReport, ConntrackError> {
    let mut report = DeleteReport::default();
    if flows.is_empty() {
        return Ok(report);
    }
    let protos: BTreeSet<u8> = flows.iter().map(|f| f.proto().number()).collect();
    let mut sock = NetlinkSocket::open().map_err(ConntrackError::Open)?;
    let entries = dump(&mut sock, &mut report.undecodable, |flow| {
        protos.contains(&flow.proto) && flows.iter().any(|f| f.matches(flow))
    })?;
    delete_entries(&mut sock, &entries, &mut report)?;
    Ok(report)
}

/// Every conntrack entry (IPv4 and IPv6) of the calling thread's network namespace that has
/// ports, for inspection and tests.
pub fn list_flows() -> Result<Vec<Flow>, ConntrackError> {
    let mut sock = NetlinkSocket::open().map_err(ConntrackError::Open)?;
    let mut undecodable = 0;
    let entries = dump(&mut sock, &mut undecodable, |_| true)?;
    Ok(entries.into_iter().map(|e| e.flow).collect())
}

/// A dumped entry: its tuples for matching, and what identifies it exactly for deletion.
#[derive(Debug)]
struct Entry {
    flow: Flow,
    family: u8,
    key: Vec<ConntrackAttribute>,
}

fn ct_header(msg: u16, flags: u16, family: u8, seq: u32) -> NfHeader {
    NfHeader {
        msg_type: (NFNL_SUBSYS_CTNETLINK << 8) | msg,
        flags: flags | NLM_F_REQUEST,
        seq,
        family,
        res_id: 0,
    }
}

/// Dumps both families' tables and keeps the entries `keep` selects, filtering as the dump
/// streams in so a large table is never held in memory.
fn dump(
    sock: &mut NetlinkSocket,
    undecodable: &mut usize,
    mut keep: impl FnMut(&Flow) -> bool,
) -> Result<Vec<Entry>, ConntrackError> {
    let seq = sock.next_seq(1);
    let mut request = Vec::new();
    ct_header(IPCTNL_MSG_CT_GET, NLM_F_DUMP, AF_UNSPEC, seq).encode(&[], &mut request);
    sock.send(&request).map_err(ConntrackError::Dump)?;
    let mut kept = Vec::new();
    loop {
        for msg in sock.recv().map_err(ConntrackError::Dump)? {
            if msg.seq != seq {
                continue; // a late reply to an earlier request
            }
            if msg.is_done() {
                return Ok(kept);
            }
            if let Some(err) = msg.error().map_err(ConntrackError::Dump)? {
                if err.is_ack() {
                    continue;
                }
                return Err(ConntrackError::Dump(SocketError::Kernel {
                    request: "IPCTNL_MSG_CT_GET",
                    seq: err.seq,
                    message: err.message.clone(),
                    source: err.to_io(),
                }));
            }
            if msg.msg_type != (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW {
                continue;
            }
            match decode_entry(&msg) {
                Ok(Some(entry)) if keep(&entry.flow) => kept.push(entry),
                Ok(_) => {}
                Err(error) => {
                    // One odd entry must not stop the cleanup of the others.
                    tracing::warn!(%error, "skipping a conntrack entry that does not decode");
                    *undecodable += 1;
                }
            }
        }
    }
}

/// Decodes one dumped entry; `None` for entries without ports (ICMP and the like).
fn decode_entry(msg: &Message) -> Result<Option<Entry>, DecodeError> {
    let (family, _, attrs) = msg.nfgen().map_err(|e| DecodeError::from(e.to_string()))?;
    let parsed = ConntrackMessage::parse_with_param(attrs, IPCTNL_MSG_CT_NEW as u8)?;
    let ConntrackMessage::New(attrs) = parsed else {
        return Ok(None);
    };
    let (mut orig, mut reply) = (None, None);
    let mut key = Vec::new();
    for attr in attrs {
        match attr {
            ConntrackAttribute::CtaTupleOrig(tuple) => orig = Some(tuple),
            ConntrackAttribute::CtaTupleReply(tuple) => reply = Some(tuple),
            ConntrackAttribute::Other(nla) if matches!(nla.kind(), CTA_ID | CTA_ZONE) => {
                key.push(ConntrackAttribute::Other(nla))
            }
            _ => {}
        }
    }
    let (Some(orig), Some(reply)) = (orig, reply) else {
        return Err(DecodeError::from("conntrack entry without both tuples"));
    };
    let (Some((proto, orig_src, orig_dst)), Some((_, reply_src, reply_dst))) =
        (endpoints(&orig), endpoints(&reply))
    else {
        return Ok(None);
    };
    key.insert(0, ConntrackAttribute::CtaTupleOrig(orig));
    Ok(Some(Entry {
        flow: Flow {
            proto,
            orig_src,
            orig_dst,
            reply_src,
            reply_dst,
        },
        family,
        key,
    }))
}

/// Protocol number, source and destination of one tuple, if it has addresses and ports.
fn endpoints(tuple: &[Tuple]) -> Option<(u8, SocketAddr, SocketAddr)> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
    for part in tuple {
        match part {
            Tuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => src = Some(*a),
                        IPTuple::DestinationAddress(a) => dst = Some(*a),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(fields) => {
                for field in fields {
                    match field {
                        ProtoTuple::Protocol(p) => proto = Some(u8::from(*p)),
                        ProtoTuple::SourcePort(p) => sport = Some(*p),
                        ProtoTuple::DestinationPort(p) => dport = Some(*p),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((
        proto?,
        SocketAddr::new(src?, sport?),
        SocketAddr::new(dst?, dport?),
    ))
}

fn delete_entries(
    sock: &mut NetlinkSocket,
    entries: &[Entry],
    report: &mut DeleteReport,
) -> Result<(), ConntrackError> {
    for chunk in entries.chunks(DELETE_CHUNK) {
        let first = sock.next_seq(chunk.len() as u32);
        let mut request = Vec::new();
        for (i, entry) in chunk.iter().enumerate() {
            let mut attrs = vec![0u8; entry.key.as_slice().buffer_len()];
            entry.key.as_slice().emit(&mut attrs);
            let seq = first.wrapping_add(i as u32);
            ct_header(IPCTNL_MSG_CT_DELETE, NLM_F_ACK, entry.family, seq)
                .encode(&attrs, &mut request);
        }
        sock.send(&request).map_err(ConntrackError::Delete)?;
        let mut answered = vec![false; chunk.len()];
        let mut pending = chunk.len();
        while pending > 0 {
            for msg in sock.recv().map_err(ConntrackError::Delete)? {
                let Some(err) = msg.error().map_err(ConntrackError::Delete)? else {
                    continue;
                };
                let i = err.seq.wrapping_sub(first) as usize;
                if i >= chunk.len() || std::mem::replace(&mut answered[i], true) {
                    continue; // not one of ours, or already counted
                }
                pending -= 1;
                match err.errno {
                    0 => report.deleted += 1,
                    libc::ENOENT => report.already_gone += 1,
                    _ => report.failed.push(DeleteFailure {
                        flow: chunk[i].flow,
                        error: err.to_io(),
                    }),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::DefaultNla;

    fn raw_nla(kind: u16, value: &[u8]) -> DefaultNla {
        DefaultNla::new(kind, value.to_vec())
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn dns(endpoints: &[&str]) -> UdpServiceView {
        UdpServiceView {
            name: "kube-system/kube-dns:dns".into(),
            service_ips: vec![ip("10.96.0.10"), ip("fd00:96::a")],
            port: 53,
            node_port: None,
            endpoints: endpoints.iter().map(|e| sa(e)).collect(),
        }
    }

    fn udp_flow(orig_src: &str, orig_dst: &str, reply_src: &str) -> Flow {
        Flow {
            proto: 17,
            orig_src: sa(orig_src),
            orig_dst: sa(orig_dst),
            reply_src: sa(reply_src),
            reply_dst: sa(orig_src),
        }
    }

    #[test]
    fn a_port_gaining_its_first_endpoints_clears_flows_to_every_service_ip_and_its_node_port() {
        let before = UdpServiceView {
            node_port: Some(30053),
            ..dns(&[])
        };
        let after = UdpServiceView {
            node_port: Some(30053),
            ..dns(&["10.1.0.5:5353"])
        };
        assert_eq!(
            plan(&[before], &[after]),
            vec![
                StaleFlow::ToService {
                    ip: ip("10.96.0.10"),
                    port: 53,
                    proto: Proto::Udp
                },
                StaleFlow::ToService {
                    ip: ip("fd00:96::a"),
                    port: 53,
                    proto: Proto::Udp
                },
                StaleFlow::ToNodePort {
                    port: 30053,
                    proto: Proto::Udp
                },
            ]
        );
    }

    #[test]
    fn a_port_that_did_not_exist_before_counts_as_having_had_no_endpoints() {
        let flows = plan(&[], &[dns(&["10.1.0.5:5353"])]);
        assert_eq!(flows.len(), 2, "{flows:?}");
        assert!(
            flows
                .iter()
                .all(|f| matches!(f, StaleFlow::ToService { port: 53, .. }))
        );
    }

    #[test]
    fn a_port_that_keeps_some_endpoints_or_gains_more_clears_nothing() {
        let before = dns(&["10.1.0.5:5353"]);
        let after = dns(&["10.1.0.5:5353", "10.1.0.6:5353"]);
        assert_eq!(plan(std::slice::from_ref(&before), &[after]), vec![]);
        assert_eq!(
            plan(std::slice::from_ref(&before), std::slice::from_ref(&before)),
            vec![]
        );
        assert_eq!(plan(&[dns(&[])], &[dns(&[])]), vec![]);
    }

    #[test]
    fn a_removed_endpoint_clears_flows_from_each_same_family_service_ip_to_it() {
        let before = dns(&["10.1.0.5:5353", "10.1.0.6:5353", "[fd00:1::5]:5353"]);
        let after = dns(&["10.1.0.6:5353"]);
        assert_eq!(
            plan(&[before], &[after]),
            vec![
                StaleFlow::ToEndpoint {
                    service_ip: Some(ip("10.96.0.10")),
                    endpoint: sa("10.1.0.5:5353"),
                    proto: Proto::Udp
                },
                StaleFlow::ToEndpoint {
                    service_ip: Some(ip("fd00:96::a")),
                    endpoint: sa("[fd00:1::5]:5353"),
                    proto: Proto::Udp
                },
            ]
        );
    }

    #[test]
    fn an_endpoint_whose_port_changed_is_a_removed_endpoint() {
        let flows = plan(&[dns(&["10.1.0.5:5353"])], &[dns(&["10.1.0.5:5354"])]);
        assert_eq!(
            flows,
            vec![StaleFlow::ToEndpoint {
                service_ip: Some(ip("10.96.0.10")),
                endpoint: sa("10.1.0.5:5353"),
                proto: Proto::Udp
            }]
        );
    }

    #[test]
    fn a_removed_endpoint_of_a_node_port_service_clears_every_flow_dnated_to_it() {
        let before = UdpServiceView {
            node_port: Some(30053),
            ..dns(&["10.1.0.5:5353", "10.1.0.6:5353"])
        };
        let after = UdpServiceView {
            node_port: Some(30053),
            ..dns(&["10.1.0.6:5353"])
        };
        assert_eq!(
            plan(&[before], &[after]),
            vec![StaleFlow::ToEndpoint {
                service_ip: None,
                endpoint: sa("10.1.0.5:5353"),
                proto: Proto::Udp
            }]
        );
    }

    #[test]
    fn a_deleted_service_port_clears_flows_to_all_its_endpoints() {
        let flows = plan(&[dns(&["10.1.0.5:5353", "10.1.0.6:5353"])], &[]);
        let endpoints: Vec<SocketAddr> = flows
            .iter()
            .map(|f| match f {
                StaleFlow::ToEndpoint { endpoint, .. } => *endpoint,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(endpoints, vec![sa("10.1.0.5:5353"), sa("10.1.0.6:5353")]);
    }

    #[test]
    fn ports_are_compared_by_name_not_by_position() {
        let other = UdpServiceView {
            name: "default/other:udp".into(),
            service_ips: vec![ip("10.96.0.20")],
            port: 9000,
            node_port: None,
            endpoints: vec![sa("10.1.0.9:9000")],
        };
        let before = [other.clone(), dns(&["10.1.0.5:5353"])];
        let after = [dns(&["10.1.0.5:5353"]), other];
        assert_eq!(plan(&before, &after), vec![]);
    }

    #[test]
    fn a_service_flow_matches_only_its_destination_address_port_and_protocol() {
        let stale = StaleFlow::ToService {
            ip: ip("10.96.0.10"),
            port: 53,
            proto: Proto::Udp,
        };
        let hit = udp_flow("10.2.0.1:40000", "10.96.0.10:53", "10.96.0.10:53");
        assert!(stale.matches(&hit));
        assert!(!stale.matches(&Flow { proto: 6, ..hit }));
        assert!(!stale.matches(&udp_flow("10.2.0.1:40000", "10.96.0.10:54", "10.1.0.5:54")));
        assert!(!stale.matches(&udp_flow("10.2.0.1:40000", "10.96.0.11:53", "10.1.0.5:53")));
    }

    #[test]
    fn a_node_port_flow_matches_any_destination_address() {
        let stale = StaleFlow::ToNodePort {
            port: 30053,
            proto: Proto::Udp,
        };
        assert!(stale.matches(&udp_flow(
            "10.2.0.1:1",
            "192.168.1.7:30053",
            "192.168.1.7:30053"
        )));
        assert!(stale.matches(&udp_flow(
            "[fd00::1]:1",
            "[fd00::7]:30053",
            "[fd00::7]:30053"
        )));
        assert!(!stale.matches(&udp_flow(
            "10.2.0.1:30053",
            "192.168.1.7:53",
            "192.168.1.7:53"
        )));
    }

    #[test]
    fn an_endpoint_flow_matches_dnated_flows_and_leaves_direct_ones_alone() {
        let endpoint = sa("10.1.0.5:5353");
        let via_service = udp_flow("10.2.0.1:40000", "10.96.0.10:53", "10.1.0.5:5353");
        let via_node_port = udp_flow("10.2.0.1:40000", "192.168.1.7:30053", "10.1.0.5:5353");
        let direct = udp_flow("10.2.0.1:40000", "10.1.0.5:5353", "10.1.0.5:5353");
        let other_endpoint = udp_flow("10.2.0.1:40000", "10.96.0.10:53", "10.1.0.6:5353");
        let other_port = udp_flow("10.2.0.1:40000", "10.96.0.10:53", "10.1.0.5:5354");

        let scoped = StaleFlow::ToEndpoint {
            service_ip: Some(ip("10.96.0.10")),
            endpoint,
            proto: Proto::Udp,
        };
        assert!(scoped.matches(&via_service));
        assert!(!scoped.matches(&via_node_port));
        assert!(!scoped.matches(&direct));
        assert!(!scoped.matches(&other_endpoint));
        assert!(!scoped.matches(&other_port));

        let any = StaleFlow::ToEndpoint {
            service_ip: None,
            endpoint,
            proto: Proto::Udp,
        };
        assert!(any.matches(&via_service));
        assert!(any.matches(&via_node_port));
        assert!(!any.matches(&direct));
        assert!(!any.matches(&other_endpoint));
    }

    /// Bytes as the kernel dumps them: orig and reply tuples, a status, the id and a zone.
    fn dumped_entry(proto: u8, with_ports: bool) -> Message {
        let tuple = |src: IpAddr, dst: IpAddr, sport: u16, dport: u16| {
            let mut fields = vec![ProtoTuple::Protocol(proto.into())];
            if with_ports {
                fields.push(ProtoTuple::SourcePort(sport));
                fields.push(ProtoTuple::DestinationPort(dport));
            }
            vec![
                Tuple::Ip(vec![
                    IPTuple::SourceAddress(src),
                    IPTuple::DestinationAddress(dst),
                ]),
                Tuple::Proto(fields),
            ]
        };
        let attrs = vec![
            ConntrackAttribute::CtaTupleOrig(tuple(ip("10.2.0.1"), ip("10.96.0.10"), 40000, 53)),
            ConntrackAttribute::CtaTupleReply(tuple(ip("10.1.0.5"), ip("10.2.0.1"), 5353, 40000)),
            ConntrackAttribute::CtaTimeout(30),
            ConntrackAttribute::Other(raw_nla(CTA_ID, &7u32.to_be_bytes())),
            ConntrackAttribute::Other(raw_nla(CTA_ZONE, &3u16.to_be_bytes())),
        ];
        let mut body = vec![0u8; attrs.as_slice().buffer_len()];
        attrs.as_slice().emit(&mut body);
        let mut payload = vec![2, 0, 0, 0];
        payload.extend(body);
        Message {
            msg_type: (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW,
            flags: 0,
            seq: 1,
            pid: 0,
            payload,
        }
    }

    #[test]
    fn a_dumped_entry_decodes_to_its_flow_and_a_delete_key_with_id_and_zone() {
        let entry = decode_entry(&dumped_entry(17, true)).unwrap().unwrap();
        assert_eq!(
            entry.flow,
            Flow {
                proto: 17,
                orig_src: sa("10.2.0.1:40000"),
                orig_dst: sa("10.96.0.10:53"),
                reply_src: sa("10.1.0.5:5353"),
                reply_dst: sa("10.2.0.1:40000"),
            }
        );
        assert_eq!(entry.family, 2);
        let kinds: Vec<u16> = entry.key.iter().map(|a| a.kind()).collect();
        assert_eq!(kinds, vec![1, CTA_ID, CTA_ZONE], "orig tuple, id, zone");
    }

    #[test]
    fn a_dumped_entry_without_ports_is_skipped_not_an_error() {
        assert!(decode_entry(&dumped_entry(1, false)).unwrap().is_none());
    }

    #[test]
    fn a_delete_spares_an_entry_with_another_id_and_counts_a_vanished_one_as_already_gone() {
        use crate::netns::{Netns, can_create};
        use std::net::UdpSocket;
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("ctid").unwrap();
        crate::nft::inspect::apply_script(
            &ns,
            "table ip t {\n chain out {\n type filter hook output priority 0;\n ct state new counter\n }\n}\n",
        )
        .unwrap();
        let (found, reports, left) = ns
            .run(|| {
                let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
                let client = UdpSocket::bind("127.0.0.1:0").unwrap();
                let to_sink = |flow: &Flow| flow.orig_dst == sink.local_addr().unwrap();
                client.send_to(b"1", sink.local_addr().unwrap()).unwrap();
                let mut sock = NetlinkSocket::open().unwrap();
                let mut undecodable = 0;
                let entries = dump(&mut sock, &mut undecodable, to_sink).unwrap();
                // The same tuple under another id stands for an entry re-created after the dump.
                let other_id: Vec<Entry> = entries
                    .iter()
                    .map(|e| Entry {
                        flow: e.flow,
                        family: e.family,
                        key: e
                            .key
                            .iter()
                            .map(|a| match a {
                                ConntrackAttribute::Other(n) if n.kind() == CTA_ID => {
                                    ConntrackAttribute::Other(raw_nla(CTA_ID, &[0, 0, 0, 1]))
                                }
                                a => a.clone(),
                            })
                            .collect(),
                    })
                    .collect();
                let mut left = Vec::new();
                let mut reports = Vec::new();
                for batch in [&other_id, &entries, &entries] {
                    let mut report = DeleteReport::default();
                    delete_entries(&mut sock, batch, &mut report).unwrap();
                    reports.push(report);
                    left.push(dump(&mut sock, &mut undecodable, to_sink).unwrap().len());
                }
                (entries.len(), reports, left)
            })
            .unwrap();
        assert_eq!(found, 1);
        let counts: Vec<(usize, usize, usize)> = reports
            .iter()
            .map(|r| (r.deleted, r.already_gone, r.failed.len()))
            .collect();
        assert_eq!(
            counts,
            vec![(0, 1, 0), (1, 0, 0), (0, 1, 0)],
            "another id: refused; the dumped id: deleted; again: already gone"
        );
        assert_eq!(left, vec![1, 0, 0]);
    }

    #[test]
    fn a_flow_prints_both_directions() {
        let flow = udp_flow("10.2.0.1:40000", "10.96.0.10:53", "10.1.0.5:5353");
        assert_eq!(
            flow.to_string(),
            "udp 10.2.0.1:40000 -> 10.96.0.10:53 (reply 10.1.0.5:5353 -> 10.2.0.1:40000)"
        );
    }
}
