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
    let connection = Connection {
        source: packet.saddr,
        destination: packet.daddr,
        protocol: proto_name(packet.proto),
        port: packet.dport,
        hook: match entry {
            Entry::Prerouting => "prerouting".into(),
            Entry::Output => "output".into(),
        },
    };
    let in_set = |set: &str, ip: IpAddr| {
        table.sets.get(set).is_some_and(|s| {
            let v = match ip {
                IpAddr::V4(a) => Value::Ipv4(a),
                IpAddr::V6(a) => Value::Ipv6(a),
            };
            s.elements.iter().any(|e| e.key.first() == Some(&v))
        })
    };
    let events = || paths.iter().flat_map(|p| &p.events);
    // The first element with a Service's name that matched: the dispatch entry.
    let dispatch = events().find_map(|e| match e {
        Event::Found { set, comment, .. } => {
            let c = comment.as_deref()?;
            service_of(c).map(|svc| (svc, set.clone(), comment.clone()))
        }
        _ => None,
    });
    let firewall_chain = events().find_map(|e| match e {
        Event::Found { set, .. } if set == FIREWALL_IPS => Some(()),
        _ => None,
    });
    let frontend = dispatch.as_ref().map(|(_, set, comment)| {
        let kind = if in_set(CLUSTER_IPS, packet.daddr) {
            "cluster-ip"
        } else if in_set(NODEPORT_IPS, packet.daddr) {
            "node-port"
        } else if firewall_chain.is_some() {
            "load-balancer-ip"
        } else {
            "external-ip"
        };
        Frontend {
            kind: kind.into(),
            matched_in: set.clone(),
            comment: comment.clone(),
        }
    });
    let source_ranges = firewall_chain.and_then(|()| {
        // The chain entered right after the firewall map matched checks the source.
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
    });

    let mut endpoints: BTreeMap<(IpAddr, u16), EndpointShare> = BTreeMap::new();
    let mut untranslated: Option<Share> = None;
    let mut stops: BTreeMap<bool, Stop> = BTreeMap::new();
    for p in paths {
        let delivery = match p.fate {
            Fate::Delivered => "delivered",
            _ => "forwarded",
        };
        match p.fate {
            Fate::Delivered | Fate::Forwarded => {
                let dnat = p.events.iter().rev().find_map(|e| match e {
                    Event::Dnat { rule, map, .. } => Some((rule, map)),
                    _ => None,
                });
                let Some((rule, map)) = dnat else {
                    let u = untranslated.get_or_insert(Share {
                        probability: 0.0,
                        delivery: delivery.into(),
                        masquerade: false,
                    });
                    u.probability += p.probability;
                    u.masquerade |= p.masquerade;
                    continue;
                };
                let share = endpoints
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
                share.masquerade |= p.masquerade;
                if p.masquerade {
                    for r in masquerade_reasons(table, p, frontend.as_ref()) {
                        if !share.masquerade_reasons.contains(&r) {
                            share.masquerade_reasons.push(r);
                        }
                    }
                }
                if let Some(Event::Pinned { set, expires_in }) =
                    p.events.iter().find(|e| matches!(e, Event::Pinned { .. }))
                {
                    share.pinned = Some(Pinned {
                        set: set.clone(),
                        expires_in_seconds: expires_in.map(|d| d.as_secs()),
                    });
                }
            }
            Fate::Dropped | Fate::Rejected => {
                let rule = p.decided_by.clone().unwrap_or(RuleRef {
                    chain: String::new(),
                    index: 0,
                    text: String::new(),
                    comment: None,
                });
                let (kind, reason) = stop_reason(table, p, &rule);
                let s = stops.entry(p.fate == Fate::Rejected).or_insert(Stop {
                    probability: 0.0,
                    kind,
                    reason,
                    chain: rule.chain.clone(),
                    rule: rule.text.clone(),
                });
                s.probability += p.probability;
            }
        }
    }
    let mut kinds = Vec::new();
    if !endpoints.is_empty() || untranslated.is_some() {
        kinds.push("accept");
    }
    if stops.contains_key(&false) {
        kinds.push("drop");
    }
    if stops.contains_key(&true) {
        kinds.push("reject");
    }
    let verdict = match kinds.as_slice() {
        [one] => one.to_string(),
        [] => "none".into(),
        _ => "mixed".into(),
    };
    let likeliest = paths
        .iter()
        .max_by(|a, b| a.probability.total_cmp(&b.probability));
    let chains = likeliest
        .map(|p| {
            p.events
                .iter()
                .filter_map(|e| match e {
                    Event::Entered { chain } => Some(chain.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut endpoints: Vec<EndpointShare> = endpoints.into_values().collect();
    for e in &mut endpoints {
        e.masquerade_reasons.sort();
    }
    Explanation {
        table: format!("{} {}", family_keyword(table.family), table.name),
        connection,
        service: dispatch.map(|(svc, _, _)| svc),
        frontend,
        source_ranges,
        verdict,
        endpoints,
        untranslated,
        dropped: stops.remove(&false),
        rejected: stops.remove(&true),
        chains,
    }
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
