//! Loopback NodePorts under the KubeProxyNFTablesLocalhostNodePorts gate: DNAT cannot send
//! loopback traffic to a pod (no `route_localnet` for nftables, none at all for IPv6), so
//! kube-proxy 1.37 serves `127.0.0.1:NodePort` and `[::1]:NodePort` with a userspace TCP proxy.
//! This decides what it listens on and where each listener connects; the daemon does the I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::endpoints::{categorize, of_family};
use super::{IpFamily, ProxyConfig, families};
use crate::cluster::{ClusterState, Protocol};

/// One loopback NodePort listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalhostListener {
    /// `127.0.0.1:NodePort` or `[::1]:NodePort`.
    pub address: SocketAddr,
    /// The service port, `namespace/name:port`, for logs.
    pub service: String,
    /// Where connections go: the endpoints external traffic of this family may reach on this
    /// node (externalTrafficPolicy applied, as upstream's proxy does), never empty.
    pub endpoints: Vec<SocketAddr>,
    /// ClientIP affinity's timeout: every loopback client shares one source address, so one
    /// endpoint serves them all until the pin has been idle this long.
    pub affinity: Option<Duration>,
}

/// The listeners the userspace proxy should have: one per TCP NodePort with endpoints, in each
/// family whose loopback NodePorts it serves (`ProxyConfig::localhost_proxy`). As upstream, a
/// NodePort without endpoints has no listener (a connection is refused by the kernel), and
/// other protocols are rejected by the ruleset instead.
pub fn localhost_listeners(state: &ClusterState, config: &ProxyConfig) -> Vec<LocalhostListener> {
    let mut out = Vec::new();
    for fam in families(state, config) {
        if !config.localhost_proxy(fam) {
            continue;
        }
        let loopback = match fam {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        };
        let zone = state.node.as_ref().and_then(|n| n.zone.as_deref());
        for (_, sp, endpoints) in state.ports_with_endpoints() {
            let Some(node_port) = sp.node_port else {
                continue;
            };
            let of_fam = |ip: &IpAddr| IpFamily::of(ip) == fam;
            if sp.name.protocol != Protocol::Tcp || !sp.cluster_ips.iter().any(of_fam) {
                continue;
            }
            let endpoints = of_family(endpoints, fam, config.use_node_hints);
            let categorized = categorize(sp, &endpoints, &config.hostname, zone);
            let targets: Vec<SocketAddr> = categorized
                .external(sp)
                .iter()
                .map(|e| SocketAddr::new(e.ip, e.port))
                .collect();
            if targets.is_empty() {
                continue;
            }
            out.push(LocalhostListener {
                address: SocketAddr::new(loopback, node_port),
                service: sp.name.to_string(),
                endpoints: targets,
                affinity: sp
                    .affinity_timeout
                    .map(|s| Duration::from_secs(u64::from(s))),
            });
        }
    }
    out
}
