//! The conntrack reconciler, as kube-proxy 1.33+ runs it after every sync: read each family's
//! UDP entries and delete those addressed to a service frontend (ClusterIP, external IP or
//! load-balancer IP with the service port, or any address with the NodePort) whose reply does
//! not come from a serving endpoint of that service.
//!
//! Guarantees: flows are judged against the services as the last sync programmed them, never
//! against an earlier sync, so the first sync after a restart deletes what went stale while
//! kubenft was down; only UDP entries are ever deleted; an entry to a service without serving
//! endpoints, or to anything that is not a frontend, is left alone. Both kinds of stale entry
//! fall out of the one rule: DNATed to an endpoint that is gone (its reply comes from it), and
//! sent to the frontend before it had endpoints (not DNATed, so its reply comes from the
//! frontend itself).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{ConntrackError, DeleteReport, DumpScope, Flow, IpFamily, delete_entries, dump};
use crate::netlink::NetlinkSocket;

/// The protocol whose entries are reconciled. kube-proxy's reconciler handles UDP only: TCP and
/// SCTP end their connections, so a flow to a gone endpoint fails and the client reconnects.
const RECONCILED: u8 = libc::IPPROTO_UDP as u8;

/// One UDP service port, as the reconciler judges the flows addressed to it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UdpService {
    /// The service port on each ClusterIP, external IP and load-balancer IP.
    pub frontends: Vec<SocketAddr>,
    pub node_port: Option<u16>,
    /// Every serving endpoint (address and target port), whatever its readiness, node, zone or
    /// the traffic policies: kube-proxy leaves a flow alone while its endpoint still serves,
    /// as a TCP connection would survive such changes.
    pub serving: BTreeSet<SocketAddr>,
}

/// The service frontends that own flows, kept service port by service port (`K` names one) so
/// a sync that changed one service updates one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontends<K: Ord> {
    services: BTreeMap<K, UdpService>,
    /// Which service ports answer on an address:port (usually one; external IPs may be shared).
    by_address: HashMap<SocketAddr, BTreeSet<K>>,
    by_node_port: HashMap<u16, BTreeSet<K>>,
}

impl<K: Ord> Default for Frontends<K> {
    fn default() -> Self {
        Frontends {
            services: BTreeMap::new(),
            by_address: HashMap::new(),
            by_node_port: HashMap::new(),
        }
    }
}

impl<K: Ord + Clone> Frontends<K> {
    /// Sets (or replaces) what `key` is. A service port without serving endpoints owns no flow
    /// (kube-proxy: nothing of it is cleaned), so it is simply not kept.
    pub fn set(&mut self, key: K, service: UdpService) {
        self.remove(&key);
        if service.serving.is_empty() {
            return;
        }
        for frontend in &service.frontends {
            self.by_address
                .entry(*frontend)
                .or_default()
                .insert(key.clone());
        }
        if let Some(port) = service.node_port {
            self.by_node_port
                .entry(port)
                .or_default()
                .insert(key.clone());
        }
        self.services.insert(key, service);
    }

    pub(crate) fn remove(&mut self, key: &K) {
        let Some(old) = self.services.remove(key) else {
            return;
        };
        for frontend in &old.frontends {
            forget(&mut self.by_address, frontend, key);
        }
        if let Some(port) = old.node_port {
            forget(&mut self.by_node_port, &port, key);
        }
    }

    #[cfg(feature = "daemon")]
    pub(crate) fn clear(&mut self) {
        *self = Frontends::default();
    }
}

impl<K: Ord> Frontends<K> {
    /// True when nothing can be stale: no UDP service port has a serving endpoint.
    pub(crate) fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The kept service ports from `from` on, in order.
    #[cfg(feature = "daemon")]
    pub(crate) fn keys_from<'a>(&'a self, from: &K) -> impl Iterator<Item = &'a K> + 'a {
        self.services.range(from..).map(|(k, _)| k)
    }

    /// True when `flow` must be deleted: a UDP flow addressed to a frontend (or, failing that,
    /// to a NodePort) whose reply does not come from a serving endpoint of its owner.
    ///
    /// Where kube-proxy differs: it also tests a flow that matched a frontend against the
    /// NodePorts, so a healthy flow to `ClusterIP:P` is deleted at every sync when another
    /// Service has NodePort P. Here a flow addressed to a frontend is judged by that frontend
    /// only.
    pub(crate) fn stale(&self, flow: &Flow) -> bool {
        if flow.proto != RECONCILED {
            return false;
        }
        let owners = match self.by_address.get(&flow.orig_dst) {
            Some(owners) => owners,
            None => match self.by_node_port.get(&flow.orig_dst.port()) {
                Some(owners) => owners,
                None => return false,
            },
        };
        !owners
            .iter()
            .filter_map(|k| self.services.get(k))
            .any(|s| s.serving.contains(&flow.reply_src))
    }
}

