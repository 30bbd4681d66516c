//! Builds the desired table of one IP family from the cluster state. Pure and deterministic:
//! the same input gives the same table, byte for byte once rendered.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use super::config::{DetectLocal, ProxyConfig};
use super::endpoints::categorize;
use super::names::*;
use crate::model::{ClusterState, Endpoint, ServicePort, TrafficPolicy};
use crate::nft::model::*;

/// Up to this many endpoints, a ClientIP-affinity service picks one by a cascade of rules
/// rather than a map: a new connection walks n/2 rules on average (tens of nanoseconds each,
/// first packet only), while each map would slow every commit of the whole table.
pub const CASCADE_MAX_ENDPOINTS: usize = 128;

/// Slots per block of the endpoint map. A chain draws `numgen random mod SLOTS_PER_BLOCK` in its
/// own block and endpoint i of n owns slots `[i·S/n, (i+1)·S/n)`, so each endpoint's share is
/// 1/n within n/65536 (0.015% of the share at 10 endpoints, 1.5% at 1,000), and the rule never
/// changes when endpoints come and go: only map elements do.
pub const SLOTS_PER_BLOCK: u32 = 1 << 16;
/// Services without ClientIP affinity, with externalTrafficPolicy Cluster if reached from
/// outside, and with up to this many endpoints, pick one through the shared `pick-M` and
/// `external-pick-M` chains and their slot map (see `names::pick_chain`) instead of chains of
/// their own.
pub const MAX_SHARED_PICK_ENDPOINTS: u32 = 4096;
/// Draws a `pick-M` chain makes (M ≥ 4). With n endpoints in slots `0..n`, n > M/2, so each
/// draw hits with probability n/M > ½ and a hit is uniform over the endpoints; a miss falls
/// through to the next draw. The last draw is among the first M/2 slots, which are always
/// full, so every connection gets an endpoint; it is reached with probability below 2^-11,
/// which skews the shares by less than 0.05%.
pub const SLOT_DRAWS: usize = 12;
/// Slot counts of the shared pick chains: 1, 2, 4 … MAX_SHARED_PICK_ENDPOINTS.
fn pick_sizes() -> impl Iterator<Item = u32> {
    std::iter::successors(Some(1u32), |m| Some(m * 2))
        .take_while(|m| *m <= MAX_SHARED_PICK_ENDPOINTS)
}
/// Blocks in the 32-bit slot space. Chains past this many (per family) fall back to a cascade of
/// endpoint chains, as ClientIP-affinity services use.
pub const MAX_BLOCKS: u32 = (1u64 << 32).div_ceil(SLOTS_PER_BLOCK as u64) as u32;

/// Which block of the endpoint map each endpoint-picking chain owns, per table family. Blocks
/// are kept across builds (read back from the previous tables) so a service whose endpoints
/// change keeps its rule; a new chain takes the lowest block nobody held before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointBlocks {
    by_family: BTreeMap<Family, BTreeMap<String, u32>>,
}

impl EndpointBlocks {
    /// Blocks given per family.
    pub fn from_families(by_family: BTreeMap<Family, BTreeMap<String, u32>>) -> Self {
        EndpointBlocks { by_family }
    }

    /// The blocks the chains of `tables` use (from their `dnat … map @service-endpoints` rules).
    pub fn of_tables(tables: &[Table]) -> Self {
        let mut by_family: BTreeMap<Family, BTreeMap<String, u32>> = BTreeMap::new();
        for t in tables {
            let blocks = by_family.entry(t.family).or_default();
            for (name, chain) in &t.chains {
                for stmt in chain.rules.iter().flat_map(|r| &r.stmts) {
                    if let Stmt::DnatNumgenMap {
                        modulus: SLOTS_PER_BLOCK,
                        offset,
                        map,
                    } = stmt
                        && is_endpoint_map(map)
                    {
                        blocks.insert(name.clone(), offset / SLOTS_PER_BLOCK);
                    }
                }
            }
        }
        EndpointBlocks { by_family }
    }

    /// The blocks of the chains of a table of `family`.
    pub fn of_family(&self, family: Family) -> BTreeMap<String, u32> {
        self.by_family.get(&family).cloned().unwrap_or_default()
    }

    /// The block of `chain` in a table of `family`, if it has one.
    pub fn block(&self, family: Family, chain: &str) -> Option<u32> {
        self.by_family.get(&family)?.get(chain).copied()
    }
}

/// Hands out blocks: previous owners keep theirs, a new chain takes the lowest block nobody
/// holds. A block is free again only once released, after the plan that dropped its chain, so
/// no block changes hands within one transaction (its old elements may still be deleted in the
/// same transaction that would add the new ones).
#[derive(Debug, Clone, Default)]
pub struct BlockAllocator {
    owners: BTreeMap<String, u32>,
    taken: std::collections::BTreeSet<u32>,
    next_free: u32,
}

impl BlockAllocator {
    pub fn new(previous: BTreeMap<String, u32>) -> Self {
        let taken = previous.values().copied().collect();
        BlockAllocator {
            owners: previous,
            taken,
            next_free: 0,
        }
    }

    fn block_for(&mut self, chain: &str) -> Option<u32> {
        if let Some(&b) = self.owners.get(chain) {
            return Some(b);
        }
        while self.taken.contains(&self.next_free) {
            self.next_free += 1;
        }
        if self.next_free >= MAX_BLOCKS {
            return None;
        }
        let b = self.next_free;
        self.taken.insert(b);
        self.owners.insert(chain.to_string(), b);
        Some(b)
    }

    /// Frees the block of `chain` (if it has one) for later plans.
    pub fn release(&mut self, chain: &str) {
        if let Some(b) = self.owners.remove(chain) {
            self.taken.remove(&b);
            self.next_free = self.next_free.min(b);
        }
    }

    /// Each chain's block.
    pub fn blocks(&self) -> &BTreeMap<String, u32> {
        &self.owners
    }
}

/// The IP family a table serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: &IpAddr) -> IpFamily {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }
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
    pub fn table_family(self) -> Family {
        if self == IpFamily::V4 {
            Family::Ip
        } else {
            Family::Ip6
        }
    }
}

pub fn ip_value(ip: IpAddr) -> Value {
    match ip {
        IpAddr::V4(a) => Value::Ipv4(a),
        IpAddr::V6(a) => Value::Ipv6(a),
    }
}

