//! What the planner is given about this node besides the cluster's objects, for the one-shot
//! commands and the daemon alike: the manifests read and this node's Node picked from them,
//! the local addresses NodePorts need, the IP families this kernel can filter, and which
//! families' NodePorts fall back to every local address (said to the operator).
//!
//! Guarantees: every skipped manifest is logged as a warning naming it; loopback addresses
//! never serve NodePorts; local addresses come in a fixed order, so an unchanged host plans
//! unchanged tables.

use std::path::Path;

use crate::cluster::{ClusterState, NodeInfo};
use crate::proxier::{IpFamily, ProxyConfig, families};
use crate::source::Inputs;
use crate::source::local_addrs::{self, LocalAddrError};
use crate::source::manifests::{self, ManifestError};

/// Reading this node's inputs failed.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("loading manifests: {0}")]
    Manifests(#[source] ManifestError),
    #[error("reading local addresses for --nodeport-addresses: {0}")]
    LocalAddresses(#[source] LocalAddrError),
}

/// Loads `path`, logs each skipped document as a warning, and picks this node's Node object.
pub fn load_inputs(path: &Path, hostname: &str) -> Result<Inputs, InputError> {
    let (m, warnings) = manifests::load(path).map_err(InputError::Manifests)?;
    for w in &warnings {
        tracing::warn!(
            file = %w.file.display(),
            document = w.document,
            item = ?w.item,
            kind = w.kind.as_deref().unwrap_or(""),
            name = w.name.as_deref().unwrap_or(""),
            reason = %w.reason,
            "skipped a manifest document"
        );
    }
    let mut named_here = m
        .nodes
        .into_iter()
        .filter(|n| n.metadata.name.as_deref() == Some(hostname));
    let node = named_here.next();
    if named_here.next().is_some() {
        tracing::warn!(
            node = hostname,
            "several Nodes with this name; using the first"
        );
    }
    if node.is_none() {
        tracing::warn!(
            node = hostname,
            "no Node with this name in the manifests: node addresses and podCIDRs are unknown"
        );
    }
    Ok(Inputs {
        services: m.services,
        endpoint_slices: m.endpoint_slices,
        node,
        service_cidrs: m.service_cidrs,
    })
}

/// Fills `config.local_addresses` when the planner needs them: `--nodeport-addresses` lists
/// CIDRs, or a family has no node IP on `node` (its NodePorts are then accepted on every local
/// address of the family). Loopback never serves NodePorts, so it is left out.
pub(crate) fn add_local_addresses(
    config: &mut ProxyConfig,
    node: Option<&NodeInfo>,
) -> Result<(), InputError> {
    if config.needs_local_addresses(node) {
        let addrs = local_addrs::local_addresses().map_err(InputError::LocalAddresses)?;
        config.local_addresses = addrs
            .into_iter()
            .map(|(ip, _)| ip)
            .filter(|ip| !ip.is_loopback())
            .collect();
        // In a fixed order: the planner replans everything when its configuration differs, and
        // a dump listing the same addresses in another order is no change.
        config.local_addresses.sort();
        config.local_addresses.dedup();
    }
    Ok(())
}

/// The IP families this kernel can filter, probed once: IPv4 always, IPv6 unless it is off
/// here (no `/proc/sys/net/ipv6`, as with `ipv6.disable=1`, or `disable_ipv6` set for all
/// interfaces of this network namespace), in which case no IPv6 packet can arrive to proxy.
pub(crate) fn kernel_families() -> Vec<IpFamily> {
    let ipv6 = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6")
        .is_ok_and(|v| v.trim() == "0");
    if !ipv6 {
        tracing::info!(
            "IPv6 is off in this kernel or network namespace: only the ip table is programmed"
        );
        return vec![IpFamily::V4];
    }
    vec![IpFamily::V4, IpFamily::V6]
}

/// For each planned family whose NodePorts are accepted on every local address of the family,
/// why: kube-proxy's behaviour, which the operator should know of.
pub(crate) fn nodeport_fallbacks(
    state: &ClusterState,
    config: &ProxyConfig,
) -> Vec<(IpFamily, &'static str)> {
    families(state, config)
        .into_iter()
        .filter_map(|f| Some((f, config.nodeport_fallback(f, state.node.as_ref())?)))
        .collect()
}

/// Logs each of `fallbacks`: a warning when the cluster looks dual-stack (its CIDRs or the
/// node's podCIDRs have both families), as kube-proxy warns, else for information.
pub(crate) fn log_nodeport_fallbacks(
    fallbacks: &[(IpFamily, &'static str)],
    state: &ClusterState,
    config: &ProxyConfig,
) {
    let nets = config
        .cluster_cidrs
        .iter()
        .chain(&config.service_cidrs)
        .chain(state.node.iter().flat_map(|n| &n.pod_cidrs));
    let (mut v4, mut v6) = (false, false);
    for n in nets {
        match n {
            ipnet::IpNet::V4(_) => v4 = true,
            ipnet::IpNet::V6(_) => v6 = true,
        }
    }
    for (family, reason) in fallbacks {
        let family = match family {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        };
        let message = "NodePorts of this family are accepted on every local address of the family, \
                       as kube-proxy does; set --node-ip or --nodeport-addresses to narrow them";
        if v4 && v6 {
            tracing::warn!(family, reason, "{message}");
        } else {
            tracing::info!(family, reason, "{message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxier::NodePortAddresses;

    const NODES: &str = "\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: other}}
- {apiVersion: v1, kind: Node, metadata: {name: node-a}, spec: {podCIDRs: [10.244.1.0/24]}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
";

    #[test]
    fn inputs_pick_the_node_named_like_this_host() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.yaml"), NODES).unwrap();
        let inputs = load_inputs(dir.path(), "node-a").unwrap();
        let node = inputs.node.expect("node-a is in the manifests");
        assert_eq!(node.metadata.name.as_deref(), Some("node-a"));
        assert_eq!(inputs.services.len(), 1);
        let none = load_inputs(dir.path(), "node-z").unwrap();
        assert!(none.node.is_none());
    }

    #[test]
    fn a_missing_manifests_path_is_reported_as_a_loading_error() {
        let err = load_inputs(Path::new("/nonexistent/kubenft"), "n").unwrap_err();
        assert!(err.to_string().starts_with("loading manifests: "), "{err}");
    }

    #[test]
    fn local_addresses_are_read_only_when_nodeports_need_them() {
        // `primary` on a node with an IP of each family: the node IPs are the NodePort addresses.
        let dual = NodeInfo {
            internal_ips: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            ..NodeInfo::default()
        };
        let mut primary = ProxyConfig::default();
        add_local_addresses(&mut primary, Some(&dual)).unwrap();
        assert!(primary.local_addresses.is_empty());
        // Without an IPv6 node IP, IPv6 NodePorts take every local IPv6 address.
        let v4_only = NodeInfo {
            internal_ips: vec!["10.0.0.1".parse().unwrap()],
            ..NodeInfo::default()
        };
        assert!(primary.needs_local_addresses(Some(&v4_only)));
        if !crate::netns::can_create() {
            eprintln!("skipped the CIDR half: creating network namespaces needs root");
            return;
        }
        let ns = crate::netns::Netns::create("cliaddrs").unwrap();
        ns.exec(&[
            "ip", "link", "add", "kveth0", "type", "veth", "peer", "name", "kveth1",
        ])
        .unwrap();
        ns.exec(&["ip", "addr", "add", "192.0.2.9/24", "dev", "kveth0"])
            .unwrap();
        let got = ns
            .run(|| {
                let mut c = ProxyConfig {
                    nodeport_addresses: NodePortAddresses::cidrs(vec![
                        "0.0.0.0/0".parse().unwrap(),
                    ]),
                    ..ProxyConfig::default()
                };
                add_local_addresses(&mut c, None).map(|()| c.local_addresses)
            })
            .unwrap()
            .unwrap();
        assert_eq!(got, vec!["192.0.2.9".parse::<std::net::IpAddr>().unwrap()]);
    }
}
