//! The path of a new connection through one table, evaluated on the table's IR the way the
//! kernel evaluates its bytecode: base chains in hook and priority order, jump/goto/return,
//! set and map lookups (concatenations, intervals, dynamic sets with their runtime elements),
//! marks, NAT and verdicts. A random draw (`numgen`) splits the walk into weighted branches, so
//! the result is the exact distribution of fates, not a sample.
//!
//! Knows nftables only: what a chain or a set is for is for the caller to name.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use crate::nft::jhash;
use crate::nft::model::{
    AddrType, Chain, ChainType, CmpOp, CtState, CtStatus, Element, Family, Hook, MapData, MapRef,
    MarkOp, Policy, Rule, Selector, Set, Stmt, Table, Value, Verdict,
};
use crate::nft::render::render_rule;

/// The kernel refuses rulesets jumping deeper than this; a walk going deeper is a loop.
const MAX_DEPTH: usize = 16;

/// The first packet of a connection, as it enters the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub saddr: IpAddr,
    pub daddr: IpAddr,
    /// IP protocol number (6 tcp, 17 udp, 132 sctp).
    pub proto: u8,
    pub dport: u16,
    /// The input interface, when known (only rules matching `iifname` need it).
    pub iif: Option<String>,
}

/// Where the packet enters the node's netfilter hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Arriving from the network (a pod, another node, a client): prerouting, then input or
    /// forward and postrouting.
    Prerouting,
    /// Sent by a process of this node: output, then postrouting.
    Output,
}

/// What the walk needs to know about the node besides the table.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// The node's own addresses: `fib … type local`, and whether a packet is delivered locally
    /// (input) or forwarded. Loopback addresses are always local.
    pub local: BTreeSet<IpAddr>,
    /// Elements of dynamic sets (rules add them; dumps of configuration leave them out), by set.
    pub dynamic: BTreeMap<String, Vec<DynamicElement>>,
}

/// A runtime element of a dynamic set (e.g. a ClientIP affinity entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicElement {
    pub key: Vec<Value>,
    /// Time left before the kernel removes it, when it has a timeout.
    pub expires_in: Option<Duration>,
}

impl Host {
    fn is_local(&self, ip: &IpAddr) -> bool {
        ip.is_loopback() || self.local.contains(ip)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WalkError {
    #[error("rule {rule:?} in chain {chain} reads {selector}, which explain cannot know{hint}")]
    Unknown {
        chain: String,
        rule: String,
        selector: String,
        hint: &'static str,
    },
    #[error("chain {from} jumps to chain {to}, which the table does not have")]
    MissingChain { from: String, to: String },
    #[error("rule {rule:?} in chain {chain} uses set {set}, which the table does not have")]
    MissingSet {
        chain: String,
        rule: String,
        set: String,
    },
    #[error("chain {chain}: more than {MAX_DEPTH} nested jumps (a loop?)")]
    TooDeep { chain: String },
    #[error("table {table} has a {family:?} family; the packet is of the other IP version")]
    Family { table: String, family: Family },
}

/// A rule, as a person reads it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleRef {
    pub chain: String,
    /// 0-based position in the chain.
    pub index: usize,
    /// The rule in `nft` syntax, with its comment.
    pub text: String,
    pub comment: Option<String>,
}

/// Something that happened on the way, in order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Event {
    /// A regular chain was entered by a jump or goto.
    Entered { chain: String },
    /// The packet's key was found in a named set or map (`set`), in the element with
    /// `comment`.
    Found {
        chain: String,
        set: String,
        key: Vec<Value>,
        comment: Option<String>,
    },
    /// A set the packet was looked up in held no element for it (only recorded for sets whose
    /// miss decided something: a negated lookup matched).
    NotFound { chain: String, set: String },
    /// The packet mark was changed by `rule`, which was reached from `caller` (the rule that
    /// jumped to the rule's chain), if any.
    Marked {
        rule: RuleRef,
        caller: Option<RuleRef>,
    },
    /// The destination was rewritten to `to`:`port` by `rule`, through `map` when it was a map
    /// lookup (with the element's comment).
    Dnat {
        rule: RuleRef,
        map: Option<String>,
        comment: Option<String>,
        to: IpAddr,
        port: u16,
    },
    /// The source address is found in dynamic set `set` (e.g. ClientIP affinity).
    Pinned {
        set: String,
        expires_in: Option<Duration>,
    },
    /// `update @set`: the source is remembered in the dynamic set.
    Remembered { set: String },
    /// The source address will be masqueraded (`rule`).
    Masquerade { rule: RuleRef },
}

