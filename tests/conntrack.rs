//! The conntrack reconciler against the real kernel: in a namespace whose loopback carries
//! service, node and endpoint addresses and whose nat output chain DNATs like a service proxy,
//! a client keeps its cached flow after the rules change (the black hole the reconciler exists
//! for), `reconcile` deletes exactly that flow, judging the table against the services as they
//! are now (nothing remembers an earlier state), and the client's next datagram follows the
//! new rules. `conntrack -L` is the independent oracle for the table's contents.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use kubenft::conntrack::{self, Frontends, Reading, UdpService};
use kubenft::netns::{self, Netns};
use kubenft_nft_testkit::conntrack::{Entry, create, present};
use kubenft_nft_testkit::inspect::apply_script;

fn can_run() -> bool {
    if !netns::can_create() {
        eprintln!("skipping: creating network namespaces needs root (CI runs as root)");
        return false;
    }
    true
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const SERVICE4: &str = "10.96.0.10";
const OTHER_SERVICE4: &str = "10.96.0.11";
const SERVICE6: &str = "fd00:96::a";
const NODE4: &str = "192.168.7.1";
const EP4_A: &str = "10.1.0.5:5353";
const EP4_B: &str = "10.1.0.6:5353";
const EP6_A: &str = "[fd00:1::5]:5353";
const EP6_B: &str = "[fd00:1::6]:5353";

/// A namespace with every address of the scenario on loopback, so all traffic stays inside.
fn lab(tag: &str) -> Netns {
    let ns = Netns::create(tag).expect("namespace");
    for addr in [SERVICE4, OTHER_SERVICE4, NODE4, "10.1.0.5", "10.1.0.6"] {
        ns.exec(&["ip", "addr", "add", &format!("{addr}/32"), "dev", "lo"])
            .unwrap();
    }
    for addr in [SERVICE6, "fd00:1::5", "fd00:1::6"] {
        ns.exec(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{addr}/128"),
            "dev",
            "lo",
            "nodad",
        ])
        .unwrap();
    }
    ns
}

/// Replaces the namespace's ruleset with nat output chains holding `rules`. Each chain starts
/// with a `ct` rule: connection tracking (what caches the old verdicts) is switched on by the
/// expressions that need it (ct, nat), not by a nat chain alone.
fn set_nat(ns: &Netns, rules4: &[&str], rules6: &[&str]) {
    let chain = |family: &str, rules: &[&str]| {
        format!(
            "table {family} lab {{\n  chain out {{\n    type nat hook output priority -100; policy accept;\n    ct state new counter\n{}  }}\n}}\n",
            rules
                .iter()
                .map(|r| format!("    {r}\n"))
                .collect::<String>()
        )
    };
    let script = format!(
        "flush ruleset\n{}{}",
        chain("ip", rules4),
        chain("ip6", rules6)
    );
    apply_script(ns, &script).unwrap_or_else(|e| panic!("{e}\n{script}"));
}

fn dnat4(service: &str, port: u16, endpoint: &str) -> String {
    format!("ip daddr {service} udp dport {port} dnat to {endpoint}")
}

fn dnat6(service: &str, port: u16, endpoint: &str) -> String {
    format!("ip6 daddr {service} udp dport {port} dnat to {endpoint}")
}

/// A UDP socket bound inside the namespace (sockets keep their namespace after the thread ends).
fn socket(ns: &Netns, bind: &str) -> UdpSocket {
    let bind = sa(bind);
    let sock = ns
        .run(move || UdpSocket::bind(bind))
        .unwrap()
        .unwrap_or_else(|e| panic!("bind {bind}: {e}"));
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    sock
}

