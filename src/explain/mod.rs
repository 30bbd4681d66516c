//! `kubenft explain`: the fate of a new connection, read from the tables the kernel holds now.
//!
//! Guarantees: only reads (netlink dumps of our table and of the node's addresses), never
//! changes anything, needs no `nft` binary and nothing beyond CAP_NET_ADMIN. The prediction is
//! made by evaluating the dumped rules (`walk`), not by asking the planner what it meant to
//! program, so a table that differs from the plan is explained as it is.

pub(crate) mod report;
pub(crate) mod service;
pub(crate) mod walk;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::nft::kernel::Nftables;
use crate::nft::model::{Family, Table};
use crate::proxier::names::SERVICE_IPS;
pub(crate) use report::{Explanation, explain};
pub(crate) use service::ServiceListing;
pub(crate) use walk::{DynamicElement, Entry, Host, Packet, WalkError, walk};

/// `kubenft explain`'s flags.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ExplainFlags {
    /// The destination: `ADDRESS:PORT`, `[IPv6]:PORT`, optionally `/tcp`, `/udp` or `/sctp`
    /// (default tcp).
    #[arg(
        value_name = "DST:PORT[/PROTO]",
        required_unless_present = "service",
        conflicts_with = "service"
    )]
    pub target: Option<String>,
    /// Instead of one connection: every frontend of this Service (`NAMESPACE/NAME`) in the
    /// tables, each explained from this node and from outside the cluster (--from, or a
    /// documentation address).
    #[arg(long, value_name = "NS/NAME")]
    pub service: Option<String>,
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
    Open(#[source] crate::nft::kernel::SocketError),
    #[error(
        "reading table {table}: the kernel refused ({source}): listing nftables needs \
         CAP_NET_ADMIN (root, or the capability granted to this user)"
    )]
    NotPermitted {
        table: String,
        #[source]
        source: crate::nft::kernel::DumpError,
    },
    #[error(
        "reading table {table}: {source} (a table written by another kubenft version may not \
         be readable; `kubenft sync --once` or the daemon replaces it)"
    )]
    Dump {
        table: String,
        #[source]
        source: crate::nft::kernel::DumpError,
    },
    #[error(
        "there is no table {table} in this network namespace: kubenft has not programmed \
         this node (or runs with another --table-name)"
    )]
    NoTable { table: String },
    #[error(
        "table {table} is not laid out as this kubenft writes it (it has no map {missing}): \
         another program's table of that name, or an older kubenft's; `kubenft sync --once` \
         or the daemon replaces it"
    )]
    Layout {
        table: String,
        missing: &'static str,
    },
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
pub(crate) fn parse_target(text: &str) -> Result<(IpAddr, u16, u8), ExplainError> {
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

/// What `explain` answers: one connection, or every frontend of a Service.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub(crate) enum Answer {
    Connection(Box<Explanation>),
    Service(ServiceListing),
}

impl Answer {
    pub(crate) fn to_text(&self) -> String {
        match self {
            Answer::Connection(e) => e.to_text(),
            Answer::Service(s) => s.to_text(),
        }
    }
}

/// The node's own addresses, as a set and in kernel order.
fn node_addresses() -> Result<(BTreeSet<IpAddr>, Vec<IpAddr>), ExplainError> {
    let addrs = crate::source::local_addrs::local_addresses().map_err(ExplainError::Addresses)?;
    let ordered: Vec<IpAddr> = addrs.iter().map(|(ip, _)| *ip).collect();
    Ok((ordered.iter().copied().collect(), ordered))
}

/// The node's first non-loopback address of an IP version: the source a process on it would
/// use, near enough.
fn first_of(ordered: &[IpAddr], v4: bool) -> Option<IpAddr> {
    ordered
        .iter()
        .copied()
        .find(|ip| ip.is_ipv4() == v4 && !ip.is_loopback())
}

