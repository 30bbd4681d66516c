use super::*;
use crate::conntrack::DeleteFailure;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn flow(proto: u8, orig_dst: &str, reply_src: &str) -> Flow {
    let client = if orig_dst.starts_with('[') {
        "[fd00:2::1]:40000"
    } else {
        "10.2.0.1:40000"
    };
    Flow {
        proto,
        orig_src: sa(client),
        orig_dst: sa(orig_dst),
        reply_src: sa(reply_src),
        reply_dst: sa(client),
    }
}

fn udp(orig_dst: &str, reply_src: &str) -> Flow {
    flow(17, orig_dst, reply_src)
}

fn service(frontends: &[&str], node_port: Option<u16>, serving: &[&str]) -> UdpService {
    UdpService {
        frontends: frontends.iter().map(|f| sa(f)).collect(),
        node_port,
        serving: serving.iter().map(|e| sa(e)).collect(),
    }
}

const CLUSTER_IP: &str = "172.30.1.1:8000";
const EXTERNAL_IP: &str = "192.168.99.100:8000";
const LB_IP: &str = "1.2.3.4:8000";
const SERVING: &str = "10.240.0.4:8080";

/// The frontends of upstream's cleanup test: one UDP port on a ClusterIP, an external IP
/// and a load-balancer IP, NodePort 32000, one serving endpoint.
fn upstream_like() -> Frontends<&'static str> {
    let mut f = Frontends::default();
    f.set(
        "test/cleanup-test:udp",
        service(&[CLUSTER_IP, EXTERNAL_IP, LB_IP], Some(32000), &[SERVING]),
    );
    f
}

#[test]
fn udp_flows_to_any_frontend_not_answered_by_a_serving_endpoint_are_stale() {
    let f = upstream_like();
    for frontend in [CLUSTER_IP, EXTERNAL_IP, LB_IP, "192.168.7.1:32000"] {
        assert!(!f.stale(&udp(frontend, SERVING)), "{frontend}: serving");
        for gone in ["10.240.1.5:8080", "10.240.2.6:8080"] {
            assert!(f.stale(&udp(frontend, gone)), "{frontend} → {gone}");
        }
        assert!(
            f.stale(&udp(frontend, "10.240.0.4:9999")),
            "{frontend}: the serving address on another port is not the endpoint"
        );
        assert!(
            f.stale(&udp(frontend, frontend)),
            "{frontend}: not DNATed (cached before there were endpoints)"
        );
    }
}

#[test]
fn tcp_and_sctp_flows_and_other_destinations_are_never_stale() {
    let f = upstream_like();
    for proto in [6, 132] {
        assert!(!f.stale(&flow(proto, CLUSTER_IP, "10.240.2.6:8080")));
        assert!(!f.stale(&flow(proto, "192.168.7.1:32000", "10.240.2.6:8080")));
    }
    for elsewhere in ["172.30.1.1:3000", "172.30.1.2:8000", "10.240.2.6:8080"] {
        assert!(!f.stale(&udp(elsewhere, "10.240.2.6:8080")), "{elsewhere}");
        assert!(!f.stale(&udp(elsewhere, elsewhere)), "{elsewhere}");
    }
}

/// kubernetes#139629: a service port whose endpoints all went away keeps the flows DNATed to
/// them alive with every packet a client sends, unless they are deleted.
#[test]
fn a_service_without_serving_endpoints_has_every_flow_to_it_stale() {
    let mut f = upstream_like();
    f.set(
        "test/cleanup-test:udp",
        service(&[CLUSTER_IP], Some(32000), &[]),
    );
    assert!(!f.is_empty());
    assert!(f.stale(&udp(CLUSTER_IP, "10.240.2.6:8080")));
    assert!(f.stale(&udp(CLUSTER_IP, SERVING)));
    assert!(f.stale(&udp("192.168.7.1:32000", "10.240.2.6:8080")));
    assert!(!f.stale(&flow(6, CLUSTER_IP, "10.240.2.6:8080")));
}

