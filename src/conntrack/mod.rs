//! Conntrack, as a service proxy needs it: the [`reconcile`]r that deletes UDP entries which no
//! longer follow the rules, over ctnetlink in the calling thread's network namespace, and the
//! node's conntrack sysctls ([`tuning`]).
//!
//! UDP has no connection teardown, so a conntrack entry lives as long as packets keep coming.
//! A DNS client that retries every second against a ClusterIP that had no endpoints (rejected)
//! or whose endpoint died (DNATed to nowhere) would keep hitting the cached entry forever; the
//! kernel only consults the ruleset again for a new entry. kube-proxy deletes these entries
//! after every sync, and so does kubenft.

pub(crate) mod reconcile;
pub(crate) mod tuning;

pub use reconcile::{FamilyReport, Frontends, UdpService, reconcile};

use std::fmt;
use std::net::SocketAddr;

use netlink_packet_core::{DecodeError, Emitable, Nla, ParseableParametrized};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Tuple,
};

use crate::netlink::attr::NLA_F_NESTED;
use crate::netlink::socket::NLM_F_ACK;
use crate::netlink::{Message, NetlinkSocket, NfHeader, SocketError};

/// The name of a transport protocol number, as a flow is printed.
fn proto_name(number: u8) -> Option<&'static str> {
    match number {
        6 => Some("tcp"),
        17 => Some("udp"),
        132 => Some("sctp"),
        _ => None,
    }
}

pub(crate) use crate::family::IpFamily;

/// conntrack keeps one table per family.
impl IpFamily {
    fn af(self) -> u8 {
        match self {
            IpFamily::V4 => libc::AF_INET as u8,
            IpFamily::V6 => libc::AF_INET6 as u8,
        }
    }
}

