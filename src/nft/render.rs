//! Prints the model in `nft -f` syntax accepted by nft 1.0.6, deterministically byte for byte.
//!
//! `render_table` prints a whole table the way `nft list table` lays it out (sets and maps
//! first, then base chains, then regular chains, tab-indented); `render_op` prints one
//! transaction operation as one self-contained nft command, so a `Transaction` can be fed to
//! `nft -f` and quoted in error messages.
//!
//! Two things nft cannot express are handled here, in one documented way each:
//! - Comments: nft's quoted strings cannot contain `"` and are limited to 128 bytes.
//!   `sanitize_comment` replaces `"` with `'` and control characters with a space, then cuts the
//!   text at 128 bytes on a character boundary. The netlink encoder should apply the same rule so
//!   rendering and the kernel's view agree.
//! - Names: nft 1.0.6 accepts chain, set and table names only as bare identifiers
//!   (`[A-Za-z_.][A-Za-z0-9/_.-]*`, see `is_nft_identifier`); quoted names are a syntax error.
//!   Names are printed as they are, so an invalid name surfaces as nft's own error pointing at it.

use std::collections::BTreeSet;
use std::fmt;
use std::fmt::Write as _;
use std::net::IpAddr;

use super::model::{
    AddrType, BaseChain, Chain, ChainType, CmpOp, CtState, CtStatus, DataType, Element, Family,
    Hook, MapData, MapRef, MarkOp, Policy, RateUnit, RejectKind, Rule, Selector, Set, Stmt, Table,
    Value, Verdict,
};
use super::transaction::{Op, TableRef, Transaction};

/// nft's limit on comment length in bytes (`NFTNL_UDATA_COMMENT_MAXLEN`).
pub const COMMENT_MAX_BYTES: usize = 128;

/// The family keyword as nft spells it.
pub fn family_keyword(family: Family) -> &'static str {
    match family {
        Family::Ip => "ip",
        Family::Ip6 => "ip6",
        Family::Inet => "inet",
    }
}

/// True when nft 1.0.6's scanner reads `name` as one identifier (table, chain or set name).
/// A name that is exactly an nft keyword (`counter`, `filter`…) still fails; ours never are.
pub fn is_nft_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '.' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.'))
}

/// Makes `text` printable as an nft comment: `"` becomes `'`, control characters become a space,
/// and the result is cut to at most 128 bytes without splitting a character.
pub fn sanitize_comment(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(COMMENT_MAX_BYTES));
    for c in text.chars() {
        let c = match c {
            '"' => '\'',
            c if c.is_control() => ' ',
            c => c,
        };
        if out.len() + c.len_utf8() > COMMENT_MAX_BYTES {
            break;
        }
        out.push(c);
    }
    out
}

fn quoted_comment(text: &str) -> String {
    format!("comment \"{}\"", sanitize_comment(text))
}

/// Interface names are quoted strings too: `"` and control characters become `_` (no interface
/// the kernel accepts has them, so a match on such a name could never succeed anyway).
fn quoted_string(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c == '"' || c.is_control() { '_' } else { c })
        .collect();
    format!("\"{clean}\"")
}

// ---------------------------------------------------------------------------------------------
// Scalars

fn proto_name(p: u8) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        6 => "tcp",
        17 => "udp",
        58 => "ipv6-icmp",
        132 => "sctp",
        _ => return None,
    })
}

fn ct_state_names(s: CtState) -> String {
    // Bit order, which is also the order nft lists them in.
    const NAMES: [(CtState, &str); 5] = [
        (CtState::INVALID, "invalid"),
        (CtState::ESTABLISHED, "established"),
        (CtState::RELATED, "related"),
        (CtState::NEW, "new"),
        (CtState::UNTRACKED, "untracked"),
    ];
    bit_names(s.0, NAMES.map(|(bit, name)| (bit.0, name)))
}

