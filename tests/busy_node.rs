//! A busy node's conntrack table, in small form (`kubenft-bench --conntrack` is the large one):
//! tens of thousands of entries made over ctnetlink, mostly TCP, some UDP to service frontends
//! DNATed to their endpoints. The reconciler deletes exactly the entries that went stale, reads
//! the table only when something can have gone stale, and the daemon skips the read after a
//! sync that changed no UDP service, but not after it repaired its rules.

use crate::harness;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::conntrack::deleted;
use harness::*;
use kubenft::conntrack::{self, Frontends, Reading, Reconciler, UdpService};
use kubenft::netns::{self, Netns};
use kubenft_nft_testkit::conntrack::{Entry, create};

const UDP_SERVICES: u32 = 100;
const ENDPOINTS: u32 = 10;
/// Clients per endpoint of each UDP service.
const CLIENTS: u32 = 10;
const HOUR: u32 = 3600;

fn frontend(s: u32) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(10, 96, 1, s as u8).into(), 53)
}

fn endpoint(s: u32, e: u32) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(10, 1, s as u8, e as u8 + 1).into(), 5353)
}

fn client(n: u32) -> SocketAddr {
    let ip = Ipv4Addr::from(0x0a02_0000 + n / 60_000);
    SocketAddr::new(ip.into(), 1024 + (n % 60_000) as u16)
}

fn udp_service(s: u32, serving: impl Iterator<Item = u32>) -> UdpService {
    UdpService {
        frontends: vec![frontend(s)],
        node_port: None,
        serving: serving.map(|e| endpoint(s, e)).collect(),
    }
}

/// 50,000 entries: 10,000 UDP flows to the frontends of 100 UDP services DNATed to their
/// endpoints, 5,000 UDP flows elsewhere, 5,000 TCP connections to the same frontends answered
/// by the endpoints (TCP is never reconciled), 30,000 other TCP connections.
fn busy_table() -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut n = 0;
    let mut next_client = || {
        n += 1;
        client(n)
    };
    for s in 0..UDP_SERVICES {
        for e in 0..ENDPOINTS {
            for _ in 0..CLIENTS {
                let c = next_client();
                entries.push(Entry::udp(c, frontend(s), endpoint(s, e), HOUR));
            }
            for _ in 0..5 {
                let c = next_client();
                entries.push(Entry::tcp_established(c, frontend(s), endpoint(s, e), HOUR));
            }
        }
    }
    for i in 0..5_000u32 {
        let to = SocketAddr::new(Ipv4Addr::from(0x0808_0000 + i).into(), 53);
        let c = next_client();
        entries.push(Entry::udp(c, to, to, HOUR));
    }
    for i in 0..30_000u32 {
        let to = SocketAddr::new(Ipv4Addr::from(0xc0a8_0000 + i % 5_000).into(), 443);
        let c = next_client();
        entries.push(Entry::tcp_established(c, to, to, HOUR));
    }
    entries
}

fn examined(r: &Reading) -> usize {
    r.examined.iter().sum()
}

#[test]
fn at_fifty_thousand_entries_every_stale_flow_goes_and_nothing_else_is_read_or_deleted() {
    if !netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = Netns::create("ct50k").expect("namespace");
    let table = busy_table();
    assert_eq!(table.len(), 50_000);
    let made = ns.run(move || create(table)).unwrap().unwrap();
    assert_eq!(made.created, 50_000, "{made:?}");

    let (first, unchanged, removed, after) = ns
        .run(|| {
            let mut frontends = Frontends::default();
            for s in 0..UDP_SERVICES {
                frontends.set(s, udp_service(s, 0..ENDPOINTS));
            }
            let mut reconciler = Reconciler::default();
            let first = reconciler.after_sync(&mut frontends, false).unwrap();
            let unchanged = reconciler.after_sync(&mut frontends, false).is_none();
            // Every UDP service loses its first endpoint: 100 endpoints removed.
            for s in 0..UDP_SERVICES {
                frontends.set(s, udp_service(s, 1..ENDPOINTS));
            }
            let removed = reconciler.after_sync(&mut frontends, false).unwrap();
            let after = reconciler.after_sync(&mut frontends, false).is_none();
            (first, unchanged, removed, after)
        })
        .unwrap();
    assert_eq!(deleted(&first), 0, "nothing stale at first");
    assert_eq!(
        examined(&first),
        15_000,
        "the kernel sends the UDP entries only"
    );
    assert!(unchanged, "nothing changed: the table is not read");
    assert_eq!(deleted(&removed), (UDP_SERVICES * CLIENTS) as usize);
    assert_eq!(examined(&removed), 15_000);
    assert!(after, "a complete reading is not repeated");

    let flows = ns.run(conntrack::list_flows).unwrap().unwrap();
    let gone: BTreeSet<SocketAddr> = (0..UDP_SERVICES).map(|s| endpoint(s, 0)).collect();
    let udp = flows.iter().filter(|f| f.proto == 17);
    assert_eq!(udp.clone().count(), 14_000);
    assert!(
        udp.clone().all(|f| !gone.contains(&f.reply_src)),
        "no UDP flow left to a removed endpoint"
    );
    let tcp: Vec<_> = flows.iter().filter(|f| f.proto == 6).collect();
    assert_eq!(tcp.len(), 35_000, "no TCP connection touched");
    assert_eq!(
        tcp.iter().filter(|f| gone.contains(&f.reply_src)).count(),
        (UDP_SERVICES * 5) as usize
    );
}

