//! `kubenft explain`: the fate of a new connection, read from the tables the kernel holds now.
//!
//! Guarantees: only reads (netlink dumps of our table and of the node's addresses), never
//! changes anything, needs no `nft` binary and nothing beyond CAP_NET_ADMIN. The prediction is
//! made by evaluating the dumped rules (`walk`), not by asking the planner what it meant to
//! program, so a table that differs from the plan is explained as it is.

pub mod report;
pub mod walk;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use clap::{Args, ValueEnum};

use crate::nft::model::{Family, Table};
use crate::nft::netlink::Nftables;
pub use report::{Explanation, explain};
pub use walk::{DynamicElement, Entry, Host, Packet, WalkError, walk};

/// `kubenft explain`'s flags.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ExplainFlags {
    /// The destination: `ADDRESS:PORT`, `[IPv6]:PORT`, optionally `/tcp`, `/udp` or `/sctp`
    /// (default tcp).
    #[arg(value_name = "DST:PORT[/PROTO]")]
    pub target: String,
    /// The connection's source address (default: this node, as a process on it would connect).
    #[arg(long, value_name = "SRC")]
    pub from: Option<IpAddr>,
    /// Where the connection enters: `prerouting` (from the network) or `output` (from this
    /// node). Default: output when the source is this node, prerouting otherwise.
    #[arg(long, value_enum)]
    pub hook: Option<HookArg>,
    /// The interface the connection arrives on (for rules matching `iifname`).
    #[arg(long, value_name = "IFNAME")]
    pub iif: Option<String>,
    /// The table to read (default: --table-name).
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HookArg {
    Prerouting,
    Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("{0:?} is not ADDRESS:PORT[/tcp|udp|sctp]")]
    Target(String),
    #[error("the source {from} and the destination {to} are of different IP versions")]
    Versions { from: IpAddr, to: IpAddr },
    #[error("opening the nf_tables netlink socket: {0}")]
    Open(#[source] crate::nft::netlink::SocketError),
    #[error(
        "reading table {table}: the kernel refused ({source}): listing nftables needs \
         CAP_NET_ADMIN (root, or the capability granted to this user)"
    )]
    NotPermitted {
        table: String,
        #[source]
        source: crate::nft::netlink::DumpError,
    },
    #[error(
        "reading table {table}: {source} (a table written by another kubenft version may not \
         be readable; `kubenft sync --once` or the daemon replaces it)"
    )]
    Dump {
        table: String,
        #[source]
        source: crate::nft::netlink::DumpError,
    },
    #[error(
        "there is no table {table} in this network namespace: kubenft has not programmed \
         this node (or runs with another --table-name)"
    )]
    NoTable { table: String },
    #[error("reading this node's addresses: {0}")]
    Addresses(#[source] crate::source::local_addrs::LocalAddrError),
    #[error("this node has no address to connect from; pass --from")]
    NoSource,
    #[error("evaluating table {table}: {source}")]
    Walk {
        table: String,
        #[source]
        source: WalkError,
    },
}

/// `ADDRESS:PORT[/proto]` → (address, port, protocol number).
pub fn parse_target(text: &str) -> Result<(IpAddr, u16, u8), ExplainError> {
    let bad = || ExplainError::Target(text.to_string());
    let (addr, proto) = match text.rsplit_once('/') {
        Some((a, p)) => {
            let proto = match p.to_ascii_lowercase().as_str() {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => 132,
                _ => return Err(bad()),
            };
            (a, proto)
        }
        None => (text, 6),
    };
    let sa: SocketAddr = addr.parse().map_err(|_| bad())?;
    Ok((sa.ip(), sa.port(), proto))
}

/// Reads the table and the node's addresses, walks the connection and returns the answer.
pub fn run(flags: &ExplainFlags, default_table: &str) -> Result<Explanation, ExplainError> {
    let (daddr, dport, proto) = parse_target(&flags.target)?;
    let name = flags.table.as_deref().unwrap_or(default_table);
    let family = if daddr.is_ipv4() {
        Family::Ip
    } else {
        Family::Ip6
    };
    let table_label = format!("{} {name}", crate::nft::render::family_keyword(family));
    let addrs = crate::source::local_addrs::local_addresses().map_err(ExplainError::Addresses)?;
    let local: BTreeSet<IpAddr> = addrs.iter().map(|(ip, _)| *ip).collect();
    let saddr = match flags.from {
        Some(ip) => ip,
        None => addrs
            .iter()
            .map(|(ip, _)| *ip)
            .find(|ip| ip.is_ipv4() == daddr.is_ipv4() && !ip.is_loopback())
            .ok_or(ExplainError::NoSource)?,
    };
    if saddr.is_ipv4() != daddr.is_ipv4() {
        return Err(ExplainError::Versions {
            from: saddr,
            to: daddr,
        });
    }
    let entry = match flags.hook {
        Some(HookArg::Prerouting) => Entry::Prerouting,
        Some(HookArg::Output) => Entry::Output,
        None if saddr.is_loopback() || local.contains(&saddr) => Entry::Output,
        None => Entry::Prerouting,
    };
    let mut nft = Nftables::open().map_err(ExplainError::Open)?;
    let dump_err = |source: crate::nft::netlink::DumpError| {
        let table = table_label.clone();
        if refused(&source) {
            ExplainError::NotPermitted { table, source }
        } else {
            ExplainError::Dump { table, source }
        }
    };
    let table = nft
        .dump_table(family, name)
        .map_err(dump_err)?
        .ok_or_else(|| ExplainError::NoTable {
            table: table_label.clone(),
        })?;
    let mut host = Host {
        local,
        ..Host::default()
    };
    for set in table.sets.values().filter(|s| s.dynamic && !s.interval) {
        let elements = nft.dynamic_elements(family, name, set).map_err(dump_err)?;
        host.dynamic.insert(
            set.name.clone(),
            elements
                .into_iter()
                .map(|(e, expires_in)| DynamicElement {
                    key: e.key,
                    expires_in,
                })
                .collect(),
        );
    }
    let packet = Packet {
        saddr,
        daddr,
        proto,
        dport,
        iif: flags.iif.clone(),
    };
    explain_table(&table, &host, &packet, entry)
}

/// Whether the kernel refused a dump for lack of privilege (EPERM anywhere in its causes).
fn refused(e: &crate::nft::netlink::DumpError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(s) = c.downcast_ref::<crate::nft::netlink::SocketError>()
            && s.errno() == Some(libc::EPERM)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The answer for `packet` entering `table` at `entry` on a node described by `host`.
pub fn explain_table(
    table: &Table,
    host: &Host,
    packet: &Packet,
    entry: Entry,
) -> Result<Explanation, ExplainError> {
    let paths = walk(table, host, packet, entry).map_err(|source| ExplainError::Walk {
        table: format!(
            "{} {}",
            crate::nft::render::family_keyword(table.family),
            table.name
        ),
        source,
    })?;
    Ok(explain(table, packet, entry, &paths))
}

#[cfg(test)]
mod tests;
