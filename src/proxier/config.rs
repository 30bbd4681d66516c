//! What the planner needs to know beyond the cluster objects: node identity and the operator's
//! choices (flags or KubeProxyConfiguration), already validated.

use std::net::IpAddr;
#[cfg(feature = "daemon")]
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::layout::IpFamily;
use crate::cluster::NodeInfo;

/// Which addresses accept NodePort traffic: kube-proxy's `nodePortAddresses`, whose keywords
/// and CIDRs combine freely (1.37).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePortAddresses {
    /// `primary`: the node's primary IP of each family (kube-proxy's default).
    pub primary: bool,
    /// Local addresses inside these accept NodePorts too; the keywords `localhost`
    /// (127.0.0.0/8, ::1/128) and `all` (0.0.0.0/0, ::/0) stand here expanded.
    pub cidrs: Vec<IpNet>,
}

impl Default for NodePortAddresses {
    fn default() -> Self {
        NodePortAddresses::primary()
    }
}

impl NodePortAddresses {
    /// `primary` alone.
    pub fn primary() -> Self {
        NodePortAddresses {
            primary: true,
            cidrs: Vec::new(),
        }
    }

    /// CIDRs alone.
    pub fn cidrs(cidrs: Vec<IpNet>) -> Self {
        NodePortAddresses {
            primary: false,
            cidrs,
        }
    }

    fn cidrs_of(&self, fam: IpFamily) -> impl Iterator<Item = &IpNet> {
        self.cidrs
            .iter()
            .filter(move |c| IpFamily::of(&c.addr()) == fam)
    }

    /// Whether a zero CIDR of `fam` is listed: every address of the family accepts NodePorts
    /// and the others listed change nothing (kube-proxy's "match all").
    pub(crate) fn matches_all(&self, fam: IpFamily) -> bool {
        self.cidrs_of(fam).any(|c| c.prefix_len() == 0)
    }

    /// Whether a loopback range of `fam` is listed: kube-proxy 1.37 judges a CIDR by its
    /// network address (`127.0.0.2/32` counts although its proxy listens on 127.0.0.1 only,
    /// kubernetes#142129).
    pub(crate) fn names_loopback(&self, fam: IpFamily) -> bool {
        self.cidrs_of(fam).any(|c| c.network().is_loopback())
    }
}

/// How "traffic from a local pod" is recognised (kube-proxy's `--detect-local-mode`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DetectLocal {
    /// Source inside `cluster_cidrs` (kube-proxy's `ClusterCIDR`).
    #[default]
    ClusterCidr,
    /// Source inside the Node's `spec.podCIDRs` (`NodeCIDR`).
    NodeCidr,
    /// Arriving on this bridge interface (`BridgeInterface`).
    BridgeInterface(String),
    /// Arriving on an interface whose name starts with this prefix (`InterfaceNamePrefix`).
    InterfaceNamePrefix(String),
}

/// Validated configuration of the planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// nftables table name, used in both the `ip` and the `ip6` table.
    pub table_name: String,
    /// This node's name (`--hostname-override`, else the host name): selects local endpoints.
    pub hostname: String,
    /// `--node-ip`: primary node IPs; empty means "take them from the Node object".
    pub node_ips: Vec<IpAddr>,
    /// `--cluster-cidr`: pod network(s), at most one per family.
    pub cluster_cidrs: Vec<IpNet>,
    /// `--service-cidr`: ClusterIP range(s); unallocated addresses inside are dropped.
    pub service_cidrs: Vec<IpNet>,
    pub nodeport_addresses: NodePortAddresses,
    /// Addresses currently on local interfaces; the caller reads them (rtnetlink), the planner
    /// only filters them with `nodeport_addresses`.
    pub local_addresses: Vec<IpAddr>,
    /// `--masquerade-all`: masquerade all traffic to ClusterIPs.
    pub masquerade_all: bool,
    /// `--masquerade-bit`: which bit of the packet mark requests masquerading (default 14,
    /// i.e. 0x4000).
    pub masquerade_bit: u8,
    pub detect_local: DetectLocal,
    /// The IP families this kernel can filter. The daemon and `sync --once` probe it once at
    /// start (the planner does no I/O); `render` keeps the default, both. Every supported
    /// family gets its table whatever addresses the node has, as kube-proxy runs both families
    /// whenever the kernel has them.
    pub supported_families: Vec<IpFamily>,
    /// Whether endpoints' node hints (`forNodes`, written for PreferSameNode) count: the
    /// PreferSameTrafficDistribution feature gate. Off, only zone hints steer topology.
    pub use_node_hints: bool,
    /// The KubeProxyNFTablesLocalhostNodePorts feature gate: loopback NodePorts are served by
    /// the daemon's userspace TCP proxy where `nodeport_addresses` names loopback, and
    /// rejected elsewhere.
    pub localhost_nodeports: bool,
    /// Whether Services' `externalIPs` are proxied: the AllowServiceExternalIPs feature gate
    /// (KEP-5707). Off, the model drops them as the Services are converted
    /// (`ClusterState::withhold_external_ips`), so nothing downstream (rules, conntrack
    /// cleanup, traffic-policy choices) sees them, as kube-proxy's service ports do not.
    pub serve_external_ips: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            table_name: "kubenft".into(),
            hostname: String::new(),
            node_ips: Vec::new(),
            cluster_cidrs: Vec::new(),
            service_cidrs: Vec::new(),
            nodeport_addresses: NodePortAddresses::primary(),
            local_addresses: Vec::new(),
            masquerade_all: false,
            masquerade_bit: 14,
            detect_local: DetectLocal::ClusterCidr,
            supported_families: vec![IpFamily::V4, IpFamily::V6],
            use_node_hints: true,
            localhost_nodeports: false,
            serve_external_ips: true,
        }
    }
}