/// The daemon's `synced` log lines of syncs that sent something (the periodic syncs that send
/// nothing log `synced; nothing to change` at debug level, which the harness's `-v` shows):
/// whether each read the conntrack table, and how many entries it deleted.
fn conntrack_reads(log: &str) -> Vec<(bool, usize)> {
    log.lines()
        .filter(|l| l.contains(" synced ") && l.contains(" ops="))
        .map(|l| {
            let field = |key: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .unwrap_or_default()
                    .to_string()
            };
            (
                field("conntrack_read=") == "true",
                field("conntrack_deleted=").parse().unwrap_or(0),
            )
        })
        .collect()
}

fn udp_entries_to(ns: &Netns, to: SocketAddr) -> Vec<conntrack::Flow> {
    ns.run(conntrack::list_flows)
        .unwrap()
        .unwrap()
        .into_iter()
        .filter(|f| f.proto == 17 && f.orig_dst == to)
        .collect()
}

#[test]
fn the_daemon_reads_the_table_after_udp_changes_and_repairs_but_not_after_other_syncs() {
    let Some((topo, api)) = lab("ctskip") else {
        return;
    };
    let dns = addr("10.96.0.53:53");
    api.apply(dns_service());
    api.apply(dns_slice(&[1, 2]));
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let daemon = start_daemon(&topo, &api, &["--sync-period", "2s"]);
    // The syncs that sent something after the first `seen`, once there are some.
    let syncs_after = |seen: usize| {
        eventually(Duration::from_secs(30), "the daemon's next sync", || {
            let r = conntrack_reads(&daemon.log());
            (r.len() > seen).then(|| r[seen..].to_vec())
        })
    };
    let first = syncs_after(0);
    assert!(first[0].0, "the first sync after a start reads the table");
    // Whatever it took to see every object has been synced.
    std::thread::sleep(Duration::from_secs(1));
    let seen = conntrack_reads(&daemon.log()).len();

    // Flows to dns from many clients, DNATed to both pods, as the node would have them.
    let pod = |n: u8| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 244, n, 2)), 5353);
    let flows: Vec<Entry> = (0..1_000)
        .map(|n| Entry::udp(client(n), dns, pod(1 + (n % 2) as u8), HOUR))
        .collect();
    let made = topo.node.run(move || create(flows)).unwrap().unwrap();
    assert_eq!(made.created, 1_000, "{made:?}");

    // A TCP service's endpoints change: no UDP flow can have gone stale.
    api.apply(slice("web", &[1, 2]));
    let tcp_change = syncs_after(seen);
    assert!(
        tcp_change.iter().all(|(read, _)| !read),
        "a sync that changed no UDP service does not read: {tcp_change:?}"
    );
    assert_eq!(udp_entries_to(&topo.node, dns).len(), 1_000);
    let seen = seen + tcp_change.len();

    // dns loses pod-1: its 500 flows go, pod-2's stay.
    api.apply(dns_slice(&[2]));
    let udp_change = syncs_after(seen);
    assert_eq!(udp_change, [(true, 500)]);
    let left = udp_entries_to(&topo.node, dns);
    assert_eq!(left.len(), 500);
    assert!(left.iter().all(|f| f.reply_src == pod(2)));
    let seen = seen + udp_change.len();

    // Someone flushes kubenft's table: until the repair, datagrams to dns were not DNATed,
    // and such a flow would keep a client off dns for as long as it keeps sending. The repair
    // is a full sync that reads the table and deletes it.
    let undnated = Entry::udp(client(5_000), dns, dns, HOUR);
    topo.node
        .exec(&["nft", "flush", "table", "ip", "kubenft"])
        .unwrap();
    let made = topo.node.run(move || create([undnated])).unwrap().unwrap();
    assert_eq!(made.created, 1);
    let repair = syncs_after(seen);
    assert_eq!(repair, [(true, 1)], "the repair reads and deletes the flow");
    assert_eq!(udp_entries_to(&topo.node, dns).len(), 500);
}
