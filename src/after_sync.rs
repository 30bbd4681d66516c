//! What the daemon derives from the model after each successful sync: the UDP service ports
//! and the endpoints their rules send to (to clear stale conntrack entries), and each service
//! port's local endpoints (healthCheckNodePort servers, the no-local-endpoints gauges).
//!
//! Both are kept service port by service port, so a sync that changed one service recomputes
//! that service only: at 10,000 services, deriving everything again took longer than the sync.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use crate::conntrack::{self, StaleFlow, UdpServiceView};
use crate::model::{
    ClusterState, Endpoint, NodeInfo, Protocol, ServicePort, ServicePortName, ServiceRef,
    TrafficPolicy,
};
use crate::proxier;
use crate::serve::ServiceHealth;

/// A service port's local endpoints, kept only for ports with a Local traffic policy (the
/// only ones the gauges and healthCheckNodePorts concern).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LocalFacts {
    no_local_internal: bool,
    no_local_external: bool,
    /// The healthCheckNodePort, its Service as `namespace/name`, and the local endpoints.
    health_check: Option<(u16, String, usize)>,
}

/// The after-sync facts, kept up to date service by service.
#[derive(Debug, Default)]
pub struct AfterSyncFacts {
    hostname: String,
    /// The node the facts were derived with (its zone picks topology-aware endpoints).
    node: Option<NodeInfo>,
    udp: BTreeMap<ServicePortName, UdpServiceView>,
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
        self.pending.extend(services.into_iter().cloned());
    }

    /// Brings the facts up to the model `state` (which the last sync programmed) and returns the
    /// UDP flows made stale since the last time. The first time there is nothing to compare
    /// with: flows that exist were made by rules a previous run left and this sync kept.
    pub fn update(&mut self, state: &ClusterState) -> Vec<StaleFlow> {
        let services = std::mem::take(&mut self.pending);
        let node_changed = self.node != state.node;
        let (before, after) = if !self.derived || node_changed {
            self.node = state.node.clone();
            let before: Vec<UdpServiceView> = std::mem::take(&mut self.udp).into_values().collect();
            self.local.clear();
            for sp in state.services.values() {
                self.derive(state, sp);
            }
            (before, self.udp.values().cloned().collect())
        } else {
            let mut before = Vec::new();
            let mut after = Vec::new();
            for service in &services {
                before.extend(remove_service(&mut self.udp, service).into_values());
                remove_service(&mut self.local, service);
                for (_, sp) in ports_of(&state.services, service) {
                    self.derive(state, sp);
                    after.extend(self.udp.get(&sp.name).cloned());
                }
            }
            (before, after)
        };
        let first = !std::mem::replace(&mut self.derived, true);
        if first {
            Vec::new()
        } else {
            conntrack::plan(&before, &after)
        }
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

    /// Service ports with an internal / external Local policy and no local endpoint.
    pub fn no_local_endpoints(&self) -> (u64, u64) {
        let count =
            |f: fn(&LocalFacts) -> bool| self.local.values().filter(|l| f(l)).count() as u64;
        (
            count(|l| l.no_local_internal),
            count(|l| l.no_local_external),
        )
    }

    fn derive(&mut self, state: &ClusterState, sp: &ServicePort) {
        let endpoints = state
            .endpoints
            .get(&sp.name)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let zone = self.node.as_ref().and_then(|n| n.zone.as_deref());
        if let Some(view) = udp_view(sp, endpoints, &self.hostname, zone) {
            self.udp.insert(sp.name.clone(), view);
        }
        if let Some(facts) = local_facts(sp, endpoints, &self.hostname) {
            self.local.insert(sp.name.clone(), facts);
        }
    }
}

