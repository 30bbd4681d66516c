//! Which endpoints a node may send a service's traffic to: ready ones, else serving-but-
//! terminating ones (separately for the cluster and the node-local sets); internalTraffic-
//! Policy Local; and topology-aware routing by hints, as kube-proxy categorises them.

use crate::model::{Endpoint, ServicePort, TrafficPolicy};

/// Ready endpoints; if there are none, those still serving while terminating.
fn usable<'a>(eps: impl Iterator<Item = &'a Endpoint> + Clone) -> Vec<Endpoint> {
    let ready: Vec<Endpoint> = eps.clone().filter(|e| e.ready).cloned().collect();
    if !ready.is_empty() {
        return ready;
    }
    eps.filter(|e| e.serving && e.terminating)
        .cloned()
        .collect()
}

/// Endpoints on this node.
pub fn local_endpoints(all: &[Endpoint], hostname: &str) -> Vec<Endpoint> {
    usable(
        all.iter()
            .filter(|e| e.node_name.as_deref() == Some(hostname)),
    )
}

/// Endpoints for traffic from inside the cluster (ClusterIP, and external traffic under
/// externalTrafficPolicy Cluster).
pub fn cluster_endpoints(
    sp: &ServicePort,
    all: &[Endpoint],
    hostname: &str,
    zone: Option<&str>,
) -> Vec<Endpoint> {
    if sp.internal_policy == TrafficPolicy::Local {
        return local_endpoints(all, hostname);
    }
    let eps = usable(all.iter());
    // Hints are honoured only when every endpoint carries them and they leave this node
    // something to use; otherwise traffic goes everywhere (kube-proxy's safe fallback).
    let by_node = sp.traffic_distribution.as_deref() == Some("PreferSameNode")
        && eps.iter().all(|e| !e.hint_nodes.is_empty())
        && eps
            .iter()
            .any(|e| e.hint_nodes.iter().any(|n| n == hostname));
    if by_node {
        return eps
            .into_iter()
            .filter(|e| e.hint_nodes.iter().any(|n| n == hostname))
            .collect();
    }
    if let Some(zone) = zone
        && eps.iter().all(|e| !e.hint_zones.is_empty())
        && eps.iter().any(|e| e.hint_zones.iter().any(|z| z == zone))
    {
        return eps
            .into_iter()
            .filter(|e| e.hint_zones.iter().any(|z| z == zone))
            .collect();
    }
    eps
}