fn received(server: &UdpSocket) -> Option<String> {
    let mut buf = [0u8; 64];
    server
        .recv_from(&mut buf)
        .ok()
        .map(|(n, _)| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// `(original destination, reply source)` of every UDP entry, as `conntrack -L` prints them.
fn oracle(ns: &Netns) -> Vec<(SocketAddr, SocketAddr)> {
    let mut flows = Vec::new();
    for family in ["ipv4", "ipv6"] {
        let out = ns
            .exec(&["conntrack", "-L", "-f", family, "-p", "udp"])
            .unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let values = |key: &str| -> Vec<String> {
                line.split_whitespace()
                    .filter_map(|t| t.strip_prefix(&format!("{key}=")).map(str::to_owned))
                    .collect()
            };
            let (src, dst, sport, dport) = (
                values("src"),
                values("dst"),
                values("sport"),
                values("dport"),
            );
            let addr = |ip: &str, port: &str| {
                SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port.parse().unwrap())
            };
            flows.push((addr(&dst[0], &dport[0]), addr(&src[1], &sport[1])));
        }
    }
    flows
}

fn has(flows: &[(SocketAddr, SocketAddr)], orig_dst: &str, reply_src: &str) -> bool {
    flows.contains(&(sa(orig_dst), sa(reply_src)))
}

/// kube-dns on both families (and, with `node_port`, on NodePort 30053) with `serving`.
fn dns(serving: &[&str], node_port: Option<u16>) -> Frontends<String> {
    let mut f = Frontends::default();
    f.set(
        "kube-system/kube-dns:dns".to_string(),
        UdpService {
            frontends: vec![
                sa(&format!("{SERVICE4}:53")),
                sa(&format!("[{SERVICE6}]:53")),
            ],
            node_port,
            serving: serving.iter().map(|e| sa(e)).collect(),
        },
    );
    f
}

/// Reconciles the namespace.
fn reconcile(ns: &Netns, frontends: Frontends<String>) -> Reading {
    ns.run(move || conntrack::reconcile(&frontends)).unwrap()
}

