//! What the daemon derives from the model after each successful sync: the UDP service
//! frontends and their serving endpoints (for the conntrack reconciler), and each service
//! port's local endpoints (healthCheckNodePort servers, the no-local-endpoints gauges).
//!
//! Both are kept service port by service port, so a sync that changed one service recomputes
//! that service only: at 10,000 services, deriving everything again took longer than the sync.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;

use crate::cluster::{
    ClusterState, Endpoint, NodeInfo, Protocol, ServicePort, ServicePortName, ServiceRef,
    TrafficPolicy,
};
use crate::conntrack::{Frontends, UdpService};
use crate::proxier;
use crate::serve::ServiceHealth;

/// A service port's local endpoints, kept only for ports with a Local traffic policy (the
/// only ones the gauges and healthCheckNodePorts concern).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LocalFacts {
    /// Per IP family (IPv4, IPv6), as kube-proxy's per-family proxiers count them.
    no_local_internal: [bool; 2],
    no_local_external: [bool; 2],
    /// The healthCheckNodePort, its Service as `namespace/name`, and the local endpoints.
    health_check: Option<(u16, String, usize)>,
}

/// The after-sync facts, kept up to date service by service.
#[derive(Debug, Default)]
pub struct AfterSyncFacts {
    hostname: String,
    /// The node the facts were derived with; when it changes, everything is derived again.
    node: Option<NodeInfo>,
    udp: Frontends<ServicePortName>,
    local: BTreeMap<ServicePortName, LocalFacts>,
    /// Services changed in the model since the facts were last brought up to date: a failed
    /// sync skips the after-sync steps, and its changes must not be forgotten.
    pending: BTreeSet<ServiceRef>,
    derived: bool,
}

impl AfterSyncFacts {
    pub fn new(hostname: &str) -> AfterSyncFacts {
        AfterSyncFacts {
            hostname: hostname.to_string(),
            ..AfterSyncFacts::default()
        }
    }

    /// Notes services whose objects changed in the model.
    pub fn changed<'a>(&mut self, services: impl IntoIterator<Item = &'a ServiceRef>) {
        // Facts not derived yet are derived from every service at the next update.
        if self.derived {
            self.pending.extend(services.into_iter().cloned());
        }
    }

    /// Brings the facts up to the model `state` (which the last sync programmed).
    pub fn update(&mut self, state: &ClusterState) {
        let services = std::mem::take(&mut self.pending);
        let node_changed = self.node != state.node;
        if !self.derived || node_changed {
            self.node = state.node.clone();
            self.udp.clear();
            self.local.clear();
            for sp in state.services.values() {
                self.derive(state, sp);
            }
        } else {
            for service in &services {
                let lowest = ServicePortName::lowest_of(service);
                // Only the UDP ports that are gone are removed: one derived again as it was
                // changes nothing, so the reconciler can tell that nothing changed.
                let gone: Vec<ServicePortName> = self
                    .udp
                    .keys_from(&lowest)
                    .take_while(|n| n.is_port_of(service))
                    .filter(|n| !state.services.contains_key(*n))
                    .cloned()
                    .collect();
                for name in &gone {
                    self.udp.remove(name);
                }
                remove_service(&mut self.local, service);
                for (_, sp) in ports_of(&state.services, service) {
                    self.derive(state, sp);
                }
            }
        }
        self.derived = true;
    }

    /// The UDP service frontends and their serving endpoints, for [`crate::conntrack`].
    pub fn frontends(&self) -> &Frontends<ServicePortName> {
        &self.udp
    }

    pub fn frontends_mut(&mut self) -> &mut Frontends<ServicePortName> {
        &mut self.udp
    }

    /// healthCheckNodePorts to serve: port → its Service and local endpoint count.
    pub fn health_checks(&self) -> BTreeMap<u16, ServiceHealth> {
        let mut checks: BTreeMap<u16, ServiceHealth> = BTreeMap::new();
        for (port, name, local) in self.local.values().filter_map(|f| f.health_check.as_ref()) {
            let entry = checks.entry(*port).or_insert(ServiceHealth {
                name: name.clone(),
                local_endpoints: 0,
            });
            // Ports of one Service share its healthCheckNodePort; count its endpoints once.
            entry.local_endpoints = entry.local_endpoints.max(*local);
        }
        checks
    }

    /// Service ports with an internal / external Local policy and no local endpoint, per IP
    /// family (IPv4, IPv6).
    pub fn no_local_endpoints(&self) -> [(u64, u64); 2] {
        [0, 1].map(|i| {
            let count = |f: fn(&LocalFacts) -> [bool; 2]| {
                self.local.values().filter(|l| f(l)[i]).count() as u64
            };
            (
                count(|l| l.no_local_internal),
                count(|l| l.no_local_external),
            )
        })
    }

    fn derive(&mut self, state: &ClusterState, sp: &ServicePort) {
        let endpoints = state
            .endpoints
            .get(&sp.name)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if let Some(service) = udp_service(sp, endpoints) {
            self.udp.set(ServicePortName::clone(&sp.name), service);
        }
        if let Some(facts) = local_facts(sp, endpoints, &self.hostname) {
            self.local.insert(ServicePortName::clone(&sp.name), facts);
        }
    }
}

