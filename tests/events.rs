//! Events, as the real daemon writes them through kube-rs to the test API server (which
//! validates them as a kube-apiserver does): kube-proxy's `Starting` event on the Node, a
//! Warning for a skipped object, kube-proxy's Warning for a port that cannot be bound, one
//! rate-limited Warning for syncs that keep failing, and syncs that go on when events cannot
//! be written at all.

use crate::common;
use crate::harness;
use crate::privilege;

use privilege::unprivileged;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use harness::*;
use kubenft_testkit::Kind;
use serde_json::{Value, json};

const METRICS: &str = "127.0.0.1:10249";

/// The events stored with `reason`.
fn events(api: &ApiServer, reason: &str) -> Vec<Value> {
    api.server
        .objects(Kind::Event)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// The value of the sample `series` (name and labels exactly as rendered).
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn events_metric(topo: &common::Topology, result: &str) -> f64 {
    let (_, page) = http_get(&topo.node, addr(METRICS), "/metrics").unwrap_or_default();
    sample(
        &page,
        &format!("kubenft_events_total{{result=\"{result}\"}}"),
    )
    .unwrap_or(-1.0)
}

#[test]
fn the_daemon_records_kube_proxys_start_event_and_a_warning_for_a_skipped_object() {
    let Some((topo, api)) = lab("evS") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let mut bad = service("bad", "10.96.0.99", 81);
    bad["spec"]["clusterIP"] = json!("not-an-ip");
    bad["spec"]["clusterIPs"] = json!(["not-an-ip"]);
    api.apply(bad);
    let daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));

    let start = eventually(Duration::from_secs(10), "the Starting event", || {
        events(&api, "Starting").pop()
    });
    assert_eq!(start["type"], "Normal");
    assert_eq!(start["action"], "StartKubeProxy");
    assert_eq!(start["regarding"]["kind"], "Node");
    assert_eq!(start["regarding"]["name"], NODE);
    assert_eq!(start["metadata"]["namespace"], "default");
    assert_eq!(start["reportingController"], "kubenft");
    assert_eq!(start["reportingInstance"], format!("kubenft-{NODE}"));
    assert!(
        start["eventTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_eq!(events(&api, "Starting").len(), 1, "one start, one event");

    let warning = eventually(
        Duration::from_secs(10),
        "a Warning for the bad Service",
        || events(&api, "RejectedObject").pop(),
    );
    assert_eq!(warning["type"], "Warning");
    assert_eq!(warning["regarding"]["kind"], "Service");
    assert_eq!(warning["regarding"]["namespace"], "demo");
    assert_eq!(warning["regarding"]["name"], "bad");
    assert_eq!(warning["metadata"]["namespace"], "demo");
    assert!(
        warning["note"].as_str().unwrap().contains("not-an-ip"),
        "the note says why: {warning}"
    );
    // The good Service is unaffected, and a change to it is still programmed.
    api.apply(slice("web", &[1, 2]));
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    assert!(
        api.server.requests().iter().any(
            |r| r.method == "POST" && r.path == "/apis/events.k8s.io/v1/namespaces/demo/events"
        ),
        "written to events.k8s.io/v1"
    );
    drop(daemon);
}

/// kube-proxy with `bindAddressHardFail` records a Warning on the Node when its healthz or
/// metrics server cannot start, then exits; kubenft always fails hard, so it always does.
#[test]
fn a_port_that_cannot_be_bound_raises_kube_proxys_warning_before_the_daemon_exits() {
    let Some((topo, api)) = lab("evB") else {
        return;
    };
    for (flag, address, reason) in [
        (
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "FailedToStartProxierHealthcheck",
        ),
        (
            "--metrics-bind-address",
            "127.0.0.1:10249",
            "FailedToStartMetricServer",
        ),
    ] {
        let taken = topo
            .node
            .run(move || std::net::TcpListener::bind(address).unwrap())
            .unwrap();
        let mut daemon = start_daemon(&topo, &api, &[flag, address]);
        let code = daemon.wait_exit(Duration::from_secs(20));
        assert!(
            code.is_some_and(|c| c != 0),
            "exits with an error: {code:?}"
        );
        let warning = events(&api, reason)
            .pop()
            .unwrap_or_else(|| panic!("no {reason} event:\n{}", daemon.log()));
        assert_eq!(warning["type"], "Warning");
        assert_eq!(warning["action"], "StartKubeProxy");
        assert_eq!(warning["regarding"]["kind"], "Node");
        assert_eq!(warning["regarding"]["name"], NODE);
        let note = warning["note"].as_str().unwrap();
        assert!(
            note.contains(address),
            "the note says which address: {note}"
        );
        assert!(
            events(&api, "Starting").is_empty(),
            "it never started, so no birth cry"
        );
        drop(taken);
    }
}

#[test]
fn syncs_that_keep_failing_raise_one_rate_limited_warning_on_the_node() {
    let Some((topo, api)) = lab("evF") else {
        return;
    };
    std::fs::set_permissions(api.kubeconfig(), std::fs::Permissions::from_mode(0o644)).unwrap();
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    // Without CAP_NET_ADMIN the kernel refuses every sync.
    let wrapper = unprivileged("");
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let daemon = start_daemon_wrapped(
        &topo,
        &api,
        &wrapper,
        &[
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "--sync-period",
            "1s",
        ],
    );
    let warning = eventually(Duration::from_secs(30), "a sync-failure Warning", || {
        events(&api, "SyncProxyRulesFailed").pop()
    });
    assert_eq!(warning["type"], "Warning");
    assert_eq!(warning["action"], "SyncProxyRules");
    assert_eq!(warning["regarding"]["kind"], "Node");
    assert_eq!(warning["regarding"]["name"], NODE);
    let note = warning["note"].as_str().unwrap();
    assert!(note.starts_with("3 syncs in a row failed"), "{note}");
    assert!(note.contains("Operation not permitted"), "{note}");

    // Later failures fold into that event instead of writing new ones.
    eventually(Duration::from_secs(20), "two more failures folded", || {
        (events_metric(&topo, "aggregated") >= 2.0).then_some(())
    });
    assert_eq!(events(&api, "SyncProxyRulesFailed").len(), 1);
    assert!(
        !api.server.requests().iter().any(|r| r.method == "PATCH"),
        "no series update within the interval"
    );
    drop(daemon);
}

#[test]
fn when_events_cannot_be_written_syncs_go_on() {
    let Some((topo, api)) = lab("evX") else {
        return;
    };
    api.server.set_forbidden(Kind::Event, true);
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    eventually(
        Duration::from_secs(10),
        "the refused write is counted",
        || (events_metric(&topo, "failed") >= 1.0).then_some(()),
    );
    assert!(
        daemon.log().contains("cannot record an event"),
        "{}",
        daemon.log()
    );
    // Changes keep being programmed, partial syncs included.
    api.apply(slice("web", &[2]));
    wait_for_backends(&topo, WEB, &["pod-2"], Duration::from_secs(5));
    api.apply(slice("web", &[1, 2]));
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    assert!(api.server.objects(Kind::Event).is_empty());
    assert!(!daemon.log().contains("sync failed"), "{}", daemon.log());
}

/// The gauge's sample for `kind` of another proxy's rules.
fn foreign_rules(topo: &common::Topology, kind: &str) -> Option<f64> {
    let (_, page) = http_get(&topo.node, addr(METRICS), "/metrics")?;
    sample(
        &page,
        &format!("kubenft_foreign_proxy_rules{{kind=\"{kind}\"}}"),
    )
}

/// A table as kube-proxy's nftables mode names it, and one of its iptables-mode chains with
/// the jump into it, as a node that ran kube-proxy holds them.
fn load_kube_proxy_rules(topo: &common::Topology) {
    topo.node
        .exec_with_stdin(
            &["nft", "-f", "-"],
            "table ip kube-proxy {\n chain services {\n }\n}\n",
        )
        .unwrap();
    topo.node
        .exec_with_stdin(
            &["iptables-restore", "--noflush"],
            "*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n",
        )
        .unwrap();
}

fn has_kube_proxy_table(topo: &common::Topology) -> bool {
    let out = topo.node.exec(&["nft", "list", "tables"]).unwrap();
    String::from_utf8_lossy(&out.stdout).contains("table ip kube-proxy")
}

#[test]
fn the_takeover_is_recorded_once_and_kube_proxys_rules_written_again_are_reported_once_and_left() {
    let Some((topo, api)) = lab("evK") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    load_kube_proxy_rules(&topo);
    let _daemon = start_daemon(
        &topo,
        &api,
        &[
            "--replace-kube-proxy",
            "--sync-period",
            "1s",
            "--full-sync-period",
            "1s",
        ],
    );
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    assert!(!has_kube_proxy_table(&topo), "removed with the first sync");

    let replaced = eventually(Duration::from_secs(10), "the takeover's event", || {
        events(&api, "KubeProxyReplaced").pop()
    });
    assert_eq!(replaced["type"], "Normal");
    let note = replaced["note"].as_str().unwrap();
    assert!(note.contains("table ip kube-proxy"), "{note}");
    assert!(
        note.contains("iptables-nft: 1 chains and 1 jump rules in ip nat"),
        "{note}"
    );
    eventually(Duration::from_secs(10), "the gauge at zero", || {
        (foreign_rules(&topo, "nftables") == Some(0.0)).then_some(())
    });

    // kube-proxy, still running on the node, writes its rules again.
    load_kube_proxy_rules(&topo);
    let warning = eventually(Duration::from_secs(10), "a Warning", || {
        events(&api, "ForeignProxyRules").pop()
    });
    assert_eq!(warning["type"], "Warning");
    assert!(
        warning["note"].as_str().unwrap().contains("again"),
        "{warning}"
    );
    eventually(Duration::from_secs(10), "the gauge counting them", || {
        (foreign_rules(&topo, "nftables") == Some(1.0)
            && foreign_rules(&topo, "iptables-nft") == Some(1.0))
        .then_some(())
    });
    // Several full syncs later: left in place, said once.
    std::thread::sleep(Duration::from_secs(4));
    assert!(has_kube_proxy_table(&topo), "never fought over");
    assert_eq!(events(&api, "ForeignProxyRules").len(), 1);
    assert_eq!(events(&api, "KubeProxyReplaced").len(), 1);
    assert_eq!(backend(&topo, WEB).as_deref(), Some("pod-1"));
}

#[test]
fn a_takeover_the_kernel_refuses_is_warned_about_once_and_the_next_sync_follows_at_once() {
    let Some((topo, api)) = lab("evR") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let Some(_owned) = crate::takeover::OwnedKubeProxyTable::create(&topo.node) else {
        return;
    };
    // The default --sync-period (30s) would be the retry delay after any other failure.
    let _daemon = start_daemon(&topo, &api, &["--replace-kube-proxy"]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(10));
    let warning = eventually(Duration::from_secs(10), "a Warning", || {
        events(&api, "ForeignProxyRules").pop()
    });
    let note = warning["note"].as_str().unwrap();
    assert!(note.contains("could not be removed"), "{note}");
    assert!(has_kube_proxy_table(&topo), "left in place");
    assert!(events(&api, "KubeProxyReplaced").is_empty());
}