/// How the walk ended for one branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fate {
    /// Accepted by every hook and delivered to a local socket (input).
    Delivered,
    /// Accepted by every hook and sent on (forward, or output and postrouting).
    Forwarded,
    Dropped,
    Rejected,
}

/// One branch of the walk with its probability.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub probability: f64,
    pub fate: Fate,
    /// The destination after NAT.
    pub daddr: IpAddr,
    pub dport: u16,
    pub masquerade: bool,
    /// The rule that dropped or rejected the packet.
    pub decided_by: Option<RuleRef>,
    pub events: Vec<Event>,
}

/// The mutable part of a packet on its way, plus what happened to it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct State {
    daddr: IpAddr,
    dport: u16,
    mark: u32,
    dnat: bool,
    masquerade: bool,
    events: Vec<Event>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Terminal {
    Accept,
    Drop,
    Reject,
}

/// How a rule's statements ended.
enum RuleEnd {
    /// A statement did not match (or found no element): the next rule.
    NoMatch(State),
    /// Every statement ran without a verdict: the next rule.
    Done(State),
    Verdict(Verdict, State),
    Terminal(Terminal, State),
}

/// How a chain ended.
enum ChainEnd {
    /// Fell off the end or returned.
    Fell(State),
    Final(Terminal, State, RuleRef),
}

/// Weighted branches, identical states merged.
struct Dist<T>(Vec<(f64, T)>);

impl<T: PartialEq> Dist<T> {
    fn new() -> Self {
        Dist(Vec::new())
    }
    fn push(&mut self, p: f64, v: T) {
        if p <= 0.0 {
            return;
        }
        match self.0.iter_mut().find(|(_, x)| *x == v) {
            Some((q, _)) => *q += p,
            None => self.0.push((p, v)),
        }
    }
}

/// Walks `packet` through `table` from `entry`.
pub fn walk(
    table: &Table,
    host: &Host,
    packet: &Packet,
    entry: Entry,
) -> Result<Vec<Path>, WalkError> {
    let family_ok = match table.family {
        Family::Ip => packet.daddr.is_ipv4(),
        Family::Ip6 => packet.daddr.is_ipv6(),
        Family::Inet => true,
    };
    if !family_ok || packet.saddr.is_ipv4() != packet.daddr.is_ipv4() {
        return Err(WalkError::Family {
            table: table.name.clone(),
            family: table.family,
        });
    }
    let w = Walker {
        table,
        host,
        packet,
        index: RefCell::new(HashMap::new()),
    };
    let start = State {
        daddr: packet.daddr,
        dport: packet.dport,
        mark: 0,
        dnat: false,
        masquerade: false,
        events: Vec::new(),
    };
    let mut out = Vec::new();
    let hooks: &[Hook] = match entry {
        Entry::Prerouting => &[Hook::Prerouting],
        Entry::Output => &[Hook::Output, Hook::Postrouting],
    };
    for (p, end) in w.hooks(hooks, start, false)?.0 {
        let (state, terminal) = match end {
            HookEnd::Passed(s) => (s, None),
            HookEnd::Stopped(t, s, r) => (s, Some((t, r))),
        };
        if let Some((t, rule)) = terminal {
            out.push(w.path(p, t, state, Some(rule)));
            continue;
        }
        // Routing: after prerouting, to a local socket (input) or on (forward, postrouting);
        // after output and postrouting, a local destination re-enters through loopback, where
        // NAT is not consulted again (the connection is already translated).
        let local = host.is_local(&state.daddr);
        let next: &[Hook] = match (entry, local) {
            (Entry::Prerouting, true) => &[Hook::Input],
            (Entry::Prerouting, false) => &[Hook::Forward, Hook::Postrouting],
            (Entry::Output, true) => &[Hook::Prerouting, Hook::Input],
            (Entry::Output, false) => &[],
        };
        let skip_nat = entry == Entry::Output;
        for (q, end) in w.hooks(next, state, skip_nat)?.0 {
            match end {
                HookEnd::Passed(s) => {
                    let fate = if local {
                        Fate::Delivered
                    } else {
                        Fate::Forwarded
                    };
                    out.push(Path {
                        probability: p * q,
                        fate,
                        daddr: s.daddr,
                        dport: s.dport,
                        masquerade: s.masquerade,
                        decided_by: None,
                        events: s.events,
                    });
                }
                HookEnd::Stopped(t, s, r) => out.push(w.path(p * q, t, s, Some(r))),
            }
        }
    }
    Ok(out)
}

