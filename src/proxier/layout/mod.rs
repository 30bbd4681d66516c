//! Builds the desired table of one IP family from the cluster state. Pure and deterministic:
//! the same input gives the same table, byte for byte once rendered.

mod blocks;
mod endpoints;
mod fragment;
mod pick;
mod service;
mod skeleton;
mod slots;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;

use super::config::{DetectLocal, ProxyConfig};
use super::endpoints::{categorize, of_family};
use super::names::*;
use super::set_sizes;
use crate::cluster::{ClusterState, Endpoint, Protocol, ServicePort, TrafficPolicy};
use crate::nft::model::*;

pub(crate) use blocks::BlockAllocator;
pub use blocks::EndpointBlocks;
pub(crate) use fragment::{Fragment, assemble};
pub use slots::SlotLayouts;

/// Up to this many endpoints, a ClientIP-affinity service picks one by a cascade of rules
/// rather than a map: a new connection walks n/2 rules on average (tens of nanoseconds each,
/// first packet only), while each map would slow every commit of the whole table.
pub(crate) const CASCADE_MAX_ENDPOINTS: usize = 128;

/// The most clients a ClientIP-affinity set remembers: the size the kernel gives a set that a
/// rule adds to when none is declared (as nft, and so kube-proxy, declares it). Declared, so
/// the set reads back as planned.
pub(crate) const AFFINITY_SET_SIZE: u32 = 65_535;

/// Slots per block of the endpoint map. A chain draws `numgen random mod SLOTS_PER_BLOCK` in its
/// own block and endpoint i of n owns slots `[i·S/n, (i+1)·S/n)`, so each endpoint's share is
/// 1/n within n/65536 (0.015% of the share at 10 endpoints, 1.5% at 1,000), and the rule never
/// changes when endpoints come and go: only map elements do.
pub(crate) const SLOTS_PER_BLOCK: u32 = 1 << 16;
/// Services without ClientIP affinity, with externalTrafficPolicy Cluster if reached from
/// outside, and with up to this many endpoints, pick one through the shared `pick-M` and
/// `external-pick-M` chains and their slot map (see `names::pick_chain`) instead of chains of
/// their own.
pub(crate) const MAX_SHARED_PICK_ENDPOINTS: u32 = 4096;
/// Draws a `pick-M` chain makes (M ≥ 4). With n endpoints in slots `0..n`, n > M/2, so each
/// draw hits with probability n/M > ½ and a hit is uniform over the endpoints; a miss falls
/// through to the next draw. The last draw is among the first M/2 slots, which are always
/// full, so every connection gets an endpoint; it is reached with probability below 2^-11,
/// which skews the shares by less than 0.05%.
pub(crate) const SLOT_DRAWS: usize = 12;
/// Blocks in the 32-bit slot space. Chains past this many (per family) fall back to a cascade of
/// endpoint chains, as ClientIP-affinity services use.
pub(crate) const MAX_BLOCKS: u32 = (1u64 << 32).div_ceil(SLOTS_PER_BLOCK as u64) as u32;

pub use crate::family::IpFamily;

/// What the planner needs of a family: its selectors, types and table family.
impl IpFamily {
    fn has(self, ip: &IpAddr) -> bool {
        IpFamily::of(ip) == self
    }
    fn has_net(self, net: &IpNet) -> bool {
        self.has(&net.addr())
    }
    fn saddr(self) -> Selector {
        if self == IpFamily::V4 {
            Selector::IpSaddr
        } else {
            Selector::Ip6Saddr
        }
    }
    fn daddr(self) -> Selector {
        if self == IpFamily::V4 {
            Selector::IpDaddr
        } else {
            Selector::Ip6Daddr
        }
    }
    fn addr_type(self) -> DataType {
        if self == IpFamily::V4 {
            DataType::Ipv4Addr
        } else {
            DataType::Ipv6Addr
        }
    }
    pub(crate) fn table_family(self) -> Family {
        if self == IpFamily::V4 {
            Family::Ip
        } else {
            Family::Ip6
        }
    }
}

pub(super) fn ip_value(ip: IpAddr) -> Value {
    match ip {
        IpAddr::V4(a) => Value::Ipv4(a),
        IpAddr::V6(a) => Value::Ipv6(a),
    }
}

pub(super) fn net_value(net: IpNet) -> Value {
    match net {
        IpNet::V4(n) if n.prefix_len() == 32 => Value::Ipv4(n.addr()),
        IpNet::V6(n) if n.prefix_len() == 128 => Value::Ipv6(n.addr()),
        IpNet::V4(n) => Value::Ipv4Net(n),
        IpNet::V6(n) => Value::Ipv6Net(n),
    }
}