fn ports_of<'a, K: Ord + Borrow<ServicePortName>, V>(
    map: &'a BTreeMap<K, V>,
    service: &ServiceRef,
) -> impl Iterator<Item = (&'a K, &'a V)> {
    map.range::<ServicePortName, _>(ServicePortName::lowest_of(service)..)
        .take_while(move |(n, _)| (*n).borrow().is_port_of(service))
}

fn remove_service<V>(
    map: &mut BTreeMap<ServicePortName, V>,
    service: &ServiceRef,
) -> BTreeMap<ServicePortName, V> {
    // Key by key: splitting the map and appending the rest back would move every entry.
    let ports: Vec<ServicePortName> = ports_of(map, service).map(|(n, _)| n.clone()).collect();
    ports
        .into_iter()
        .filter_map(|n| map.remove_entry(&n))
        .collect()
}

/// Where a service port answers: each ClusterIP, external IP and load-balancer IP with the
/// service port.
fn frontends(sp: &ServicePort) -> impl Iterator<Item = SocketAddr> + '_ {
    sp.cluster_ips
        .iter()
        .chain(&sp.external_ips)
        .chain(&sp.load_balancer_ips)
        .map(|ip| SocketAddr::new(*ip, sp.port))
}

/// A UDP service port's frontends and serving endpoints, or None for other protocols.
fn udp_service(sp: &ServicePort, all: &[Endpoint]) -> Option<UdpService> {
    if sp.name.protocol != Protocol::Udp {
        return None;
    }
    let frontends = frontends(sp).collect();
    let serving = all
        .iter()
        .filter(|e| e.serving)
        .map(|e| SocketAddr::new(e.ip, e.port))
        .collect();
    Some(UdpService {
        frontends,
        node_port: sp.node_port,
        serving,
    })
}

fn local_facts(sp: &ServicePort, all: &[Endpoint], hostname: &str) -> Option<LocalFacts> {
    let internal = sp.internal_policy == TrafficPolicy::Local;
    let external = sp.has_external() && sp.external_policy == TrafficPolicy::Local;
    if !internal && !external {
        return None;
    }
    let local = proxier::local_endpoints(all, hostname).len();
    // Each family's proxier in kube-proxy sees the service's IPs and endpoints of its family.
    // Like kube-proxy, a service without usable endpoints anywhere is not counted: it rejects
    // rather than drops, whatever its policies.
    let no_local = [true, false].map(|v4| {
        if !sp.cluster_ips.iter().any(|ip| ip.is_ipv4() == v4) {
            return false;
        }
        let of_family: Vec<Endpoint> = all
            .iter()
            .filter(|e| e.ip.is_ipv4() == v4)
            .cloned()
            .collect();
        let usable_anywhere = of_family
            .iter()
            .any(|e| e.ready || (e.serving && e.terminating));
        usable_anywhere && proxier::local_endpoints(&of_family, hostname).is_empty()
    });
    Some(LocalFacts {
        no_local_internal: no_local.map(|n| internal && n),
        no_local_external: no_local.map(|n| external && n),
        health_check: sp.health_check_node_port.filter(|_| external).map(|port| {
            let name = format!("{}/{}", sp.name.namespace, sp.name.name);
            (port, name, local)
        }),
    })
}

