//! Conntrack entries made to order: `CT_NEW` messages over ctnetlink in a namespace, UDP flows
//! between addresses no packet ever uses (100.64.0.0/10, CGNAT space), each with its own
//! timeout so the kernel expires them by itself. No packet is sent: the entries only take room
//! in the node's conntrack table and in every dump of it (the daemon's stale-UDP reconciler
//! dumps the UDP entries after each sync). They are never assured, so a full table evicts them
//! before it refuses a real connection.

use std::net::{Ipv4Addr, SocketAddr};

use kubenft::netns::Netns;
use kubenft_nft_testkit::conntrack::{self, Entry};

/// Where the filler flows go: one server address, port 53.
const SERVER: Ipv4Addr = Ipv4Addr::new(100, 127, 255, 254);
/// Clients are 100.64.0.0 + n / 16 with source port 20000 + n % 16.
const CLIENT_BASE: u32 = 0x6440_0000;

/// Flow `n`'s (client address, client port).
pub fn client(n: usize) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::from(CLIENT_BASE + (n / 16) as u32),
        20_000 + (n % 16) as u16,
    )
}

/// Flow `n`, expiring after `timeout_s`.
fn entry(n: usize, timeout_s: u32) -> Entry {
    let to = SocketAddr::from((SERVER, 53));
    Entry::udp_unreplied(client(n).into(), to, timeout_s)
}

/// Flows of a fill of `count` looked up to tell whether it expired.
const PROBES: usize = 32;

/// How many of `PROBES` flows spread over a fill of `count` are still in `ns`'s table.
pub fn remaining(ns: &Netns, count: usize) -> Result<usize, String> {
    let probes: Vec<Entry> = (0..PROBES)
        .map(|i| entry(i * (count - 1) / (PROBES - 1), 0))
        .collect();
    ns.run(move || conntrack::present(&probes))
        .map_err(|e| e.to_string())?
}

/// What a fill did.
#[derive(Debug, Clone, Default)]
pub struct Filled {
    pub asked: usize,
    /// Messages the kernel refused, and the errno of one of them.
    pub refused: usize,
    pub first_errno: Option<i32>,
}

/// Creates `count` UDP entries in `ns` expiring after `timeout_s`.
pub fn fill(ns: &Netns, count: usize, timeout_s: u32) -> Result<Filled, String> {
    let made = ns
        .run(move || conntrack::create((0..count).map(|n| entry(n, timeout_s))))
        .map_err(|e| e.to_string())??;
    Ok(Filled {
        asked: count,
        refused: made.refused.values().sum(),
        first_errno: made.refused.keys().next().copied(),
    })
}

/// The number of conntrack entries in `ns`.
pub fn count(ns: &Netns) -> Option<usize> {
    ns.run(|| {
        std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_count")
            .ok()?
            .trim()
            .parse()
            .ok()
    })
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_flows_have_distinct_clients() {
        assert_eq!(client(17), (Ipv4Addr::new(100, 64, 0, 1), 20_001));
        assert_ne!(entry(16, 30), entry(17, 30));
    }
}
