//! The typed nftables model: what a table holds, independent of how it reaches the kernel.
//!
//! One `Table` value is the whole desired (or dumped) state of one nftables table. The same value
//! is rendered as `nft -f` text (`render`), encoded as netlink messages (`netlink`), and decoded
//! back from a kernel dump, so equality of two `Table`s is equality of rulesets.
//!
//! Collections are `BTreeMap`s keyed by name and element `Vec`s are kept sorted by `Table::normalize`,
//! so output is deterministic byte for byte.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Address family of a table (`NFPROTO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Family {
    /// `ip` (NFPROTO_IPV4)
    #[default]
    Ip,
    /// `ip6` (NFPROTO_IPV6)
    Ip6,
    /// `inet` (NFPROTO_INET): both; address matches carry an implicit `meta nfproto` dependency.
    Inet,
}

/// A whole table with everything in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Table {
    pub family: Family,
    pub name: String,
    pub comment: Option<String>,
    pub chains: BTreeMap<String, Chain>,
    pub sets: BTreeMap<String, Set>,
}

/// A chain: regular (jump/goto target) or base (attached to a hook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseChain>,
    pub comment: Option<String>,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    pub kind: ChainType,
    pub hook: Hook,
    /// Numeric priority (e.g. -100 for dstnat); rendered as a number because nft 1.0.6 rejects
    /// `priority dstnat` on output hooks.
    pub priority: i32,
    pub policy: Policy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
    Route,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Accept,
    Drop,
}

/// A rule: statements evaluated left to right, plus an optional comment.
///
/// `handle` is the kernel's rule handle; it is `None` in desired state and filled in by dumps.
/// Equality ignores nothing: compare desired with dumped state via `Table::without_handles`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rule {
    pub stmts: Vec<Stmt>,
    pub comment: Option<String>,
    pub handle: Option<u64>,
}

/// A value a rule can read from the packet or its metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Selector {
    /// `ip saddr`
    IpSaddr,
    /// `ip daddr`
    IpDaddr,
    /// `ip6 saddr`
    Ip6Saddr,
    /// `ip6 daddr`
    Ip6Daddr,
    /// `th sport` (transport header bytes 0-1)
    ThSport,
    /// `th dport` (transport header bytes 2-3)
    ThDport,
    /// `meta l4proto`
    L4Proto,
    /// `meta nfproto`
    NfProto,
    /// `meta mark`
    Mark,
    /// `iifname`
    IifName,
    /// `oifname`
    OifName,
    /// `fib saddr type` (address type of the source, e.g. local)
    FibSaddrType,
    /// `fib daddr type`
    FibDaddrType,
    /// `ct state` (a bit set: matched with `CtState` values)
    CtState,
    /// `ct status` (a bit set: matched with `CtStatus` values)
    CtStatus,
}

/// A constant on the right-hand side of a match, a set key part, or a dnat target.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    /// A CIDR: matched as `addr & mask == net`; in interval sets, a range.
    Ipv4Net(ipnet::Ipv4Net),
    Ipv6Net(ipnet::Ipv6Net),
    /// IP protocol number (6 tcp, 17 udp, 132 sctp).
    Proto(u8),
    /// Transport port.
    Port(u16),
    Mark(u32),
    /// `NFPROTO_*` value (2 ipv4, 10 ipv6).
    NfProto(u8),
    /// Interface name; a trailing `*` makes it a prefix match.
    IfName(String),
    /// Route address type (`RTN_LOCAL` = 2 is `local`).
    AddrType(AddrType),
    /// Conntrack state bits (`NF_CT_STATE_*_BIT`).
    CtState(CtState),
    /// Conntrack status bits (`IPS_*`).
    CtStatus(CtStatus),
    /// An inclusive range of 32-bit integers, a key of an interval map with an `Integer` key
    /// (numgen results). On the wire such keys are big-endian, so ranges sort as numbers.
    IntRange {
        first: u32,
        last: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddrType {
    Unicast,
    Local,
    Broadcast,
    Multicast,
}

/// Conntrack states as a bit set; `ct state new,established` is `NEW | ESTABLISHED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CtState(pub u32);

impl CtState {
    pub const INVALID: CtState = CtState(1);
    pub const ESTABLISHED: CtState = CtState(2);
    pub const RELATED: CtState = CtState(4);
    pub const NEW: CtState = CtState(8);
    pub const UNTRACKED: CtState = CtState(64);
}

/// Conntrack status bits as a bit set (`enum ip_conntrack_status`); matched "any bit set".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CtStatus(pub u32);

impl CtStatus {
    /// `IPS_DST_NAT`: the connection's destination was rewritten (`ct status dnat`).
    pub const DNAT: CtStatus = CtStatus(1 << 5);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
}

/// What a rule ends with, or what a verdict map yields.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Accept,
    Drop,
    Continue,
    Return,
    Jump(String),
    Goto(String),
}