/// kubernetes#141371: a deleted service port's frontends are judged once more, with no
/// endpoint, unless a kept service owns them again; a complete reconciliation forgets them.
#[test]
fn a_removed_service_ports_flows_are_stale_until_a_complete_reconciliation() {
    let mut f = upstream_like();
    f.set("other", service(&[EXTERNAL_IP], None, &["10.240.9.9:53"]));
    f.remove(&"test/cleanup-test:udp");
    assert!(!f.is_empty());
    assert!(f.stale(&udp(CLUSTER_IP, SERVING)));
    assert!(f.stale(&udp(LB_IP, SERVING)));
    assert!(f.stale(&udp("192.168.7.1:32000", SERVING)));
    assert!(
        !f.stale(&udp(EXTERNAL_IP, "10.240.9.9:53")),
        "a frontend another service still owns is judged by it"
    );
    assert!(f.stale(&udp(EXTERNAL_IP, SERVING)));
    assert!(
        !f.stale(&udp("172.30.1.2:8000", SERVING)),
        "never a frontend"
    );

    let mut reconciler = Reconciler::default();
    reconciler.read(&mut f, &report(false, Ok(DeleteReport::default())));
    assert!(!f.stale(&udp(CLUSTER_IP, SERVING)), "forgotten once read");
    assert!(!f.stale(&udp("192.168.7.1:32000", SERVING)));
    f.remove(&"other");
    assert_eq!(f, Frontends::default());
}

fn report(interrupted: bool, outcome: Result<DeleteReport, ConntrackError>) -> Reading {
    Reading {
        elapsed: Duration::ZERO,
        examined: [0; 2],
        unfiltered: false,
        interrupted,
        outcome: outcome.map(|d| [d, DeleteReport::default()]),
    }
}

/// The table is read after a start, after any change to what judges flows, and after the rules
/// were repaired; otherwise not, until a reading was incomplete.
#[test]
fn the_table_is_read_only_when_a_flow_can_have_gone_stale_since_the_last_complete_reading() {
    let mut f = upstream_like();
    let mut r = Reconciler::default();
    assert!(r.must_read(&f, false), "after a start");
    r.read(&mut f, &report(false, Ok(DeleteReport::default())));
    assert!(!r.must_read(&f, false), "nothing changed");
    assert!(r.must_read(&f, true), "the rules were repaired");

    f.set(
        "test/cleanup-test:udp",
        service(&[CLUSTER_IP, EXTERNAL_IP, LB_IP], Some(32000), &[SERVING]),
    );
    assert!(
        !r.must_read(&f, false),
        "set to what it was: nothing changed"
    );
    f.set("b", service(&["10.96.0.12:53"], None, &["10.1.0.5:53"]));
    assert!(r.must_read(&f, false), "a service port added");
    r.read(&mut f, &report(false, Ok(DeleteReport::default())));
    f.set("b", service(&["10.96.0.12:53"], None, &[]));
    assert!(r.must_read(&f, false), "its endpoint stopped serving");
    r.read(&mut f, &report(false, Ok(DeleteReport::default())));
    f.remove(&"b");
    assert!(r.must_read(&f, false), "a service port removed");

    let incomplete = [
        report(true, Ok(DeleteReport::default())),
        report(
            false,
            Ok(DeleteReport {
                failed: vec![DeleteFailure {
                    flow: udp(CLUSTER_IP, "10.240.2.6:8080"),
                    error: std::io::Error::from_raw_os_error(libc::EBUSY),
                }],
                ..DeleteReport::default()
            }),
        ),
        report(
            false,
            Err(ConntrackError::Dump(crate::netlink::SocketError::Receive(
                std::io::Error::from_raw_os_error(libc::ENOBUFS),
            ))),
        ),
    ];
    for bad in incomplete {
        r.read(&mut f, &bad);
        assert!(
            r.must_read(&f, false),
            "read again after an incomplete reading"
        );
        assert!(
            f.stale(&udp("10.96.0.12:53", "10.1.0.5:53")),
            "the removed port stays retired"
        );
    }
    r.read(&mut f, &report(false, Ok(DeleteReport::default())));
    assert!(!r.must_read(&f, false));
    assert!(!f.stale(&udp("10.96.0.12:53", "10.1.0.5:53")));
}

