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
mod tests;