/// `ct status` bits by nft's names (only the NAT bits have rules here).
fn ct_status_names(s: CtStatus) -> String {
    const NAMES: [(CtStatus, &str); 2] = [(CtStatus(1 << 4), "snat"), (CtStatus::DNAT, "dnat")];
    bit_names(s.0, NAMES.map(|(bit, name)| (bit.0, name)))
}

/// A bit set as nft lists it: the names of the set bits in `names` order, comma-separated.
fn bit_names<const N: usize>(bits: u32, names: [(u32, &str); N]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut rest = bits;
    for (bit, name) in names {
        if rest & bit != 0 {
            parts.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 || parts.is_empty() {
        // Bits nft has no name for: a plain number is still accepted for a bitmask type.
        parts.push(format!("0x{rest:08x}"));
    }
    parts.join(",")
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Ipv4(a) => write!(f, "{a}"),
            Value::Ipv6(a) => write!(f, "{a}"),
            Value::Ipv4Net(n) => write!(f, "{}/{}", n.network(), n.prefix_len()),
            Value::Ipv6Net(n) => write!(f, "{}/{}", n.network(), n.prefix_len()),
            Value::Proto(p) => match proto_name(*p) {
                Some(name) => f.write_str(name),
                None => write!(f, "{p}"),
            },
            Value::Port(p) => write!(f, "{p}"),
            Value::Mark(m) => write!(f, "0x{m:08x}"),
            Value::NfProto(2) => f.write_str("ipv4"),
            Value::NfProto(10) => f.write_str("ipv6"),
            Value::NfProto(p) => write!(f, "{p}"),
            Value::IfName(name) => f.write_str(&quoted_string(name)),
            Value::AddrType(t) => f.write_str(match t {
                AddrType::Unicast => "unicast",
                AddrType::Local => "local",
                AddrType::Broadcast => "broadcast",
                AddrType::Multicast => "multicast",
            }),
            Value::CtState(s) => f.write_str(&ct_state_names(*s)),
            Value::CtStatus(s) => f.write_str(&ct_status_names(*s)),
            Value::IntRange { first, last } => write!(f, "{first}-{last}"),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Selector::IpSaddr => "ip saddr",
            Selector::IpDaddr => "ip daddr",
            Selector::Ip6Saddr => "ip6 saddr",
            Selector::Ip6Daddr => "ip6 daddr",
            Selector::ThSport => "th sport",
            Selector::ThDport => "th dport",
            Selector::L4Proto => "meta l4proto",
            Selector::NfProto => "meta nfproto",
            Selector::Mark => "meta mark",
            Selector::IifName => "iifname",
            Selector::OifName => "oifname",
            Selector::FibSaddrType => "fib saddr type",
            Selector::FibDaddrType => "fib daddr type",
            Selector::CtState => "ct state",
            Selector::CtStatus => "ct status",
        })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Accept => f.write_str("accept"),
            Verdict::Drop => f.write_str("drop"),
            Verdict::Continue => f.write_str("continue"),
            Verdict::Return => f.write_str("return"),
            Verdict::Jump(c) => write!(f, "jump {c}"),
            Verdict::Goto(c) => write!(f, "goto {c}"),
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataType::Ipv4Addr => "ipv4_addr",
            DataType::Ipv6Addr => "ipv6_addr",
            DataType::InetProto => "inet_proto",
            DataType::InetService => "inet_service",
            DataType::Mark => "mark",
            DataType::IfName => "ifname",
            DataType::Verdict => "verdict",
            DataType::Integer => "integer",
        })
    }
}

fn concat<T: fmt::Display>(parts: &[T]) -> String {
    let mut s = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            s.push_str(" . ");
        }
        let _ = write!(s, "{p}");
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Statements