pub fn net_value(net: IpNet) -> Value {
    match net {
        IpNet::V4(n) if n.prefix_len() == 32 => Value::Ipv4(n.addr()),
        IpNet::V6(n) if n.prefix_len() == 128 => Value::Ipv6(n.addr()),
        IpNet::V4(n) => Value::Ipv4Net(n),
        IpNet::V6(n) => Value::Ipv6Net(n),
    }
}

fn m(left: Selector, op: CmpOp, right: Value) -> Stmt {
    Stmt::Match {
        left,
        mask: None,
        op,
        right,
    }
}

fn jump(c: &str) -> Stmt {
    Stmt::Verdict(Verdict::Jump(c.into()))
}

fn goto(c: &str) -> Stmt {
    Stmt::Verdict(Verdict::Goto(c.into()))
}

fn ct_new() -> Stmt {
    m(Selector::CtState, CmpOp::Eq, Value::CtState(CtState::NEW))
}

fn rule(stmts: Vec<Stmt>, comment: Option<String>) -> Rule {
    Rule {
        stmts,
        comment,
        handle: None,
    }
}

fn map(name: &str, key: Vec<DataType>, verdicts: bool, comment: &str) -> Set {
    Set {
        name: name.into(),
        key,
        data: if verdicts {
            vec![DataType::Verdict]
        } else {
            Vec::new()
        },
        interval: false,
        dynamic: false,
        timeout: None,
        comment: Some(comment.into()),
        elements: Vec::new(),
    }
}

/// What one service port (or the fixed skeleton) contributes to a family's table: its chains,
/// the sets only it declares (endpoint-map shards, affinity sets), and its elements of shared
/// sets. The table is the union of the skeleton and every service's fragment; an element key
/// two fragments share is taken from the first in service order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fragment {
    pub chains: Vec<Chain>,
    /// Declarations only, without elements.
    pub sets: Vec<Set>,
    /// Elements by set name, each set once, keys unique within the fragment.
    pub elements: Vec<(String, Vec<Element>)>,
}

impl Fragment {
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.sets.is_empty() && self.elements.is_empty()
    }

    /// The elements this fragment puts in `set`.
    pub fn elements_of(&self, set: &str) -> &[Element] {
        self.elements
            .iter()
            .find(|(s, _)| s == set)
            .map_or(&[], |(_, e)| e.as_slice())
    }

    fn push_element(&mut self, set: &str, element: Element) {
        let i = match self.elements.iter().position(|(s, _)| s == set) {
            Some(i) => i,
            None => {
                self.elements.push((set.to_string(), Vec::new()));
                self.elements.len() - 1
            }
        };
        self.elements[i].1.push(element);
    }

    /// Two ports or addresses of one service can yield the same key: the first stays. Done
    /// once the fragment is built rather than per element, which would be quadratic in a
    /// service's elements (endpoints × addresses it is reached at).
    fn dedup_keys(&mut self) {
        for (_, elements) in &mut self.elements {
            if elements.len() > 1 {
                let first: Vec<bool> = {
                    let mut seen = std::collections::HashSet::with_capacity(elements.len());
                    elements.iter().map(|e| seen.insert(&e.key)).collect()
                };
                let mut first = first.into_iter();
                elements.retain(|_| first.next().unwrap_or(true));
            }
        }
    }

    fn declare(&mut self, set: Set) {
        if !self.sets.iter().any(|s| s.name == set.name) {
            self.sets.push(set);
        }
    }
}

/// The table `head` (family, name, comment, no contents) filled with `fragments`, in order:
/// the first chain, set or element key seen wins.
pub fn assemble(head: &Table, fragments: impl IntoIterator<Item = Fragment>) -> Table {
    let mut t = head.clone();
    let mut seen: BTreeMap<String, std::collections::HashSet<Vec<Value>>> = BTreeMap::new();
    for f in fragments {
        for set in f.sets {
            t.sets.entry(set.name.clone()).or_insert(set);
        }
        for chain in f.chains {
            t.chains.entry(chain.name.clone()).or_insert(chain);
        }
        for (name, elements) in f.elements {
            let set = t
                .sets
                .get_mut(&name)
                .expect("a fragment's elements go to declared sets");
            let keys = seen.entry(name).or_default();
            for e in elements {
                if keys.insert(e.key.clone()) {
                    set.elements.push(e);
                }
            }
        }
    }
    t.normalize();
    t
}

/// The slot counts of the shared pick chains a service port's ClusterIPs and its external
/// addresses use (their endpoints differ when the two traffic policies do).
#[derive(Debug, Clone, Copy)]
struct SlotCounts {
    internal: u32,
    external: u32,
}

struct Builder<'a> {
    fam: IpFamily,
    config: &'a ProxyConfig,
    state: &'a ClusterState,
    blocks: &'a mut BlockAllocator,
    out: Fragment,
}