#[derive(PartialEq)]
enum HookEnd {
    Passed(State),
    Stopped(Terminal, State, RuleRef),
}

struct Walker<'a> {
    table: &'a Table,
    host: &'a Host,
    packet: &'a Packet,
    /// Exact-key index of plain (non-interval) sets, built on first use.
    index: RefCell<HashMap<String, HashMap<Vec<Value>, usize>>>,
}

impl Walker<'_> {
    fn path(&self, p: f64, t: Terminal, s: State, rule: Option<RuleRef>) -> Path {
        let fate = match t {
            Terminal::Drop => Fate::Dropped,
            Terminal::Reject => Fate::Rejected,
            // Accepting verdicts are not final: the caller goes on to the next hook.
            Terminal::Accept => Fate::Forwarded,
        };
        Path {
            probability: p,
            fate,
            daddr: s.daddr,
            dport: s.dport,
            masquerade: s.masquerade,
            decided_by: rule,
            events: s.events,
        }
    }

    /// The base chains of `hooks`, in hook then priority order.
    fn hooks(
        &self,
        hooks: &[Hook],
        start: State,
        skip_nat: bool,
    ) -> Result<Dist<HookEnd>, WalkError> {
        let mut live = Dist::new();
        live.push(1.0, start);
        let mut done = Dist::new();
        for hook in hooks {
            let mut bases: Vec<&Chain> = self
                .table
                .chains
                .values()
                .filter(|c| {
                    c.base
                        .is_some_and(|b| b.hook == *hook && !(skip_nat && b.kind == ChainType::Nat))
                })
                .collect();
            bases.sort_by_key(|c| c.base.map(|b| b.priority));
            for chain in bases {
                let policy = chain.base.map_or(Policy::Accept, |b| b.policy);
                let mut next = Dist::new();
                for (p, state) in live.0 {
                    for (q, end) in self.chain(chain, state, 0, None)?.0 {
                        match end {
                            ChainEnd::Fell(s) if policy == Policy::Accept => next.push(p * q, s),
                            ChainEnd::Fell(s) => done.push(
                                p * q,
                                HookEnd::Stopped(
                                    Terminal::Drop,
                                    s,
                                    RuleRef {
                                        chain: chain.name.clone(),
                                        index: chain.rules.len(),
                                        text: "policy drop".into(),
                                        comment: None,
                                    },
                                ),
                            ),
                            ChainEnd::Final(Terminal::Accept, s, _) => next.push(p * q, s),
                            ChainEnd::Final(t, s, r) => done.push(p * q, HookEnd::Stopped(t, s, r)),
                        }
                    }
                }
                live = next;
            }
        }
        for (p, s) in live.0 {
            done.push(p, HookEnd::Passed(s));
        }
        Ok(done)
    }

    fn rule_ref(&self, chain: &Chain, index: usize) -> RuleRef {
        let rule = &chain.rules[index];
        RuleRef {
            chain: chain.name.clone(),
            index,
            text: render_rule(rule, self.table.family),
            comment: rule.comment.clone(),
        }
    }

    fn chain(
        &self,
        chain: &Chain,
        start: State,
        depth: usize,
        caller: Option<&RuleRef>,
    ) -> Result<Dist<ChainEnd>, WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::TooDeep {
                chain: chain.name.clone(),
            });
        }
        let mut out = Dist::new();
        let mut pending = Dist::new();
        pending.push(1.0, start);
        for (i, rule) in chain.rules.iter().enumerate() {
            if pending.0.is_empty() {
                break;
            }
            let here = self.rule_ref(chain, i);
            let mut next = Dist::new();
            for (p, state) in pending.0 {
                for (q, end) in self.rule(chain, rule, &here, caller, state)?.0 {
                    let p = p * q;
                    match end {
                        RuleEnd::NoMatch(s) | RuleEnd::Done(s) => next.push(p, s),
                        RuleEnd::Terminal(t, s) => out.push(p, ChainEnd::Final(t, s, here.clone())),
                        RuleEnd::Verdict(v, s) => match v {
                            Verdict::Accept => {
                                out.push(p, ChainEnd::Final(Terminal::Accept, s, here.clone()))
                            }
                            Verdict::Drop => {
                                out.push(p, ChainEnd::Final(Terminal::Drop, s, here.clone()))
                            }
                            Verdict::Continue => next.push(p, s),
                            Verdict::Return => out.push(p, ChainEnd::Fell(s)),
                            Verdict::Jump(ref to) | Verdict::Goto(ref to) => {
                                let is_jump = matches!(v, Verdict::Jump(_));
                                let target = self.table.chains.get(to).ok_or_else(|| {
                                    WalkError::MissingChain {
                                        from: chain.name.clone(),
                                        to: to.to_string(),
                                    }
                                })?;
                                let mut s = s;
                                s.events.push(Event::Entered { chain: to.clone() });
                                for (r, end) in self.chain(target, s, depth + 1, Some(&here))?.0 {
                                    match end {
                                        ChainEnd::Fell(s) if is_jump => next.push(p * r, s),
                                        // A goto's chain returns to this chain's caller.
                                        ChainEnd::Fell(s) => out.push(p * r, ChainEnd::Fell(s)),
                                        fin => out.push(p * r, fin),
                                    }
                                }
                            }
                        },
                    }
                }
            }
            pending = next;
        }
        for (p, s) in pending.0 {
            out.push(p, ChainEnd::Fell(s));
        }
        Ok(out)
    }

    /// Runs one rule's statements over the branches they create.
    fn rule(
        &self,
        chain: &Chain,
        rule: &Rule,
        here: &RuleRef,
        caller: Option<&RuleRef>,
        start: State,
    ) -> Result<Dist<RuleEnd>, WalkError> {
        let mut out = Dist::new();
        let mut live = Dist::new();
        live.push(1.0, start);
        for stmt in &rule.stmts {
            let mut next = Dist::new();
            for (p, state) in live.0 {
                for (q, step) in self.stmt(chain, here, caller, stmt, state)?.0 {
                    match step {
                        Step::Go(s) => next.push(p * q, s),
                        Step::End(end) => out.push(p * q, end),
                    }
                }
            }
            live = next;
        }
        for (p, s) in live.0 {
            out.push(p, RuleEnd::Done(s));
        }
        Ok(out)
    }

    fn unknown(&self, here: &RuleRef, sel: Selector) -> WalkError {
        let hint = match sel {
            Selector::IifName => ": pass --iif",
            _ => "",
        };
        WalkError::Unknown {
            chain: here.chain.clone(),
            rule: here.text.clone(),
            selector: sel.to_string(),
            hint,
        }
    }

    /// The value `sel` reads from the packet in `state`; `None` when the packet has no such
    /// field (the rule cannot match).
    fn read(
        &self,
        here: &RuleRef,
        sel: Selector,
        state: &State,
    ) -> Result<Option<Value>, WalkError> {
        let ip = |a: IpAddr| match a {
            IpAddr::V4(a) => Value::Ipv4(a),
            IpAddr::V6(a) => Value::Ipv6(a),
        };
        let addr_type = |a: &IpAddr| {
            if self.host.is_local(a) {
                AddrType::Local
            } else if a.is_multicast() {
                AddrType::Multicast
            } else {
                AddrType::Unicast
            }
        };
        let v4 = self.packet.saddr.is_ipv4();
        Ok(Some(match sel {
            Selector::IpSaddr if v4 => ip(self.packet.saddr),
            Selector::IpDaddr if v4 => ip(state.daddr),
            Selector::Ip6Saddr if !v4 => ip(self.packet.saddr),
            Selector::Ip6Daddr if !v4 => ip(state.daddr),
            // An address of the other version: nft's implicit dependency on the network
            // protocol fails, so the rule does not match, whatever the operator.
            Selector::IpSaddr | Selector::IpDaddr | Selector::Ip6Saddr | Selector::Ip6Daddr => {
                return Ok(None);
            }
            Selector::ThDport => Value::Port(state.dport),
            Selector::L4Proto => Value::Proto(self.packet.proto),
            Selector::NfProto => Value::NfProto(if v4 { 2 } else { 10 }),
            Selector::Mark => Value::Mark(state.mark),
            Selector::IifName => match &self.packet.iif {
                Some(name) => Value::IfName(name.clone()),
                None => return Err(self.unknown(here, sel)),
            },
            Selector::FibSaddrType => Value::AddrType(addr_type(&self.packet.saddr)),
            Selector::FibDaddrType => Value::AddrType(addr_type(&state.daddr)),
            Selector::CtState => Value::CtState(CtState::NEW),
            Selector::CtStatus => Value::CtStatus(if state.dnat {
                CtStatus::DNAT
            } else {
                CtStatus(0)
            }),
            Selector::ThSport | Selector::OifName => return Err(self.unknown(here, sel)),
        }))
    }

    /// The numbers `[lo, hi)` a numgen or jhash interval draw may yield, each equally likely:
    /// a jhash whose fields the packet gives is one number, else (as numgen) its whole range.
    fn drawn(&self, here: &RuleRef, stmt: &Stmt, state: &State) -> (u64, u64) {
        let (modulus, offset) = match stmt {
            Stmt::DnatHashMap {
                fields,
                seed,
                modulus,
                offset,
                ..
            } => {
                let known = fields
                    .iter()
                    .map(|f| self.read(here, *f, state).ok().flatten())
                    .collect::<Option<Vec<Value>>>();
                if let Some(v) = known.and_then(|v| jhash::draw(&v, *seed, *modulus, *offset)) {
                    return (u64::from(v), u64::from(v) + 1);
                }
                (*modulus, *offset)
            }
            Stmt::DnatNumgenMap {
                modulus, offset, ..
            } => (*modulus, *offset),
            _ => (0, 0),
        };
        (u64::from(offset), u64::from(offset) + u64::from(modulus))
    }

    fn key(
        &self,
        here: &RuleRef,
        key: &[Selector],
        state: &State,
    ) -> Result<Option<Vec<Value>>, WalkError> {
        key.iter()
            .map(|s| self.read(here, *s, state))
            .collect::<Result<Option<Vec<Value>>, WalkError>>()
    }

    fn set(&self, here: &RuleRef, name: &str) -> Result<&Set, WalkError> {
        self.table
            .sets
            .get(name)
            .ok_or_else(|| WalkError::MissingSet {
                chain: here.chain.clone(),
                rule: here.text.clone(),
                set: name.to_string(),
            })
    }

    /// The element of `set` holding `key`, if any.
    fn find<'s>(&self, set: &'s Set, key: &[Value]) -> Option<&'s Element> {
        let exact = !set.interval
            && set.elements.iter().all(|e| {
                e.key.iter().all(|v| {
                    !matches!(
                        v,
                        Value::Ipv4Net(_) | Value::Ipv6Net(_) | Value::IntRange { .. }
                    )
                })
            });
        if !exact {
            return set.elements.iter().find(|e| {
                e.key.len() == key.len() && e.key.iter().zip(key).all(|(a, b)| holds(a, b))
            });
        }
        let mut index = self.index.borrow_mut();
        let by_key = index.entry(set.name.clone()).or_insert_with(|| {
            set.elements
                .iter()
                .enumerate()
                .map(|(i, e)| (e.key.clone(), i))
                .collect()
        });
        by_key.get(key).map(|&i| &set.elements[i])
    }

    fn stmt(
        &self,
        chain: &Chain,
        here: &RuleRef,
        caller: Option<&RuleRef>,
        stmt: &Stmt,
        mut state: State,
    ) -> Result<Dist<Step>, WalkError> {
        let mut out = Dist::new();
        let found = |state: &mut State, set: &str, e: &Element| {
            state.events.push(Event::Found {
                chain: chain.name.clone(),
                set: set.to_string(),
                key: e.key.clone(),
                comment: e.comment.clone(),
            });
        };
        match stmt {
            Stmt::Match {
                left,
                mask,
                op,
                right,
            } => {
                let Some(mut v) = self.read(here, *left, &state)? else {
                    out.push(1.0, Step::End(RuleEnd::NoMatch(state)));
                    return Ok(out);
                };
                if let (Some(m), Value::Mark(x)) = (mask, &v) {
                    v = Value::Mark(x & m);
                }
                let hit = holds(right, &v) == (*op == CmpOp::Eq);
                out.push(
                    1.0,
                    if hit {
                        Step::Go(state)
                    } else {
                        Step::End(RuleEnd::NoMatch(state))
                    },
                );
            }
            Stmt::Lookup { key, set, negate } => {
                let k = match self.key(here, key, &state)? {
                    Some(k) => k,
                    None => {
                        out.push(1.0, Step::End(RuleEnd::NoMatch(state)));
                        return Ok(out);
                    }
                };
                let s = self.set(here, set)?;
                let hit = if s.dynamic {
                    let e = self.host.dynamic.get(set).and_then(|es| {
                        es.iter().find(|e| {
                            e.key.len() == k.len() && e.key.iter().zip(&k).all(|(a, b)| holds(a, b))
                        })
                    });
                    if let Some(e) = e {
                        state.events.push(Event::Pinned {
                            set: set.clone(),
                            expires_in: e.expires_in,
                        });
                    }
                    e.is_some()
                } else {
                    match self.find(s, &k) {
                        Some(e) => {
                            if !negate {
                                found(&mut state, set, e);
                            }
                            true
                        }
                        None => {
                            if *negate {
                                state.events.push(Event::NotFound {
                                    chain: chain.name.clone(),
                                    set: set.clone(),
                                });
                            }
                            false
                        }
                    }
                };
                out.push(
                    1.0,
                    if hit != *negate {
                        Step::Go(state)
                    } else {
                        Step::End(RuleEnd::NoMatch(state))
                    },
                );
            }
            Stmt::VMap { key, map } => {
                let k = match self.key(here, key, &state)? {
                    Some(k) => k,
                    None => {
                        out.push(1.0, Step::End(RuleEnd::NoMatch(state)));
                        return Ok(out);
                    }
                };
                let verdict = match map {
                    MapRef::Named(name) => {
                        let s = self.set(here, name)?;
                        self.find(s, &k).and_then(|e| {
                            let v = e.data.as_ref().and_then(MapData::verdict).cloned();
                            if v.is_some() {
                                found(&mut state, name, e);
                            }
                            v
                        })
                    }
                    MapRef::Anonymous(items) => anonymous(items, &k),
                };
                out.push(
                    1.0,
                    match verdict {
                        Some(v) => Step::End(RuleEnd::Verdict(v, state)),
                        None => Step::End(RuleEnd::NoMatch(state)),
                    },
                );
            }
            Stmt::NumgenVMap { modulus, map } => {
                let n = (*modulus).max(1);
                for r in 0..n {
                    let k = [Value::Mark(r)];
                    let mut s = state.clone();
                    let verdict = match map {
                        MapRef::Named(name) => {
                            let set = self.set(here, name)?;
                            self.find(set, &k).and_then(|e| {
                                let v = e.data.as_ref().and_then(MapData::verdict).cloned();
                                if v.is_some() {
                                    found(&mut s, name, e);
                                }
                                v
                            })
                        }
                        MapRef::Anonymous(items) => anonymous(items, &k),
                    };
                    let step = match verdict {
                        Some(v) => Step::End(RuleEnd::Verdict(v, s)),
                        None => Step::End(RuleEnd::NoMatch(s)),
                    };
                    out.push(1.0 / f64::from(n), step);
                }
            }
            Stmt::NumgenIs { modulus, value } => {
                let n = f64::from((*modulus).max(1));
                let p = if value < modulus { 1.0 / n } else { 0.0 };
                out.push(p, Step::Go(state.clone()));
                out.push(1.0 - p, Step::End(RuleEnd::NoMatch(state)));
            }
            Stmt::DnatNumgenMap { map, .. } | Stmt::DnatHashMap { map, .. } => {
                let s = self.set(here, map)?;
                let (lo, hi) = self.drawn(here, stmt, &state);
                let total = (hi - lo).max(1) as f64;
                let mut covered = 0u64;
                for e in &s.elements {
                    let Some(Value::IntRange { first, last }) = e.key.first() else {
                        continue;
                    };
                    let a = u64::from(*first).max(lo);
                    let b = (u64::from(*last) + 1).min(hi);
                    if a >= b {
                        continue;
                    }
                    covered += b - a;
                    if let Some(to) = dnat_target(e) {
                        let mut t = state.clone();
                        self.dnat(&mut t, here, Some(map), e.comment.clone(), to);
                        out.push(
                            (b - a) as f64 / total,
                            Step::End(RuleEnd::Terminal(Terminal::Accept, t)),
                        );
                    }
                }
                let missed = (hi - lo).saturating_sub(covered);
                out.push(missed as f64 / total, Step::End(RuleEnd::NoMatch(state)));
            }
            Stmt::DnatSlotMap { key, modulus, map } => {
                let s = self.set(here, map)?;
                let mut k = match self.key(here, key, &state)? {
                    Some(k) => k,
                    None => {
                        out.push(1.0, Step::End(RuleEnd::NoMatch(state)));
                        return Ok(out);
                    }
                };
                let n = (*modulus).max(1);
                for r in 0..n {
                    k.push(Value::Mark(r));
                    let step = match self.find(s, &k).and_then(|e| Some((e, dnat_target(e)?))) {
                        Some((e, to)) => {
                            let mut t = state.clone();
                            self.dnat(&mut t, here, Some(map), e.comment.clone(), to);
                            Step::End(RuleEnd::Terminal(Terminal::Accept, t))
                        }
                        None => Step::End(RuleEnd::NoMatch(state.clone())),
                    };
                    k.pop();
                    out.push(1.0 / f64::from(n), step);
                }
            }
            Stmt::DnatMap { key, map } => {
                let s = self.set(here, map)?;
                let k = match self.key(here, key, &state)? {
                    Some(k) => k,
                    None => {
                        out.push(1.0, Step::End(RuleEnd::NoMatch(state)));
                        return Ok(out);
                    }
                };
                match self.find(s, &k).and_then(|e| Some((e, dnat_target(e)?))) {
                    Some((e, to)) => {
                        self.dnat(&mut state, here, Some(map), e.comment.clone(), to);
                        out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Accept, state)));
                    }
                    None => out.push(1.0, Step::End(RuleEnd::NoMatch(state))),
                }
            }
            Stmt::Dnat { addr, port } => {
                let to = (*addr, port.unwrap_or(state.dport));
                self.dnat(&mut state, here, None, None, to);
                out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Accept, state)));
            }
            Stmt::Update { set, .. } => {
                state.events.push(Event::Remembered { set: set.clone() });
                out.push(1.0, Step::Go(state));
            }
            Stmt::SetMark(op) => {
                state.mark = match *op {
                    MarkOp::Or(v) => state.mark | v,
                    MarkOp::Xor(v) => state.mark ^ v,
                    MarkOp::And(v) => state.mark & v,
                    MarkOp::Set(v) => v,
                };
                state.events.push(Event::Marked {
                    rule: here.clone(),
                    caller: caller.cloned(),
                });
                out.push(1.0, Step::Go(state));
            }
            Stmt::Masquerade { .. } => {
                state.masquerade = true;
                state.events.push(Event::Masquerade { rule: here.clone() });
                out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Accept, state)));
            }
            Stmt::Reject(_) => out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Reject, state))),
            // Rate limits are assumed not exceeded; counters count.
            Stmt::Limit { .. } | Stmt::Counter => out.push(1.0, Step::Go(state)),
            Stmt::Verdict(v) => out.push(1.0, Step::End(RuleEnd::Verdict(v.clone(), state))),
        }
        Ok(out)
    }

    fn dnat(
        &self,
        state: &mut State,
        here: &RuleRef,
        map: Option<&String>,
        comment: Option<String>,
        (to, port): (IpAddr, u16),
    ) {
        state.daddr = to;
        state.dport = port;
        state.dnat = true;
        state.events.push(Event::Dnat {
            rule: here.clone(),
            map: map.cloned(),
            comment,
            to,
            port,
        });
    }
}