/// Entries deleted, both families; no delete may have failed.
pub(crate) fn deleted(r: &Reading) -> usize {
    assert!(!r.unfiltered, "this kernel filters by protocol: {r:?}");
    match &r.outcome {
        Ok(reports) => {
            assert!(reports.iter().all(|d| d.failed.is_empty()), "{r:?}");
            r.deleted()
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_client_rejected_before_its_service_had_endpoints_reaches_them_after_reconciling() {
    if !can_run() {
        return;
    }
    let ns = lab("ctnew");
    set_nat(&ns, &[], &[]);
    let server4 = socket(&ns, EP4_A);
    let server6 = socket(&ns, EP6_A);
    let client4 = socket(&ns, "0.0.0.0:0");
    let client6 = socket(&ns, "[::]:0");
    let node_client = socket(&ns, "0.0.0.0:0");
    let bystander = socket(&ns, "0.0.0.0:0");

    // No endpoints: the datagrams go to the bare service addresses and conntrack caches that.
    // Sinks listen there so the test can see where the stale datagrams really go.
    let service4 = sa(&format!("{SERVICE4}:53"));
    let service6 = sa(&format!("[{SERVICE6}]:53"));
    let node_port = sa(&format!("{NODE4}:30053"));
    let other = sa(&format!("{OTHER_SERVICE4}:53"));
    let sink4 = socket(&ns, &service4.to_string());
    let sink6 = socket(&ns, &service6.to_string());
    let _sinks = [
        socket(&ns, &node_port.to_string()),
        socket(&ns, &other.to_string()),
    ];
    client4.send_to(b"early", service4).unwrap();
    client6.send_to(b"early", service6).unwrap();
    node_client.send_to(b"early", node_port).unwrap();
    bystander.send_to(b"early", other).unwrap();
    let before = oracle(&ns);
    assert!(has(&before, "10.96.0.10:53", "10.96.0.10:53"), "{before:?}");
    assert!(
        has(&before, "[fd00:96::a]:53", "[fd00:96::a]:53"),
        "{before:?}"
    );
    assert!(
        has(&before, "192.168.7.1:30053", "192.168.7.1:30053"),
        "{before:?}"
    );

    // While the service has no serving endpoint, every flow to it is stale: nothing of it
    // can answer (kubernetes#139629). The bystander's flow stays.
    assert_eq!(deleted(&reconcile(&ns, dns(&[], Some(30053)))), 3);
    let emptied = oracle(&ns);
    assert!(!has(&emptied, "10.96.0.10:53", "10.96.0.10:53"));
    assert!(has(&emptied, "10.96.0.11:53", "10.96.0.11:53"));
    assert_eq!(received(&sink4).as_deref(), Some("early"));
    assert_eq!(received(&sink6).as_deref(), Some("early"));

    // The clients keep sending before the endpoint's rules arrive: cached again.
    client4.send_to(b"early", service4).unwrap();
    client6.send_to(b"early", service6).unwrap();
    node_client.send_to(b"early", node_port).unwrap();
    assert_eq!(oracle(&ns), before);

    // The endpoint arrives, but the cached flows bypass the new DNAT: the black hole.
    set_nat(
        &ns,
        &[&dnat4(SERVICE4, 53, EP4_A), &dnat4(NODE4, 30053, EP4_A)],
        &[&dnat6(SERVICE6, 53, EP6_A)],
    );
    client4.send_to(b"stale", service4).unwrap();
    client6.send_to(b"stale", service6).unwrap();
    assert_eq!(received(&server4), None, "the cached flow is not DNATed");
    assert_eq!(received(&server6), None, "the cached flow is not DNATed");
    assert_eq!(received(&sink4).as_deref(), Some("early"));
    assert_eq!(received(&sink4).as_deref(), Some("stale"));
    assert_eq!(received(&sink6).as_deref(), Some("early"));
    assert_eq!(received(&sink6).as_deref(), Some("stale"));

    let listed = ns.run(conntrack::list_flows).unwrap().unwrap();
    assert!(
        listed
            .iter()
            .any(|f| f.orig_dst == service4 && f.reply_src == service4),
        "list_flows sees what conntrack -L sees: {listed:?}"
    );

    let reports = reconcile(&ns, dns(&[EP4_A, EP6_A], Some(30053)));
    assert_eq!(deleted(&reports), 3, "{reports:?}");
    let after = oracle(&ns);
    assert!(!has(&after, "10.96.0.10:53", "10.96.0.10:53"), "{after:?}");
    assert!(
        !has(&after, "[fd00:96::a]:53", "[fd00:96::a]:53"),
        "{after:?}"
    );
    assert!(
        !has(&after, "192.168.7.1:30053", "192.168.7.1:30053"),
        "{after:?}"
    );
    assert!(
        has(&after, "10.96.0.11:53", "10.96.0.11:53"),
        "a flow to an address that is no frontend stays: {after:?}"
    );

    client4.send_to(b"fresh", service4).unwrap();
    client6.send_to(b"fresh", service6).unwrap();
    node_client.send_to(b"fresh-np", node_port).unwrap();
    assert_eq!(received(&server4).as_deref(), Some("fresh"));
    assert_eq!(received(&server4).as_deref(), Some("fresh-np"));
    assert_eq!(received(&server6).as_deref(), Some("fresh"));
    assert_eq!(received(&sink4), None);

    // The new flows follow the rules: reconciling again deletes nothing.
    assert_eq!(
        deleted(&reconcile(&ns, dns(&[EP4_A, EP6_A], Some(30053)))),
        0
    );
}

#[test]
fn flows_dnated_to_an_endpoint_that_stopped_serving_move_to_the_remaining_one() {
    if !can_run() {
        return;
    }
    let ns = lab("ctgone");
    set_nat(
        &ns,
        &[&dnat4(SERVICE4, 53, EP4_A)],
        &[&dnat6(SERVICE6, 53, EP6_A)],
    );
    let old4 = socket(&ns, EP4_A);
    let new4 = socket(&ns, EP4_B);
    let old6 = socket(&ns, EP6_A);
    let new6 = socket(&ns, EP6_B);
    let client4 = socket(&ns, "0.0.0.0:0");
    let client6 = socket(&ns, "[::]:0");
    let direct = socket(&ns, "0.0.0.0:0");
    let service4 = sa(&format!("{SERVICE4}:53"));
    let service6 = sa(&format!("[{SERVICE6}]:53"));

    client4.send_to(b"one", service4).unwrap();
    client6.send_to(b"one", service6).unwrap();
    direct.send_to(b"direct", sa(EP4_A)).unwrap();
    assert_eq!(received(&old4).as_deref(), Some("one"));
    assert_eq!(received(&old4).as_deref(), Some("direct"));
    assert_eq!(received(&old6).as_deref(), Some("one"));

    // Endpoint A is terminating: the rules send new flows to B, but A still serves, so its
    // flows stay (as its TCP connections would).
    set_nat(
        &ns,
        &[&dnat4(SERVICE4, 53, EP4_B)],
        &[&dnat6(SERVICE6, 53, EP6_B)],
    );
    let reports = reconcile(&ns, dns(&[EP4_A, EP4_B, EP6_A, EP6_B], None));
    assert_eq!(deleted(&reports), 0, "{reports:?}");
    client4.send_to(b"two", service4).unwrap();
    assert_eq!(received(&old4).as_deref(), Some("two"), "still served by A");
    assert_eq!(received(&new4), None);

    // A stops serving: the flows DNATed to it are deleted, and only those.
    let reports = reconcile(&ns, dns(&[EP4_B, EP6_B], None));
    assert_eq!(deleted(&reports), 2, "{reports:?}");
    let after = oracle(&ns);
    assert!(!has(&after, "10.96.0.10:53", EP4_A), "{after:?}");
    assert!(!has(&after, "[fd00:96::a]:53", EP6_A), "{after:?}");
    assert!(
        has(&after, EP4_A, EP4_A),
        "traffic straight to the pod is not a service flow and stays: {after:?}"
    );

    client4.send_to(b"three", service4).unwrap();
    client6.send_to(b"three", service6).unwrap();
    assert_eq!(received(&new4).as_deref(), Some("three"));
    assert_eq!(received(&new6).as_deref(), Some("three"));
    assert_eq!(received(&old4), None);
}

#[test]
fn more_stale_entries_than_one_delete_datagram_carries_are_all_deleted() {
    if !can_run() {
        return;
    }
    let ns = lab("ctmany");
    set_nat(&ns, &[], &[]);
    let client = socket(&ns, "0.0.0.0:0");
    let ports: Vec<u16> = (20000..20300).collect();
    for &port in &ports {
        client
            .send_to(b"x", sa(&format!("{SERVICE4}:{port}")))
            .unwrap();
    }
    client
        .send_to(b"x", sa(&format!("{OTHER_SERVICE4}:20000")))
        .unwrap();
    assert_eq!(oracle(&ns).len(), ports.len() + 1);

    let mut frontends = Frontends::default();
    for &port in &ports {
        frontends.set(
            format!("demo/s{port}:udp"),
            UdpService {
                frontends: vec![sa(&format!("{SERVICE4}:{port}"))],
                node_port: None,
                serving: [sa(EP4_A)].into(),
            },
        );
    }
    assert_eq!(deleted(&reconcile(&ns, frontends)), ports.len());
    assert_eq!(
        oracle(&ns),
        vec![(
            sa(&format!("{OTHER_SERVICE4}:20000")),
            sa(&format!("{OTHER_SERVICE4}:20000"))
        )]
    );
}

/// Opens `count` TCP connections that never complete (the namespace drops their SYNs), so
/// conntrack holds `count` TCP entries for two minutes.
fn tcp_entries(ns: &Netns, count: u16) {
    apply_script(
        ns,
        "table inet drop-syn {\n  chain in {\n    type filter hook input priority 0;\n    tcp dport 1-65535 drop\n  }\n}\n",
    )
    .unwrap();
    ns.run(move || {
        for port in 0..count {
            let to = sa(&format!("{OTHER_SERVICE4}:{}", 1000 + port));
            let std::net::SocketAddr::V4(to) = to else {
                unreachable!()
            };
            // SAFETY: plain socket calls on a descriptor this block owns and closes.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
                assert!(fd >= 0);
                let addr = libc::sockaddr_in {
                    sin_family: libc::AF_INET as u16,
                    sin_port: to.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*to.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                libc::connect(
                    fd,
                    &addr as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                );
                libc::close(fd);
            }
        }
    })
    .unwrap();
}

/// Median wall time of `runs` calls.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

/// What a reconciliation costs with 10,000 UDP services, first with a few entries, then with
/// many (printed; run with --nocapture). The many-entry table holds TCP entries the kernel
/// filters out and UDP entries to no frontend, plus stale ones that must go and only those.
#[test]
fn reconciling_ten_thousand_services_reads_only_udp_entries_and_deletes_only_stale_ones() {
    if !can_run() {
        return;
    }
    let ns = lab("ctcost");
    set_nat(&ns, &[], &[]);
    // Filling the table takes longer than UDP's 30 s unreplied timeout under qemu's TCG, and
    // an entry that expires mid-test would be counted missing: they must outlive the test
    // (the namespace's own timeout; its rules above loaded conntrack).
    ns.exec(&[
        "sysctl",
        "-qw",
        "net.netfilter.nf_conntrack_udp_timeout=3600",
    ])
    .unwrap();
    // Every service address is local, so datagrams to them are tracked and answered.
    ns.exec(&["ip", "route", "add", "local", "10.96.0.0/16", "dev", "lo"])
        .unwrap();
    let mut frontends = Frontends::default();
    for i in 0..10_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a60_0000 + 0x100 + i);
        frontends.set(
            format!("demo/s{i}:udp"),
            UdpService {
                frontends: vec![SocketAddr::new(ip.into(), 53)],
                node_port: Some(30000 + (i % 2000) as u16),
                serving: [sa(EP4_A)].into(),
            },
        );
    }
    let frontends = std::sync::Arc::new(frontends);
    let client = socket(&ns, "0.0.0.0:0");
    for port in 0..3u16 {
        client
            .send_to(b"x", sa(&format!("{OTHER_SERVICE4}:{}", 40000 + port)))
            .unwrap();
    }
    let f = frontends.clone();
    let few = ns
        .run(move || {
            median(21, || {
                deleted(&conntrack::reconcile(&*f));
            })
        })
        .unwrap();

    // Many: 20,000 TCP entries, 20,000 UDP entries to no frontend, 1,000 stale ones (sent
    // before their frontend had endpoints).
    tcp_entries(&ns, 20_000);
    let many_client = socket(&ns, "0.0.0.0:0");
    for port in 0..20_000u16 {
        many_client
            .send_to(b"x", sa(&format!("{OTHER_SERVICE4}:{}", 10000 + port)))
            .unwrap();
    }
    for i in 0..1_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a60_0000 + 0x100 + i);
        many_client
            .send_to(b"x", SocketAddr::new(ip.into(), 53))
            .unwrap();
    }
    let f = frontends.clone();
    let (first, removed, examined, again) = ns
        .run(move || {
            let t = Instant::now();
            let reports = conntrack::reconcile(&*f);
            let first = t.elapsed();
            let examined: usize = reports.examined.iter().sum();
            let n = deleted(&reports);
            let again = median(5, || {
                assert_eq!(deleted(&conntrack::reconcile(&*f)), 0);
            });
            (first, n, examined, again)
        })
        .unwrap();
    assert_eq!(removed, 1_000);
    assert_eq!(
        examined,
        3 + 20_000 + 1_000,
        "the kernel sends the UDP entries only"
    );
    let unfiltered = ns
        .run(|| {
            median(5, || {
                conntrack::list_flows().unwrap();
            })
        })
        .unwrap();
    let total = ns.run(conntrack::list_flows).unwrap().unwrap();
    assert!(
        total.iter().filter(|f| f.proto == 6).count() >= 19_000,
        "the TCP entries exist: {}",
        total.len()
    );
    eprintln!(
        "reconcile, 10,000 UDP services: {few:?} with 3 UDP entries; with 20,000 TCP + \
         21,000 UDP entries {first:?} (1,000 deleted), then {again:?} (nothing stale); \
         an unfiltered dump of the same table {unfiltered:?}"
    );
}