fn forget<A: Eq + std::hash::Hash, K: Ord>(index: &mut HashMap<A, BTreeSet<K>>, at: &A, key: &K) {
    if let Some(keys) = index.get_mut(at) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(at);
        }
    }
}

/// What reconciling one family's table did.
#[derive(Debug)]
pub struct FamilyReport {
    pub family: IpFamily,
    /// Dump, decisions and deletes (kube-proxy's reconciler duration).
    pub elapsed: Duration,
    /// UDP entries read.
    pub examined: usize,
    /// Set when the kernel could not filter by protocol (before Linux 5.8) and every entry of
    /// the table was read.
    pub unfiltered: bool,
    pub outcome: Result<DeleteReport, ConntrackError>,
}

/// Reconciles the calling thread's network namespace: each family's UDP entries are read (the
/// kernel sends no other protocol) and the stale ones deleted, each by its id. With nothing to
/// own flows, no table is read.
pub fn reconcile<K: Ord>(frontends: &Frontends<K>) -> Vec<FamilyReport> {
    let started = Instant::now();
    if frontends.is_empty() {
        return IpFamily::BOTH
            .into_iter()
            .map(|family| FamilyReport {
                family,
                elapsed: started.elapsed(),
                examined: 0,
                unfiltered: false,
                outcome: Ok(DeleteReport::default()),
            })
            .collect();
    }
    IpFamily::BOTH
        .into_iter()
        .map(|family| reconcile_family(family, frontends))
        .collect()
}