impl Builder<'_> {
    fn chain(
        &mut self,
        name: &str,
        base: Option<(ChainType, Hook, i32)>,
        comment: Option<&str>,
        rules: Vec<Rule>,
    ) {
        let base = base.map(|(kind, hook, priority)| BaseChain {
            kind,
            hook,
            priority,
            policy: Policy::Accept,
        });
        let chain = Chain {
            name: name.into(),
            base,
            comment: comment.map(str::to_owned),
            rules,
        };
        match self.out.chains.iter_mut().find(|c| c.name == name) {
            Some(c) => *c = chain,
            None => self.out.chains.push(chain),
        }
    }

    fn element(
        &mut self,
        set: &str,
        key: Vec<Value>,
        data: Option<Verdict>,
        comment: Option<String>,
    ) {
        self.out.push_element(
            set,
            Element {
                key,
                data: data.map(MapData::Verdict),
                comment,
            },
        );
    }

    /// `<daddr> . l4proto . dport vmap @map`: dispatch by destination address and port.
    fn by_destination(&self, map: &str) -> Rule {
        let key = vec![self.fam.daddr(), Selector::L4Proto, Selector::ThDport];
        rule(
            vec![Stmt::VMap {
                key,
                map: MapRef::Named(map.into()),
            }],
            None,
        )
    }

    /// `<daddr> @nodeport-ips l4proto . dport vmap @map`: dispatch NodePort traffic by port.
    fn by_node_port(&self, map: &str) -> Rule {
        let lookup = Stmt::Lookup {
            key: vec![self.fam.daddr()],
            set: NODEPORT_IPS.into(),
            negate: false,
        };
        let vmap = Stmt::VMap {
            key: vec![Selector::L4Proto, Selector::ThDport],
            map: MapRef::Named(map.into()),
        };
        rule(vec![lookup, vmap], None)
    }

    /// Base chains, fixed regular chains and the shared sets and maps.
    fn skeleton(&mut self) {
        use ChainType::{Filter, Nat};
        let f = self.fam;
        let mark = self.config.masquerade_mark();
        let key3 = self.frontend_types();
        let key2 = vec![DataType::InetProto, DataType::InetService];
        // (chain, type, hook, priority, jumps, why)
        type BaseRow = (
            &'static str,
            ChainType,
            Hook,
            i32,
            &'static [&'static str],
            &'static str,
        );
        let base: [BaseRow; 8] = [
            (
                FILTER_PREROUTING_PRE_DNAT,
                Filter,
                Hook::Prerouting,
                -110,
                &[FIREWALL_CHECK],
                "source ranges of load balancers, before DNAT rewrites the destination",
            ),
            (
                FILTER_OUTPUT_PRE_DNAT,
                Filter,
                Hook::Output,
                -110,
                &[FIREWALL_CHECK],
                "source ranges for traffic from this host",
            ),
            (
                NAT_PREROUTING,
                Nat,
                Hook::Prerouting,
                -100,
                &[SERVICES],
                "DNAT of traffic arriving at the node",
            ),
            (
                NAT_OUTPUT,
                Nat,
                Hook::Output,
                -100,
                &[SERVICES],
                "DNAT of traffic from this host",
            ),
            (
                FILTER_FORWARD,
                Filter,
                Hook::Forward,
                0,
                &[SERVICE_ENDPOINTS_CHECK, CLUSTER_IPS_CHECK],
                "services without endpoints, unused ClusterIP ports",
            ),
            (
                FILTER_INPUT,
                Filter,
                Hook::Input,
                0,
                &[NODEPORT_ENDPOINTS_CHECK, SERVICE_ENDPOINTS_CHECK],
                "NodePorts and services without endpoints",
            ),
            (
                FILTER_OUTPUT,
                Filter,
                Hook::Output,
                0,
                &[SERVICE_ENDPOINTS_CHECK, CLUSTER_IPS_CHECK],
                "services without endpoints, unused ClusterIP ports",
            ),
            (
                NAT_POSTROUTING,
                Nat,
                Hook::Postrouting,
                100,
                &[MASQUERADING],
                "masquerade what was marked for it",
            ),
        ];
        for (name, kind, hook, prio, jumps, why) in base {
            // Only new connections need checking: NAT and filter verdicts stick to the flow.
            let rules = jumps
                .iter()
                .map(|j| {
                    let mut s = if kind == Filter {
                        vec![ct_new()]
                    } else {
                        vec![]
                    };
                    s.push(jump(j));
                    rule(s, None)
                })
                .collect();
            self.chain(name, Some((kind, hook, prio)), Some(why), rules);
        }
        self.chain(
            MARK_FOR_MASQUERADE,
            None,
            None,
            vec![rule(vec![Stmt::SetMark(MarkOp::Or(mark))], None)],
        );
        self.chain(
            MASQUERADING,
            None,
            None,
            vec![
                rule(
                    vec![
                        m(
                            Selector::CtStatus,
                            CmpOp::Eq,
                            Value::CtStatus(CtStatus::DNAT),
                        ),
                        Stmt::Lookup {
                            key: vec![f.saddr(), f.daddr()],
                            set: HAIRPIN_ENDPOINTS.into(),
                            negate: false,
                        },
                        jump(MARK_FOR_MASQUERADE),
                    ],
                    Some("hairpin: an endpoint reaching itself through a service".into()),
                ),
                rule(
                    vec![
                        Stmt::Match {
                            left: Selector::Mark,
                            mask: Some(mark),
                            op: CmpOp::Eq,
                            right: Value::Mark(0),
                        },
                        Stmt::Verdict(Verdict::Return),
                    ],
                    None,
                ),
                rule(vec![Stmt::SetMark(MarkOp::Xor(mark))], None),
                rule(vec![Stmt::Masquerade { fully_random: true }], None),
            ],
        );
        // `service-ips` and `service-nodeports` jump rather than goto: a chain the same commit
        // created is empty to a packet that entered the table before it, and that packet must
        // go on to the retry below instead of leaving untranslated.
        let mut dispatch = vec![self.by_destination(SERVICE_IPS)];
        dispatch.extend(self.pick_dispatch());
        dispatch.push(self.by_node_port(SERVICE_NODEPORTS));
        dispatch.push(self.frontend_in(
            PICK_FALLBACK,
            PICK_RETRY,
            Some("the dispatch changed while this packet was looked up".into()),
        ));
        self.chain(SERVICES, None, None, dispatch);
        // Not `service-ips`: a chain created by the commit is empty to a packet that entered
        // the table before it, so a service that moved to a chain of its own gets the fallback.
        let mut retry = self.pick_dispatch();
        // Its own chain's masquerade rule is out of reach: masquerade, as external traffic
        // needs, at the cost of a pod's source address for this one connection.
        retry.push(rule(
            vec![jump(MARK_FOR_MASQUERADE)],
            Some("the service moved to a chain of its own".into()),
        ));
        retry.push(self.pick_fallback());
        self.chain(
            PICK_RETRY,
            None,
            Some("the dispatch again, once its commit is complete"),
            retry,
        );
        self.chain(
            REJECT_CHAIN,
            None,
            Some("helper for services with no endpoints"),
            vec![rule(vec![Stmt::Reject(RejectKind::Default)], None)],
        );
        self.chain(
            SERVICE_ENDPOINTS_CHECK,
            None,
            None,
            vec![self.by_destination(NO_ENDPOINT_SERVICES)],
        );
        self.chain(
            NODEPORT_ENDPOINTS_CHECK,
            None,
            None,
            vec![self.by_node_port(NO_ENDPOINT_NODEPORTS)],
        );
        self.chain(
            FIREWALL_CHECK,
            None,
            None,
            vec![self.by_destination(FIREWALL_IPS)],
        );
        let mut checks = vec![rule(
            vec![
                Stmt::Lookup {
                    key: vec![f.daddr()],
                    set: CLUSTER_IPS.into(),
                    negate: false,
                },
                Stmt::Reject(RejectKind::Default),
            ],
            Some("reject traffic to an active ClusterIP on a port no service uses".into()),
        )];
        let service_cidrs = dropped_service_cidrs(self.state, self.config);
        for cidr in service_cidrs.iter().filter(|c| f.has_net(c)) {
            checks.push(rule(
                vec![
                    m(f.daddr(), CmpOp::Eq, net_value(*cidr)),
                    Stmt::Verdict(Verdict::Drop),
                ],
                Some("drop traffic to unallocated ClusterIPs".into()),
            ));
        }
        self.chain(CLUSTER_IPS_CHECK, None, None, checks);

        self.pick_chains();

        let set = map(CLUSTER_IPS, vec![f.addr_type()], false, "active ClusterIPs");
        self.out.declare(set);
        self.out.declare(map(
            NODEPORT_IPS,
            vec![f.addr_type()],
            false,
            "IPs that accept NodePort traffic",
        ));
        self.out.declare(map(
            SERVICE_IPS,
            key3.clone(),
            true,
            "ClusterIP, ExternalIP and LoadBalancer IP traffic",
        ));
        self.out.declare(map(
            HAIRPIN_ENDPOINTS,
            vec![f.addr_type(), f.addr_type()],
            false,
            "endpoint . itself: a service connection from an endpoint to itself is masqueraded",
        ));
        self.out.declare(map(
            SERVICE_NODEPORTS,
            key2.clone(),
            true,
            "NodePort traffic",
        ));
        self.out.declare(map(
            NO_ENDPOINT_SERVICES,
            key3.clone(),
            true,
            "vmap to drop or reject packets to services with no endpoints",
        ));
        self.out.declare(map(
            NO_ENDPOINT_NODEPORTS,
            key2,
            true,
            "vmap to drop or reject packets to service nodeports with no endpoints",
        ));
        self.out.declare(map(
            FIREWALL_IPS,
            key3,
            true,
            "destinations that are subject to LoadBalancerSourceRanges",
        ));
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
        let mut s = map(name, key, false, comment);
        s.data = vec![self.fam.addr_type(), DataType::InetService];
        s
    }

    /// `goto chain` for a packet whose `frontend()` is in `set`.
    fn frontend_in(&self, set: &str, chain: &str, comment: Option<String>) -> Rule {
        rule(
            vec![
                Stmt::Lookup {
                    key: self.frontend(),
                    set: set.into(),
                    negate: false,
                },
                goto(chain),
            ],
            comment,
        )
    }

    /// A rule per pick set (ClusterIPs, then external addresses) sending its keys to its chain.
    fn pick_dispatch(&self) -> Vec<Rule> {
        pick_sizes()
            .map(|m| (pick_set(m), pick_chain(m)))
            .chain(pick_sizes().map(|m| (external_pick_set(m), external_pick_chain(m))))
            .map(|(set, chain)| self.frontend_in(&set, &chain, None))
            .collect()
    }

    /// The last rule of the chains that draw endpoints from maps: the first endpoint for the
    /// packet's destination, for a packet whose draws all missed because its service moved to
    /// another chain meanwhile.
    fn pick_fallback(&self) -> Rule {
        rule(
            vec![Stmt::DnatMap {
                key: self.frontend(),
                map: PICK_FALLBACK.into(),
            }],
            Some("the service moved to another chain during the draws".into()),
        )
    }

    /// The shared `pick-M` chains (M = 1, 2, 4 … MAX_SHARED_PICK_ENDPOINTS), the sets of the
    /// services each serves, and their slot map.
    fn pick_chains(&mut self) {
        let masquerade = self.cluster_masquerade();
        let frontend_key = self.frontend_types();
        let key = self.frontend();
        let draw = |modulus: u32, slots: u32| {
            rule(
                vec![Stmt::DnatSlotMap {
                    key: key.clone(),
                    modulus,
                    map: pick_slots(slots),
                }],
                None,
            )
        };
        for slots in pick_sizes() {
            let mut rules = Vec::new();
            if let Some(cond) = masquerade.clone() {
                let mut s: Vec<Stmt> = cond.into_iter().collect();
                s.push(jump(MARK_FOR_MASQUERADE));
                rules.push(rule(s, None));
            }
            let mut draws = Vec::new();
            if slots <= 2 {
                draws.push(draw(slots, slots));
            } else {
                draws.extend((1..SLOT_DRAWS).map(|_| draw(slots, slots)));
                draws.push(draw(slots / 2, slots));
            }
            draws.push(self.pick_fallback());
            rules.extend(draws.iter().cloned());
            // nft keeps comments to 128 bytes.
            let comment = match slots {
                1 => "ClusterIPs of services with 1 endpoint, in slot 0".to_string(),
                2 => "ClusterIPs of services with 2 endpoints, in slots 0 and 1".to_string(),
                _ => format!(
                    "ClusterIPs of services with {}-{slots} endpoints in slots 0..n-1: an empty \
                     slot draws again; the last draw is among slots 0-{}",
                    slots / 2 + 1,
                    slots / 2 - 1
                ),
            };
            self.chain(&pick_chain(slots), None, Some(&comment), rules);
            let mut external = vec![rule(
                vec![jump(MARK_FOR_MASQUERADE)],
                Some("masquerade traffic from outside the cluster".into()),
            )];
            external.extend(draws);
            self.chain(
                &external_pick_chain(slots),
                None,
                Some(&format!(
                    "external traffic of services with externalTrafficPolicy Cluster, drawn as in {}",
                    pick_chain(slots)
                )),
                external,
            );
            self.out.declare(map(
                &external_pick_set(slots),
                frontend_key.clone(),
                false,
                &format!(
                    "external IP, LB IP or node IP . protocol . port of the services {} serves",
                    external_pick_chain(slots)
                ),
            ));
            self.out.declare(map(
                &pick_set(slots),
                frontend_key.clone(),
                false,
                &format!(
                    "ClusterIP . protocol . port of the services {} serves",
                    pick_chain(slots)
                ),
            ));
            let mut slot_key = frontend_key.clone();
            slot_key.push(DataType::Integer);
            self.out.declare(self.endpoint_data_map(
                &pick_slots(slots),
                slot_key,
                "ClusterIP . protocol . port . slot to endpoint address . port",
            ));
        }
        self.out.declare(self.endpoint_data_map(
            PICK_FALLBACK,
            frontend_key,
            "service address . protocol . port to its first endpoint, for connections racing a commit",
        ));
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

    /// The shared pick chains' slot counts for a service port whose internal traffic goes to
    /// `internal` endpoints and external traffic to `external` ones, if it may use them:
    /// without ClientIP affinity (which remembers the endpoint chain a client used) and, if
    /// reached from outside, with externalTrafficPolicy Cluster (Local picks among other
    /// endpoints and short-circuits pod and host traffic, in chains of the service's own).
    fn shared_pick(
        &self,
        sp: &ServicePort,
        internal: usize,
        external: usize,
    ) -> Option<SlotCounts> {
        let fits = |n: usize| {
            u32::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_SHARED_PICK_ENDPOINTS)
                .map(u32::next_power_of_two)
        };
        let external_ok = !sp.has_external() || sp.external_policy == TrafficPolicy::Cluster;
        if sp.affinity_timeout.is_some() || !external_ok {
            return None;
        }
        Some(SlotCounts {
            internal: fits(internal)?,
            external: if sp.has_external() {
                fits(external)?
            } else {
                1
            },
        })
    }

    /// Puts endpoint i of `eps` in slot i of each of `frontends` (address and port, with the
    /// service port's protocol) in the slot map of `pick_chain(slots)`.
    fn fill_slots(
        &mut self,
        sp: &ServicePort,
        slots: u32,
        frontends: &[(IpAddr, u16)],
        eps: &[Endpoint],
    ) {
        let map = pick_slots(slots);
        let label = sp.name.to_string();
        let proto = Value::Proto(sp.name.protocol.number());
        self.fallback(sp, frontends, eps);
        for &(ip, port) in frontends {
            for (slot, ep) in eps.iter().enumerate() {
                self.out.push_element(
                    &map,
                    Element {
                        key: vec![
                            ip_value(ip),
                            proto.clone(),
                            Value::Port(port),
                            Value::Mark(slot as u32),
                        ],
                        data: Some(MapData::Values(vec![ip_value(ep.ip), Value::Port(ep.port)])),
                        comment: Some(label.clone()),
                    },
                );
            }
        }
    }

    /// Puts each of `frontends` in `PICK_FALLBACK` with the first of `eps`, the endpoints
    /// traffic arriving there may use.
    fn fallback(&mut self, sp: &ServicePort, frontends: &[(IpAddr, u16)], eps: &[Endpoint]) {
        let Some(first) = eps.first() else {
            return;
        };
        let label = sp.name.to_string();
        let proto = Value::Proto(sp.name.protocol.number());
        for &(ip, port) in frontends {
            self.out.push_element(
                PICK_FALLBACK,
                Element {
                    key: vec![ip_value(ip), proto.clone(), Value::Port(port)],
                    data: Some(MapData::Values(vec![
                        ip_value(first.ip),
                        Value::Port(first.port),
                    ])),
                    comment: Some(label.clone()),
                },
            );
        }
    }

    /// Each of `eps` reaching itself through a service is masqueraded (`hairpin-endpoints`).
    fn hairpin(&mut self, eps: &[Endpoint]) {
        for ep in eps {
            self.element(
                HAIRPIN_ENDPOINTS,
                vec![ip_value(ep.ip), ip_value(ep.ip)],
                None,
                None,
            );
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
        let f = self.fam;
        match &self.config.detect_local {
            DetectLocal::ClusterCidr => self
                .config
                .cluster_cidrs
                .iter()
                .find(|c| f.has_net(c))
                .map(|c| m(f.saddr(), CmpOp::Ne, net_value(*c))),
            DetectLocal::NodeCidr => self
                .state
                .node
                .as_ref()
                .and_then(|n| n.pod_cidrs.iter().find(|c| f.has_net(c)))
                .map(|c| m(f.saddr(), CmpOp::Ne, net_value(*c))),
            DetectLocal::BridgeInterface(name) => {
                Some(m(Selector::IifName, CmpOp::Ne, Value::IfName(name.clone())))
            }
            DetectLocal::InterfaceNamePrefix(prefix) => Some(m(
                Selector::IifName,
                CmpOp::Ne,
                Value::IfName(format!("{prefix}*")),
            )),
        }
    }

    fn is_local(&self) -> Option<Stmt> {
        self.not_local().map(|s| match s {
            Stmt::Match {
                left, mask, right, ..
            } => Stmt::Match {
                left,
                mask,
                op: CmpOp::Eq,
                right,
            },
            other => other,
        })
    }

    /// The rules of `chain` that send a new connection to one of `eps`: a random slot of the
    /// chain's block in the endpoint map, or (ClientIP affinity, or no block left) a cascade
    /// of endpoint chains.
    fn dispatch(&mut self, sp: &ServicePort, chain: &str, eps: &[Endpoint]) -> Vec<Rule> {
        if eps.is_empty() {
            return Vec::new();
        }
        if sp.affinity_timeout.is_none()
            && let Some(block) = self.blocks.block_for(chain)
        {
            return self.endpoint_slots(sp, block, eps);
        }
        self.endpoint_chains(sp, eps);
        self.cascade(sp, eps)
    }

    /// Fills `block` of the endpoint map with `eps` (each owning an equal share of the slots,
    /// give or take one) and returns the rule that draws a slot.
    fn endpoint_slots(&mut self, sp: &ServicePort, block: u32, eps: &[Endpoint]) -> Vec<Rule> {
        let n = eps.len() as u64;
        let base = block * SLOTS_PER_BLOCK;
        let share = |i: u64| (i * u64::from(SLOTS_PER_BLOCK) / n) as u32;
        let label = sp.name.to_string();
        let shard = endpoint_map(block);
        // Shards exist while some block in them is used.
        let mut s = self.endpoint_data_map(
            &shard,
            vec![DataType::Integer],
            "random slot to endpoint address . port; a service owns 65536 slots",
        );
        s.interval = true;
        self.out.declare(s);
        for (i, ep) in eps.iter().enumerate() {
            let i = i as u64;
            let (first, last) = (base + share(i), base + share(i + 1) - 1);
            self.out.push_element(
                &shard,
                Element {
                    key: vec![Value::IntRange { first, last }],
                    data: Some(MapData::Values(vec![ip_value(ep.ip), Value::Port(ep.port)])),
                    comment: Some(label.clone()),
                },
            );
        }
        self.hairpin(eps);
        vec![
            rule(
                vec![
                    m(
                        Selector::L4Proto,
                        CmpOp::Eq,
                        Value::Proto(sp.name.protocol.number()),
                    ),
                    Stmt::DnatNumgenMap {
                        modulus: SLOTS_PER_BLOCK,
                        offset: base,
                        map: shard,
                    },
                ],
                None,
            ),
            // The block is gone if the service moved to a pick chain while this packet was on
            // its way here.
            self.pick_fallback(),
        ]
    }

    /// Endpoint chains (and affinity sets) for `eps`, then the dispatch statements.
    fn cascade(&mut self, sp: &ServicePort, eps: &[Endpoint]) -> Vec<Rule> {
        let f = self.fam;
        let mut rules = Vec::new();
        let mut targets = Vec::new();
        for ep in eps {
            let chain = endpoint_chain(&sp.name, ep.ip, ep.port);
            if sp.affinity_timeout.is_some() {
                let set = affinity_set(&sp.name, ep.ip, ep.port);
                rules.push(rule(
                    vec![
                        Stmt::Lookup {
                            key: vec![f.saddr()],
                            set: set.clone(),
                            negate: false,
                        },
                        goto(&chain),
                    ],
                    None,
                ));
            }
            targets.push(chain);
        }
        match targets.as_slice() {
            [] => {}
            // One endpoint needs no random choice.
            [only] => rules.push(rule(vec![goto(only)], None)),
            // A few: a cascade of independent draws, the i-th taken with probability
            // 1/(n-i), which is uniform overall. Anonymous maps would do it in one lookup,
            // but every map in the table makes the kernel's loop checks slower for all of
            // it, so that cold syncs grow quadratically with the number of services.
            few if few.len() <= CASCADE_MAX_ENDPOINTS => {
                let n = few.len();
                for (i, chain) in few.iter().enumerate() {
                    let stmts = if i + 1 < n {
                        vec![
                            Stmt::NumgenIs {
                                modulus: (n - i) as u32,
                                value: 0,
                            },
                            goto(chain),
                        ]
                    } else {
                        vec![goto(chain)]
                    };
                    rules.push(rule(stmts, None));
                }
            }
            // Many: one lookup instead of a long walk for every new connection.
            many => rules.push(rule(
                vec![Stmt::NumgenVMap {
                    modulus: many.len() as u32,
                    map: MapRef::Anonymous(
                        many.iter()
                            .enumerate()
                            .map(|(i, c)| (vec![Value::Mark(i as u32)], Verdict::Goto(c.clone())))
                            .collect(),
                    ),
                }],
                None,
            )),
        }
        rules
    }

    fn endpoint_chains(&mut self, sp: &ServicePort, eps: &[Endpoint]) {
        let f = self.fam;
        for ep in eps {
            let chain = endpoint_chain(&sp.name, ep.ip, ep.port);
            if self.out.chains.iter().any(|c| c.name == chain) {
                continue;
            }
            let mut rules = vec![rule(
                vec![
                    m(f.saddr(), CmpOp::Eq, ip_value(ep.ip)),
                    jump(MARK_FOR_MASQUERADE),
                ],
                Some("hairpin: an endpoint reaching itself".into()),
            )];
            if let Some(timeout) = sp.affinity_timeout {
                let set = affinity_set(&sp.name, ep.ip, ep.port);
                self.out.declare(Set {
                    name: set.clone(),
                    key: vec![f.addr_type()],
                    data: Vec::new(),
                    interval: false,
                    dynamic: true,
                    timeout: Some(timeout),
                    comment: Some(format!("ClientIP affinity for {}", sp.name)),
                    elements: Vec::new(),
                });
                rules.push(rule(
                    vec![Stmt::Update {
                        set,
                        key: vec![f.saddr()],
                    }],
                    None,
                ));
            }
            rules.push(rule(
                vec![
                    m(
                        Selector::L4Proto,
                        CmpOp::Eq,
                        Value::Proto(sp.name.protocol.number()),
                    ),
                    Stmt::Dnat {
                        addr: ep.ip,
                        port: Some(ep.port),
                    },
                ],
                None,
            ));
            self.chain(&chain, None, None, rules);
        }
    }

    fn service(&mut self, sp: &ServicePort) {
        let f = self.fam;
        let cluster_ips: Vec<IpAddr> = sp
            .cluster_ips
            .iter()
            .copied()
            .filter(|ip| f.has(ip))
            .collect();
        if cluster_ips.is_empty() {
            return; // a single-stack service of the other family
        }
        let mut all: Vec<Endpoint> = self
            .state
            .endpoints
            .get(&sp.name)
            .into_iter()
            .flatten()
            .filter(|e| f.has(&e.ip))
            .cloned()
            .collect();
        if !self.config.use_node_hints {
            // As kube-proxy with the PreferSameTrafficDistribution gate off: node hints unread.
            all.iter_mut().for_each(|e| e.hint_nodes.clear());
        }
        let node = self.state.node.as_ref();
        let hostname = self.config.hostname.as_str();
        let eps = categorize(sp, &all, hostname, node.and_then(|n| n.zone.as_deref()));
        // ClusterIP traffic follows internalTrafficPolicy, external traffic
        // externalTrafficPolicy; `cluster` also serves pods and the host under eTP Local.
        let internal = eps.internal(sp);
        let external_eps = eps.external(sp);
        let cluster = eps.cluster.as_deref().unwrap_or_default();
        let local = eps.local.as_deref().unwrap_or_default();
        let proto = Value::Proto(sp.name.protocol.number());
        let port = Value::Port(sp.port);
        let label = sp.name.to_string();
        let svc_chain = service_chain(&sp.name);
        // Chains of its own, named as kube-proxy names them: `service-…` picks among the
        // cluster endpoints, `local-…` among the local ones, and ClusterIPs go to the one of
        // their policy. (Without external traffic, `service-…` is free to serve a Local
        // internal policy itself.)
        let internal_chain = if sp.internal_policy == TrafficPolicy::Local && sp.has_external() {
            local_chain(&sp.name)
        } else {
            svc_chain.clone()
        };
        // Where traffic finds no endpoint of its policy: dropped if endpoints exist elsewhere
        // (a Local policy), rejected if none exists at all.
        let no_endpoints = if eps.has_any {
            (Verdict::Drop, "has no local endpoints")
        } else {
            (Verdict::Goto(REJECT_CHAIN.into()), "has no endpoints")
        };

        for ip in &cluster_ips {
            self.element(CLUSTER_IPS, vec![ip_value(*ip)], None, None);
        }
        let shared = self.shared_pick(sp, internal.len(), external_eps.len());
        let cluster_frontends: Vec<(IpAddr, u16)> =
            cluster_ips.iter().map(|ip| (*ip, sp.port)).collect();
        if let (false, Some(slots)) = (internal.is_empty(), shared) {
            // The shared pick chain masquerades off-cluster sources and draws a slot.
            self.fill_slots(sp, slots.internal, &cluster_frontends, internal);
            self.hairpin(internal);
            for ip in &cluster_ips {
                self.element(
                    &pick_set(slots.internal),
                    vec![ip_value(*ip), proto.clone(), port.clone()],
                    None,
                    Some(label.clone()),
                );
            }
        } else if !internal.is_empty() {
            // The internal chain: masquerade off-cluster sources, then pick an endpoint.
            let mut rules = Vec::new();
            for ip in &cluster_ips {
                if let Some(cond) = self.cluster_masquerade() {
                    let mut s = vec![m(f.daddr(), CmpOp::Eq, ip_value(*ip))];
                    s.extend(cond);
                    s.push(jump(MARK_FOR_MASQUERADE));
                    rules.push(rule(s, None));
                }
            }
            rules.extend(self.dispatch(sp, &internal_chain, internal));
            self.chain(&internal_chain, None, Some(&label), rules);
            self.fallback(sp, &cluster_frontends, internal);
            for ip in &cluster_ips {
                self.element(
                    SERVICE_IPS,
                    vec![ip_value(*ip), proto.clone(), port.clone()],
                    Some(Verdict::Jump(internal_chain.clone())),
                    Some(label.clone()),
                );
            }
        } else {
            let (verdict, why) = no_endpoints.clone();
            for ip in &cluster_ips {
                self.element(
                    NO_ENDPOINT_SERVICES,
                    vec![ip_value(*ip), proto.clone(), port.clone()],
                    Some(verdict.clone()),
                    Some(format!("{label} {why}")),
                );
            }
        }

        if !sp.has_external() {
            return;
        }
        // External traffic: NodePorts, external IPs, load-balancer IPs.
        let ext_chain = external_chain(&sp.name);
        let external_ips: Vec<IpAddr> = sp
            .external_ips
            .iter()
            .chain(&sp.load_balancer_ips)
            .copied()
            .filter(|ip| f.has(ip))
            .collect();
        let node_port_here = sp.node_port.filter(|_| !self.nodeport_ips().is_empty());
        // Where external traffic arrives: each external or LB IP with the service port, then
        // each NodePort address with the NodePort.
        let mut frontends: Vec<(IpAddr, u16)> =
            external_ips.iter().map(|ip| (*ip, sp.port)).collect();
        if let Some(np) = node_port_here {
            frontends.extend(self.nodeport_ips().into_iter().map(|ip| (ip, np)));
        }
        // Under eTP Local without a local endpoint, pods and the host still reach the cluster
        // endpoints through the external chain's short-circuits (as upstream, whose no-endpoint
        // drop runs after DNAT and so sees only the traffic from outside left untranslated).
        let short_circuit_only = external_eps.is_empty()
            && sp.external_policy == TrafficPolicy::Local
            && !cluster.is_empty();
        let external_chain_needed = !external_eps.is_empty() || short_circuit_only;
        if external_eps.is_empty() {
            let (verdict, why) = no_endpoints;
            for ip in &external_ips {
                self.element(
                    NO_ENDPOINT_SERVICES,
                    vec![ip_value(*ip), proto.clone(), port.clone()],
                    Some(verdict.clone()),
                    Some(format!("{label} {why}")),
                );
            }
            if let Some(np) = node_port_here {
                self.element(
                    NO_ENDPOINT_NODEPORTS,
                    vec![proto.clone(), Value::Port(np)],
                    Some(verdict),
                    Some(format!("{label} {why}")),
                );
            }
        }
        if let (true, Some(slots)) = (external_chain_needed, shared) {
            // externalTrafficPolicy Cluster: the shared external pick chain masquerades and
            // draws among the cluster endpoints, keyed by the address the traffic arrived at.
            self.fill_slots(sp, slots.external, &frontends, external_eps);
            self.hairpin(external_eps);
            for (i, (ip, port)) in frontends.into_iter().enumerate() {
                let comment = if i < external_ips.len() {
                    format!("{label} external IP")
                } else {
                    format!("{label} NodePort")
                };
                self.element(
                    &external_pick_set(slots.external),
                    vec![ip_value(ip), proto.clone(), Value::Port(port)],
                    None,
                    Some(comment),
                );
            }
        } else if external_chain_needed {
            // The cluster endpoints' chain, unless the internal chain is it.
            if internal_chain != svc_chain && !cluster.is_empty() {
                let dispatch = self.dispatch(sp, &svc_chain, cluster);
                self.chain(&svc_chain, None, Some(&label), dispatch);
            }
            let mut rules = Vec::new();
            if sp.external_policy == TrafficPolicy::Cluster {
                rules.push(rule(
                    vec![jump(MARK_FOR_MASQUERADE)],
                    Some("masquerade traffic from outside the cluster".into()),
                ));
                rules.push(rule(vec![goto(&svc_chain)], None));
            } else {
                // Pods and the node itself may use every endpoint; the node's own traffic is
                // masqueraded so replies come back through it.
                if let (Some(local_pod), false) = (self.is_local(), cluster.is_empty()) {
                    rules.push(rule(
                        vec![local_pod, goto(&svc_chain)],
                        Some("short-circuit pod traffic".into()),
                    ));
                }
                if !cluster.is_empty() {
                    let host = m(
                        Selector::FibSaddrType,
                        CmpOp::Eq,
                        Value::AddrType(AddrType::Local),
                    );
                    rules.push(rule(
                        vec![host.clone(), jump(MARK_FOR_MASQUERADE)],
                        Some("masquerade host traffic".into()),
                    ));
                    rules.push(rule(
                        vec![host, goto(&svc_chain)],
                        Some("short-circuit host traffic".into()),
                    ));
                }
                // Traffic from outside takes the local endpoints; without any it falls through
                // to the no-endpoint drop.
                if !local.is_empty() {
                    let local_chain = local_chain(&sp.name);
                    // Under iTP Local too, the internal chain picks among the local endpoints.
                    if internal_chain != local_chain {
                        let dispatch = self.dispatch(sp, &local_chain, local);
                        self.chain(&local_chain, None, Some(&label), dispatch);
                    }
                    rules.push(rule(vec![goto(&local_chain)], None));
                }
            }
            self.chain(&ext_chain, None, Some(&label), rules);
            // The fallback serves what the chain serves traffic from outside: nothing without
            // a local endpoint, so that traffic is not translated by `pick-retry` either.
            self.fallback(sp, &frontends, external_eps);
            for ip in &external_ips {
                self.element(
                    SERVICE_IPS,
                    vec![ip_value(*ip), proto.clone(), port.clone()],
                    Some(Verdict::Jump(ext_chain.clone())),
                    Some(format!("{label} external IP")),
                );
            }
            if let Some(np) = node_port_here {
                self.element(
                    SERVICE_NODEPORTS,
                    vec![proto.clone(), Value::Port(np)],
                    Some(Verdict::Jump(ext_chain.clone())),
                    Some(label.clone()),
                );
            }
        }

        // LoadBalancerSourceRanges: only listed sources reach the load-balancer IPs.
        let lb_ips: Vec<IpAddr> = sp
            .load_balancer_ips
            .iter()
            .copied()
            .filter(|ip| f.has(ip))
            .collect();
        if !sp.source_ranges.is_empty() && !lb_ips.is_empty() {
            let fw = firewall_chain(&sp.name);
            let ranges: Vec<IpNet> = sp
                .source_ranges
                .iter()
                .copied()
                .filter(|r| f.has_net(r))
                .collect();
            let mut rules: Vec<Rule> = ranges
                .iter()
                .map(|r| {
                    rule(
                        vec![
                            m(f.saddr(), CmpOp::Eq, net_value(*r)),
                            Stmt::Verdict(Verdict::Return),
                        ],
                        None,
                    )
                })
                .collect();
            // A node inside an allowed range may reach the LB through its own IPs (hairpin).
            if self
                .node_ips()
                .iter()
                .any(|ip| ranges.iter().any(|r| r.contains(ip)))
            {
                for ip in &lb_ips {
                    rules.push(rule(
                        vec![
                            m(f.saddr(), CmpOp::Eq, ip_value(*ip)),
                            Stmt::Verdict(Verdict::Return),
                        ],
                        None,
                    ));
                }
            }
            rules.push(rule(
                vec![Stmt::Verdict(Verdict::Drop)],
                Some("source not in loadBalancerSourceRanges".into()),
            ));
            self.chain(&fw, None, Some(&label), rules);
            for ip in &lb_ips {
                self.element(
                    FIREWALL_IPS,
                    vec![ip_value(*ip), proto.clone(), port.clone()],
                    Some(Verdict::Goto(fw.clone())),
                    Some(label.clone()),
                );
            }
        }
    }
}

