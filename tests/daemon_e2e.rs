//! `kubenft run` end to end: the real binary, watching the test API server through a kubeconfig,
//! programs a node namespace, and real connections from an external client follow every
//! change made through the API: Services created, scaled, updated and deleted; a restart under
//! continuous traffic drops no connection and sends no operation; a 30 s API outage keeps the rules,
//! and coming back with an expired resourceVersion converges; stale UDP flows are cleared;
//! health and metrics are served.

use crate::common;
use crate::harness;

use std::time::Duration;

use common::{Outcome, Topology, try_request};
use harness::*;
use kubenft::netns::can_create;
use kubenft_testkit::Kind;

#[test]
fn services_follow_creates_scaling_updates_and_deletes_made_through_the_api() {
    let Some((topo, api)) = lab("e2eF") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let _daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));

    // Scale up: the second pod takes traffic within a second.
    api.apply(slice("web", &[1, 2]));
    let took = wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    assert!(took < Duration::from_secs(1), "scale-up took {took:?}");

    // Scale down to the other pod.
    api.apply(slice("web", &[2]));
    let took = wait_for_backends(&topo, WEB, &["pod-2"], Duration::from_secs(5));
    assert!(took < Duration::from_secs(1), "scale-down took {took:?}");

    // A new Service with its endpoints.
    api.apply(service("api", "10.96.0.11", 8081));
    api.apply(slice("api", &[1]));
    let took = wait_for_backends(&topo, "10.96.0.11:8081", &["pod-1"], Duration::from_secs(5));
    assert!(took < Duration::from_secs(1), "a new service took {took:?}");

    // The Service moves to another port: the old one no longer answers, the new one does.
    api.apply(service("api", "10.96.0.11", 9090));
    wait_for_backends(&topo, "10.96.0.11:9090", &["pod-1"], Duration::from_secs(2));
    assert_eq!(backend(&topo, "10.96.0.11:8081"), None, "old port closed");

    // All endpoints gone: connections are refused (reject), not left hanging.
    api.apply(slice("web", &[]));
    wait_for_outcome(
        &topo,
        WEB,
        Duration::from_secs(2),
        "web refuses without endpoints",
        |o| *o == Outcome::Refused,
    );

    // Deleted: no rule for it remains.
    api.server
        .delete(Kind::Service, Some("demo"), "api")
        .unwrap();
    wait_for_outcome(
        &topo,
        "10.96.0.11:9090",
        Duration::from_secs(2),
        "api gone",
        |o| !matches!(o, Outcome::Answered { .. }),
    );
    let table = topo
        .node
        .exec(&["nft", "list", "table", "ip", "kubenft"])
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        !table.contains("demo/api/"),
        "no chain of the deleted service:\n{table}"
    );
    assert!(
        table.contains("10.96.0.10"),
        "web (without endpoints) is still there:\n{table}"
    );
}

#[test]
fn a_change_that_waits_out_the_min_sync_period_is_programmed_by_the_next_sync() {
    let Some((topo, api)) = lab("e2eW") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let _daemon = start_daemon(&topo, &api, &["--min-sync-period", "3s"]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));

    // Made just after the first sync, the change waits most of 3 s for the next one; the
    // daemon converts it into its model meanwhile, and that sync must still program it.
    api.apply(slice("web", &[1, 2]));
    let took = wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(10));
    assert!(took < Duration::from_secs(4), "the change took {took:?}");
}

