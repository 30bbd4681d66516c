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

use std::borrow::Cow;
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

mod op;
mod stmt;
mod table;
#[cfg(test)]
mod tests;

pub use op::{render_op, render_transaction, render_transaction_with_maps};
pub use stmt::render_rule;
pub(crate) use table::render_element;
pub use table::render_table;

/// nft's limit on comment length in bytes (`NFTNL_UDATA_COMMENT_MAXLEN`).
pub(crate) const COMMENT_MAX_BYTES: usize = 128;

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
/// and the result is cut to at most 128 bytes without splitting a character. A comment that
/// needs none of that (nearly all) is handed back as it is, not copied.
pub fn sanitize_comment(text: &str) -> Cow<'_, str> {
    if is_sanitized(text) {
        return Cow::Borrowed(text);
    }
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
    Cow::Owned(out)
}

/// Whether `sanitize_comment` leaves `text` as it is.
fn is_sanitized(text: &str) -> bool {
    text.len() <= COMMENT_MAX_BYTES && !text.chars().any(|c| c == '"' || c.is_control())
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
