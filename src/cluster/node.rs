//! This node's facts from its Node object: addresses, pod CIDRs, labels.

use super::*;

impl NodeInfo {
    /// This node's facts from its Node object.
    pub(crate) fn of(node: &Node) -> NodeInfo {
        let status = node.status.as_ref();
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            internal_ips: status
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .filter(|a| a.type_ == "InternalIP")
                .filter_map(|a| parse_ip(&a.address))
                .collect(),
            pod_cidrs: node
                .spec
                .as_ref()
                .and_then(|s| {
                    s.pod_cidrs
                        .clone()
                        .or_else(|| s.pod_cidr.clone().map(|c| vec![c]))
                })
                .into_iter()
                .flatten()
                .filter_map(|c| c.parse().ok())
                .collect(),
            zone: node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("topology.kubernetes.io/zone"))
                .cloned(),
        }
    }
}
