//! Statements and rules in `nft -f` syntax: one statement prints as nft prints it back, so a
//! rendered rule reads the same as `nft list` shows it.

use super::*;

/// Keys of integer-typed maps (numgen results) are held as `Value::Mark` (a host-endian u32)
/// but read better as plain numbers: `numgen random mod 2 vmap { 0 : …, 1 : … }`, and
/// `10.96.0.10 . tcp . 80 . 3` in a map keyed by a numgen slot.
pub(super) fn integer_key(key: &[Value]) -> String {
    let parts: Vec<String> = key
        .iter()
        .map(|v| match v {
            Value::Mark(n) => n.to_string(),
            other => other.to_string(),
        })
        .collect();
    concat(&parts)
}

fn render_map_ref(map: &MapRef, integer_keys: bool) -> String {
    match map {
        MapRef::Named(name) => format!("@{name}"),
        MapRef::Anonymous(entries) => {
            let items: Vec<String> = entries
                .iter()
                .map(|(key, verdict)| {
                    let key = if integer_keys {
                        integer_key(key)
                    } else {
                        concat(key)
                    };
                    format!("{key} : {verdict}")
                })
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}

/// The ` offset N` of a number draw; nft lists `offset 0` as nothing.
fn offset_suffix(offset: u32) -> String {
    if offset == 0 {
        String::new()
    } else {
        format!(" offset {offset}")
    }
}

/// The family keyword of a `dnat … to … map`: the map's data says nothing of it, the table's
/// family does.
fn dnat_map_family(family: Option<Family>) -> &'static str {
    if family == Some(Family::Ip6) {
        "ip6"
    } else {
        "ip"
    }
}

fn render_dnat(family: Option<Family>, addr: IpAddr, port: Option<u16>) -> String {
    // In an inet table nft must be told which address family the target belongs to; in ip and
    // ip6 tables (and without a family, for Display) the address says it.
    let prefix = match (family, addr) {
        (Some(Family::Inet), IpAddr::V4(_)) => "dnat ip to",
        (Some(Family::Inet), IpAddr::V6(_)) => "dnat ip6 to",
        _ => "dnat to",
    };
    match (addr, port) {
        (IpAddr::V4(a), Some(p)) => format!("{prefix} {a}:{p}"),
        (IpAddr::V6(a), Some(p)) => format!("{prefix} [{a}]:{p}"),
        (a, None) => format!("{prefix} {a}"),
    }
}

fn render_reject(family: Option<Family>, kind: RejectKind) -> String {
    match kind {
        RejectKind::Default => "reject".to_string(),
        RejectKind::TcpReset => "reject with tcp reset".to_string(),
        RejectKind::IcmpPortUnreachable => match family {
            Some(Family::Ip) => "reject with icmp type port-unreachable",
            Some(Family::Ip6) => "reject with icmpv6 type port-unreachable",
            // icmpx ("abstracted ICMP") is only valid in inet tables.
            Some(Family::Inet) | None => "reject with icmpx type port-unreachable",
        }
        .to_string(),
    }
}

/// One statement in the syntax of a table of `family`. Only `dnat` and `reject with icmp…`
/// depend on the family; `Display` uses the family-free spelling (valid in ip/ip6 for dnat and
/// in inet for `icmpx`).
pub(crate) fn render_stmt(stmt: &Stmt, family: Option<Family>) -> String {
    match stmt {
        Stmt::Match {
            left,
            mask,
            op,
            right,
        } => {
            let op = match op {
                CmpOp::Eq => "",
                CmpOp::Ne => "!= ",
            };
            match mask {
                // With a mask nft needs the operator spelled out: `meta mark & 0x4000 == 0`.
                Some(m) => {
                    let op = if op.is_empty() { "== " } else { op };
                    format!("{left} & 0x{m:08x} {op}{right}")
                }
                None => format!("{left} {op}{right}"),
            }
        }
        Stmt::Lookup { key, set, negate } => {
            let op = if *negate { "!= " } else { "" };
            format!("{} {op}@{set}", concat(key))
        }
        Stmt::VMap { key, map } => format!("{} vmap {}", concat(key), render_map_ref(map, false)),
        Stmt::NumgenVMap { modulus, map } => {
            format!(
                "numgen random mod {modulus} vmap {}",
                render_map_ref(map, true)
            )
        }
        Stmt::NumgenIs { modulus, value } => format!("numgen random mod {modulus} {value}"),
        Stmt::Update { set, key } => format!("update @{set} {{ {} }}", concat(key)),
        Stmt::SetMark(op) => match op {
            MarkOp::Or(v) => format!("meta mark set meta mark or 0x{v:08x}"),
            MarkOp::Xor(v) => format!("meta mark set meta mark xor 0x{v:08x}"),
            MarkOp::And(v) => format!("meta mark set meta mark and 0x{v:08x}"),
            MarkOp::Set(v) => format!("meta mark set 0x{v:08x}"),
        },
        Stmt::Dnat { addr, port } => render_dnat(family, *addr, *port),
        Stmt::DnatNumgenMap {
            modulus,
            offset,
            map,
        } => {
            // The map's data (`address . port`) tells nft to translate both.
            let ip = dnat_map_family(family);
            let offset = offset_suffix(*offset);
            format!("dnat {ip} to numgen random mod {modulus}{offset} map @{map}")
        }
        Stmt::DnatHashMap {
            fields,
            seed,
            modulus,
            offset,
            map,
        } => {
            let offset = offset_suffix(*offset);
            format!(
                "dnat {} to jhash {} mod {modulus} seed 0x{seed:x}{offset} map @{map}",
                dnat_map_family(family),
                concat(fields)
            )
        }
        Stmt::DnatSlotMap { key, modulus, map } => format!(
            "dnat {} to {} . numgen random mod {modulus} map @{map}",
            dnat_map_family(family),
            concat(key)
        ),
        Stmt::DnatMap { key, map } => format!(
            "dnat {} to {} map @{map}",
            dnat_map_family(family),
            concat(key)
        ),
        Stmt::Masquerade { fully_random } => {
            if *fully_random {
                "masquerade fully-random".to_string()
            } else {
                "masquerade".to_string()
            }
        }
        Stmt::Reject(kind) => render_reject(family, *kind),
        Stmt::Limit { rate, unit, burst } => {
            let unit = match unit {
                RateUnit::Second => "second",
                RateUnit::Minute => "minute",
                RateUnit::Hour => "hour",
                RateUnit::Day => "day",
            };
            format!("limit rate {rate}/{unit} burst {burst} packets")
        }
        Stmt::Counter => "counter".to_string(),
        Stmt::Verdict(v) => v.to_string(),
    }
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render_stmt(self, None))
    }
}

/// A rule's statements and comment on one line, as it appears inside a chain block.
pub fn render_rule(rule: &Rule, family: Family) -> String {
    let mut parts: Vec<String> = rule
        .stmts
        .iter()
        .map(|s| render_stmt(s, Some(family)))
        .collect();
    if let Some(c) = &rule.comment {
        parts.push(quoted_comment(c));
    }
    parts.join(" ")
}
