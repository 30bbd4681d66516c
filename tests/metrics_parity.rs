//! Every kube-proxy metric that applies to nftables mode is served by a running daemon with
//! kube-proxy's name, type and labels (the list restated from upstream's
//! pkg/proxy/metrics/metrics.go and the Kubernetes metrics reference, last checked against the
//! reference for v1.36); the metrics of other modes are listed with the reason they do not
//! apply.

use crate::harness;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::*;

/// (name, type, labels other than `le`) of kube-proxy's metrics in nftables mode.
const NFTABLES_MODE: &[(&str, &str, &[&str])] = &[
    (
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "histogram",
        &["ip_family"],
    ),
    (
        "kubeproxy_sync_full_proxy_rules_duration_seconds",
        "histogram",
        &["ip_family"],
    ),
    (
        "kubeproxy_sync_partial_proxy_rules_duration_seconds",
        "histogram",
        &["ip_family"],
    ),
    (
        "kubeproxy_network_programming_duration_seconds",
        "histogram",
        &["ip_family"],
    ),
    (
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "gauge",
        &["ip_family"],
    ),
    (
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "gauge",
        &["ip_family"],
    ),
    (
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
        "gauge",
        &[],
    ),
    (
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "counter",
        &[],
    ),
    (
        "kubeproxy_sync_proxy_rules_service_changes_pending",
        "gauge",
        &[],
    ),
    (
        "kubeproxy_sync_proxy_rules_service_changes_total",
        "counter",
        &[],
    ),
    (
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "counter",
        &["ip_family"],
    ),
    (
        "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
        "counter",
        &["ip_family"],
    ),
    (
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
        "gauge",
        &["ip_family", "traffic_policy"],
    ),
    ("kubeproxy_proxy_healthz_total", "counter", &["code"]),
    ("kubeproxy_proxy_livez_total", "counter", &["code"]),
    (
        "kubeproxy_conntrack_reconciler_sync_duration_seconds",
        "histogram",
        &["ip_family"],
    ),
    (
        "kubeproxy_conntrack_reconciler_deleted_entries_total",
        "counter",
        &["ip_family"],
    ),
    // 1.37, KubeProxyNFTablesLocalhostNodePorts (served whatever the gate: zero without it).
    (
        "kubeproxy_nftables_localhost_nodeport_listeners",
        "gauge",
        &["ip_family"],
    ),
    (
        "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total",
        "counter",
        &["ip_family"],
    ),
    (
        "kubeproxy_nftables_localhost_nodeport_rejected_packets_total",
        "counter",
        &["ip_family", "protocol"],
    ),
];

/// kube-proxy metrics of other modes, and why kubenft does not serve them.
const OTHER_MODES: &[(&str, &str)] = &[
    (
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
        "iptables and ipvs modes: counts iptables-restore failures",
    ),
    (
        "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
        "iptables mode: partial iptables-restore failures",
    ),
    (
        "kubeproxy_sync_proxy_rules_iptables_total",
        "iptables mode: rules per iptables table",
    ),
    (
        "kubeproxy_sync_proxy_rules_iptables_last",
        "iptables mode: rules written per iptables table",
    ),
    (
        "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
        "iptables mode: an nfacct counter of its ct-state-invalid drop rule",
    ),
    (
        "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
        "iptables mode: NodePorts on localhost through route_localnet; nftables mode serves \
         them with a userspace proxy and metrics of its own",
    ),
];

/// The buckets kube-proxy gives each histogram (the upper bounds, without +Inf).
fn buckets(name: &str) -> Vec<f64> {
    let exponential: Vec<f64> = (0..15).map(|i| 0.001 * 2f64.powi(i)).collect();
    if name == "kubeproxy_network_programming_duration_seconds" {
        let mut b = vec![0.0, 0.25, 0.5];
        b.extend((1..=59).map(f64::from));
        b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
        b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
        return b;
    }
    exponential
}

/// The label names of a sample line (`name{a="x",b="y"} v`), `le` left out.
fn label_names(line: &str) -> BTreeSet<String> {
    let Some((_, rest)) = line.split_once('{') else {
        return BTreeSet::new();
    };
    let labels = rest.split_once('}').map_or("", |(l, _)| l);
    labels
        .split(',')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
        .filter(|k| k != "le")
        .collect()
}

#[test]
fn every_kube_proxy_metric_of_nftables_mode_is_served_with_its_type_labels_and_buckets() {
    let Some((topo, api)) = lab("mtP") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let _daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    api.apply(slice("web", &[1, 2]));
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    // Probe both endpoints so their counters have a series.
    let healthz = addr("127.0.0.1:10256");
    eventually(Duration::from_secs(5), "healthz", || {
        http_get(&topo.node, healthz, "/healthz")
    });
    http_get(&topo.node, healthz, "/livez").expect("livez");

    let (status, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics").unwrap();
    assert_eq!(status, 200);
    for (name, kind, labels) in NFTABLES_MODE {
        assert!(
            page.lines().any(|l| l == format!("# TYPE {name} {kind}")),
            "{name} is served as a {kind}:\n{page}"
        );
        let series = if *kind == "histogram" {
            format!("{name}_bucket")
        } else {
            name.to_string()
        };
        let samples: Vec<&str> = page
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(&series)
                    .is_some_and(|r| r.starts_with([' ', '{']))
            })
            .collect();
        assert!(!samples.is_empty(), "{name} has samples:\n{page}");
        let want: BTreeSet<String> = labels.iter().map(|l| l.to_string()).collect();
        for s in &samples {
            assert_eq!(label_names(s), want, "labels of {s}");
        }
        if labels.contains(&"ip_family") {
            assert!(
                samples.iter().any(|s| s.contains("ip_family=\"IPv4\"")),
                "{name} has an IPv4 series"
            );
        }
        if *kind == "histogram" {
            let bounds: Vec<f64> = samples
                .iter()
                .filter(|s| s.contains("ip_family=\"IPv4\""))
                .filter_map(|s| s.split("le=\"").nth(1)?.split('"').next())
                .filter(|le| *le != "+Inf")
                .map(|le| le.parse().unwrap())
                .collect();
            let want = buckets(name);
            assert_eq!(bounds.len(), want.len(), "{name} bucket count");
            for (got, want) in bounds.iter().zip(&want) {
                assert!((got - want).abs() < 1e-9, "{name}: bucket {got} vs {want}");
            }
        }
    }
    // The sync that programmed the change is counted under the family it programmed.
    let synced = page
        .lines()
        .find_map(|l| {
            l.strip_prefix("kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} ")
        })
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!(synced >= 2.0, "{synced}");
    assert!(
        page.contains("kubeproxy_sync_proxy_rules_endpoint_changes_total ")
            && metric(&page, "kubeproxy_sync_proxy_rules_endpoint_changes_total").unwrap() >= 2.0,
        "the slice changes were counted:\n{page}"
    );
    assert!(page.contains("kubeproxy_proxy_healthz_total{code=\"200\"} "));

    for (name, why) in OTHER_MODES {
        assert!(!why.is_empty());
        assert!(
            !page.contains(&format!("# TYPE {name} ")),
            "{name} belongs to another mode ({why}) and is not served"
        );
    }
}