struct Builder<'a> {
    fam: IpFamily,
    config: &'a ProxyConfig,
    state: &'a ClusterState,
    blocks: &'a mut BlockAllocator,
    /// The slots the previous plan gave endpoints in the shared slot maps.
    layouts: &'a SlotLayouts,
    out: Fragment,
}

impl Builder<'_> {
    /// Adds `chain` to the fragment, replacing a chain of the same name.
    fn chain(&mut self, chain: Chain) {
        match self.out.chains.iter_mut().find(|c| c.name == chain.name) {
            Some(c) => *c = chain,
            None => self.out.chains.push(chain),
        }
    }

    /// `<daddr> . l4proto . dport vmap @map`: dispatch by destination address and port.
    fn by_destination(&self, map: &str) -> Rule {
        Rule::new(vec![Stmt::vmap(self.frontend(), map)])
    }

    /// `<daddr> @nodeport-ips l4proto . dport vmap @map`: dispatch NodePort traffic by port.
    fn by_node_port(&self, map: &str) -> Rule {
        let lookup = Stmt::in_set(vec![self.fam.daddr()], NODEPORT_IPS);
        let vmap = Stmt::vmap(vec![Selector::L4Proto, Selector::ThDport], map);
        Rule::new(vec![lookup, vmap])
    }

    /// The packet's `daddr . l4proto . dport`, as the dispatch sets and maps key it.
    fn frontend(&self) -> Vec<Selector> {
        vec![self.fam.daddr(), Selector::L4Proto, Selector::ThDport]
    }

    /// The types of `frontend()`: `address . inet_proto . inet_service`.
    fn frontend_types(&self) -> Vec<DataType> {
        vec![
            self.fam.addr_type(),
            DataType::InetProto,
            DataType::InetService,
        ]
    }

    /// A map of this family whose data is an endpoint's `address . port`.
    fn endpoint_data_map(&self, name: &str, key: Vec<DataType>, comment: &str) -> Set {
        let data = vec![self.fam.addr_type(), DataType::InetService];
        Set::map(name, key, data).with_comment(comment)
    }

    /// `goto chain` for a packet whose `frontend()` is in `set`.
    fn frontend_in(&self, set: &str, chain: &str) -> Rule {
        Rule::new(vec![Stmt::in_set(self.frontend(), set), Stmt::goto(chain)])
    }

    /// Whether ClusterIP traffic is marked for masquerading, and on which condition besides its
    /// destination: every connection with `--masquerade-all` (`Some(None)`), else those not from
    /// a local pod (`None` when local traffic cannot be told apart).
    fn cluster_masquerade(&self) -> Option<Option<Stmt>> {
        if self.config.masquerade_all {
            Some(None)
        } else {
            self.not_local().map(Some)
        }
    }

    /// Each of `eps` reaching itself through a service is masqueraded (`hairpin-endpoints`).
    fn hairpin(&mut self, eps: &[Endpoint]) {
        for ep in eps {
            let key = vec![ip_value(ep.ip), ip_value(ep.ip)];
            self.out.push_element(HAIRPIN_ENDPOINTS, Element::new(key));
        }
    }

    fn node_ips(&self) -> Vec<IpAddr> {
        self.config.node_ips_of(self.fam, self.state.node.as_ref())
    }

    fn nodeport_ips(&self) -> Vec<IpAddr> {
        self.config.nodeport_ips(self.fam, self.state.node.as_ref())
    }

    /// "Not from a local pod", as a match; None when local traffic cannot be told apart.
    fn not_local(&self) -> Option<Stmt> {
        self.local_source()
            .map(|(left, right)| Stmt::match_ne(left, right))
    }

    /// "From a local pod", as a match; None when local traffic cannot be told apart.
    fn is_local(&self) -> Option<Stmt> {
        self.local_source()
            .map(|(left, right)| Stmt::match_eq(left, right))
    }

    /// What a packet from a local pod has: its source in the local pod range, or its input
    /// interface by name.
    fn local_source(&self) -> Option<(Selector, Value)> {
        let f = self.fam;
        match &self.config.detect_local {
            DetectLocal::ClusterCidr => self
                .config
                .cluster_cidrs
                .iter()
                .find(|c| f.has_net(c))
                .map(|c| (f.saddr(), net_value(*c))),
            DetectLocal::NodeCidr => self
                .state
                .node
                .as_ref()
                .and_then(|n| n.pod_cidrs.iter().find(|c| f.has_net(c)))
                .map(|c| (f.saddr(), net_value(*c))),
            DetectLocal::BridgeInterface(name) => {
                Some((Selector::IifName, Value::IfName(name.clone())))
            }
            DetectLocal::InterfaceNamePrefix(prefix) => {
                Some((Selector::IifName, Value::IfName(format!("{prefix}*"))))
            }
        }
    }
}

