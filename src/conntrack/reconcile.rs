//! The conntrack reconciler, as kube-proxy runs it after every sync: read each family's UDP
//! entries and delete those addressed to a service frontend (ClusterIP, external IP or
//! load-balancer IP with the service port, or any address with the NodePort) whose reply does
//! not come from a serving endpoint of that service.
//!
//! Guarantees: flows are judged against the services as the last sync programmed them, never
//! against an earlier sync, so the first sync after a restart deletes what went stale while
//! kubenft was down; only UDP entries are ever deleted; an entry to anything that is not a
//! frontend is left alone. Both kinds of stale entry fall out of the one rule: DNATed to an
//! endpoint that is gone (its reply comes from it), and sent to the frontend before it had
//! endpoints (not DNATed, so its reply comes from the frontend itself). A service port
//! without serving endpoints is judged with none (kubernetes#139629), and the frontends of a
//! service port that was deleted are judged so once more (kubernetes#141371): the flows DNATed
//! to its last endpoints would otherwise be kept alive by every packet a client sends.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{ConntrackError, DeleteReport, DumpScope, Entry, Flow, delete_entries, dump};
use crate::family::IpFamily;
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
#[derive(Debug, Clone)]
pub struct Frontends<K: Ord> {
    services: BTreeMap<K, UdpService>,
    /// Which service ports answer on an address:port (usually one; external IPs may be shared).
    by_address: HashMap<SocketAddr, BTreeSet<K>>,
    by_node_port: HashMap<u16, BTreeSet<K>>,
    /// Frontends and NodePorts of service ports removed since the last complete
    /// reconciliation: every flow to them is stale, unless a kept service owns them again.
    retired: HashSet<SocketAddr>,
    /// (IPv6, port): a NodePort belongs to the families of its service's frontends.
    retired_node_ports: HashSet<(bool, u16)>,
    /// Bumped by every change that can make a flow stale, so a reconciler can tell whether
    /// anything changed since it last read the table.
    revision: u64,
}

impl<K: Ord> Default for Frontends<K> {
    fn default() -> Self {
        Frontends {
            services: BTreeMap::new(),
            by_address: HashMap::new(),
            by_node_port: HashMap::new(),
            retired: HashSet::new(),
            retired_node_ports: HashSet::new(),
            revision: 0,
        }
    }
}

/// Equal when they keep the same service ports: how they got there (the revision, and the
/// ports retired on the way) is not compared.
impl<K: Ord> PartialEq for Frontends<K> {
    fn eq(&self, other: &Self) -> bool {
        self.services == other.services
            && self.by_address == other.by_address
            && self.by_node_port == other.by_node_port
    }
}

impl<K: Ord> Eq for Frontends<K> {}

impl<K: Ord + Clone> Frontends<K> {
    /// Sets (or replaces) what `key` is; setting what it already is changes nothing.
    pub fn set(&mut self, key: K, service: UdpService) {
        if self.services.get(&key) == Some(&service) {
            return;
        }
        self.unindex(&key);
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
        self.revision += 1;
    }

    /// Removes `key`, whose frontends stay retired until the next complete reconciliation.
    pub fn remove(&mut self, key: &K) {
        let Some(old) = self.unindex(key) else {
            return;
        };
        self.retired.extend(&old.frontends);
        if let Some(port) = old.node_port {
            let families = old.frontends.iter().map(|f| (f.is_ipv6(), port));
            self.retired_node_ports.extend(families);
        }
        self.revision += 1;
    }

    fn unindex(&mut self, key: &K) -> Option<UdpService> {
        let old = self.services.remove(key)?;
        for frontend in &old.frontends {
            forget(&mut self.by_address, frontend, key);
        }
        if let Some(port) = old.node_port {
            forget(&mut self.by_node_port, &port, key);
        }
        Some(old)
    }

    /// Forgets every service port, each one retired as [`Frontends::remove`] retires it.
    #[cfg(feature = "daemon")]
    pub(crate) fn clear(&mut self) {
        let keys: Vec<K> = self.services.keys().cloned().collect();
        for key in &keys {
            self.remove(key);
        }
    }
}

impl<K: Ord> Frontends<K> {
    /// True when nothing can be stale: no UDP service port, none retired.
    pub(crate) fn is_empty(&self) -> bool {
        self.services.is_empty() && self.retired.is_empty() && self.retired_node_ports.is_empty()
    }