#[test]
fn restarting_the_daemon_under_traffic_fails_no_connection_and_changes_nothing() {
    let Some((topo, api)) = lab("e2eR") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1, 2]));
    let mut daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(20));
    let programmed = topo.node.exec(&["nft", "list", "ruleset"]).unwrap().stdout;

    let traffic = Traffic::start(&topo, WEB);
    std::thread::sleep(Duration::from_millis(300));
    assert!(daemon.stop(), "a graceful stop exits 0");
    std::thread::sleep(Duration::from_millis(300));
    let mut daemon = start_daemon(&topo, &api, &[]);
    eventually(Duration::from_secs(20), "the new daemon synced", || {
        daemon.log().contains("synced").then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    // A crash is no different.
    daemon.kill();
    let mut daemon = start_daemon(&topo, &api, &[]);
    eventually(Duration::from_secs(20), "the third daemon synced", || {
        daemon.log().contains("synced").then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    let (ok, failed) = traffic.finish();
    assert!(ok > 20, "traffic flowed: {ok} connections");
    assert!(
        failed.is_empty(),
        "failed connections across restarts: {failed:?}"
    );

    let log = daemon.log();
    assert!(
        log.contains("synced; nothing to change"),
        "the restart's sync sent no operation:\n{log}"
    );
    assert!(
        !log.contains("ops="),
        "no transaction at all after a restart:\n{log}"
    );
    assert!(daemon.running());
    let after = topo.node.exec(&["nft", "list", "ruleset"]).unwrap().stdout;
    assert_eq!(
        String::from_utf8_lossy(&after),
        String::from_utf8_lossy(&programmed),
        "the ruleset is unchanged"
    );
}

const OUTAGE: Duration = Duration::from_secs(30);

#[test]
fn an_api_outage_keeps_the_rules_and_an_expired_resume_converges() {
    let Some((topo, api)) = lab("e2eO") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1, 2]));
    let daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(20));

    // The API goes away for 30 s; the rules stay and keep serving all along, and the daemon
    // stays healthy (nothing it knows of is waiting to be programmed).
    api.server.set_unavailable(true);
    let traffic = Traffic::start(&topo, WEB);
    std::thread::sleep(OUTAGE);
    assert_eq!(
        http_get(&topo.node, addr("127.0.0.1:10256"), "/healthz").map(|a| a.0),
        Some(200)
    );
    let (ok, failed) = traffic.finish();
    assert!(
        ok > 20 && failed.is_empty(),
        "served during the outage: {ok} ok, {failed:?}"
    );

    // Meanwhile the cluster changed, and the server forgot its history: the daemon's
    // resourceVersion is expired when it comes back, so it must re-list.
    api.apply(slice("web", &[2]));
    api.apply(service("api", "10.96.0.11", 8081));
    api.apply(slice("api", &[1]));
    api.server.compact();
    api.server.set_unavailable(false);

    // kube-rs backs off exponentially up to 30 s while the API is down, so the first retry
    // after it returns may come that late (a node fleet must not stampede a recovering API).
    // Each kind's watcher has its own backoff: the EndpointSlice watcher may be back well before
    // the Service watcher, so each wait gets the whole budget.
    let recovery = Duration::from_secs(60);
    wait_for_backends(&topo, WEB, &["pod-2"], recovery);
    wait_for_backends(&topo, "10.96.0.11:8081", &["pod-1"], recovery);
    let log = daemon.log();
    assert!(
        log.contains("watch failed"),
        "the outage was noticed:\n{log}"
    );
}

#[test]
fn health_and_metrics_are_served_with_kube_proxys_names() {
    let Some((topo, api)) = lab("e2eM") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let _daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    api.apply(slice("web", &[1, 2]));
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));

    let healthz = addr("127.0.0.1:10256");
    let (status, body) = eventually(Duration::from_secs(5), "healthz answers", || {
        http_get(&topo.node, healthz, "/healthz")
    });
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"nodeEligible\": true"), "{body}");
    let (status, _) = http_get(&topo.node, healthz, "/livez").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        http_get(&topo.client, addr("10.0.0.1:10256"), "/healthz").map(|a| a.0),
        Some(200),
        "healthz listens on every address by default"
    );

    let (status, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics").unwrap();
    assert_eq!(status, 200);
    let count = |name: &str| metric(&page, name).unwrap_or_else(|| panic!("{name} in:\n{page}"));
    assert!(count("kubeproxy_sync_proxy_rules_duration_seconds_count") >= 2.0);
    assert!(count("kubeproxy_sync_full_proxy_rules_duration_seconds_count") >= 1.0);
    assert!(count("kubeproxy_sync_partial_proxy_rules_duration_seconds_count") >= 1.0);
    assert!(count("kubeproxy_network_programming_duration_seconds_count") >= 1.0);
    assert!(count("kubeproxy_sync_proxy_rules_last_timestamp_seconds") > 1e9);
    assert!(count("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds") > 1e9);
    assert_eq!(
        count("kubeproxy_sync_proxy_rules_nftables_sync_failures_total"),
        0.0
    );
    assert!(count("kubenft_transaction_operations_count") >= 2.0);
    assert_eq!(
        http_get(&topo.client, addr("10.0.0.1:10249"), "/metrics"),
        None,
        "metrics listen on localhost only by default"
    );
}

