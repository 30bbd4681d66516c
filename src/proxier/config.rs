//! What the planner needs to know beyond the cluster objects: node identity and the operator's
//! choices (flags or KubeProxyConfiguration), already validated.

use std::net::IpAddr;

use ipnet::IpNet;

/// Which addresses accept NodePort traffic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodePortAddresses {
    /// The node's primary IP of each family (kube-proxy's default, `primary`).
    #[default]
    Primary,
    /// Every local address inside one of these CIDRs (loopback never counts).
    Cidrs(Vec<IpNet>),
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
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            table_name: "kubenft".into(),
            hostname: String::new(),
            node_ips: Vec::new(),
            cluster_cidrs: Vec::new(),
            service_cidrs: Vec::new(),
            nodeport_addresses: NodePortAddresses::Primary,
            local_addresses: Vec::new(),
            masquerade_all: false,
            masquerade_bit: 14,
            detect_local: DetectLocal::ClusterCidr,
        }
    }
}

impl ProxyConfig {
    /// The packet-mark bit that requests masquerading (`1 << masquerade_bit`).
    pub fn masquerade_mark(&self) -> u32 {
        1u32 << self.masquerade_bit
    }
}