/// Reads the table(s) and the node's addresses and answers `flags`.
pub(crate) fn run(flags: &ExplainFlags, default_table: &str) -> Result<Answer, ExplainError> {
    let name = flags.table.as_deref().unwrap_or(default_table);
    let (local, ordered) = node_addresses()?;
    let mut nft = Nftables::open().map_err(ExplainError::Open)?;
    if let Some(service) = &flags.service {
        let mut tables = Vec::new();
        let mut host = Host {
            local,
            ..Host::default()
        };
        for family in [Family::Ip, Family::Ip6] {
            if let Some((table, dynamic)) = read_table(&mut nft, family, name, false)? {
                host.dynamic.extend(dynamic);
                tables.push(table);
            }
        }
        if tables.is_empty() {
            return Err(ExplainError::NoTable {
                table: format!("ip {name} or ip6 {name}"),
            });
        }
        let node = |v4: bool| first_of(&ordered, v4);
        return service::list(&tables, &host, service, &node, flags.from).map(Answer::Service);
    }
    let target = flags.target.as_deref().unwrap_or_default();
    let (daddr, dport, proto) = parse_target(target)?;
    let family = if daddr.is_ipv4() {
        Family::Ip
    } else {
        Family::Ip6
    };
    let saddr = match flags.from {
        Some(ip) => ip,
        None => first_of(&ordered, daddr.is_ipv4()).ok_or(ExplainError::NoSource)?,
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
    let Some((table, dynamic)) = read_table(&mut nft, family, name, true)? else {
        unreachable!("read_table reports a missing required table as an error");
    };
    let host = Host { local, dynamic };
    let packet = Packet {
        saddr,
        daddr,
        proto,
        dport,
        // A connection this node sends arrives on no interface: `iifname` reads empty.
        iif: flags
            .iif
            .clone()
            .or_else(|| (entry == Entry::Output).then(String::new)),
    };
    explain_table(&table, &host, &packet, entry).map(|e| Answer::Connection(Box::new(e)))
}

/// Runtime elements of dynamic sets, by set.
type DynamicSets = std::collections::BTreeMap<String, Vec<DynamicElement>>;

/// Table `name` of `family` and the runtime elements of its dynamic sets; `None` when it does
/// not exist and `required` is false.
fn read_table(
    nft: &mut Nftables,
    family: Family,
    name: &str,
    required: bool,
) -> Result<Option<(Table, DynamicSets)>, ExplainError> {
    let table_label = format!("{} {name}", crate::nft::render::family_keyword(family));
    let dump_err = |source: crate::nft::kernel::DumpError| {
        let table = table_label.clone();
        if refused(&source) {
            ExplainError::NotPermitted { table, source }
        } else {
            ExplainError::Dump { table, source }
        }
    };
    let Some(table) = nft.dump_table(family, name).map_err(dump_err)? else {
        if required {
            return Err(ExplainError::NoTable { table: table_label });
        }
        return Ok(None);
    };
    // Every table kubenft writes dispatches services through this map; without it, the walk
    // would find no service and answer "not a service address", which would be wrong.
    if !table.sets.contains_key(SERVICE_IPS) {
        return Err(ExplainError::Layout {
            table: table_label,
            missing: SERVICE_IPS,
        });
    }
    let mut dynamic = DynamicSets::new();
    for set in table.sets.values().filter(|s| s.dynamic && !s.interval) {
        let elements = nft.dynamic_elements(family, name, set).map_err(dump_err)?;
        dynamic.insert(
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
    Ok(Some((table, dynamic)))
}

/// Whether the kernel refused a dump for lack of privilege (EPERM anywhere in its causes).
fn refused(e: &crate::nft::kernel::DumpError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(s) = c.downcast_ref::<crate::nft::kernel::SocketError>()
            && s.errno() == Some(libc::EPERM)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The answer for `packet` entering `table` at `entry` on a node described by `host`.
pub(crate) fn explain_table(
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