/// How a set lookup names its set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapRef {
    /// `@name`: a named set or map of this table.
    Named(String),
    /// `{ key : verdict, … }`: an anonymous constant map owned by the rule.
    Anonymous(Vec<(Vec<Value>, Verdict)>),
}

/// Meta mark arithmetic: `meta mark set meta mark <op> value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkOp {
    Or(u32),
    Xor(u32),
    /// `meta mark set meta mark and value`
    And(u32),
    /// `meta mark set value`
    Set(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectKind {
    /// Plain `reject`: TCP reset for TCP, ICMP port unreachable otherwise (as nft's default).
    Default,
    /// `reject with tcp reset`
    TcpReset,
    /// `reject with icmp(v6)x port-unreachable`
    IcmpPortUnreachable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateUnit {
    Second,
    Minute,
    Hour,
    Day,
}

/// One statement of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    /// `left [& mask] op right`. `mask` is only meaningful for `Mark` and `CtState`;
    /// for `CtState` the match is "any of these bits set" (`ct state new`).
    Match {
        left: Selector,
        mask: Option<u32>,
        op: CmpOp,
        right: Value,
    },
    /// `key . key … [!=] @set`: membership test (`negate` for `!=`).
    Lookup {
        key: Vec<Selector>,
        set: String,
        negate: bool,
    },
    /// `key . key … vmap @map` or `vmap { … }`.
    VMap { key: Vec<Selector>, map: MapRef },
    /// `numgen random mod N vmap { 0 : verdict, … }` (`map` must be `Anonymous` or `Named`).
    NumgenVMap { modulus: u32, map: MapRef },
    /// `numgen random mod N V`: a fresh random number below `modulus` equals `value`. A chain
    /// of these with moduli N, N-1, … and value 0 picks uniformly without a map (each map in a
    /// table makes the kernel's loop checks slower for the whole table).
    NumgenIs { modulus: u32, value: u32 },
    /// `dnat to numgen random mod M offset O map @map`: a random number in `O..O+M` is looked
    /// up in an interval map whose data is `address . port`. Which endpoint owns which part of
    /// the range is then map data, so endpoints change without touching rules. A number the
    /// map does not hold falls through to the next statement's rule (no translation).
    DnatNumgenMap {
        modulus: u32,
        offset: u32,
        map: String,
    },
    /// `dnat to jhash f . f … mod M seed S offset O map @map`: like `DnatNumgenMap`, but the
    /// number is the Jenkins hash of the packet's `fields`, so the same fields always draw the
    /// same slot, on every host programmed with the same seed (see `nft::jhash`).
    DnatHashMap {
        fields: Vec<Selector>,
        seed: u32,
        modulus: u32,
        offset: u32,
        map: String,
    },
    /// `dnat to key . key … . numgen random mod M map @map`: the packet's key and a random slot
    /// below M are looked up in a hash map whose data is `address . port`. Rules sharing one
    /// chain serve every key the map holds, so keys (services) come and go as elements. A slot
    /// the map does not hold falls through to the next rule (no translation).
    DnatSlotMap {
        key: Vec<Selector>,
        modulus: u32,
        map: String,
    },
    /// `dnat to key . key … map @map`: the packet's key is looked up in a hash map whose data
    /// is `address . port`. A key the map does not hold falls through to the next rule (no
    /// translation).
    DnatMap { key: Vec<Selector>, map: String },
    /// `update @set { key . key … }`: add or refresh the key in a dynamic timeout set.
    Update { set: String, key: Vec<Selector> },
    /// `meta mark set …`
    SetMark(MarkOp),
    /// `dnat to addr[:port]` (needs `meta l4proto` match before it if a port is given).
    Dnat { addr: IpAddr, port: Option<u16> },
    /// `masquerade [fully-random]`
    Masquerade { fully_random: bool },
    /// `reject [with …]`
    Reject(RejectKind),
    /// `limit rate N/unit burst B packets`
    Limit {
        rate: u64,
        unit: RateUnit,
        burst: u32,
    },
    /// `counter`
    Counter,
    /// A terminal verdict.
    Verdict(Verdict),
}

/// Types of set key parts and map data, as nft names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DataType {
    Ipv4Addr,
    Ipv6Addr,
    InetProto,
    InetService,
    Mark,
    IfName,
    Verdict,
    /// Plain host-endian 32-bit integer (numgen results).
    Integer,
}