/// The ClusterIP ranges whose unallocated addresses are dropped: `--service-cidr` (or the
/// configuration file's field) when the operator gave any, whatever the cluster says; else the
/// ranges of the cluster's ServiceCIDR objects, as kube-proxy takes them.
pub(super) fn dropped_service_cidrs<'a>(
    state: &'a ClusterState,
    config: &'a ProxyConfig,
) -> &'a [IpNet] {
    if config.service_cidrs.is_empty() {
        &state.service_cidrs
    } else {
        &config.service_cidrs
    }
}

/// The name and comment of our table of `fam`, without contents.
pub(crate) fn table_head(config: &ProxyConfig, fam: IpFamily) -> Table {
    Table {
        family: fam.table_family(),
        name: config.table_name.clone(),
        comment: Some("rules for kubenft, the Kubernetes service proxy".into()),
        ..Table::default()
    }
}

/// Builds fragments of one family's table. Blocks of the endpoint map persist in the allocator
/// across fragments (and, in the incremental planner, across plans).
pub(crate) struct FragmentBuilder<'a> {
    fam: IpFamily,
    config: &'a ProxyConfig,
    state: &'a ClusterState,
}

impl<'a> FragmentBuilder<'a> {
    pub(crate) fn new(config: &'a ProxyConfig, state: &'a ClusterState, fam: IpFamily) -> Self {
        FragmentBuilder { fam, config, state }
    }

    fn builder<'b>(
        &'b self,
        blocks: &'b mut BlockAllocator,
        layouts: &'b SlotLayouts,
    ) -> Builder<'b> {
        Builder {
            fam: self.fam,
            config: self.config,
            state: self.state,
            blocks,
            layouts,
            out: Fragment::default(),
        }
    }

    /// Base chains, fixed chains, the shared sets and the NodePort addresses: everything that
    /// depends on the node, the configuration and the service CIDRs only.
    pub(crate) fn skeleton(&self) -> Fragment {
        let mut blocks = BlockAllocator::new(BTreeMap::new());
        let layouts = SlotLayouts::default();
        let mut b = self.builder(&mut blocks, &layouts);
        b.skeleton();
        for ip in b.nodeport_ips() {
            b.out
                .push_element(NODEPORT_IPS, Element::new(vec![ip_value(ip)]));
        }
        b.out.dedup_keys();
        b.out
    }

    /// What `sp` with its `endpoints` adds to the table (empty for a service of the other
    /// family only); its endpoints keep the slots `layouts` gives them where they can.
    pub(crate) fn service(
        &self,
        sp: &ServicePort,
        endpoints: &[Endpoint],
        blocks: &mut BlockAllocator,
        layouts: &SlotLayouts,
    ) -> Fragment {
        let mut b = self.builder(blocks, layouts);
        b.service(sp, endpoints);
        b.out.dedup_keys();
        b.out
    }
}

/// The table of one family; chains keep the endpoint-map blocks `previous` gave them, and
/// endpoints take the shared slot maps' slots in address order.
pub(crate) fn build_family(
    state: &ClusterState,
    config: &ProxyConfig,
    fam: IpFamily,
    previous: &EndpointBlocks,
) -> Table {
    let mut blocks = BlockAllocator::new(previous.of_family(fam.table_family()));
    let fragments = FragmentBuilder::new(config, state, fam);
    let skeleton = fragments.skeleton();
    let layouts = SlotLayouts::default();
    let services = state
        .ports_with_endpoints()
        .map(|(_, sp, eps)| fragments.service(sp, eps, &mut blocks, &layouts));
    let parts: Vec<Fragment> = std::iter::once(skeleton).chain(services).collect();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for (set, elements) in parts.iter().flat_map(|p| &p.elements) {
        *counts.entry(set.clone()).or_default() += elements.len();
    }
    let mut table = assemble(&table_head(config, fam), parts);
    for set in table.sets.values_mut() {
        let elements = counts.get(&set.name).copied().unwrap_or(0);
        set.size = set_sizes::chosen(set, elements, None).or(set.size);
    }
    table
}

/// Which families to build: every family the kernel supports, whatever addresses the node has
/// (kube-proxy too runs both whenever the kernel has them; a family without a node IP only
/// changes where its NodePorts are accepted), and the node's primary family in any case: its
/// first node IP's, else its first configured CIDR's, else IPv4.
pub(crate) fn families(state: &ClusterState, config: &ProxyConfig) -> Vec<IpFamily> {
    let primary = config
        .node_ips
        .iter()
        .chain(state.node.iter().flat_map(|n| &n.internal_ips))
        .copied()
        .chain(
            config
                .cluster_cidrs
                .iter()
                .chain(&config.service_cidrs)
                .map(|c| c.addr()),
        )
        .next()
        .map_or(IpFamily::V4, |ip| IpFamily::of(&ip));
    [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .filter(|f| *f == primary || config.supported_families.contains(f))
        .collect()
}
