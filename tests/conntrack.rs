//! Stale UDP conntrack cleanup against the real kernel: in a namespace whose loopback carries
//! service, node and endpoint addresses and whose nat output chain DNATs like a service proxy,
//! a client keeps its cached flow after the rules change (the black hole this module exists
//! for), `plan` + `delete_flows` remove exactly that flow, and the client's next datagram
//! follows the new rules. `conntrack -L` is the independent oracle for the table's contents.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use kubenft::conntrack::{self, Proto, StaleFlow, UdpServiceView};
use kubenft::netns::{self, Netns};
use kubenft::nft::inspect::apply_script;

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

fn dns_view(endpoints: &[&str], node_port: Option<u16>) -> UdpServiceView {
    UdpServiceView {
        name: "kube-system/kube-dns:dns".into(),
        service_ips: vec![SERVICE4.parse().unwrap(), SERVICE6.parse().unwrap()],
        port: 53,
        node_port,
        endpoints: endpoints.iter().map(|e| sa(e)).collect(),
    }
}

#[test]
fn a_client_rejected_before_its_service_had_endpoints_reaches_them_after_cleanup() {
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

    let stale = conntrack::plan(
        &[dns_view(&[], Some(30053))],
        &[dns_view(&[EP4_A, EP6_A], Some(30053))],
    );
    let report = ns
        .run(move || conntrack::delete_flows(&stale))
        .unwrap()
        .unwrap();
    assert_eq!(report.deleted, 3, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");

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
        "an unrelated service's flow stays: {after:?}"
    );

    client4.send_to(b"fresh", service4).unwrap();
    client6.send_to(b"fresh", service6).unwrap();
    node_client.send_to(b"fresh-np", node_port).unwrap();
    assert_eq!(received(&server4).as_deref(), Some("fresh"));
    assert_eq!(received(&server4).as_deref(), Some("fresh-np"));
    assert_eq!(received(&server6).as_deref(), Some("fresh"));
    assert_eq!(received(&sink4), None);
}

#[test]
fn flows_dnated_to_a_removed_endpoint_move_to_the_remaining_one_after_cleanup() {
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

    // Endpoint A goes away; the cached DNAT keeps sending to it.
    set_nat(
        &ns,
        &[&dnat4(SERVICE4, 53, EP4_B)],
        &[&dnat6(SERVICE6, 53, EP6_B)],
    );
    client4.send_to(b"two", service4).unwrap();
    assert_eq!(received(&old4).as_deref(), Some("two"), "stale DNAT");
    assert_eq!(received(&new4), None);

    let stale = conntrack::plan(
        &[dns_view(&[EP4_A, EP6_A], None)],
        &[dns_view(&[EP4_B, EP6_B], None)],
    );
    assert_eq!(
        stale,
        vec![
            StaleFlow::ToEndpoint {
                service_ip: Some(SERVICE4.parse().unwrap()),
                endpoint: sa(EP4_A),
                proto: Proto::Udp,
            },
            StaleFlow::ToEndpoint {
                service_ip: Some(SERVICE6.parse().unwrap()),
                endpoint: sa(EP6_A),
                proto: Proto::Udp,
            },
        ]
    );
    let report = ns
        .run(move || conntrack::delete_flows(&stale))
        .unwrap()
        .unwrap();
    assert_eq!(report.deleted, 2, "{report:?}");

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
fn stale_flows_that_match_nothing_leave_the_table_alone() {
    if !can_run() {
        return;
    }
    let ns = lab("ctnone");
    set_nat(&ns, &[], &[]);
    let _sink = socket(&ns, &format!("{SERVICE4}:53"));
    let client = socket(&ns, "0.0.0.0:0");
    client.send_to(b"x", sa(&format!("{SERVICE4}:53"))).unwrap();
    let before = oracle(&ns);
    assert_eq!(before.len(), 1, "{before:?}");
    let unrelated = vec![StaleFlow::ToService {
        ip: SERVICE4.parse().unwrap(),
        port: 54,
        proto: Proto::Udp,
    }];
    let report = ns
        .run(move || conntrack::delete_flows(&unrelated))
        .unwrap()
        .unwrap();
    assert_eq!(report.deleted + report.already_gone, 0, "{report:?}");
    let empty = ns.run(|| conntrack::delete_flows(&[])).unwrap().unwrap();
    assert_eq!(empty.deleted, 0);
    assert_eq!(oracle(&ns), before);
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

    let stale: Vec<StaleFlow> = ports
        .iter()
        .map(|&port| StaleFlow::ToService {
            ip: SERVICE4.parse().unwrap(),
            port,
            proto: Proto::Udp,
        })
        .collect();
    let report = ns
        .run(move || conntrack::delete_flows(&stale))
        .unwrap()
        .unwrap();
    assert_eq!(report.deleted, ports.len(), "{report:?}");
    assert_eq!(
        oracle(&ns),
        vec![(
            sa(&format!("{OTHER_SERVICE4}:20000")),
            sa(&format!("{OTHER_SERVICE4}:20000"))
        )]
    );
}