    /// The kept service ports from `from` on, in order.
    #[cfg(feature = "daemon")]
    pub(crate) fn keys_from<'a>(&'a self, from: &K) -> impl Iterator<Item = &'a K> + 'a {
        self.services.range(from..).map(|(k, _)| k)
    }

    /// True when `flow` must be deleted: a UDP flow addressed to a frontend (or, failing that,
    /// to a NodePort of a service of the flow's family, as each of kube-proxy's per-family
    /// proxiers judges its own family) whose reply does not come from a serving endpoint of
    /// its owner; a flow to a retired frontend or NodePort that no kept service owns has none.
    ///
    /// Where kube-proxy differs: it also tests a flow that matched a frontend against the
    /// NodePorts, so a healthy flow to `ClusterIP:P` is deleted at every sync when another
    /// Service has NodePort P. Here a flow addressed to a frontend is judged by that frontend
    /// only.
    pub(crate) fn stale(&self, flow: &Flow) -> bool {
        if flow.proto != RECONCILED {
            return false;
        }
        let v6 = flow.orig_dst.is_ipv6();
        let (owners, by_node_port) = match self.by_address.get(&flow.orig_dst) {
            Some(owners) => (owners, false),
            None if self.retired.contains(&flow.orig_dst) => return true,
            None => match self.by_node_port.get(&flow.orig_dst.port()) {
                Some(owners) => (owners, true),
                None => {
                    return self
                        .retired_node_ports
                        .contains(&(v6, flow.orig_dst.port()));
                }
            },
        };
        let mut owners = owners
            .iter()
            .filter_map(|k| self.services.get(k))
            .filter(|s| !by_node_port || s.frontends.iter().any(|f| f.is_ipv6() == v6))
            .peekable();
        if owners.peek().is_none() {
            return self
                .retired_node_ports
                .contains(&(v6, flow.orig_dst.port()));
        }
        !owners.any(|s| s.serving.contains(&flow.reply_src))
    }

    /// The families (IPv4, IPv6) that have a frontend, kept or retired: only their flows can
    /// be stale.
    pub(crate) fn families(&self) -> [bool; 2] {
        families_of(self.by_address.keys().chain(&self.retired))
    }

    /// After a complete reconciliation: the retired frontends' flows are gone.
    fn forget_retired(&mut self) {
        self.retired.clear();
        self.retired_node_ports.clear();
    }
}

/// Which families (IPv4, IPv6) `addresses` has.
fn families_of<'a>(addresses: impl IntoIterator<Item = &'a SocketAddr>) -> [bool; 2] {
    let mut families = [false; 2];
    for address in addresses {
        families[usize::from(address.is_ipv6())] = true;
    }
    families
}

fn forget<A: Eq + std::hash::Hash, K: Ord>(index: &mut HashMap<A, BTreeSet<K>>, at: &A, key: &K) {
    if let Some(keys) = index.get_mut(at) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(at);
        }
    }
}

/// What one reconciliation did: one reading of the table, both families.
#[derive(Debug)]
pub struct Reading {
    /// Dump, decisions and deletes (kube-proxy's reconciler duration).
    pub elapsed: Duration,
    /// Entries of the protocol read: IPv4, IPv6.
    pub examined: [usize; 2],
    /// Set when the kernel could not filter by protocol (before Linux 5.8) and every entry of
    /// the table was read.
    pub unfiltered: bool,
    /// Set when the kernel flagged the dump as interrupted: an entry may have been missed.
    pub interrupted: bool,
    /// The deletes: IPv4, IPv6.
    pub outcome: Result<[DeleteReport; 2], ConntrackError>,
}

impl Reading {
    /// Every stale entry read was deleted (or was already gone), and none can have been missed.
    fn complete(&self) -> bool {
        !self.interrupted
            && self
                .outcome
                .as_ref()
                .is_ok_and(|d| d.iter().all(|d| d.failed.is_empty()))
    }

    pub fn deleted(&self) -> usize {
        self.outcome
            .as_ref()
            .map_or(0, |d| d.iter().map(|d| d.deleted).sum())
    }
}

/// Reconciles after each sync, reading the table only when a flow can have gone stale since
/// the last complete reconciliation. At a million entries one read costs the kernel a walk of
/// the whole table (~0.9 s here), and most syncs change no UDP service: kube-proxy reads it
/// after every sync all the same.
///
/// A flow goes stale only when what judges it changes: a UDP service port, its frontends or
/// its serving endpoints (the frontends' revision), or the rules themselves (a repair after
/// someone else changed kubenft's table: until then, new flows were not DNATed). Everything
/// else (TCP services, a sync that changed nothing) leaves every flow as the last read judged
/// it. After a start the table is always read once: what went stale while kubenft was down.
#[derive(Debug, Default)]
pub struct Reconciler {
    /// The revision of the frontends the last complete reconciliation judged flows by.
    clean_at: Option<u64>,
}

impl Reconciler {
    /// Reconciles the calling thread's network namespace if anything can be stale, and returns
    /// what was done; `None` when the table was not read. `rules_repaired`: the sync rewrote
    /// rules the kernel held differently from what kubenft last programmed.
    pub fn after_sync<K: Ord>(
        &mut self,
        frontends: &mut Frontends<K>,
        rules_repaired: bool,
    ) -> Option<Reading> {
        if !self.must_read(frontends, rules_repaired) {
            return None;
        }
        let reading = reconcile(frontends);
        self.read(frontends, &reading);
        Some(reading)
    }

