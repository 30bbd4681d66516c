//! A walk's branches told as a person asks about a connection: which Service and frontend
//! answered, whether source ranges let it in, which endpoints it may reach and how likely each
//! is, whether it is masqueraded and why, or why it is dropped or rejected.
//!
//! Everything here is read from what the walk hit: element comments (`ns/name:port …`) name the
//! Service, the sets an address was found in name the frontend, the rules that set the
//! masquerade mark say why. Nothing assumes which chain layout the planner chose.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use serde::Serialize;

use super::walk::{Entry, Event, Fate, Packet, Path, RuleRef};
use crate::nft::model::{CmpOp, MarkOp, Selector, Stmt, Table, Value};
use crate::nft::render::family_keyword;
use crate::proxier::names::{CLUSTER_IPS, FIREWALL_IPS, NODEPORT_IPS};

/// The whole answer for one connection (serialized as `explain --output json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Explanation {
    /// `ip kubenft` or `ip6 kubenft`.
    pub table: String,
    pub connection: Connection,
    /// `ns/name:port`, from the comment of the element that matched the destination.
    pub service: Option<String>,
    pub frontend: Option<Frontend>,
    /// The LoadBalancerSourceRanges check, when the destination has one.
    pub source_ranges: Option<SourceRanges>,
    /// `accept`, `drop`, `reject`, or `mixed` when branches differ.
    pub verdict: String,
    /// Every endpoint the connection may be translated to.
    pub endpoints: Vec<EndpointShare>,
    /// Accepted without a destination rewrite (not a service address, or a rule let it pass).
    pub untranslated: Option<Share>,
    pub dropped: Option<Stop>,
    pub rejected: Option<Stop>,
    /// The chains the most likely branch entered, in order.
    pub chains: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Connection {
    pub source: IpAddr,
    pub destination: IpAddr,
    pub protocol: String,
    pub port: u16,
    /// `prerouting` (arrives from the network) or `output` (sent by this node).
    pub hook: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Frontend {
    /// `cluster-ip`, `node-port`, `load-balancer-ip`, or `external-ip` (an external IP, or a
    /// load-balancer IP without source ranges: the table does not tell them apart).
    pub kind: String,
    /// The set or map whose element matched the destination.
    pub matched_in: String,
    /// That element's comment.
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct SourceRanges {
    /// The chain that checks the source.
    pub chain: String,
    /// Whether this source may pass.
    pub allowed: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct EndpointShare {
    pub address: IpAddr,
    pub port: u16,
    pub probability: f64,
    /// How the endpoint was chosen: the NAT map (or chain, for a plain `dnat`) and its share.
    pub via: Vec<Via>,
    /// Whether the source address is rewritten to the node's (masquerade), and why.
    pub masquerade: bool,
    pub masquerade_reasons: Vec<MasqueradeReason>,
    /// The source is pinned to this endpoint by a ClientIP-affinity set.
    pub pinned: Option<Pinned>,
    /// `delivered` (to this node) or `forwarded`.
    pub delivery: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Via {
    pub chain: String,
    /// The map the endpoint was drawn from, if any.
    pub map: Option<String>,
    pub probability: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Pinned {
    pub set: String,
    pub expires_in_seconds: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct MasqueradeReason {
    /// `hairpin`, `off-cluster-source`, `node-traffic`, `external-traffic-policy-cluster`,
    /// `masquerade-all`.
    pub kind: String,
    pub chain: String,
    pub rule: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Share {
    pub probability: f64,
    pub delivery: String,
    /// Whether the source address is rewritten to the node's on some of these branches.
    pub masquerade: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Stop {
    pub probability: f64,
    /// `no-endpoints`, `no-local-endpoints`, `unused-cluster-ip-port`, `unallocated-cluster-ip`,
    /// `source-ranges`, `chain-policy`, or `other`.
    pub kind: String,
    /// In words: the comment of the rule or element that decided.
    pub reason: String,
    pub chain: String,
    pub rule: String,
}

fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

/// The `ns/name:port` at the start of an element comment such as `ns/name:port external IP`.
pub(crate) fn service_of(comment: &str) -> Option<String> {
    let first = comment.split_whitespace().next()?;
    (first.contains('/') && first.contains(':')).then(|| first.to_string())
}

/// Interprets the branches of a walk of `packet` through `table`.
pub(crate) fn explain(table: &Table, packet: &Packet, entry: Entry, paths: &[Path]) -> Explanation {
    let dispatch = dispatch(paths);
    let firewalled = found_in_firewall(paths);
    let frontend = dispatch
        .as_ref()
        .map(|d| frontend(table, packet.daddr, d, firewalled));
    let source_ranges = if firewalled {
        source_ranges(paths)
    } else {
        None
    };
    let Outcomes {
        endpoints,
        untranslated,
        mut stops,
    } = Outcomes::tally(table, paths, frontend.as_ref());
    let verdict = verdict(!endpoints.is_empty() || untranslated.is_some(), &stops);
    let mut endpoints: Vec<EndpointShare> = endpoints.into_values().collect();
    for e in &mut endpoints {
        e.masquerade_reasons.sort();
    }
    Explanation {
        table: format!("{} {}", family_keyword(table.family), table.name),
        connection: connection(packet, entry),
        service: dispatch.map(|d| d.service),
        frontend,
        source_ranges,
        verdict,
        endpoints,
        untranslated,
        dropped: stops.remove(&false),
        rejected: stops.remove(&true),
        chains: likeliest_chains(paths),
    }
}

fn connection(packet: &Packet, entry: Entry) -> Connection {
    Connection {
        source: packet.saddr,
        destination: packet.daddr,
        protocol: proto_name(packet.proto),
        port: packet.dport,
        hook: match entry {
            Entry::Prerouting => "prerouting".into(),
            Entry::Output => "output".into(),
        },
    }
}

/// The dispatch entry: the first element with a Service's name that matched, on any branch.
struct Dispatch {
    /// `ns/name:port`.
    service: String,
    set: String,
    comment: Option<String>,
}

fn dispatch(paths: &[Path]) -> Option<Dispatch> {
    paths.iter().flat_map(|p| &p.events).find_map(|e| match e {
        Event::Found { set, comment, .. } => {
            let c = comment.as_deref()?;
            service_of(c).map(|service| Dispatch {
                service,
                set: set.clone(),
                comment: comment.clone(),
            })
        }
        _ => None,
    })
}

/// Whether the destination matched the firewall map (it has LoadBalancerSourceRanges) on any
/// branch.
fn found_in_firewall(paths: &[Path]) -> bool {
    paths
        .iter()
        .flat_map(|p| &p.events)
        .any(|e| matches!(e, Event::Found { set, .. } if set == FIREWALL_IPS))
}

/// Whether `table`'s set `set` has an element whose key starts with `ip`.
fn in_set(table: &Table, set: &str, ip: IpAddr) -> bool {
    table.sets.get(set).is_some_and(|s| {
        let v = match ip {
            IpAddr::V4(a) => Value::Ipv4(a),
            IpAddr::V6(a) => Value::Ipv6(a),
        };
        s.elements.iter().any(|e| e.key.first() == Some(&v))
    })
}

/// Which kind of address `daddr` is to the Service, told by the sets that hold it.
fn frontend(table: &Table, daddr: IpAddr, dispatch: &Dispatch, firewalled: bool) -> Frontend {
    let kind = if in_set(table, CLUSTER_IPS, daddr) {
        "cluster-ip"
    } else if in_set(table, NODEPORT_IPS, daddr) {
        "node-port"
    } else if firewalled {
        "load-balancer-ip"
    } else {
        "external-ip"
    };
    Frontend {
        kind: kind.into(),
        matched_in: dispatch.set.clone(),
        comment: dispatch.comment.clone(),
    }
}

/// The source-range check of a destination found in the firewall map: the chain entered right
/// after the map matched checks the source, and lets it in unless a branch stops there.
fn source_ranges(paths: &[Path]) -> Option<SourceRanges> {
    let chain = paths.iter().find_map(|p| {
        let mut it = p
            .events
            .iter()
            .skip_while(|e| !matches!(e, Event::Found { set, .. } if set == FIREWALL_IPS));
        it.next();
        it.find_map(|e| match e {
            Event::Entered { chain } => Some(chain.clone()),
            _ => None,
        })
    })?;
    let dropped_there = paths.iter().any(|p| {
        p.decided_by.as_ref().is_some_and(|r| r.chain == chain)
            && matches!(p.fate, Fate::Dropped | Fate::Rejected)
    });
    Some(SourceRanges {
        chain,
        allowed: !dropped_there,
    })
}

/// Where the branches end, their probabilities summed: per endpoint, untranslated, or stopped.
#[derive(Default)]
struct Outcomes {
    endpoints: BTreeMap<(IpAddr, u16), EndpointShare>,
    untranslated: Option<Share>,
    /// `true`: rejected, `false`: dropped.
    stops: BTreeMap<bool, Stop>,
}

impl Outcomes {
    fn tally(table: &Table, paths: &[Path], frontend: Option<&Frontend>) -> Self {
        let mut out = Self::default();
        for p in paths {
            let delivery = match p.fate {
                Fate::Delivered => "delivered",
                _ => "forwarded",
            };
            match p.fate {
                Fate::Delivered | Fate::Forwarded => {
                    // The last destination rewrite is the endpoint the branch reaches.
                    let dnat = p.events.iter().rev().find_map(|e| match e {
                        Event::Dnat { rule, map, .. } => Some((rule, map)),
                        _ => None,
                    });
                    match dnat {
                        Some((rule, map)) => {
                            out.count_endpoint(table, p, rule, map, delivery, frontend)
                        }
                        None => out.count_untranslated(p, delivery),
                    }
                }
                Fate::Dropped | Fate::Rejected => out.count_stop(table, p),
            }
        }
        out
    }

    fn count_untranslated(&mut self, p: &Path, delivery: &str) {
        let u = self.untranslated.get_or_insert(Share {
            probability: 0.0,
            delivery: delivery.into(),
            masquerade: false,
        });
        u.probability += p.probability;
        u.masquerade |= p.masquerade;
    }

    /// Adds branch `p`, translated by `rule` (drawing from `map`, if any), to its endpoint's
    /// share: the probability, the way there, masquerade and affinity.
    fn count_endpoint(
        &mut self,
        table: &Table,
        p: &Path,
        rule: &RuleRef,
        map: &Option<String>,
        delivery: &str,
        frontend: Option<&Frontend>,
    ) {
        let share = self
            .endpoints
            .entry((p.daddr, p.dport))
            .or_insert_with(|| EndpointShare {
                address: p.daddr,
                port: p.dport,
                probability: 0.0,
                via: Vec::new(),
                masquerade: false,
                masquerade_reasons: Vec::new(),
                pinned: None,
                delivery: delivery.into(),
            });
        share.probability += p.probability;
        match share
            .via
            .iter_mut()
            .find(|v| v.chain == rule.chain && v.map == *map)
        {
            Some(v) => v.probability += p.probability,
            None => share.via.push(Via {
                chain: rule.chain.clone(),
                map: map.clone(),
                probability: p.probability,
            }),
        }
        note_masquerade(share, table, p, frontend);
        if let Some(pinned) = pinned(p) {
            share.pinned = Some(pinned);
        }
    }

    /// Adds dropped or rejected branch `p` to its stop; the first such branch says why.
    fn count_stop(&mut self, table: &Table, p: &Path) {
        let rule = p.decided_by.clone().unwrap_or(RuleRef {
            chain: String::new(),
            index: 0,
            text: String::new(),
            comment: None,
        });
        let (kind, reason) = stop_reason(table, p, &rule);
        let s = self.stops.entry(p.fate == Fate::Rejected).or_insert(Stop {
            probability: 0.0,
            kind,
            reason,
            chain: rule.chain.clone(),
            rule: rule.text.clone(),
        });
        s.probability += p.probability;
    }
}

/// Whether branch `p` is masqueraded, and why, added to `share`.
fn note_masquerade(
    share: &mut EndpointShare,
    table: &Table,
    p: &Path,
    frontend: Option<&Frontend>,
) {
    share.masquerade |= p.masquerade;
    if p.masquerade {
        for r in masquerade_reasons(table, p, frontend) {
            if !share.masquerade_reasons.contains(&r) {
                share.masquerade_reasons.push(r);
            }
        }
    }
}

/// The ClientIP-affinity set that pinned branch `p`'s source to its endpoint, if any.
fn pinned(p: &Path) -> Option<Pinned> {
    match p.events.iter().find(|e| matches!(e, Event::Pinned { .. })) {
        Some(Event::Pinned { set, expires_in }) => Some(Pinned {
            set: set.clone(),
            expires_in_seconds: expires_in.map(|d| d.as_secs()),
        }),
        _ => None,
    }
}

/// `accept`, `drop` or `reject` when every branch ends the same way, `mixed` when they differ,
/// `none` when there is no branch.
fn verdict(accepted: bool, stops: &BTreeMap<bool, Stop>) -> String {
    let mut kinds = Vec::new();
    if accepted {
        kinds.push("accept");
    }
    if stops.contains_key(&false) {
        kinds.push("drop");
    }
    if stops.contains_key(&true) {
        kinds.push("reject");
    }
    match kinds.as_slice() {
        [one] => one.to_string(),
        [] => "none".into(),
        _ => "mixed".into(),
    }
}

/// The chains the most likely branch entered, in order.
fn likeliest_chains(paths: &[Path]) -> Vec<String> {
    let likeliest = paths
        .iter()
        .max_by(|a, b| a.probability.total_cmp(&b.probability));
    likeliest
        .map(|p| {
            p.events
                .iter()
                .filter_map(|e| match e {
                    Event::Entered { chain } => Some(chain.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn rule_at<'t>(table: &'t Table, r: &RuleRef) -> Option<&'t crate::nft::model::Rule> {
    table.chains.get(&r.chain)?.rules.get(r.index)
}

/// Why `path` is masqueraded: each rule that set mark bits, or the rule that jumped to it when
/// the marking rule is an unconditional helper; classified by what that rule matches.
fn masquerade_reasons(
    table: &Table,
    path: &Path,
    frontend: Option<&Frontend>,
) -> Vec<MasqueradeReason> {
    let mut out = Vec::new();
    for e in &path.events {
        let Event::Marked { rule, caller } = e else {
            continue;
        };
        let Some(marking) = rule_at(table, rule) else {
            continue;
        };
        let sets_bits = marking
            .stmts
            .iter()
            .any(|s| matches!(s, Stmt::SetMark(MarkOp::Or(_) | MarkOp::Set(_))));
        if !sets_bits {
            continue;
        }
        let conditional = marking
            .stmts
            .iter()
            .any(|s| matches!(s, Stmt::Match { .. } | Stmt::Lookup { .. }));
        let deciding = match caller {
            Some(c) if !conditional => c,
            _ => rule,
        };
        let Some(r) = rule_at(table, deciding) else {
            continue;
        };
        out.push(MasqueradeReason {
            kind: classify_masquerade(&r.stmts, frontend).into(),
            chain: deciding.chain.clone(),
            rule: deciding.text.clone(),
        });
    }
    out
}

fn classify_masquerade(stmts: &[Stmt], frontend: Option<&Frontend>) -> &'static str {
    let is_saddr = |s: &Selector| matches!(s, Selector::IpSaddr | Selector::Ip6Saddr);
    let mut kind = None;
    for s in stmts {
        match s {
            Stmt::Match {
                left: Selector::CtStatus,
                ..
            } => kind = Some("hairpin"),
            Stmt::Lookup { key, .. } if key.len() == 2 && key.iter().any(is_saddr) => {
                kind = Some("hairpin")
            }
            // The source is one single address: an endpoint reaching itself.
            Stmt::Match {
                left,
                op: CmpOp::Eq,
                right: Value::Ipv4(_) | Value::Ipv6(_),
                ..
            } if is_saddr(left) => kind = Some("hairpin"),
            Stmt::Match {
                left,
                op: CmpOp::Ne,
                ..
            } if is_saddr(left) || *left == Selector::IifName => {
                kind = kind.or(Some("off-cluster-source"))
            }
            Stmt::Match {
                left: Selector::FibSaddrType,
                ..
            } => kind = kind.or(Some("node-traffic")),
            _ => {}
        }
    }
    kind.unwrap_or(match frontend.map(|f| f.kind.as_str()) {
        Some("cluster-ip") | None => "masquerade-all",
        Some(_) => "external-traffic-policy-cluster",
    })
}

/// What kind of stop `rule` made on `path`, and the words that say why: the rule's comment,
/// else the comment of the last element that sent the packet there.
fn stop_reason(table: &Table, path: &Path, rule: &RuleRef) -> (String, String) {
    let element = path.events.iter().rev().find_map(|e| match e {
        Event::Found {
            comment: Some(c), ..
        } => Some(c.clone()),
        _ => None,
    });
    let chain_comment = table
        .chains
        .get(&rule.chain)
        .and_then(|c| c.comment.clone());
    let reason = rule
        .comment
        .clone()
        .or_else(|| element.clone())
        .or(chain_comment)
        .unwrap_or_else(|| format!("rule `{}` in chain {}", rule.text, rule.chain));
    let text = reason.to_lowercase();
    let kind = if rule.text == "policy drop" {
        "chain-policy"
    } else if text.contains("no local endpoints") {
        "no-local-endpoints"
    } else if text.contains("no endpoints") {
        "no-endpoints"
    } else if text.contains("port no service uses") {
        "unused-cluster-ip-port"
    } else if text.contains("unallocated") {
        "unallocated-cluster-ip"
    } else if text.contains("loadbalancersourceranges")
        || path
            .events
            .iter()
            .any(|e| matches!(e, Event::Found { set, .. } if set == FIREWALL_IPS))
    {
        "source-ranges"
    } else {
        "other"
    };
    (kind.into(), reason)
}

fn percent(p: f64) -> String {
    let v = p * 100.0;
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}%")
    } else {
        format!("{v:.4}%")
    }
}

fn addr_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

impl Explanation {
    /// The answer for a person.
    pub(crate) fn to_text(&self) -> String {
        let c = &self.connection;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "connection: {} -> {}/{} (new, entering at {}; table {})",
            c.source,
            addr_port(c.destination, c.port),
            c.protocol,
            c.hook,
            self.table
        );
        match (&self.service, &self.frontend) {
            (Some(svc), Some(f)) => {
                let _ = writeln!(
                    s,
                    "service:    {svc}, {} (matched in {})",
                    f.kind.replace('-', " "),
                    f.matched_in
                );
            }
            _ => {
                let _ = writeln!(
                    s,
                    "service:    none: the table has no service at this address and port"
                );
            }
        }
        if let Some(fw) = &self.source_ranges {
            let _ = writeln!(
                s,
                "source:     {} by the source ranges ({})",
                if fw.allowed { "allowed" } else { "not allowed" },
                fw.chain
            );
        }
        let _ = writeln!(s, "verdict:    {}", self.verdict);
        for e in &self.endpoints {
            let via: Vec<String> = e
                .via
                .iter()
                .map(|v| match &v.map {
                    Some(m) => format!("{} via {m}", percent(v.probability)),
                    None => format!("{} via {}", percent(v.probability), v.chain),
                })
                .collect();
            let _ = writeln!(
                s,
                "  -> {:<24} {:>9}  ({})",
                addr_port(e.address, e.port),
                percent(e.probability),
                via.join(", ")
            );
            if let Some(pin) = &e.pinned {
                let until = pin
                    .expires_in_seconds
                    .map(|t| format!(" for {t} s more"))
                    .unwrap_or_default();
                let _ = writeln!(s, "     pinned to it by {}{until}", pin.set);
            }
            if e.masquerade {
                for r in &e.masquerade_reasons {
                    let _ = writeln!(
                        s,
                        "     masqueraded: {} ({}: {})",
                        r.kind.replace('-', " "),
                        r.chain,
                        r.rule
                    );
                }
                if e.masquerade_reasons.is_empty() {
                    let _ = writeln!(s, "     masqueraded");
                }
            } else {
                let _ = writeln!(s, "     source address kept");
            }
        }
        if let Some(u) = &self.untranslated {
            let _ = writeln!(
                s,
                "  -> not translated, {} ({})",
                u.delivery,
                percent(u.probability)
            );
        }
        for (what, stop) in [("dropped", &self.dropped), ("rejected", &self.rejected)] {
            if let Some(st) = stop {
                let _ = writeln!(
                    s,
                    "  {what} ({}): {} [{}] by {}: {}",
                    percent(st.probability),
                    st.reason,
                    st.kind,
                    st.chain,
                    st.rule
                );
            }
        }
        if !self.chains.is_empty() {
            let _ = writeln!(s, "chains:     {}", self.chains.join(" > "));
        }
        s
    }
}