#[test]
fn a_flow_to_a_frontend_is_judged_by_that_frontend_even_when_its_port_is_a_node_port() {
    let mut f = Frontends::default();
    f.set("a", service(&["10.96.0.10:30053"], None, &["10.1.0.5:53"]));
    f.set(
        "b",
        service(&["10.96.0.11:53"], Some(30053), &["10.1.0.9:53"]),
    );
    assert!(!f.stale(&udp("10.96.0.10:30053", "10.1.0.5:53")));
    assert!(f.stale(&udp("10.96.0.10:30053", "10.1.0.9:53")));
    assert!(!f.stale(&udp("192.168.7.1:30053", "10.1.0.9:53")));
    assert!(f.stale(&udp("192.168.7.1:30053", "10.1.0.5:53")));
}

#[test]
fn a_shared_frontend_keeps_flows_to_a_serving_endpoint_of_any_of_its_owners() {
    let mut f = Frontends::default();
    f.set("a", service(&["192.0.2.1:53"], None, &["10.1.0.5:53"]));
    f.set("b", service(&["192.0.2.1:53"], None, &["10.1.0.6:53"]));
    assert!(!f.stale(&udp("192.0.2.1:53", "10.1.0.5:53")));
    assert!(!f.stale(&udp("192.0.2.1:53", "10.1.0.6:53")));
    assert!(f.stale(&udp("192.0.2.1:53", "10.1.0.7:53")));
    f.remove(&"a");
    assert!(f.stale(&udp("192.0.2.1:53", "10.1.0.5:53")));
    f.remove(&"b");
    assert!(f.stale(&udp("192.0.2.1:53", "10.1.0.7:53")), "retired");
    f.forget_retired();
    assert!(!f.stale(&udp("192.0.2.1:53", "10.1.0.7:53")));
    assert_eq!(
        f,
        Frontends::default(),
        "nothing left behind in the indexes"
    );
}

#[test]
fn replacing_a_service_forgets_its_old_frontends_and_node_port() {
    let mut f = upstream_like();
    f.set(
        "test/cleanup-test:udp",
        service(&["172.30.1.2:8000"], None, &[SERVING]),
    );
    assert!(!f.stale(&udp(CLUSTER_IP, "10.240.2.6:8080")));
    assert!(!f.stale(&udp("192.168.7.1:32000", "10.240.2.6:8080")));
    assert!(f.stale(&udp("172.30.1.2:8000", "10.240.2.6:8080")));
    let mut fresh = Frontends::default();
    fresh.set(
        "test/cleanup-test:udp",
        service(&["172.30.1.2:8000"], None, &[SERVING]),
    );
    assert_eq!(f, fresh);
}

#[test]
fn ipv6_frontends_and_endpoints_are_matched_the_same_way() {
    let mut f = Frontends::default();
    f.set(
        "dns",
        service(&["[fd00:96::a]:53"], Some(30053), &["[fd00:1::5]:5353"]),
    );
    assert!(!f.stale(&udp("[fd00:96::a]:53", "[fd00:1::5]:5353")));
    assert!(f.stale(&udp("[fd00:96::a]:53", "[fd00:1::6]:5353")));
    assert!(f.stale(&udp("[fd00::7]:30053", "[fd00::7]:30053")));
}

/// Each of kube-proxy's per-family proxiers judges the flows of its family against its own
/// services: a NodePort of an IPv4-only service owns no IPv6 flow, and a family without
/// frontends is not read at all.
#[test]
fn a_node_port_owns_only_flows_of_its_services_families() {
    let mut f = Frontends::default();
    f.set(
        "v4",
        service(&["10.96.0.10:53"], Some(30053), &["10.1.0.5:53"]),
    );
    assert_eq!(f.families(), [true, false]);
    assert!(f.stale(&udp("192.168.7.1:30053", "10.1.0.9:53")));
    assert!(!f.stale(&udp("[fd00::7]:30053", "[fd00::9]:53")));
    f.remove(&"v4");
    assert!(f.stale(&udp("192.168.7.1:30053", "10.1.0.5:53")), "retired");
    assert!(!f.stale(&udp("[fd00::7]:30053", "[fd00::9]:53")));
    f.set(
        "dual",
        service(
            &["10.96.0.11:53", "[fd00:96::b]:53"],
            Some(30054),
            &["10.1.0.5:53", "[fd00:1::5]:53"],
        ),
    );
    assert_eq!(f.families(), [true, true]);
    assert!(f.stale(&udp("[fd00::7]:30054", "[fd00::9]:53")));
    assert!(!f.stale(&udp("[fd00::7]:30054", "[fd00:1::5]:53")));
}