/// One conntrack entry's two directions, as the kernel reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// IP protocol number.
    pub proto: u8,
    pub(crate) orig_src: SocketAddr,
    pub orig_dst: SocketAddr,
    pub reply_src: SocketAddr,
    pub(crate) reply_dst: SocketAddr,
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match proto_name(self.proto) {
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
    pub(crate) already_gone: usize,
    /// Matching entries the kernel refused to delete.
    pub failed: Vec<DeleteFailure>,
    /// Dumped entries that could not be decoded, and so were neither matched nor deleted.
    pub(crate) undecodable: usize,
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
const CTA_FILTER: u16 = 25;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_FLAG_CTA_PROTO_NUM: u32 = 1 << 3;
const AF_UNSPEC: u8 = 0;
/// Deletes sent per datagram: the kernel handles each message of a non-batch datagram in turn
/// and acknowledges each, so a cleanup of thousands of entries costs tens of round trips.
const DELETE_CHUNK: usize = 128;

/// Every conntrack entry (IPv4 and IPv6) of the calling thread's network namespace that has
/// ports, for inspection and tests.
pub fn list_flows() -> Result<Vec<Flow>, ConntrackError> {
    let mut sock = NetlinkSocket::open().map_err(ConntrackError::Open)?;
    let mut undecodable = 0;
    let entries = dump(&mut sock, DumpScope::All, &mut undecodable, |_| true)?;
    Ok(entries.into_iter().map(|e| e.flow).collect())
}

/// Which entries the kernel sends.
#[derive(Debug, Clone, Copy)]
enum DumpScope {
    All,
    /// One family's entries of one protocol, selected by the kernel (`CTA_FILTER`, Linux 5.8+):
    /// entries of other protocols are never copied to us.
    Filtered {
        family: IpFamily,
        /// IP protocol number.
        proto: u8,
    },
}

impl DumpScope {
    /// The dump request's family and attributes.
    fn request(self) -> (u8, Vec<u8>) {
        let DumpScope::Filtered { family, proto } = self else {
            return (AF_UNSPEC, Vec::new());
        };
        let orig =
            ConntrackAttribute::CtaTupleOrig(vec![Tuple::Proto(vec![ProtoTuple::Protocol(
                proto.into(),
            )])]);
        let mut bytes = vec![0u8; orig.buffer_len()];
        orig.emit(&mut bytes);
        // Written by hand: the attribute types this crate emits cannot carry NLA_F_NESTED, and
        // the kernel parses CTA_FILTER strictly: it must be flagged as nested.
        let flags = CTA_FILTER_FLAG_CTA_PROTO_NUM.to_ne_bytes();
        let inner_len = 4 + flags.len() as u16;
        for field in [
            4 + inner_len,
            CTA_FILTER | NLA_F_NESTED,
            inner_len,
            CTA_FILTER_ORIG_FLAGS,
        ] {
            bytes.extend(field.to_ne_bytes());
        }
        bytes.extend(flags);
        (family.af(), bytes)
    }
}

/// A dumped entry: its tuples for matching, and what identifies it exactly for deletion.
#[derive(Debug)]
struct Entry {
    flow: Flow,
    family: u8,
    key: Vec<ConntrackAttribute>,
}

/// Dumps the entries of `scope` and keeps those `keep` selects, filtering as the dump streams in
/// so a large table is never held in memory.
fn dump(
    sock: &mut NetlinkSocket,
    scope: DumpScope,
    undecodable: &mut usize,
    mut keep: impl FnMut(&Flow) -> bool,
) -> Result<Vec<Entry>, ConntrackError> {
    let (family, attrs) = scope.request();
    let header = NfHeader::request(
        NFNL_SUBSYS_CTNETLINK,
        IPCTNL_MSG_CT_GET,
        0,
        family,
        sock.next_seq(1),
    );
    let mut kept = Vec::new();
    // An interrupted dump is used as it is: an entry it missed is judged after the next sync.
    sock.dump_each("IPCTNL_MSG_CT_GET", header, &attrs, |msg| {
        if msg.subsys_msg(NFNL_SUBSYS_CTNETLINK) != Some(IPCTNL_MSG_CT_NEW) {
            return;
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
    })
    .map_err(ConntrackError::Dump)?;
    Ok(kept)
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
            NfHeader::request(
                NFNL_SUBSYS_CTNETLINK,
                IPCTNL_MSG_CT_DELETE,
                NLM_F_ACK,
                entry.family,
                seq,
            )
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
    use std::net::IpAddr;

    fn raw_nla(kind: u16, value: &[u8]) -> DefaultNla {
        DefaultNla::new(kind, value.to_vec())
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
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
        ns.exec_with_stdin(
            &["nft", "-f", "-"],
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
                let entries = dump(&mut sock, DumpScope::All, &mut undecodable, to_sink).unwrap();
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
                    left.push(
                        dump(&mut sock, DumpScope::All, &mut undecodable, to_sink)
                            .unwrap()
                            .len(),
                    );
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
    fn a_filtered_dump_asks_for_one_family_and_the_protocol_in_the_original_tuple() {
        let scope = DumpScope::Filtered {
            family: IpFamily::V6,
            proto: libc::IPPROTO_UDP as u8,
        };
        let flags = CTA_FILTER_FLAG_CTA_PROTO_NUM.to_ne_bytes();
        let mut expected = vec![
            0x10, 0x00, 0x01, 0x80, // CTA_TUPLE_ORIG, nested
            0x0c, 0x00, 0x02, 0x80, // CTA_TUPLE_PROTO, nested
            0x05, 0x00, 0x01, 0x00, 17, 0, 0, 0, // CTA_PROTO_NUM udp, padded
        ];
        expected.extend(12u16.to_ne_bytes());
        expected.extend((CTA_FILTER | NLA_F_NESTED).to_ne_bytes());
        expected.extend(8u16.to_ne_bytes());
        expected.extend(CTA_FILTER_ORIG_FLAGS.to_ne_bytes());
        expected.extend(flags);
        assert_eq!(scope.request(), (libc::AF_INET6 as u8, expected));
        assert_eq!(DumpScope::All.request(), (AF_UNSPEC, Vec::new()));
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