#[test]
fn a_set_outgrowing_its_declared_size_is_recreated_larger_without_a_failed_sync() {
    let Some((topo, api)) = lab("e2eG") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let _daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));

    // `cluster-ips` holds one address, declared 768 large: 800 more Services outgrow it.
    for i in 0..800 {
        let ip = format!("10.96.{}.{}", 1 + i / 250, 1 + i % 250);
        api.apply(service(&format!("extra-{i}"), &ip, 80));
    }
    let listed = eventually(
        Duration::from_secs(30),
        "every ClusterIP programmed",
        || {
            let out = topo
                .node
                .exec(&["nft", "list", "set", "ip", "kubenft", "cluster-ips"])
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.contains("10.96.4.50").then_some(text)
        },
    );
    assert!(listed.contains("size 1536"), "recreated larger:\n{listed}");
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(5));

    let (_, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics").unwrap();
    let count = |name: &str| metric(&page, name).unwrap_or_else(|| panic!("{name} in:\n{page}"));
    assert_eq!(
        count("kubeproxy_sync_proxy_rules_nftables_sync_failures_total"),
        0.0,
        "the partial changes the set could not take were never sent"
    );
    assert!(
        count("kubeproxy_sync_full_proxy_rules_duration_seconds_count") >= 2.0,
        "the first sync and the one that recreated the set"
    );
}

const LB_MANIFESTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.0.0/16]}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: demo}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  healthCheckNodePort: 32000
  clusterIP: 10.96.0.20
  ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP, targetPort: 8080}]
status: {loadBalancer: {ingress: [{ip: 192.0.2.10}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: lb-1, namespace: demo, labels: {kubernetes.io/service-name: lb}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.2], nodeName: NODE_OF_POD, conditions: {ready: true}}
"#;

#[test]
fn run_follows_a_manifests_directory_and_answers_health_check_node_ports() {
    if !can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let topo = Topology::build("e2eH").expect("lab builds");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, LB_MANIFESTS.replace("NODE_OF_POD", NODE)).unwrap();
    let _daemon = Daemon::start(
        &topo.node,
        &[
            "--manifests",
            dir.path().to_str().unwrap(),
            "--manifests-poll-period",
            "100ms",
            "--hostname-override",
            NODE,
            "--cluster-cidr",
            "10.244.0.0/16",
            "--min-sync-period",
            "50ms",
        ],
    );
    wait_for_backends(&topo, "192.0.2.10:80", &["pod-1"], Duration::from_secs(20));
    let health = addr("10.0.0.1:32000");
    let (status, body) = eventually(
        Duration::from_secs(5),
        "healthCheckNodePort answers",
        || http_get(&topo.client, health, "/healthz").filter(|(s, _)| *s == 200),
    );
    assert_eq!(status, 200);
    assert!(body.contains("\"localEndpoints\":1"), "{body}");
    assert!(body.contains("\"name\":\"lb\""), "{body}");

    // The only endpoint moves to another node: this node must leave the load balancer's pool
    // (503) and drop what still arrives rather than forward it.
    std::fs::write(&file, LB_MANIFESTS.replace("NODE_OF_POD", "node-b")).unwrap();
    let (_, body) = eventually(Duration::from_secs(5), "healthCheckNodePort fails", || {
        http_get(&topo.client, health, "/healthz").filter(|(s, _)| *s == 503)
    });
    assert!(body.contains("\"localEndpoints\":0"), "{body}");
    assert_eq!(
        try_request(&topo.client, addr("192.0.2.10:80")),
        Outcome::TimedOut,
        "dropped without a local endpoint"
    );
    assert_eq!(
        explained(&topo, "192.0.2.10:80")["dropped"]["kind"],
        "no-local-endpoints"
    );

    // The Service goes away: so does its healthCheckNodePort.
    std::fs::write(
        &file,
        LB_MANIFESTS
            .split("---\napiVersion: v1\nkind: Service")
            .next()
            .unwrap(),
    )
    .unwrap();
    eventually(Duration::from_secs(5), "healthCheckNodePort closed", || {
        http_get(&topo.client, health, "/healthz")
            .is_none()
            .then_some(())
    });
}

/// A UDP client in the client namespace that always uses the same source port, as a stub
/// resolver retrying a query does: every datagram belongs to the same conntrack entry.
struct UdpClient {
    socket: std::net::UdpSocket,
    to: std::net::SocketAddr,
}

impl UdpClient {
    fn new(topo: &Topology, to: &str) -> UdpClient {
        let socket = topo
            .client
            .run(|| {
                let s = std::net::UdpSocket::bind("10.0.0.2:40053").unwrap();
                s.set_read_timeout(Some(Duration::from_millis(150)))
                    .unwrap();
                s
            })
            .unwrap();
        UdpClient {
            socket,
            to: addr(to),
        }
    }