fn reconcile_family<K: Ord>(family: IpFamily, frontends: &Frontends<K>) -> FamilyReport {
    let started = Instant::now();
    let mut report = DeleteReport::default();
    let mut examined = 0;
    let mut unfiltered = false;
    let filtered = DumpScope::Filtered {
        family,
        proto: RECONCILED,
    };
    let mut sock = match NetlinkSocket::open() {
        Ok(sock) => sock,
        Err(e) => {
            return FamilyReport {
                family,
                elapsed: started.elapsed(),
                examined: 0,
                unfiltered: false,
                outcome: Err(ConntrackError::Open(e)),
            };
        }
    };
    let mut keep = |flow: &Flow| {
        examined += 1;
        frontends.stale(flow)
    };
    let mut entries = dump(&mut sock, filtered, &mut report.undecodable, &mut keep);
    if let Err(ConntrackError::Dump(e)) = &entries
        && matches!(e.errno(), Some(libc::EOPNOTSUPP | libc::EINVAL))
    {
        tracing::debug!(error = %e, "the kernel cannot filter conntrack dumps; filtering here");
        unfiltered = true;
        let v4 = family == IpFamily::V4;
        entries = dump(&mut sock, DumpScope::All, &mut report.undecodable, |flow| {
            flow.orig_src.is_ipv4() == v4 && flow.proto == RECONCILED && keep(flow)
        });
    }
    let outcome = entries.and_then(|entries| {
        delete_entries(&mut sock, &entries, &mut report)?;
        Ok(report)
    });
    FamilyReport {
        family,
        elapsed: started.elapsed(),
        examined,
        unfiltered,
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn flow(proto: u8, orig_dst: &str, reply_src: &str) -> Flow {
        let client = if orig_dst.starts_with('[') {
            "[fd00:2::1]:40000"
        } else {
            "10.2.0.1:40000"
        };
        Flow {
            proto,
            orig_src: sa(client),
            orig_dst: sa(orig_dst),
            reply_src: sa(reply_src),
            reply_dst: sa(client),
        }
    }

    fn udp(orig_dst: &str, reply_src: &str) -> Flow {
        flow(17, orig_dst, reply_src)
    }

    fn service(frontends: &[&str], node_port: Option<u16>, serving: &[&str]) -> UdpService {
        UdpService {
            frontends: frontends.iter().map(|f| sa(f)).collect(),
            node_port,
            serving: serving.iter().map(|e| sa(e)).collect(),
        }
    }

    const CLUSTER_IP: &str = "172.30.1.1:8000";
    const EXTERNAL_IP: &str = "192.168.99.100:8000";
    const LB_IP: &str = "1.2.3.4:8000";
    const SERVING: &str = "10.240.0.4:8080";

    /// The frontends of upstream's cleanup test: one UDP port on a ClusterIP, an external IP
    /// and a load-balancer IP, NodePort 32000, one serving endpoint.
    fn upstream_like() -> Frontends<&'static str> {
        let mut f = Frontends::default();
        f.set(
            "test/cleanup-test:udp",
            service(&[CLUSTER_IP, EXTERNAL_IP, LB_IP], Some(32000), &[SERVING]),
        );
        f
    }

    #[test]
    fn udp_flows_to_any_frontend_not_answered_by_a_serving_endpoint_are_stale() {
        let f = upstream_like();
        for frontend in [CLUSTER_IP, EXTERNAL_IP, LB_IP, "192.168.7.1:32000"] {
            assert!(!f.stale(&udp(frontend, SERVING)), "{frontend}: serving");
            for gone in ["10.240.1.5:8080", "10.240.2.6:8080"] {
                assert!(f.stale(&udp(frontend, gone)), "{frontend} → {gone}");
            }
            assert!(
                f.stale(&udp(frontend, "10.240.0.4:9999")),
                "{frontend}: the serving address on another port is not the endpoint"
            );
            assert!(
                f.stale(&udp(frontend, frontend)),
                "{frontend}: not DNATed (cached before there were endpoints)"
            );
        }
    }

    #[test]
    fn tcp_and_sctp_flows_and_other_destinations_are_never_stale() {
        let f = upstream_like();
        for proto in [6, 132] {
            assert!(!f.stale(&flow(proto, CLUSTER_IP, "10.240.2.6:8080")));
            assert!(!f.stale(&flow(proto, "192.168.7.1:32000", "10.240.2.6:8080")));
        }
        for elsewhere in ["172.30.1.1:3000", "172.30.1.2:8000", "10.240.2.6:8080"] {
            assert!(!f.stale(&udp(elsewhere, "10.240.2.6:8080")), "{elsewhere}");
            assert!(!f.stale(&udp(elsewhere, elsewhere)), "{elsewhere}");
        }
    }

    #[test]
    fn a_service_without_serving_endpoints_owns_no_flow() {
        let mut f = upstream_like();
        f.set(
            "test/cleanup-test:udp",
            service(&[CLUSTER_IP], Some(32000), &[]),
        );
        assert!(f.is_empty());
        assert!(!f.stale(&udp(CLUSTER_IP, "10.240.2.6:8080")));
        assert!(!f.stale(&udp(CLUSTER_IP, CLUSTER_IP)));
        assert!(!f.stale(&udp("192.168.7.1:32000", "10.240.2.6:8080")));
    }

    #[test]
    fn a_flow_to_a_frontend_is_judged_by_that_frontend_even_when_its_port_is_a_node_port() {
        let mut f = Frontends::default();
        f.set("a", service(&["10.96.0.10:30053"], None, &["10.1.0.5:53"]));
        f.set(
            "b",
            service(&["10.96.0.11:53"], Some(30053), &["10.1.0.9:53"]),
        );
        assert!(!f.stale(&udp("10.96.0.10:30053", "10.1.0.5:53")));
        assert!(f.stale(&udp("10.96.0.10:30053", "10.1.0.9:53")));
        assert!(!f.stale(&udp("192.168.7.1:30053", "10.1.0.9:53")));
        assert!(f.stale(&udp("192.168.7.1:30053", "10.1.0.5:53")));
    }

    #[test]
    fn a_shared_frontend_keeps_flows_to_a_serving_endpoint_of_any_of_its_owners() {
        let mut f = Frontends::default();
        f.set("a", service(&["192.0.2.1:53"], None, &["10.1.0.5:53"]));
        f.set("b", service(&["192.0.2.1:53"], None, &["10.1.0.6:53"]));
        assert!(!f.stale(&udp("192.0.2.1:53", "10.1.0.5:53")));
        assert!(!f.stale(&udp("192.0.2.1:53", "10.1.0.6:53")));
        assert!(f.stale(&udp("192.0.2.1:53", "10.1.0.7:53")));
        f.remove(&"a");
        assert!(f.stale(&udp("192.0.2.1:53", "10.1.0.5:53")));
        f.remove(&"b");
        assert!(!f.stale(&udp("192.0.2.1:53", "10.1.0.7:53")));
        assert_eq!(
            f,
            Frontends::default(),
            "nothing left behind in the indexes"
        );
    }

    #[test]
    fn replacing_a_service_forgets_its_old_frontends_and_node_port() {
        let mut f = upstream_like();
        f.set(
            "test/cleanup-test:udp",
            service(&["172.30.1.2:8000"], None, &[SERVING]),
        );
        assert!(!f.stale(&udp(CLUSTER_IP, "10.240.2.6:8080")));
        assert!(!f.stale(&udp("192.168.7.1:32000", "10.240.2.6:8080")));
        assert!(f.stale(&udp("172.30.1.2:8000", "10.240.2.6:8080")));
        let mut fresh = Frontends::default();
        fresh.set(
            "test/cleanup-test:udp",
            service(&["172.30.1.2:8000"], None, &[SERVING]),
        );
        assert_eq!(f, fresh);
    }

    #[test]
    fn ipv6_frontends_and_endpoints_are_matched_the_same_way() {
        let mut f = Frontends::default();
        f.set(
            "dns",
            service(&["[fd00:96::a]:53"], Some(30053), &["[fd00:1::5]:5353"]),
        );
        assert!(!f.stale(&udp("[fd00:96::a]:53", "[fd00:1::5]:5353")));
        assert!(f.stale(&udp("[fd00:96::a]:53", "[fd00:1::6]:5353")));
        assert!(f.stale(&udp("[fd00::7]:30053", "[fd00::7]:30053")));
    }
}
