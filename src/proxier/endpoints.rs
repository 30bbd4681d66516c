//! Which endpoints a node may send a service port's traffic to, categorised as kube-proxy's
//! `CategorizeEndpoints` does: the endpoints of the Cluster policy (topology applied) and those
//! of the Local policy (its third list, every endpoint reachable from this node, is their union,
//! which no rule needs). Internal traffic (ClusterIPs) follows internalTrafficPolicy, external
//! traffic (NodePorts, external and load-balancer IPs) follows externalTrafficPolicy; each policy
//! picks one of the two lists.
//!
//! Usable means ready; where none is, serving-and-terminating ones (separately for the Cluster
//! and the Local list). Topology comes from the hints the EndpointSlice controller writes for a
//! Service's `trafficDistribution` (PreferClose / PreferSameZone: `forZones`; PreferSameNode:
//! `forNodes` too), not from the Service field itself: a node prefers its own hints when every
//! ready endpoint carries node hints and one names this node, else its zone's when every ready
//! endpoint carries zone hints and one names this node's zone, else uses every endpoint.
//! Feature gates assumed on, as in Kubernetes 1.35: TopologyAwareHints (GA 1.33) and
//! PreferSameTrafficDistribution (alpha 1.33, beta 1.34, GA 1.35).

use std::borrow::Cow;

use crate::cluster::{Endpoint, ServicePort, TrafficPolicy};
use crate::family::IpFamily;

/// One service port's endpoints as this node sees them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Categorized {
    /// For the Cluster policy, topology applied; `None` when the port never uses that policy
    /// (internalTrafficPolicy Local and not reachable from outside).
    pub(crate) cluster: Option<Vec<Endpoint>>,
    /// This node's, for the Local policy; `None` when the port never uses that policy.
    pub(crate) local: Option<Vec<Endpoint>>,
    /// Whether some endpoint anywhere could serve (ready, or serving while terminating): when
    /// a policy's list is empty, its traffic is dropped if so and rejected if not.
    pub(crate) has_any: bool,
}

impl Categorized {
    /// The endpoints internal (ClusterIP) traffic goes to.
    pub(crate) fn internal(&self, sp: &ServicePort) -> &[Endpoint] {
        self.of(sp.internal_policy)
    }

    /// The endpoints external (NodePort, external IP, load-balancer IP) traffic goes to.
    pub(crate) fn external(&self, sp: &ServicePort) -> &[Endpoint] {
        self.of(sp.external_policy)
    }

    fn of(&self, policy: TrafficPolicy) -> &[Endpoint] {
        let list = match policy {
            TrafficPolicy::Cluster => &self.cluster,
            TrafficPolicy::Local => &self.local,
        };
        list.as_deref().unwrap_or_default()
    }
}

/// A port's endpoints of family `fam` as the node reads them: without their node hints when
/// those do not count (the PreferSameTrafficDistribution gate off, as kube-proxy then ignores
/// them). Borrowed when nothing differs, which is most ports.
pub(crate) fn of_family(
    endpoints: &[Endpoint],
    fam: IpFamily,
    use_node_hints: bool,
) -> Cow<'_, [Endpoint]> {
    let as_read =
        |e: &Endpoint| IpFamily::of(&e.ip) == fam && (use_node_hints || e.hint_nodes.is_empty());
    if endpoints.iter().all(as_read) {
        return Cow::Borrowed(endpoints);
    }
    let mut read: Vec<Endpoint> = endpoints
        .iter()
        .filter(|e| IpFamily::of(&e.ip) == fam)
        .cloned()
        .collect();
    if !use_node_hints {
        read.iter_mut().for_each(|e| e.hint_nodes.clear());
    }
    Cow::Owned(read)
}

/// Which endpoints topology lets this node use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    Everywhere,
    SameNode,
    SameZone,
}

/// Categorises `all` (the port's endpoints of one family) for the node `node_name` in `zone`
/// (its `topology.kubernetes.io/zone` label).
pub(crate) fn categorize(
    sp: &ServicePort,
    all: &[Endpoint],
    node_name: &str,
    zone: Option<&str>,
) -> Categorized {
    let external = sp.has_external();
    let local_policy_external = external && sp.external_policy == TrafficPolicy::Local;
    // Cluster endpoints serve external traffic under either policy: policy Local still sends
    // pods' and the node's own connections to them.
    let uses_cluster = sp.internal_policy == TrafficPolicy::Cluster || external;
    let uses_local = sp.internal_policy == TrafficPolicy::Local || local_policy_external;
    let is_local = |e: &Endpoint| e.node_name.as_deref() == Some(node_name);
    let fallback = |e: &Endpoint| e.serving && e.terminating;

    let mut out = Categorized::default();
    // A node without the label has no zone hints meant for it.
    let zone = zone.unwrap_or_default();
    if uses_cluster {
        let topology = topology_of(all, node_name, zone);
        let mut cluster: Vec<Endpoint> = all
            .iter()
            .filter(|e| e.ready && available(e, topology, node_name, zone))
            .cloned()
            .collect();
        // Topology applies only when it leaves a ready endpoint, so an empty list here means
        // nothing is ready anywhere: terminating ones that still serve, wherever they are.
        if cluster.is_empty() {
            cluster = all.iter().filter(|e| fallback(e)).cloned().collect();
        }
        out.has_any = !cluster.is_empty();
        out.cluster = Some(cluster);
    }
    if uses_local {
        out.has_any |= all.iter().any(|e| e.ready || fallback(e));
        let mut local: Vec<Endpoint> = all
            .iter()
            .filter(|e| is_local(e) && e.ready)
            .cloned()
            .collect();
        if local.is_empty() {
            local = all
                .iter()
                .filter(|e| is_local(e) && fallback(e))
                .cloned()
                .collect();
        }
        out.local = Some(local);
    }
    out
}

/// The topology the hints of the ready endpoints allow this node (none when no endpoint is
/// ready: the terminating fallback ignores hints).
fn topology_of(all: &[Endpoint], node_name: &str, zone: &str) -> Topology {
    let ready: Vec<&Endpoint> = all.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return Topology::Everywhere;
    }
    let every = |hinted: fn(&Endpoint) -> &[String]| ready.iter().all(|e| !hinted(e).is_empty());
    let some_names = |hinted: fn(&Endpoint) -> &[String], name: &str| {
        ready.iter().any(|e| hinted(e).iter().any(|h| h == name))
    };
    if every(|e| &e.hint_nodes) && some_names(|e| &e.hint_nodes, node_name) {
        return Topology::SameNode;
    }
    if every(|e| &e.hint_zones) && some_names(|e| &e.hint_zones, zone) {
        return Topology::SameZone;
    }
    Topology::Everywhere
}

fn available(e: &Endpoint, topology: Topology, node_name: &str, zone: &str) -> bool {
    match topology {
        Topology::Everywhere => true,
        Topology::SameNode => e.hint_nodes.iter().any(|n| n == node_name),
        Topology::SameZone => e.hint_zones.iter().any(|z| z == zone),
    }
}

/// Endpoints on this node: ready ones, else those still serving while terminating.
#[cfg(feature = "daemon")]
pub(crate) fn local_endpoints(all: &[Endpoint], node_name: &str) -> Vec<Endpoint> {
    let on_node = |e: &&Endpoint| e.node_name.as_deref() == Some(node_name);
    let ready: Vec<Endpoint> = all
        .iter()
        .filter(on_node)
        .filter(|e| e.ready)
        .cloned()
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    all.iter()
        .filter(on_node)
        .filter(|e| e.serving && e.terminating)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;