enum Step {
    /// On to the rule's next statement.
    Go(State),
    End(RuleEnd),
}

impl PartialEq for Step {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Step::Go(a), Step::Go(b)) => a == b,
            (Step::End(a), Step::End(b)) => a == b,
            _ => false,
        }
    }
}

impl PartialEq for RuleEnd {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RuleEnd::NoMatch(a), RuleEnd::NoMatch(b)) | (RuleEnd::Done(a), RuleEnd::Done(b)) => {
                a == b
            }
            (RuleEnd::Verdict(v, a), RuleEnd::Verdict(w, b)) => v == w && a == b,
            (RuleEnd::Terminal(t, a), RuleEnd::Terminal(u, b)) => t == u && a == b,
            _ => false,
        }
    }
}

impl PartialEq for ChainEnd {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ChainEnd::Fell(a), ChainEnd::Fell(b)) => a == b,
            (ChainEnd::Final(t, a, r), ChainEnd::Final(u, b, q)) => t == u && a == b && r == q,
            _ => false,
        }
    }
}

/// The `address . port` an element of a NAT map translates to.
fn dnat_target(e: &Element) -> Option<(IpAddr, u16)> {
    match e.data.as_ref()? {
        MapData::Values(v) => match v.as_slice() {
            [Value::Ipv4(a), Value::Port(p)] => Some((IpAddr::V4(*a), *p)),
            [Value::Ipv6(a), Value::Port(p)] => Some((IpAddr::V6(*a), *p)),
            _ => None,
        },
        MapData::Verdict(_) => None,
    }
}

fn anonymous(items: &[(Vec<Value>, Verdict)], key: &[Value]) -> Option<Verdict> {
    items
        .iter()
        .find(|(k, _)| k.len() == key.len() && k.iter().zip(key).all(|(a, b)| holds(a, b)))
        .map(|(_, v)| v.clone())
}

/// Whether the packet's value `v` is matched by `pattern` (a constant, a CIDR, a range, an
/// interface-name prefix, or conntrack bits of which any must be set).
fn holds(pattern: &Value, v: &Value) -> bool {
    match (pattern, v) {
        (Value::Ipv4Net(n), Value::Ipv4(a)) => n.contains(a),
        (Value::Ipv6Net(n), Value::Ipv6(a)) => n.contains(a),
        (Value::IntRange { first, last }, Value::Mark(x)) => first <= x && x <= last,
        (Value::IfName(p), Value::IfName(name)) => match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        },
        (Value::CtState(want), Value::CtState(have)) => want.0 & have.0 != 0,
        (Value::CtStatus(want), Value::CtStatus(have)) => want.0 & have.0 != 0,
        _ => pattern == v,
    }
}
