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

mod lookup;
mod stmt;

use lookup::{anonymous, dnat_target, holds};

/// The kernel refuses rulesets jumping deeper than this; a walk going deeper is a loop.
const MAX_DEPTH: usize = 16;

/// The first packet of a connection, as it enters the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packet {
    pub saddr: IpAddr,
    pub daddr: IpAddr,
    /// IP protocol number (6 tcp, 17 udp, 132 sctp).
    pub proto: u8,
    pub dport: u16,
    /// The input interface, when known (only rules matching `iifname` need it).
    pub iif: Option<String>,
}

impl Packet {
    /// A packet whose input interface is not known.
    pub(crate) fn new(saddr: IpAddr, daddr: IpAddr, proto: u8, dport: u16) -> Packet {
        Packet {
            saddr,
            daddr,
            proto,
            dport,
            iif: None,
        }
    }
}

/// Where the packet enters the node's netfilter hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Arriving from the network (a pod, another node, a client): prerouting, then input or
    /// forward and postrouting.
    Prerouting,
    /// Sent by a process of this node: output, then postrouting.
    Output,
}

/// What the walk needs to know about the node besides the table.
#[derive(Debug, Clone, Default)]
pub(crate) struct Host {
    /// The node's own addresses: `fib … type local`, and whether a packet is delivered locally
    /// (input) or forwarded. Loopback addresses are always local.
    pub local: BTreeSet<IpAddr>,
    /// Elements of dynamic sets (rules add them; dumps of configuration leave them out), by set.
    pub dynamic: BTreeMap<String, Vec<DynamicElement>>,
}

/// A runtime element of a dynamic set (e.g. a ClientIP affinity entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DynamicElement {
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
pub(crate) struct RuleRef {
    pub chain: String,
    /// 0-based position in the chain.
    pub index: usize,
    /// The rule in `nft` syntax, with its comment.
    pub text: String,
    pub comment: Option<String>,
}

/// Something that happened on the way, in order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Event {
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
pub(crate) enum Fate {
    /// Accepted by every hook and delivered to a local socket (input).
    Delivered,
    /// Accepted by every hook and sent on (forward, or output and postrouting).
    Forwarded,
    Dropped,
    Rejected,
}

/// One branch of the walk with its probability.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Path {
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
pub(crate) fn walk(
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