    /// One query: who answered, if anyone.
    fn ask(&self) -> Option<String> {
        self.socket.send_to(b"q", self.to).ok()?;
        let mut buf = [0u8; 64];
        let (n, _) = self.socket.recv_from(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Keeps asking (so the conntrack entry never idles out) until `expected` answers.
    fn until(&self, expected: &str, limit: Duration, what: &str) {
        eventually(limit, what, || {
            (self.ask().as_deref() == Some(expected)).then_some(())
        });
    }
}

#[test]
fn stale_udp_flows_are_cleared_so_a_retrying_client_follows_the_endpoints() {
    let Some((topo, api)) = lab("e2eU") else {
        return;
    };
    let _dns = [
        kubenft::lab::serve_udp(&topo.pods[0], "pod-1"),
        kubenft::lab::serve_udp(&topo.pods[1], "pod-2"),
    ];
    api.apply(dns_service());
    api.apply(dns_slice(&[]));
    let _daemon = start_daemon(&topo, &api, &[]);
    let client = UdpClient::new(&topo, "10.96.0.53:53");
    // No endpoints: the queries are rejected.
    eventually(Duration::from_secs(20), "the daemon programmed dns", || {
        let t = topo
            .node
            .exec(&["nft", "list", "table", "ip", "kubenft"])
            .ok()?;
        String::from_utf8_lossy(&t.stdout)
            .contains("10.96.0.53")
            .then_some(())
    });
    for _ in 0..5 {
        assert_eq!(client.ask(), None);
    }

    // The Service gains an endpoint: the same client (same source port, still retrying)
    // reaches it.
    api.apply(dns_slice(&[1]));
    client.until(
        "pod-1",
        Duration::from_secs(5),
        "the retrying client reaches pod-1",
    );

    // pod-1 leaves the Service: the flow DNATed to it is deleted and the client moves on
    // (without the cleanup it would stick to pod-1 for as long as it keeps asking; checked by
    // disabling it).
    api.apply(dns_slice(&[2]));
    client.until(
        "pod-2",
        Duration::from_secs(5),
        "the retrying client moves to pod-2",
    );
    let flows = topo
        .node
        .exec(&["conntrack", "-L", "-p", "udp", "--orig-port-src", "40053"])
        .unwrap();
    let flows = String::from_utf8_lossy(&flows.stdout);
    assert!(
        !flows.contains("10.244.1.2"),
        "no flow to the removed endpoint:\n{flows}"
    );
}

#[test]
fn a_udp_flow_to_an_endpoint_removed_while_the_daemon_was_down_is_deleted_by_its_first_sync() {
    let Some((topo, api)) = lab("e2eC") else {
        return;
    };
    let _dns = [
        kubenft::lab::serve_udp(&topo.pods[0], "pod-1"),
        kubenft::lab::serve_udp(&topo.pods[1], "pod-2"),
    ];
    api.apply(dns_service());
    api.apply(dns_slice(&[1]));
    let mut daemon = start_daemon(&topo, &api, &[]);
    let client = UdpClient::new(&topo, "10.96.0.53:53");
    client.until("pod-1", Duration::from_secs(20), "the client reaches pod-1");

    // While the daemon is down, pod-1 leaves the Service (the pod itself keeps answering, as a
    // pod on its way out may). The client keeps asking, so its flow never idles out.
    assert!(daemon.stop(), "a graceful stop exits 0");
    api.apply(dns_slice(&[2]));
    for _ in 0..5 {
        assert_eq!(client.ask().as_deref(), Some("pod-1"), "the cached flow");
    }

    // The restarted daemon's first sync deletes the flow: the client moves to pod-2. Without
    // the reconciler it would stay on pod-1 for as long as it keeps asking.
    let _daemon = start_daemon(&topo, &api, &[]);
    client.until(
        "pod-2",
        Duration::from_secs(10),
        "the retrying client moves to pod-2 after the restart",
    );
    let flows = topo
        .node
        .exec(&["conntrack", "-L", "-p", "udp", "--orig-port-src", "40053"])
        .unwrap();
    let flows = String::from_utf8_lossy(&flows.stdout);
    assert!(
        !flows.contains("10.244.1.2"),
        "no flow to the removed endpoint:\n{flows}"
    );
    // The reconciler counts its deletions when its pass ends, which may be just after the
    // client already moved.
    let metrics = addr("127.0.0.1:10249");
    let deleted = || {
        let (_, page) = http_get(&topo.node, metrics, "/metrics")?;
        page.lines()
            .find_map(|l| {
                l.strip_prefix(
                    "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"} ",
                )
            })
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|n| *n >= 1.0)
    };
    eventually(
        Duration::from_secs(5),
        "the deleted entry counted in /metrics",
        deleted,
    );
}