/// The addresses TCP service ports answer on (ClusterIPs, external IPs and load-balancer IPs,
/// each with the service port): where a flow that was never DNATed can only have begun while
/// the rules were missing ([`crate::conntrack::delete_never_dnated`]).
pub fn tcp_frontends(state: &ClusterState) -> HashSet<SocketAddr> {
    state
        .services
        .values()
        .filter(|sp| sp.name.protocol == Protocol::Tcp)
        .flat_map(frontends)
        .collect()
}

/// The UDP frontends of `state`: what [`AfterSyncFacts::frontends`] keeps, derived from scratch.
pub fn udp_frontends(state: &ClusterState) -> Frontends<ServicePortName> {
    let mut frontends = Frontends::default();
    for sp in state.services.values() {
        let all = state.endpoints_of(&sp.name);
        if let Some(service) = udp_service(sp, all) {
            frontends.set(ServicePortName::clone(&sp.name), service);
        }
    }
    frontends
}

/// [`AfterSyncFacts::health_checks`] and [`AfterSyncFacts::no_local_endpoints`] derived from
/// scratch, port by port and family by family.
pub fn local_endpoint_facts(
    state: &ClusterState,
    hostname: &str,
) -> (BTreeMap<u16, ServiceHealth>, [(u64, u64); 2]) {
    let mut checks: BTreeMap<u16, ServiceHealth> = BTreeMap::new();
    let mut counts = [(0, 0); 2];
    for sp in state.services.values() {
        let all = state.endpoints_of(&sp.name);
        for (i, count) in counts.iter_mut().enumerate() {
            let v4 = i == 0;
            if !sp.cluster_ips.iter().any(|ip| ip.is_ipv4() == v4) {
                continue;
            }
            let mine: Vec<Endpoint> = all
                .iter()
                .filter(|e| e.ip.is_ipv4() == v4)
                .cloned()
                .collect();
            let local = proxier::local_endpoints(&mine, hostname).len();
            let usable_anywhere = mine.iter().any(|e| e.ready || (e.serving && e.terminating));
            let no_local = local == 0 && usable_anywhere;
            if sp.internal_policy == TrafficPolicy::Local && no_local {
                count.0 += 1;
            }
            if sp.has_external() && sp.external_policy == TrafficPolicy::Local && no_local {
                count.1 += 1;
            }
        }
        if sp.has_external() && sp.external_policy == TrafficPolicy::Local {
            let local = proxier::local_endpoints(all, hostname).len();
            if let Some(port) = sp.health_check_node_port {
                let entry = checks.entry(port).or_insert(ServiceHealth {
                    name: format!("{}/{}", sp.name.namespace, sp.name.name),
                    local_endpoints: 0,
                });
                entry.local_endpoints = entry.local_endpoints.max(local);
            }
        }
    }
    (checks, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port_name(ns: &str, name: &str, port: &str) -> ServicePortName {
        ServicePortName {
            namespace: ns.into(),
            name: name.into(),
            port: port.into(),
            protocol: Protocol::Udp,
        }
    }

    #[test]
    fn removing_a_service_takes_all_its_ports_and_nothing_else() {
        let mut map: BTreeMap<ServicePortName, u8> = [
            (port_name("a", "dns", "x"), 1),
            (port_name("b", "dns", ""), 2),
            (port_name("b", "dns", "tcp"), 3),
            (port_name("b", "dns-2", ""), 4),
            (port_name("c", "dns", ""), 5),
        ]
        .into_iter()
        .collect();
        let removed = remove_service(&mut map, &("b".into(), "dns".into()));
        assert_eq!(removed.values().copied().collect::<Vec<_>>(), [2, 3]);
        assert_eq!(map.values().copied().collect::<Vec<_>>(), [1, 4, 5]);
        assert!(remove_service(&mut map, &("b".into(), "dns".into())).is_empty());
        let last = remove_service(&mut map, &("c".into(), "dns".into()));
        assert_eq!(last.values().copied().collect::<Vec<_>>(), [5]);
        assert_eq!(map.values().copied().collect::<Vec<_>>(), [1, 4]);
    }
}
