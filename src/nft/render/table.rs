//! Declarations (base chains, sets and maps, elements) and whole tables, laid out as
//! `nft list table` lays them out.

use super::stmt::integer_key;
use super::*;

fn hook_name(h: Hook) -> &'static str {
    match h {
        Hook::Prerouting => "prerouting",
        Hook::Input => "input",
        Hook::Forward => "forward",
        Hook::Output => "output",
        Hook::Postrouting => "postrouting",
    }
}

pub(super) fn base_chain_line(b: &BaseChain) -> String {
    let kind = match b.kind {
        ChainType::Filter => "filter",
        ChainType::Nat => "nat",
        ChainType::Route => "route",
    };
    let policy = match b.policy {
        Policy::Accept => "accept",
        Policy::Drop => "drop",
    };
    format!(
        "type {kind} hook {} priority {}; policy {policy};",
        hook_name(b.hook),
        b.priority
    )
}

/// Seconds as nft prints durations (`3h`, `1h30m`, `45s`).
fn duration(secs: u32) -> String {
    if secs == 0 {
        return "0s".to_string();
    }
    let mut s = String::new();
    let mut rest = secs;
    for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= len {
            let _ = write!(s, "{}{unit}", rest / len);
            rest %= len;
        }
    }
    s
}

/// The `type …` line of a set or map. A plain `integer` key part (numgen results) has no size
/// in nft's type system, so such keys are declared with `typeof` (`numgen random mod 1` for the
/// integer): the same 32-bit host-endian key, and the modulus is not part of the set's type.
fn set_type_line(set: &Set) -> String {
    if set.key.contains(&DataType::Integer) {
        // `typeof` needs the data as expressions too: `ip daddr . th dport`, or `verdict`.
        let key: Vec<&str> = set.key.iter().map(|&t| typeof_expr(t)).collect();
        let data: Vec<&str> = set.data.iter().map(|&t| typeof_expr(t)).collect();
        let data = if data.is_empty() {
            String::new()
        } else {
            format!(" : {}", data.join(" . "))
        };
        return format!("typeof {}{data}", key.join(" . "));
    }
    let data = if set.data.is_empty() {
        String::new()
    } else {
        format!(" : {}", concat(&set.data))
    };
    format!("type {}{data}", concat(&set.key))
}

/// An expression of each data type, for `typeof` declarations.
fn typeof_expr(t: DataType) -> &'static str {
    match t {
        DataType::Ipv4Addr => "ip daddr",
        DataType::Ipv6Addr => "ip6 daddr",
        DataType::InetProto => "meta l4proto",
        DataType::InetService => "th dport",
        DataType::Mark => "meta mark",
        DataType::IfName => "iifname",
        DataType::Verdict => "verdict",
        DataType::Integer => "numgen random mod 1",
    }
}

fn set_flags(set: &Set) -> Option<String> {
    let mut flags = Vec::new();
    if set.interval {
        flags.push("interval");
    }
    if set.dynamic {
        flags.push("dynamic");
    }
    if set.timeout.is_some() {
        flags.push("timeout");
    }
    (!flags.is_empty()).then(|| format!("flags {}", flags.join(",")))
}

pub(super) fn set_keyword(set: &Set) -> &'static str {
    if set.data.is_empty() { "set" } else { "map" }
}

/// The declaration lines of a set or map, without elements.
pub(super) fn set_decl_lines(set: &Set) -> Vec<String> {
    let mut lines = vec![set_type_line(set)];
    lines.extend(set.size.map(|n| format!("size {n}")));
    lines.extend(set_flags(set));
    if let Some(t) = set.timeout {
        lines.push(format!("timeout {}", duration(t)));
    }
    if let Some(c) = &set.comment {
        lines.push(quoted_comment(c));
    }
    lines
}

/// One element: `key . key [comment "…"] [: verdict]`.
pub(crate) fn render_element(e: &Element) -> String {
    render_element_in(e, false)
}

/// An element of a set whose key is `integer` when `integer_keys` (see `integer_key`).
fn render_element_in(e: &Element, integer_keys: bool) -> String {
    let mut s = if integer_keys {
        integer_key(&e.key)
    } else {
        concat(&e.key)
    };
    if let Some(c) = &e.comment {
        s.push(' ');
        s.push_str(&quoted_comment(c));
    }
    match &e.data {
        Some(MapData::Verdict(v)) => {
            let _ = write!(s, " : {v}");
        }
        Some(MapData::Values(values)) => {
            let _ = write!(s, " : {}", concat(values));
        }
        None => {}
    }
    s
}

/// Element keys only (for `delete element`, where data and comments are not accepted).
pub(super) fn render_element_key(e: &Element) -> String {
    concat(&e.key)
}

// ---------------------------------------------------------------------------------------------
// Whole table

/// A complete `table <family> <name> { … }` script. Sets and maps come first (rules refer to
/// them), then base chains (the entry points, in name order), then regular chains by name.
/// Elements are printed in the order they are held; call `Table::normalize` for sorted output.
pub fn render_table(t: &Table) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "table {} {} {{", family_keyword(t.family), t.name);
    let mut blocks: Vec<String> = Vec::new();
    if let Some(c) = &t.comment {
        // The table comment sits alone at the top of the block, as nft lists it.
        out.push('\t');
        out.push_str(&quoted_comment(c));
        out.push('\n');
    }
    for set in t.sets.values() {
        blocks.push(render_set_block(set));
    }
    let base = t.chains.values().filter(|c| c.base.is_some());
    let regular = t.chains.values().filter(|c| c.base.is_none());
    for chain in base.chain(regular) {
        blocks.push(render_chain_block(chain, t.family));
    }
    out.push_str(&blocks.join("\n"));
    out.push_str("}\n");
    out
}

fn render_set_block(set: &Set) -> String {
    let mut s = format!("\t{} {} {{\n", set_keyword(set), set.name);
    for line in set_decl_lines(set) {
        let _ = writeln!(s, "\t\t{line}");
    }
    if !set.elements.is_empty() {
        // One element per line: big maps stay diffable and readable.
        let integer_keys = set.key.contains(&DataType::Integer);
        s.push_str("\t\telements = {\n");
        let n = set.elements.len();
        for (i, e) in set.elements.iter().enumerate() {
            let sep = if i + 1 < n { "," } else { "" };
            let _ = writeln!(s, "\t\t\t{}{sep}", render_element_in(e, integer_keys));
        }
        s.push_str("\t\t}\n");
    }
    s.push_str("\t}\n");
    s
}

fn render_chain_block(chain: &Chain, family: Family) -> String {
    let mut s = format!("\tchain {} {{\n", chain.name);
    if let Some(b) = &chain.base {
        let _ = writeln!(s, "\t\t{}", base_chain_line(b));
    }
    if let Some(c) = &chain.comment {
        let _ = writeln!(s, "\t\t{}", quoted_comment(c));
    }
    for rule in &chain.rules {
        let _ = writeln!(s, "\t\t{}", render_rule(rule, family));
    }
    s.push_str("\t}\n");
    s
}