/// A named set or map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub name: String,
    /// Concatenated key (one entry for a plain set).
    pub key: Vec<DataType>,
    /// Map data: empty for a set, `[Verdict]` for a verdict map, or a concatenation of value
    /// types (`[Ipv4Addr, InetService]`) for a data map.
    pub data: Vec<DataType>,
    /// `flags interval`: elements may be CIDRs.
    pub interval: bool,
    /// `flags dynamic`: rules may add elements (`update @set`).
    pub dynamic: bool,
    /// `timeout`: default element lifetime in seconds (implies `flags timeout`).
    pub timeout: Option<u32>,
    /// `size`: the most elements the set may hold. The kernel sizes a hash set's table for it
    /// when the set is created, instead of growing it from a few buckets by rehashing, and
    /// refuses the transaction that would put more elements in it. A set whose size changes is
    /// recreated (`diff::same_set_type`).
    pub size: Option<u32>,
    pub comment: Option<String>,
    pub elements: Vec<Element>,
}

/// One element of a set or map.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Element {
    /// One value per key part; CIDRs allowed in interval sets.
    pub key: Vec<Value>,
    /// Map data: a verdict, or one value per data type of a data map.
    pub data: Option<MapData>,
    pub comment: Option<String>,
}

/// What a map element maps its key to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MapData {
    Verdict(Verdict),
    Values(Vec<Value>),
}

impl MapData {
    /// The verdict of a verdict map's element.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            MapData::Verdict(v) => Some(v),
            MapData::Values(_) => None,
        }
    }
}

impl From<Verdict> for MapData {
    fn from(v: Verdict) -> Self {
        MapData::Verdict(v)
    }
}

// Constructors: the one vocabulary for building tables, shared by the planner, the tests and
// the corpus. Each starts from the plain form (no comment, no flags, no handle); builder
// methods add the rest.

impl Table {
    /// An empty table.
    pub fn new(family: Family, name: impl Into<String>) -> Table {
        Table {
            family,
            name: name.into(),
            ..Table::default()
        }
    }
}

impl Chain {
    /// A regular chain (no hook), without rules.
    pub fn new(name: impl Into<String>) -> Chain {
        Chain {
            name: name.into(),
            base: None,
            comment: None,
            rules: Vec::new(),
        }
    }

    /// A base chain on `hook` at `priority`, with the default `accept` policy.
    pub fn base(name: impl Into<String>, kind: ChainType, hook: Hook, priority: i32) -> Chain {
        Chain {
            base: Some(BaseChain {
                kind,
                hook,
                priority,
                policy: Policy::Accept,
            }),
            ..Chain::new(name)
        }
    }

    pub fn with_comment(self, comment: impl Into<String>) -> Chain {
        Chain {
            comment: Some(comment.into()),
            ..self
        }
    }

    pub fn with_rules(self, rules: Vec<Rule>) -> Chain {
        Chain { rules, ..self }
    }
}

impl Rule {
    /// A rule of `stmts`, without comment or kernel handle.
    pub fn new(stmts: Vec<Stmt>) -> Rule {
        Rule {
            stmts,
            comment: None,
            handle: None,
        }
    }

    pub fn with_comment(self, comment: impl Into<String>) -> Rule {
        Rule {
            comment: Some(comment.into()),
            ..self
        }
    }
}

impl Verdict {
    pub fn jump(chain: impl Into<String>) -> Verdict {
        Verdict::Jump(chain.into())
    }

    pub fn goto(chain: impl Into<String>) -> Verdict {
        Verdict::Goto(chain.into())
    }
}

impl From<Verdict> for Stmt {
    fn from(v: Verdict) -> Stmt {
        Stmt::Verdict(v)
    }
}

impl Stmt {
    /// `left op right`, unmasked.
    pub fn compare(left: Selector, op: CmpOp, right: Value) -> Stmt {
        Stmt::Match {
            left,
            mask: None,
            op,
            right,
        }
    }