fn netfilter_sysctl(ns: Option<&Netns>, name: &str) -> String {
    let path = format!("/proc/sys/net/netfilter/{name}");
    let out = match ns {
        Some(ns) => ns.exec(&["cat", &path]).unwrap().stdout,
        None => std::fs::read(&path).unwrap(),
    };
    String::from_utf8_lossy(&out).trim().to_string()
}

/// `kubenft run --init-only` in a namespace sets that namespace's conntrack timeouts and exits
/// 0 without contacting any API; the host's values are untouched. The limit and the hash size
/// (global knobs) are left out with `--conntrack-max-per-core=0`, so the host's can never change.
#[test]
fn init_only_sets_the_namespaces_conntrack_timeouts_and_exits() {
    if !can_run() {
        return;
    }
    let ns = lab("ctinit");
    set_nat(&ns, &[], &[]); // loads conntrack in the namespace
    let names = [
        "nf_conntrack_udp_timeout",
        "nf_conntrack_udp_timeout_stream",
        "nf_conntrack_tcp_timeout_close_wait",
        "nf_conntrack_tcp_be_liberal",
        "nf_conntrack_max",
    ];
    let host_before: Vec<String> = names.iter().map(|n| netfilter_sysctl(None, n)).collect();
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(env!("CARGO_BIN_EXE_kubenft"))
        .args([
            "run",
            "--init-only",
            "--hostname-override",
            "node-a",
            "--conntrack-max-per-core=0",
            "--conntrack-udp-timeout=7s",
            "--conntrack-udp-timeout-stream=3m",
            "--conntrack-tcp-timeout-close-wait=1h",
            "--conntrack-tcp-be-liberal",
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(netfilter_sysctl(Some(&ns), "nf_conntrack_udp_timeout"), "7");
    assert_eq!(
        netfilter_sysctl(Some(&ns), "nf_conntrack_udp_timeout_stream"),
        "180"
    );
    assert_eq!(
        netfilter_sysctl(Some(&ns), "nf_conntrack_tcp_timeout_close_wait"),
        "3600"
    );
    assert_eq!(
        netfilter_sysctl(Some(&ns), "nf_conntrack_tcp_be_liberal"),
        "1"
    );
    assert!(
        log.contains("conntrack: set net.netfilter.nf_conntrack_udp_timeout from 30 to 7"),
        "{log}"
    );
    assert!(!log.contains("nf_conntrack_max"), "left alone: {log}");
    let host_after: Vec<String> = names.iter().map(|n| netfilter_sysctl(None, n)).collect();
    assert_eq!(host_after, host_before, "the host's values are untouched");
}

#[test]
fn tcp_flows_to_a_frontend_that_were_never_dnated_are_deleted_and_no_other() {
    if !can_run() {
        return;
    }
    let ns = lab("ctNoDnat");
    let client = |port: u16| sa(&format!("10.2.0.1:{port}"));
    let web = sa(&format!("{SERVICE4}:80"));
    let web6 = sa(&format!("[{SERVICE6}]:80"));
    let endpoint = sa("10.1.0.5:8080");
    let never_dnated = vec![
        Entry::tcp_established(client(40_001), web, web, 120),
        Entry::tcp_established(sa("[fd00:2::1]:40001"), web6, web6, 120),
    ];
    let kept = vec![
        // DNATed to its endpoint, as every flow that began under the rules.
        Entry::tcp_established(client(40_002), web, endpoint, 3600),
        // Not DNATed, but to an address no service answers on.
        Entry::tcp_established(client(40_003), sa("10.96.9.9:80"), sa("10.96.9.9:80"), 3600),
        // Not DNATed, to the service's address on a port it does not serve.
        Entry::tcp_established(
            client(40_004),
            sa(&format!("{SERVICE4}:81")),
            sa(&format!("{SERVICE4}:81")),
            3600,
        ),
        // UDP: the reconciler's to judge.
        Entry::udp(
            client(40_005),
            sa(&format!("{SERVICE4}:80")),
            sa(&format!("{SERVICE4}:80")),
            3600,
        ),
    ];
    let all: Vec<Entry> = never_dnated.iter().chain(&kept).copied().collect();
    ns.run(move || create(all)).unwrap().unwrap();

    let frontends: std::collections::HashSet<SocketAddr> = [web, web6].into();
    let reading = ns
        .run(move || conntrack::delete_never_dnated(&frontends))
        .unwrap();
    assert_eq!(deleted(&reading), 2, "{reading:?}");
    assert_eq!(reading.examined, [4, 1], "only TCP entries are read");
    let (gone, stay) = (never_dnated.clone(), kept.clone());
    assert_eq!(ns.run(move || present(&gone)).unwrap().unwrap(), 0);
    assert_eq!(ns.run(move || present(&stay)).unwrap().unwrap(), 4);
}