/// The ClusterIP ranges whose unallocated addresses are dropped: `--service-cidr` (or the
/// configuration file's field) when the operator gave any, whatever the cluster says; else the
/// ranges of the cluster's ServiceCIDR objects, as kube-proxy takes them.
pub fn dropped_service_cidrs<'a>(state: &'a ClusterState, config: &'a ProxyConfig) -> &'a [IpNet] {
    if config.service_cidrs.is_empty() {
        &state.service_cidrs
    } else {
        &config.service_cidrs
    }
}

/// The name and comment of our table of `fam`, without contents.
pub fn table_head(config: &ProxyConfig, fam: IpFamily) -> Table {
    Table {
        family: fam.table_family(),
        name: config.table_name.clone(),
        comment: Some("rules for kubenft, the Kubernetes service proxy".into()),
        ..Table::default()
    }
}

/// Builds fragments of one family's table. Blocks of the endpoint map persist in the allocator
/// across fragments (and, in the incremental planner, across plans).
pub struct FragmentBuilder<'a> {
    fam: IpFamily,
    config: &'a ProxyConfig,
    state: &'a ClusterState,
}

impl<'a> FragmentBuilder<'a> {
    pub fn new(config: &'a ProxyConfig, state: &'a ClusterState, fam: IpFamily) -> Self {
        FragmentBuilder { fam, config, state }
    }

