//! `kubenft explain --service ns/name`: every frontend of a Service as the kernel's table has
//! it, each explained from this node and from a client outside the cluster. The frontends are
//! found by the Service's name in element comments (`ns/name:port …`), so what is listed is
//! what is programmed, whatever the API says.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

use serde::Serialize;

use super::report::{Explanation, service_of};
use super::walk::{Entry, Host, Packet};
use super::{ExplainError, explain_table};
use crate::nft::model::{Selector, Stmt, Table, Value};

/// A client address outside any cluster (TEST-NET-3, RFC 5737), for the "from outside" view.
pub(crate) const OUTSIDE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 1));
/// Its IPv6 counterpart (the documentation prefix, RFC 3849).
pub(crate) const OUTSIDE6: IpAddr =
    IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct ServiceListing {
    pub service: String,
    pub frontends: Vec<FrontendView>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct FrontendView {
    pub address: IpAddr,
    pub port: u16,
    pub protocol: String,
    /// A new connection from this node.
    pub from_node: Explanation,
    /// A new connection from `outside` (arriving from the network).
    pub from_outside: Explanation,
}

/// `address . protocol . port` keys at which `table` serves Service `name` (`ns/name`).
pub(crate) fn frontends(table: &Table, name: &str) -> Vec<(IpAddr, u8, u16)> {
    let ours = |c: &Option<String>| {
        c.as_deref()
            .and_then(service_of)
            .is_some_and(|s| s.split_once(':').is_some_and(|(svc, _)| svc == name))
    };
    let mut out = BTreeSet::new();
    for set in table.sets.values() {
        for e in set.elements.iter().filter(|e| ours(&e.comment)) {
            match e.key.as_slice() {
                [addr, Value::Proto(p), Value::Port(port), ..] => {
                    if let Some(ip) = ip_of(addr) {
                        out.insert((ip, *p, *port));
                    }
                }
                // `protocol . port` (NodePorts): at each address of the set a rule looks the
                // destination up in before it uses this map.
                [Value::Proto(p), Value::Port(port)] => {
                    for ip in addresses_before(table, &set.name) {
                        out.insert((ip, *p, *port));
                    }
                }
                _ => {}
            }
        }
    }
    out.into_iter().collect()
}

fn ip_of(v: &Value) -> Option<IpAddr> {
    match v {
        Value::Ipv4(a) => Some(IpAddr::V4(*a)),
        Value::Ipv6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// The addresses of every set that a rule matches the destination against before it looks up
/// `map`.
fn addresses_before(table: &Table, map: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for rule in table.chains.values().flat_map(|c| &c.rules) {
        let uses_map = rule.stmts.iter().any(|s| match s {
            Stmt::VMap {
                map: crate::nft::model::MapRef::Named(m),
                ..
            } => m == map,
            Stmt::Lookup { set, .. } => set == map,
            _ => false,
        });
        if !uses_map {
            continue;
        }
        for s in &rule.stmts {
            if let Stmt::Lookup {
                key,
                set,
                negate: false,
            } = s
                && matches!(key.as_slice(), [Selector::IpDaddr | Selector::Ip6Daddr])
                && let Some(addrs) = table.sets.get(set)
            {
                out.extend(addrs.elements.iter().filter_map(|e| ip_of(e.key.first()?)));
            }
        }
    }
    out
}

/// Every frontend of `name` in `tables`, each explained from this node (`node_addr`) and from
/// outside (`outside`, or the documentation address of its family).
pub(crate) fn list(
    tables: &[Table],
    host: &Host,
    name: &str,
    node_addr: &dyn Fn(bool) -> Option<IpAddr>,
    outside: Option<IpAddr>,
) -> Result<ServiceListing, ExplainError> {
    let mut views = Vec::new();
    for table in tables {
        for (daddr, proto, dport) in frontends(table, name) {
            let v4 = daddr.is_ipv4();
            let ask = |saddr: IpAddr, entry: Entry| {
                explain_table(table, host, &Packet::new(saddr, daddr, proto, dport), entry)
            };
            let node = node_addr(v4).ok_or(ExplainError::NoSource)?;
            let outside = outside.filter(|o| o.is_ipv4() == v4).unwrap_or(if v4 {
                OUTSIDE
            } else {
                OUTSIDE6
            });
            let from_node = ask(node, Entry::Output)?;
            let from_outside = ask(outside, Entry::Prerouting)?;
            views.push(FrontendView {
                address: daddr,
                port: dport,
                protocol: from_node.connection.protocol.clone(),
                from_node,
                from_outside,
            });
        }
    }
    Ok(ServiceListing {
        service: name.to_string(),
        frontends: views,
    })
}

impl ServiceListing {
    pub(crate) fn to_text(&self) -> String {
        let mut s = String::new();
        if self.frontends.is_empty() {
            let _ = writeln!(
                s,
                "service {}: no frontend in the tables (no element comment names it)",
                self.service
            );
            return s;
        }
        let _ = writeln!(s, "service {}, as programmed:", self.service);
        for f in &self.frontends {
            let kind = f
                .from_outside
                .frontend
                .as_ref()
                .or(f.from_node.frontend.as_ref())
                .map_or("frontend".to_string(), |k| k.kind.replace('-', " "));
            let addr = match f.address {
                IpAddr::V4(a) => format!("{a}:{}", f.port),
                IpAddr::V6(a) => format!("[{a}]:{}", f.port),
            };
            let _ = writeln!(s, "{kind} {addr}/{}", f.protocol);
            for (label, e) in [
                ("from this node", &f.from_node),
                ("from outside", &f.from_outside),
            ] {
                let _ = writeln!(s, "  {label} ({}): {}", e.connection.source, summary(e));
            }
        }
        s
    }
}

/// One line: endpoints with shares and masquerading, or the stop and its reason.
fn summary(e: &Explanation) -> String {
    let mut parts: Vec<String> = e
        .endpoints
        .iter()
        .map(|ep| {
            let masq = if ep.masquerade { ", masqueraded" } else { "" };
            let pin = if ep.pinned.is_some() { ", pinned" } else { "" };
            format!(
                "{}:{} {:.1}%{masq}{pin}",
                ep.address,
                ep.port,
                ep.probability * 100.0
            )
        })
        .collect();
    if let Some(fw) = &e.source_ranges
        && !fw.allowed
    {
        parts.push("source not in the source ranges".into());
    }
    for (what, stop) in [("dropped", &e.dropped), ("rejected", &e.rejected)] {
        if let Some(stop) = stop {
            parts.push(format!("{what} ({})", stop.reason));
        }
    }
    if parts.is_empty() {
        parts.push(e.verdict.clone());
    }
    parts.join("; ")
}