fn ports_of<'a, V>(
    map: &'a BTreeMap<ServicePortName, V>,
    service: &ServiceRef,
) -> impl Iterator<Item = (&'a ServicePortName, &'a V)> {
    map.range(ServicePortName::lowest_of(service)..)
        .take_while(move |(n, _)| n.is_port_of(service))
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

/// A UDP service port and the endpoints its rules send to (after readiness, traffic policy and
/// topology), or None for other protocols.
fn udp_view(
    sp: &ServicePort,
    all: &[Endpoint],
    hostname: &str,
    zone: Option<&str>,
) -> Option<UdpServiceView> {
    if sp.name.protocol != Protocol::Udp {
        return None;
    }
    let endpoints: BTreeSet<SocketAddr> = proxier::reachable_endpoints(sp, all, hostname, zone)
        .iter()
        .map(|e| SocketAddr::new(e.ip, e.port))
        .collect();
    let service_ips: Vec<IpAddr> = sp
        .cluster_ips
        .iter()
        .chain(&sp.external_ips)
        .chain(&sp.load_balancer_ips)
        .copied()
        .collect();
    Some(UdpServiceView {
        name: sp.name.to_string(),
        service_ips,
        port: sp.port,
        node_port: sp.node_port,
        endpoints: endpoints.into_iter().collect(),
    })
}

fn local_facts(sp: &ServicePort, all: &[Endpoint], hostname: &str) -> Option<LocalFacts> {
    let internal = sp.internal_policy == TrafficPolicy::Local;
    let external = sp.has_external() && sp.external_policy == TrafficPolicy::Local;
    if !internal && !external {
        return None;
    }
    let local = proxier::local_endpoints(all, hostname).len();
    // Like kube-proxy, a service without usable endpoints anywhere is not counted: it rejects
    // rather than drops, whatever its policies.
    let usable_anywhere = all.iter().any(|e| e.ready || (e.serving && e.terminating));
    let no_local = local == 0 && usable_anywhere;
    Some(LocalFacts {
        no_local_internal: internal && no_local,
        no_local_external: external && no_local,
        health_check: sp.health_check_node_port.filter(|_| external).map(|port| {
            let name = format!("{}/{}", sp.name.namespace, sp.name.name);
            (port, name, local)
        }),
    })
}

/// Every UDP service port of `state` with the endpoints its rules send to: what
/// [`AfterSyncFacts`] keeps, derived from scratch.
pub fn udp_views(state: &ClusterState, hostname: &str) -> Vec<UdpServiceView> {
    let zone = state.node.as_ref().and_then(|n| n.zone.as_deref());
    state
        .services
        .values()
        .filter_map(|sp| {
            let all = state.endpoints.get(&sp.name).map_or(&[][..], Vec::as_slice);
            udp_view(sp, all, hostname, zone)
        })
        .collect()
}

/// [`AfterSyncFacts::health_checks`] and [`AfterSyncFacts::no_local_endpoints`] derived from
/// scratch, port by port.
pub fn local_endpoint_facts(
    state: &ClusterState,
    hostname: &str,
) -> (BTreeMap<u16, ServiceHealth>, (u64, u64)) {
    let mut checks: BTreeMap<u16, ServiceHealth> = BTreeMap::new();
    let (mut internal, mut external) = (0, 0);
    for sp in state.services.values() {
        let all = state.endpoints.get(&sp.name).map_or(&[][..], Vec::as_slice);
        let local = proxier::local_endpoints(all, hostname).len();
        let usable_anywhere = all.iter().any(|e| e.ready || (e.serving && e.terminating));
        let no_local = local == 0 && usable_anywhere;
        if sp.internal_policy == TrafficPolicy::Local && no_local {
            internal += 1;
        }
        if sp.has_external() && sp.external_policy == TrafficPolicy::Local {
            if no_local {
                external += 1;
            }
            if let Some(port) = sp.health_check_node_port {
                let entry = checks.entry(port).or_insert(ServiceHealth {
                    name: format!("{}/{}", sp.name.namespace, sp.name.name),
                    local_endpoints: 0,
                });
                entry.local_endpoints = entry.local_endpoints.max(local);
            }
        }
    }
    (checks, (internal, external))
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
