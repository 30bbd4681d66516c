//! Synthetic clusters: generated in memory for the planner, and written out as manifests for
//! the real daemon (`kubenft run --manifests`).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};

use kubenft::cluster::{
    ClusterState, ConsistentEndpoint, Endpoint, NodeInfo, Protocol, ServicePort, ServicePortName,
    TrafficPolicy,
};
use kubenft::proxier::ProxyConfig;

/// The node every synthetic cluster is planned for.
pub const NODE: &str = "node-0";
/// Pod network of the synthetic clusters (endpoint addresses are drawn from it).
pub const CLUSTER_CIDR: &str = "10.128.0.0/9";

/// The share of services, in percent, that are NodePort services with externalTrafficPolicy
/// Local (`--nodeport-percent`). They keep chains of their own where the others share the
/// pick chains, so they show what a cluster with such services costs. Set once, before any
/// cluster is made; 0 when never set.
static NODEPORT_PERCENT: OnceLock<usize> = OnceLock::new();

/// NodePorts come from 30000-32767.
const NODEPORT_BASE: usize = 30000;
const NODEPORTS: usize = 2768;

/// Makes `percent` % of the services of every cluster of this run NodePort services; refused
/// if a cluster of `largest` services would need more NodePorts than the range has.
pub fn set_nodeport_percent(percent: usize, largest: usize) -> Result<(), String> {
    if percent > 100 || largest * percent / 100 > NODEPORTS {
        return Err(format!(
            "--nodeport-percent {percent}: {} NodePorts needed for {largest} services, {NODEPORTS} exist",
            largest * percent / 100
        ));
    }
    NODEPORT_PERCENT
        .set(percent)
        .map_err(|_| "the NodePort share is set once".to_string())
}

pub fn nodeport_percent() -> usize {
    NODEPORT_PERCENT.get().copied().unwrap_or(0)
}

/// The NodePort of service `s`, if it is one of the NodePort services: spread evenly, the i-th
/// of them on port 30000 + i.
fn node_port(s: usize) -> Option<u16> {
    let p = nodeport_percent();
    let (before, after) = (s * p / 100, (s + 1) * p / 100);
    (after > before).then(|| (NODEPORT_BASE + before) as u16)
}

/// A scale written `SxE`: `S` services with `E` endpoints each.
pub fn parse_scale(scale: &str) -> Result<(usize, usize), String> {
    scale
        .split_once('x')
        .and_then(|(s, e)| Some((s.parse().ok()?, e.parse().ok()?)))
        .ok_or_else(|| format!("{scale}: expected services x endpoints, like 10000x10"))
}

pub fn service_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0a60_0000u32 + 1 + i as u32) // 10.96.0.0/12
}

fn endpoint_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0a80_0000u32 + 1 + i as u32) // 10.128.0.0/9
}

/// `services` ClusterIP services (one TCP port, 80 → 8080) with `endpoints` ready endpoints
/// each, spread over 100 nodes; `nodeport_percent()` of them NodePort services with
/// externalTrafficPolicy Local.
pub fn cluster(services: usize, endpoints: usize) -> ClusterState {
    let mut state = ClusterState {
        node: Some(NodeInfo {
            name: NODE.into(),
            internal_ips: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
            pod_cidrs: vec!["10.128.0.0/24".parse().unwrap()],
            zone: None,
        }),
        ..ClusterState::default()
    };
    for s in 0..services {
        add_service(&mut state, s, endpoints);
        if let Some(port) = node_port(s) {
            let sp = state
                .services
                .get_mut(&service_name(s))
                .expect("just added");
            sp.node_port = Some(port);
            sp.external_policy = TrafficPolicy::Local;
        }
    }
    state
}

/// Annotates every Service of `state` with a consistent endpoint choice in `mode`, as
/// `kubenft.io/consistent-endpoint` does.
pub fn choose_consistently(state: &mut ClusterState, mode: ConsistentEndpoint) {
    for sp in state.services.values_mut() {
        sp.consistent = Some(mode);
    }
}

pub fn service_name(s: usize) -> ServicePortName {
    ServicePortName {
        namespace: format!("ns-{}", s % 50),
        name: format!("svc-{s}"),
        port: "http".into(),
        protocol: Protocol::Tcp,
    }
}

pub fn add_service(state: &mut ClusterState, s: usize, endpoints: usize) {
    let name = Arc::new(service_name(s));
    state.services.insert(
        name.clone(),
        ServicePort {
            name: name.clone(),
            cluster_ips: vec![IpAddr::V4(service_ip(s))],
            port: 80,
            node_port: None,
            external_ips: vec![],
            load_balancer_ips: vec![],
            source_ranges: vec![],
            external_policy: TrafficPolicy::Cluster,
            internal_policy: TrafficPolicy::Cluster,
            affinity_timeout: None,
            health_check_node_port: None,
            traffic_distribution: None,
            consistent: None,
        },
    );
    let eps = (0..endpoints)
        .map(|e| endpoint(endpoint_ip(s * endpoints + e).into(), 8080, (s + e) % 100))
        .collect();
    state.endpoints.insert(name, eps);
}

/// A ready endpoint on `node-<node>`.
pub fn endpoint(ip: IpAddr, port: u16, node: usize) -> Endpoint {
    Endpoint {
        ip,
        port,
        ready: true,
        serving: true,
        terminating: false,
        node_name: Some(format!("node-{node}").into()),
        zone: None,
        hint_zones: vec![],
        hint_nodes: vec![],
    }
}

pub fn config() -> ProxyConfig {
    ProxyConfig {
        hostname: NODE.into(),
        cluster_cidrs: vec![CLUSTER_CIDR.parse().unwrap()],
        ..ProxyConfig::default()
    }
}

/// The same cluster as `cluster(services, endpoints)`, as the manifests a `kubectl get -o
/// yaml` would give: (file name, contents).
pub fn manifests(services: usize, endpoints: usize) -> Vec<(&'static str, String)> {
    let mut svcs = String::new();
    let mut slices = String::new();
    for s in 0..services {
        let n = service_name(s);
        let (kind, node_port) = match node_port(s) {
            Some(p) => (
                "NodePort\n  externalTrafficPolicy: Local",
                format!(", nodePort: {p}"),
            ),
            None => ("ClusterIP", String::new()),
        };
        let _ = write!(
            svcs,
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {}, namespace: {}}}\nspec:\n  \
             type: {kind}\n  clusterIP: {ip}\n  clusterIPs: [{ip}]\n  ports: [{{name: http, port: 80, \
             protocol: TCP, targetPort: 8080{node_port}}}]\n",
            n.name,
            n.namespace,
            ip = service_ip(s)
        );
        let _ = write!(
            slices,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {}-x, \
             namespace: {}, labels: {{kubernetes.io/service-name: {}}}}}\naddressType: IPv4\n\
             ports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n",
            n.name, n.namespace, n.name
        );
        for e in 0..endpoints {
            let _ = writeln!(
                slices,
                "  - {{addresses: [{}], nodeName: node-{}, conditions: {{ready: true}}}}",
                endpoint_ip(s * endpoints + e),
                (s + e) % 100
            );
        }
    }
    let node = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {NODE}}}\nspec: {{podCIDR: 10.128.0.0/24}}\n\
         status: {{addresses: [{{type: InternalIP, address: 10.0.0.1}}]}}\n"
    );
    vec![
        ("node.yaml", node),
        ("services.yaml", svcs),
        ("endpointslices.yaml", slices),
    ]
}