impl ProxyConfig {
    /// The packet-mark bit that requests masquerading (`1 << masquerade_bit`).
    pub(crate) fn masquerade_mark(&self) -> u32 {
        1u32 << self.masquerade_bit
    }

    /// This node's primary IPs of family `fam`: those of `--node-ip`, else the Node's first
    /// InternalIP of the family; empty when neither names one.
    pub(crate) fn node_ips_of(&self, fam: IpFamily, node: Option<&NodeInfo>) -> Vec<IpAddr> {
        let configured: Vec<IpAddr> = self
            .node_ips
            .iter()
            .copied()
            .filter(|ip| IpFamily::of(ip) == fam)
            .collect();
        if !configured.is_empty() {
            return configured;
        }
        node.iter()
            .flat_map(|n| &n.internal_ips)
            .copied()
            .find(|ip| IpFamily::of(ip) == fam)
            .into_iter()
            .collect()
    }

    /// Why NodePorts of `fam` are accepted on every local address of the family, if they
    /// are: `nodePortAddresses` matches all of it, or names no address of it. kube-proxy reads
    /// `primary` as the node IP of each family and a family without any address chosen as
    /// "all of them".
    pub(crate) fn nodeport_fallback(
        &self,
        fam: IpFamily,
        node: Option<&NodeInfo>,
    ) -> Option<&'static str> {
        let addresses = &self.nodeport_addresses;
        if addresses.matches_all(fam) {
            return Some("--nodeport-addresses matches every address of this family");
        }
        let primary = addresses.primary && !self.node_ips_of(fam, node).is_empty();
        if primary || addresses.cidrs_of(fam).next().is_some() {
            return None;
        }
        Some(if addresses.primary {
            "this node has no IP of this family (neither --node-ip nor an InternalIP)"
        } else {
            "--nodeport-addresses has no CIDR of this family"
        })
    }

    /// The addresses of family `fam` that accept NodePorts: the node IP with `primary` and
    /// the local addresses inside the CIDRs, or every local address of the family when
    /// `nodePortAddresses` matches all of it or names none of it (see `nodeport_fallback`).
    /// Never loopback: loopback NodePorts are the userspace proxy's (`localhost_proxy`). The
    /// fallback leaves out IPv6 link-local addresses (kube-proxy's `fib daddr type local`
    /// keeps them): every pod's host-side veth has one, so they change with each pod and would
    /// replan every service, and they serve no client beyond the link.
    pub(crate) fn nodeport_ips(&self, fam: IpFamily, node: Option<&NodeInfo>) -> Vec<IpAddr> {
        let local = self
            .local_addresses
            .iter()
            .copied()
            .filter(|ip| IpFamily::of(ip) == fam);
        let addresses = &self.nodeport_addresses;
        let mut ips: Vec<IpAddr> = if self.nodeport_fallback(fam, node).is_some() {
            local
                .filter(|ip| !matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local()))
                .collect()
        } else {
            let mut ips: Vec<IpAddr> = local
                .filter(|ip| addresses.cidrs_of(fam).any(|c| c.contains(ip)))
                .collect();
            if addresses.primary {
                ips.extend(self.node_ips_of(fam, node));
            }
            ips
        };
        ips.retain(|ip| !ip.is_loopback());
        ips.sort();
        ips.dedup();
        ips
    }

    /// Whether `nodeport_ips` reads `local_addresses` for some supported family, so the caller
    /// knows to fill them in.
    pub(crate) fn needs_local_addresses(&self, node: Option<&NodeInfo>) -> bool {
        !self.nodeport_addresses.cidrs.is_empty()
            || self
                .supported_families
                .iter()
                .any(|f| self.nodeport_fallback(*f, node).is_some())
    }

    /// Whether loopback NodePorts of `fam` are served by the userspace proxy, as kube-proxy
    /// 1.37.0 decides: the gate is on and `nodePortAddresses` names a loopback range of the
    /// family. A zero CIDR beside it (`all,localhost`) does not turn it off: the KEP's draft
    /// said it would, the released code does not look at it.
    pub(crate) fn localhost_proxy(&self, fam: IpFamily) -> bool {
        self.localhost_nodeports && self.nodeport_addresses.names_loopback(fam)
    }

    /// Where healthCheckNodePort servers listen, as kube-proxy's do: on the addresses of each
    /// family that `nodePortAddresses` names (the node IP with `primary`, the local addresses
    /// inside the CIDRs), or on the family's unspecified address when it names none of the
    /// family, for each family in `families`.
    #[cfg(feature = "daemon")]
    pub(crate) fn health_check_addresses(
        &self,
        families: &[IpFamily],
        node: Option<&NodeInfo>,
    ) -> Vec<IpAddr> {
        families
            .iter()
            .flat_map(|&fam| {
                if self.nodeport_fallback(fam, node).is_some() {
                    vec![match fam {
                        IpFamily::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                        IpFamily::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                    }]
                } else {
                    self.nodeport_ips(fam, node)
                }
            })
            .collect()
    }
}