    fn builder<'b>(&'b self, blocks: &'b mut BlockAllocator) -> Builder<'b> {
        Builder {
            fam: self.fam,
            config: self.config,
            state: self.state,
            blocks,
            out: Fragment::default(),
        }
    }

    /// Base chains, fixed chains, the shared sets and the NodePort addresses: everything that
    /// depends on the node, the configuration and the service CIDRs only.
    pub fn skeleton(&self) -> Fragment {
        let mut blocks = BlockAllocator::new(BTreeMap::new());
        let mut b = self.builder(&mut blocks);
        b.skeleton();
        for ip in b.nodeport_ips() {
            b.element(NODEPORT_IPS, vec![ip_value(ip)], None, None);
        }
        b.out.dedup_keys();
        b.out
    }

    /// What `sp` adds to the table (empty for a service of the other family only).
    pub fn service(&self, sp: &ServicePort, blocks: &mut BlockAllocator) -> Fragment {
        let mut b = self.builder(blocks);
        b.service(sp);
        b.out.dedup_keys();
        b.out
    }
}

/// The table of one family; chains keep the endpoint-map blocks `previous` gave them.
pub fn build_family(
    state: &ClusterState,
    config: &ProxyConfig,
    fam: IpFamily,
    previous: &EndpointBlocks,
) -> Table {
    let mut blocks = BlockAllocator::new(previous.of_family(fam.table_family()));
    let fragments = FragmentBuilder::new(config, state, fam);
    let skeleton = fragments.skeleton();
    let services = state
        .services
        .values()
        .map(|sp| fragments.service(sp, &mut blocks));
    assemble(
        &table_head(config, fam),
        std::iter::once(skeleton).chain(services),
    )
}

/// Which families to build: every family the kernel supports, whatever addresses the node has
/// (kube-proxy too runs both whenever the kernel has them; a family without a node IP only
/// changes where its NodePorts are accepted), and the node's primary family in any case: its
/// first node IP's, else its first configured CIDR's, else IPv4.
pub fn families(state: &ClusterState, config: &ProxyConfig) -> Vec<IpFamily> {
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