    fn must_read<K: Ord>(&self, frontends: &Frontends<K>, rules_repaired: bool) -> bool {
        rules_repaired || self.clean_at != Some(frontends.revision)
    }

    /// Notes what a reading of the table did: complete, it judged every flow by `frontends`.
    fn read<K: Ord>(&mut self, frontends: &mut Frontends<K>, reading: &Reading) {
        if reading.complete() {
            frontends.forget_retired();
            self.clean_at = Some(frontends.revision);
        } else {
            self.clean_at = None;
        }
    }
}

/// Reconciles the calling thread's network namespace: the UDP entries of each family that has
/// a frontend are read (the kernel sends no other protocol, but walks its whole table for each
/// dump: at a million entries the walk is most of the cost, so a family without frontends is
/// not read), and the stale ones deleted, each by its id. With nothing to own flows, no table
/// is read.
pub fn reconcile<K: Ord>(frontends: &Frontends<K>) -> Reading {
    read_and_delete(
        (!frontends.is_empty()).then(|| frontends.families()),
        RECONCILED,
        |flow| frontends.stale(flow),
    )
}

/// Deletes the TCP entries addressed to one of `frontends` (a TCP service port's ClusterIP,
/// external IP or load-balancer IP) that were never DNATed: their reply comes from the
/// frontend itself. Only a flow that began while kubenft's rules were missing (before its
/// first sync, or between someone flushing its table and the repair) is one, and conntrack
/// keeps it so: a client that reuses its source port while the entry lives (120 s after an
/// unanswered SYN) is not DNATed either and is refused at the cluster-IP check. kube-proxy
/// cleans up UDP only; its rules are not flushed behind its back as often as they are read.
pub fn delete_never_dnated(frontends: &HashSet<SocketAddr>) -> Reading {
    read_and_delete(
        (!frontends.is_empty()).then(|| families_of(frontends)),
        libc::IPPROTO_TCP as u8,
        |flow| flow.reply_src == flow.orig_dst && frontends.contains(&flow.orig_dst),
    )
}

/// Reads the `proto` entries of the families set in `families` (none: nothing is read) and
/// deletes those `stale` picks.
fn read_and_delete(
    families: Option<[bool; 2]>,
    proto: u8,
    stale: impl Fn(&Flow) -> bool,
) -> Reading {
    let started = Instant::now();
    let mut reading = Reading {
        elapsed: Duration::ZERO,
        examined: [0; 2],
        unfiltered: false,
        interrupted: false,
        outcome: Ok(Default::default()),
    };
    if let Some(families) = families {
        reading.outcome = dump_and_delete(families, proto, &stale, &mut reading);
    }
    reading.elapsed = started.elapsed();
    reading
}

fn dump_and_delete(
    in_use: [bool; 2],
    proto: u8,
    stale: &impl Fn(&Flow) -> bool,
    reading: &mut Reading,
) -> Result<[DeleteReport; 2], ConntrackError> {
    let mut sock = NetlinkSocket::open().map_err(ConntrackError::Open)?;
    let mut reports: [DeleteReport; 2] = Default::default();
    let mut picked: [Vec<Entry>; 2] = Default::default();
    let examined = &mut reading.examined;
    let mut keep = |flow: &Flow| {
        let i = usize::from(flow.orig_src.is_ipv6());
        examined[i] += 1;
        stale(flow)
    };
    for family in IpFamily::BOTH.into_iter().filter(|f| in_use[f.index()]) {
        let filtered = DumpScope::Filtered { family, proto };
        let undecodable = &mut reports[family.index()].undecodable;
        match dump(&mut sock, filtered, undecodable, &mut keep) {
            Ok(dumped) => {
                reading.interrupted |= dumped.interrupted;
                picked[family.index()] = dumped.entries;
            }
            Err(ConntrackError::Dump(e))
                if matches!(e.errno(), Some(libc::EOPNOTSUPP | libc::EINVAL)) =>
            {
                tracing::debug!(error = %e, "the kernel cannot filter conntrack dumps; filtering here");
                reading.unfiltered = true;
                let dumped = dump(&mut sock, DumpScope::All, undecodable, |flow| {
                    flow.proto == proto
                        && in_use[usize::from(flow.orig_src.is_ipv6())]
                        && keep(flow)
                })?;
                reading.interrupted |= dumped.interrupted;
                let (v6, v4) = dumped
                    .entries
                    .into_iter()
                    .partition(|e| e.flow.orig_src.is_ipv6());
                picked = [v4, v6];
                break;
            }
            Err(e) => return Err(e),
        }
    }
    for (entries, report) in picked.iter().zip(&mut reports) {
        delete_entries(&mut sock, entries, report)?;
    }
    Ok(reports)
}

#[cfg(test)]
mod tests;