/// Keys of integer-typed maps (numgen results) are held as `Value::Mark` (a host-endian u32)
/// but read better as plain numbers: `numgen random mod 2 vmap { 0 : …, 1 : … }`, and
/// `10.96.0.10 . tcp . 80 . 3` in a map keyed by a numgen slot.
fn integer_key(key: &[Value]) -> String {
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
pub fn render_stmt(stmt: &Stmt, family: Option<Family>) -> String {
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
            // The map's data (`address . port`) tells nft to translate both; nft lists
            // `offset 0` as nothing.
            let ip = dnat_map_family(family);
            let offset = if *offset == 0 {
                String::new()
            } else {
                format!(" offset {offset}")
            };
            format!("dnat {ip} to numgen random mod {modulus}{offset} map @{map}")
        }
        Stmt::DnatHashMap {
            fields,
            seed,
            modulus,
            offset,
            map,
        } => {
            let offset = if *offset == 0 {
                String::new()
            } else {
                format!(" offset {offset}")
            };
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

// ---------------------------------------------------------------------------------------------
// Declarations

fn hook_name(h: Hook) -> &'static str {
    match h {
        Hook::Prerouting => "prerouting",
        Hook::Input => "input",
        Hook::Forward => "forward",
        Hook::Output => "output",
        Hook::Postrouting => "postrouting",
    }
}

fn base_chain_line(b: &BaseChain) -> String {
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

fn set_keyword(set: &Set) -> &'static str {
    if set.data.is_empty() { "set" } else { "map" }
}

/// The declaration lines of a set or map, without elements.
fn set_decl_lines(set: &Set) -> Vec<String> {
    let mut lines = vec![set_type_line(set)];
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
pub fn render_element(e: &Element) -> String {
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
fn render_element_key(e: &Element) -> String {
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

// ---------------------------------------------------------------------------------------------
// Transactions

fn table_ref(t: &TableRef) -> String {
    format!("{} {}", family_keyword(t.family), t.name)
}

/// One operation as one nft command line. `flush set` is printed for `FlushSet`; nft spells it
/// `flush map` for maps, which this function cannot know: `render_transaction` and
/// `render_op_with_maps` can.
pub fn render_op(op: &Op) -> String {
    render_op_with_maps(op, &|_, _| false)
}

/// Like `render_op`, with `is_map(table, name)` telling whether a set name is a map (only
/// `FlushSet` needs it: nft rejects `flush set` on a map and `flush map` on a set).
pub fn render_op_with_maps(op: &Op, is_map: &dyn Fn(&TableRef, &str) -> bool) -> String {
    match op {
        Op::AddTable { table, comment } => match comment {
            Some(c) => format!(
                "add table {} {{ {}; }}",
                table_ref(table),
                quoted_comment(c)
            ),
            None => format!("add table {}", table_ref(table)),
        },
        Op::DeleteTable { table } => format!("delete table {}", table_ref(table)),
        Op::FlushTable { table } => format!("flush table {}", table_ref(table)),
        Op::AddChain { table, chain } => {
            let mut body = Vec::new();
            if let Some(b) = &chain.base {
                body.push(base_chain_line(b));
            }
            if let Some(c) = &chain.comment {
                body.push(format!("{};", quoted_comment(c)));
            }
            if body.is_empty() {
                format!("add chain {} {}", table_ref(table), chain.name)
            } else {
                format!(
                    "add chain {} {} {{ {} }}",
                    table_ref(table),
                    chain.name,
                    body.join(" ")
                )
            }
        }
        Op::FlushChain { table, chain } => format!("flush chain {} {chain}", table_ref(table)),
        Op::DeleteChain { table, chain } => format!("delete chain {} {chain}", table_ref(table)),
        Op::AddSet { table, set } => {
            let body: Vec<String> = set_decl_lines(set)
                .into_iter()
                .map(|l| format!("{l};"))
                .collect();
            format!(
                "add {} {} {} {{ {} }}",
                set_keyword(set),
                table_ref(table),
                set.name,
                body.join(" ")
            )
        }
        Op::FlushSet { table, set } => {
            let kw = if is_map(table, set) { "map" } else { "set" };
            format!("flush {kw} {} {set}", table_ref(table))
        }
        Op::DeleteSet { table, set } => format!("delete set {} {set}", table_ref(table)),
        Op::AddElements {
            table,
            set,
            elements,
        } => {
            if elements.is_empty() {
                // `{ }` is a syntax error; an empty add changes nothing.
                return format!("# add element {} {set}: no elements", table_ref(table));
            }
            let items: Vec<String> = elements.iter().map(render_element).collect();
            format!(
                "add element {} {set} {{ {} }}",
                table_ref(table),
                items.join(", ")
            )
        }
        Op::DeleteElements {
            table,
            set,
            elements,
        } => {
            if elements.is_empty() {
                return format!("# delete element {} {set}: no elements", table_ref(table));
            }
            let items: Vec<String> = elements.iter().map(render_element_key).collect();
            format!(
                "delete element {} {set} {{ {} }}",
                table_ref(table),
                items.join(", ")
            )
        }
        Op::AddRule { table, chain, rule } => format!(
            "add rule {} {chain} {}",
            table_ref(table),
            render_rule(rule, table.family)
        ),
        Op::DeleteRule {
            table,
            chain,
            handle,
        } => format!("delete rule {} {chain} handle {handle}", table_ref(table)),
    }
}

/// The whole transaction, one command per line, ready for `nft -f`. Maps are recognised from
/// the transaction's own `AddSet` operations (for `flush map`). An expected generation cannot be
/// expressed in nft syntax and is printed as a comment line.
pub fn render_transaction(tx: &Transaction) -> String {
    render_transaction_with_maps(tx, &[])
}

/// Like `render_transaction`, also treating the maps of `known` tables (e.g. the last applied
/// state) as maps when flushing.
pub fn render_transaction_with_maps(tx: &Transaction, known: &[&Table]) -> String {
    let mut maps: BTreeSet<(TableRef, String)> = BTreeSet::new();
    for t in known {
        let tref = TableRef {
            family: t.family,
            name: t.name.clone(),
        };
        for set in t.sets.values().filter(|s| !s.data.is_empty()) {
            maps.insert((tref.clone(), set.name.clone()));
        }
    }
    for op in &tx.ops {
        if let Op::AddSet { table, set } = op
            && !set.data.is_empty()
        {
            maps.insert((table.clone(), set.name.clone()));
        }
    }
    let is_map = |t: &TableRef, name: &str| maps.contains(&(t.clone(), name.to_string()));
    let mut out = String::new();
    if let Some(g) = tx.expected_generation {
        let _ = writeln!(out, "# expected ruleset generation {g}");
    }
    for op in &tx.ops {
        out.push_str(&render_op_with_maps(op, &is_map));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::model::Chain;
    use std::collections::BTreeMap;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn tref(family: Family) -> TableRef {
        TableRef {
            family,
            name: "kubenft".into(),
        }
    }

    fn matches(left: Selector, mask: Option<u32>, op: CmpOp, right: Value) -> Stmt {
        Stmt::Match {
            left,
            mask,
            op,
            right,
        }
    }

    #[test]
    fn a_service_dispatch_vmap_renders_as_a_concatenation() {
        let s = Stmt::VMap {
            key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
            map: MapRef::Named("service-ips".into()),
        };
        assert_eq!(
            s.to_string(),
            "ip daddr . meta l4proto . th dport vmap @service-ips"
        );
    }

    #[test]
    fn numgen_keys_render_as_plain_numbers() {
        let s = Stmt::NumgenVMap {
            modulus: 2,
            map: MapRef::Anonymous(vec![
                (vec![Value::Mark(0)], Verdict::goto("a")),
                (vec![Value::Mark(1)], Verdict::goto("b")),
            ]),
        };
        assert_eq!(
            s.to_string(),
            "numgen random mod 2 vmap { 0 : goto a, 1 : goto b }"
        );
    }

    #[test]
    fn masquerade_mark_statements_render_with_eight_digit_hex() {
        assert_eq!(
            Stmt::SetMark(MarkOp::Or(0x4000)).to_string(),
            "meta mark set meta mark or 0x00004000"
        );
        assert_eq!(
            Stmt::SetMark(MarkOp::Xor(0x4000)).to_string(),
            "meta mark set meta mark xor 0x00004000"
        );
        assert_eq!(
            matches(Selector::Mark, Some(0x4000), CmpOp::Eq, Value::Mark(0)).to_string(),
            "meta mark & 0x00004000 == 0x00000000"
        );
        assert_eq!(
            matches(Selector::Mark, Some(0x4000), CmpOp::Ne, Value::Mark(0)).to_string(),
            "meta mark & 0x00004000 != 0x00000000"
        );
    }

    #[test]
    fn plain_matches_omit_the_equals_sign_and_negate_with_bang_equals() {
        let cidr = Value::Ipv4Net("10.0.0.0/8".parse().unwrap());
        assert_eq!(
            matches(Selector::IpSaddr, None, CmpOp::Ne, cidr).to_string(),
            "ip saddr != 10.0.0.0/8"
        );
        assert_eq!(
            matches(
                Selector::CtState,
                None,
                CmpOp::Eq,
                Value::CtState(CtState(CtState::NEW.0 | CtState::ESTABLISHED.0))
            )
            .to_string(),
            "ct state established,new"
        );
        assert_eq!(
            matches(
                Selector::FibDaddrType,
                None,
                CmpOp::Eq,
                Value::AddrType(AddrType::Local)
            )
            .to_string(),
            "fib daddr type local"
        );
        assert_eq!(
            matches(
                Selector::IifName,
                None,
                CmpOp::Eq,
                Value::IfName("veth*".into())
            )
            .to_string(),
            "iifname \"veth*\""
        );
        let lookup = Stmt::Lookup {
            key: vec![Selector::IpDaddr],
            set: "x".into(),
            negate: true,
        };
        assert_eq!(lookup.to_string(), "ip daddr != @x");
    }

    #[test]
    fn dnat_names_the_address_family_only_in_inet_tables() {
        let v4 = Stmt::Dnat {
            addr: IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)),
            port: Some(80),
        };
        let v6 = Stmt::Dnat {
            addr: IpAddr::V6("fd00::1".parse::<Ipv6Addr>().unwrap()),
            port: Some(80),
        };
        assert_eq!(render_stmt(&v4, Some(Family::Ip)), "dnat to 10.1.0.2:80");
        assert_eq!(
            render_stmt(&v4, Some(Family::Inet)),
            "dnat ip to 10.1.0.2:80"
        );
        assert_eq!(render_stmt(&v6, Some(Family::Ip6)), "dnat to [fd00::1]:80");
        assert_eq!(
            render_stmt(&v6, Some(Family::Inet)),
            "dnat ip6 to [fd00::1]:80"
        );
    }

    #[test]
    fn reject_limit_and_update_render_in_nft_syntax() {
        assert_eq!(Stmt::Reject(RejectKind::Default).to_string(), "reject");
        assert_eq!(
            Stmt::Reject(RejectKind::TcpReset).to_string(),
            "reject with tcp reset"
        );
        assert_eq!(
            render_stmt(
                &Stmt::Reject(RejectKind::IcmpPortUnreachable),
                Some(Family::Ip)
            ),
            "reject with icmp type port-unreachable"
        );
        let limit = Stmt::Limit {
            rate: 10,
            unit: RateUnit::Second,
            burst: 5,
        };
        assert_eq!(limit.to_string(), "limit rate 10/second burst 5 packets");
        let update = Stmt::Update {
            set: "affinity-x".into(),
            key: vec![Selector::IpSaddr],
        };
        assert_eq!(update.to_string(), "update @affinity-x { ip saddr }");
        assert_eq!(
            Stmt::Masquerade { fully_random: true }.to_string(),
            "masquerade fully-random"
        );
    }

    #[test]
    fn comments_lose_quotes_and_control_characters_and_stop_at_128_bytes() {
        assert_eq!(sanitize_comment("say \"hi\"\n"), "say 'hi' ");
        let long = "é".repeat(100); // 200 bytes
        let cut = sanitize_comment(&long);
        assert_eq!(cut.len(), 128);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn identifiers_follow_the_nft_scanner() {
        assert!(is_nft_identifier(
            "endpoint-ABC-ns/svc/tcp/p80__10.0.0.1/80"
        ));
        assert!(!is_nft_identifier("1chain"));
        assert!(!is_nft_identifier("a:b"));
        assert!(!is_nft_identifier(""));
    }

    #[test]
    fn a_table_renders_sets_then_base_chains_then_regular_chains() {
        let mut chains = BTreeMap::new();
        chains.insert(
            "a-regular".to_string(),
            Chain::new("a-regular").with_rules(vec![
                Rule::new(vec![Verdict::Accept.into()]).with_comment("ok"),
            ]),
        );
        chains.insert(
            "z-base".to_string(),
            Chain::base("z-base", ChainType::Nat, Hook::Prerouting, -100)
                .with_comment("entry")
                .with_rules(vec![Rule::new(vec![Stmt::jump("a-regular")])]),
        );
        let mut sets = BTreeMap::new();
        sets.insert(
            "ports".to_string(),
            Set {
                dynamic: true,
                timeout: Some(5400),
                ..Set::new("ports", vec![DataType::InetService]).with_elements(vec![
                    Element::new(vec![Value::Port(80)]).with_comment("http"),
                ])
            },
        );
        let t = Table {
            family: Family::Ip,
            name: "kubenft".into(),
            comment: Some("t".into()),
            chains,
            sets,
        };
        let expected = "table ip kubenft {
\tcomment \"t\"
\tset ports {
\t\ttype inet_service
\t\tflags dynamic,timeout
\t\ttimeout 1h30m
\t\telements = {
\t\t\t80 comment \"http\"
\t\t}
\t}

\tchain z-base {
\t\ttype nat hook prerouting priority -100; policy accept;
\t\tcomment \"entry\"
\t\tjump a-regular
\t}

\tchain a-regular {
\t\taccept comment \"ok\"
\t}
}
";
        assert_eq!(render_table(&t), expected);
    }

    #[test]
    fn transaction_ops_render_as_single_commands() {
        let t = tref(Family::Ip);
        let map = Set::verdict_map(
            "service-ips",
            vec![
                DataType::Ipv4Addr,
                DataType::InetProto,
                DataType::InetService,
            ],
        )
        .with_comment("svc");
        let element = Element::map(
            vec![
                Value::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
                Value::Proto(6),
                Value::Port(80),
            ],
            Verdict::goto("service-x"),
        )
        .with_comment("ns/svc:http");
        let tx = Transaction {
            ops: vec![
                Op::AddTable {
                    table: t.clone(),
                    comment: None,
                },
                Op::AddSet {
                    table: t.clone(),
                    set: map,
                },
                Op::AddElements {
                    table: t.clone(),
                    set: "service-ips".into(),
                    elements: vec![element.clone()],
                },
                Op::DeleteElements {
                    table: t.clone(),
                    set: "service-ips".into(),
                    elements: vec![element],
                },
                Op::FlushSet {
                    table: t.clone(),
                    set: "service-ips".into(),
                },
                Op::DeleteRule {
                    table: t.clone(),
                    chain: "services".into(),
                    handle: 7,
                },
            ],
            expected_generation: Some(3),
        };
        let expected = "# expected ruleset generation 3
add table ip kubenft
add map ip kubenft service-ips { type ipv4_addr . inet_proto . inet_service : verdict; comment \"svc\"; }
add element ip kubenft service-ips { 10.0.0.1 . tcp . 80 comment \"ns/svc:http\" : goto service-x }
delete element ip kubenft service-ips { 10.0.0.1 . tcp . 80 }
flush map ip kubenft service-ips
delete rule ip kubenft services handle 7
";
        assert_eq!(render_transaction(&tx), expected);
    }
}