    /// `left right`: equality, unmasked.
    pub fn match_eq(left: Selector, right: Value) -> Stmt {
        Stmt::compare(left, CmpOp::Eq, right)
    }

    /// `left != right`, unmasked.
    pub fn match_ne(left: Selector, right: Value) -> Stmt {
        Stmt::compare(left, CmpOp::Ne, right)
    }

    /// `left & mask == right`: equality under a mask (`meta mark & 0x4000 == 0`).
    pub(crate) fn match_masked(left: Selector, mask: u32, right: Value) -> Stmt {
        Stmt::Match {
            left,
            mask: Some(mask),
            op: CmpOp::Eq,
            right,
        }
    }

    /// `key @set`: the key is an element of `set`.
    pub(crate) fn in_set(key: Vec<Selector>, set: impl Into<String>) -> Stmt {
        Stmt::Lookup {
            key,
            set: set.into(),
            negate: false,
        }
    }

    /// `key . key … vmap @map`: the verdict the named map holds for the packet's `key`.
    pub fn vmap(key: Vec<Selector>, map: impl Into<String>) -> Stmt {
        Stmt::VMap {
            key,
            map: MapRef::Named(map.into()),
        }
    }

    /// `ct state …`: any of the `states` bits is set.
    pub(crate) fn ct_state(states: CtState) -> Stmt {
        Stmt::match_eq(Selector::CtState, Value::CtState(states))
    }

    /// `ct state new`
    pub fn ct_new() -> Stmt {
        Stmt::ct_state(CtState::NEW)
    }

    /// `jump chain`
    pub fn jump(chain: impl Into<String>) -> Stmt {
        Stmt::Verdict(Verdict::jump(chain))
    }

    /// `goto chain`
    pub fn goto(chain: impl Into<String>) -> Stmt {
        Stmt::Verdict(Verdict::goto(chain))
    }
}

impl Set {
    /// A plain set of `key`s: no data, no flags, no timeout, no comment, no elements.
    pub fn new(name: impl Into<String>, key: Vec<DataType>) -> Set {
        Set {
            name: name.into(),
            key,
            data: Vec::new(),
            interval: false,
            dynamic: false,
            timeout: None,
            size: None,
            comment: None,
            elements: Vec::new(),
        }
    }

    /// A map from `key` to `data` (`[DataType::Verdict]` for a verdict map).
    pub fn map(name: impl Into<String>, key: Vec<DataType>, data: Vec<DataType>) -> Set {
        Set {
            data,
            ..Set::new(name, key)
        }
    }

    /// A verdict map from `key`.
    pub fn verdict_map(name: impl Into<String>, key: Vec<DataType>) -> Set {
        Set::map(name, key, vec![DataType::Verdict])
    }

    pub fn with_comment(self, comment: impl Into<String>) -> Set {
        Set {
            comment: Some(comment.into()),
            ..self
        }
    }

    /// `flags interval`: elements may be ranges and CIDRs.
    pub(crate) fn with_interval(self) -> Set {
        Set {
            interval: true,
            ..self
        }
    }

    /// `flags dynamic`: rules may add elements (`update @set`).
    pub(crate) fn with_dynamic(self) -> Set {
        Set {
            dynamic: true,
            ..self
        }
    }

    /// `timeout`: elements expire `seconds` after they were added or last updated.
    pub(crate) fn with_timeout(self, seconds: u32) -> Set {
        Set {
            timeout: Some(seconds),
            ..self
        }
    }

    /// `size`: holds at most `elements` elements.
    pub fn with_size(self, elements: u32) -> Set {
        Set {
            size: Some(elements),
            ..self
        }
    }

    pub fn with_elements(self, elements: Vec<Element>) -> Set {
        Set { elements, ..self }
    }
}

impl Element {
    /// A set element: `key`, no data, no comment.
    pub fn new(key: Vec<Value>) -> Element {
        Element {
            key,
            data: None,
            comment: None,
        }
    }

    /// The map element `key : data`.
    pub fn map(key: Vec<Value>, data: impl Into<MapData>) -> Element {
        Element {
            data: Some(data.into()),
            ..Element::new(key)
        }
    }

    pub fn with_comment(self, comment: impl Into<String>) -> Element {
        Element {
            comment: Some(comment.into()),
            ..self
        }
    }
}
