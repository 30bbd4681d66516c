//! The registry's text: help and type lines, buckets, labels, and concurrent updates.

use super::*;

const V4: &[&str] = &["IPv4"];

/// The value of the sample line that starts with `series ` in `text`.
fn sample(text: &str, series: &str) -> String {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
        .to_owned()
}

#[test]
fn every_metric_has_help_and_type_lines_with_its_kind() {
    let text = Metrics::new().render();
    for (name, kind) in [
        ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram"),
        (
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "histogram",
        ),
        (
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "histogram",
        ),
        (
            "kubeproxy_network_programming_duration_seconds",
            "histogram",
        ),
        ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"),
        (
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "gauge",
        ),
        (
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
            "counter",
        ),
        (
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "gauge",
        ),
        (
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "histogram",
        ),
        (
            "kubeproxy_conntrack_reconciler_deleted_entries_total",
            "counter",
        ),
        ("kubenft_transaction_operations", "histogram"),
        ("kubenft_transaction_bytes", "histogram"),
        ("kubenft_objects_rejected_total", "counter"),
        ("kubenft_sync_total", "counter"),
    ] {
        let type_line = format!("# TYPE {name} {kind}");
        let help_prefix = format!("# HELP {name} ");
        let lines: Vec<&str> = text.lines().collect();
        let t = lines
            .iter()
            .position(|l| *l == type_line)
            .unwrap_or_else(|| panic!("missing `{type_line}`"));
        assert!(
            t > 0 && lines[t - 1].starts_with(&help_prefix),
            "HELP must precede TYPE for {name}"
        );
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("# TYPE "))
                .filter(|l| l.split(' ').nth(2) == Some(name))
                .count(),
            1,
            "{name} declared once"
        );
    }
}

#[test]
fn histogram_buckets_are_cumulative_and_end_with_inf_sum_and_count() {
    let m = Metrics::new();
    m.record_sync(SyncKind::Full, SyncResult::Success, 0.0005, V4);
    m.record_sync(SyncKind::Full, SyncResult::Success, 0.003, V4);
    m.record_sync(SyncKind::Partial, SyncResult::Success, 0.004, V4);
    m.record_sync(SyncKind::Partial, SyncResult::Success, 100.0, V4);
    let text = m.render();
    let n = "kubeproxy_sync_proxy_rules_duration_seconds";
    assert_eq!(
        sample(
            &text,
            &format!("{n}_bucket{{ip_family=\"IPv4\",le=\"0.001\"}}")
        ),
        "1"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{n}_bucket{{ip_family=\"IPv4\",le=\"0.002\"}}")
        ),
        "1"
    );
    // 0.004 sits exactly on a bound: buckets are "less than or equal".
    assert_eq!(
        sample(
            &text,
            &format!("{n}_bucket{{ip_family=\"IPv4\",le=\"0.004\"}}")
        ),
        "3"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{n}_bucket{{ip_family=\"IPv4\",le=\"16.384\"}}")
        ),
        "3"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{n}_bucket{{ip_family=\"IPv4\",le=\"+Inf\"}}")
        ),
        "4"
    );
    assert_eq!(
        sample(&text, &format!("{n}_count{{ip_family=\"IPv4\"}}")),
        "4"
    );
    let sum: f64 = sample(&text, &format!("{n}_sum{{ip_family=\"IPv4\"}}"))
        .parse()
        .unwrap();
    assert!((sum - 100.0075).abs() < 1e-9, "sum {sum}");

    let full = "kubeproxy_sync_full_proxy_rules_duration_seconds";
    assert_eq!(
        sample(&text, &format!("{full}_count{{ip_family=\"IPv4\"}}")),
        "2"
    );
    let partial = "kubeproxy_sync_partial_proxy_rules_duration_seconds";
    assert_eq!(
        sample(
            &text,
            &format!("{partial}_bucket{{ip_family=\"IPv4\",le=\"0.004\"}}")
        ),
        "1"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{partial}_bucket{{ip_family=\"IPv4\",le=\"+Inf\"}}")
        ),
        "2"
    );
}

#[test]
fn bucket_layouts_match_kube_proxy() {
    let sync = sync_duration_buckets();
    assert_eq!(sync.len(), 15);
    assert_eq!(sync[0], 0.001);
    assert!((sync[14] - 16.384).abs() < 1e-12);

    let np = network_programming_buckets();
    assert_eq!(np.len(), 1 + 2 + 59 + 12 + 7);
    assert_eq!(&np[..4], &[0.0, 0.25, 0.5, 1.0]);
    assert_eq!(np[61], 59.0);
    assert_eq!(np[62], 60.0);
    assert_eq!(np[73], 115.0);
    assert_eq!(np[74], 120.0);
    assert_eq!(*np.last().unwrap(), 300.0);
    assert!(np.windows(2).all(|w| w[0] < w[1]));

    let text = Metrics::new().render();
    let n = "kubeproxy_network_programming_duration_seconds_bucket";
    let les: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{n}{{ip_family=\"IPv4\"")))
        .map(|l| l.split("le=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(les.first(), Some(&"0"));
    assert_eq!(les.get(1), Some(&"0.25"));
    assert_eq!(les.last(), Some(&"+Inf"));
}

#[test]
fn failed_syncs_count_as_nftables_failures_and_by_kind_and_result() {
    let m = Metrics::new();
    m.record_sync(SyncKind::Full, SyncResult::Failure, 0.1, V4);
    m.record_sync(SyncKind::Partial, SyncResult::Failure, 0.1, V4);
    m.record_sync(SyncKind::Partial, SyncResult::Success, 0.1, V4);
    m.record_sync(SyncKind::Partial, SyncResult::Success, 0.1, V4);
    let text = m.render();
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"}"
        ),
        "2"
    );
    let s = "kubenft_sync_total";
    assert_eq!(
        sample(&text, &format!("{s}{{kind=\"full\",result=\"success\"}}")),
        "0"
    );
    assert_eq!(
        sample(&text, &format!("{s}{{kind=\"full\",result=\"failure\"}}")),
        "1"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{s}{{kind=\"partial\",result=\"success\"}}")
        ),
        "2"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{s}{{kind=\"partial\",result=\"failure\"}}")
        ),
        "1"
    );
}

#[test]
fn gauges_report_the_last_value_set() {
    let m = Metrics::new();
    m.set_last_sync_timestamp(1_700_000_000.5, V4);
    m.set_last_sync_timestamp(1_700_000_001.25, V4);
    m.set_last_queued_timestamp(1_700_000_002.0, V4);
    m.set_no_local_endpoints("IPv4", 3, 1);
    m.set_no_local_endpoints("IPv4", 2, 0);
    let text = m.render();
    assert_eq!(
        sample(
            &text,
            &format!(
                "{}{{ip_family=\"IPv4\"}}",
                "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
            )
        ),
        "1700000001.25"
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"}"
        ),
        "1700000002"
    );
    let n = "kubeproxy_sync_proxy_rules_no_local_endpoints_total";
    assert_eq!(
        sample(
            &text,
            &format!("{n}{{ip_family=\"IPv4\",traffic_policy=\"internal\"}}")
        ),
        "2"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{n}{{ip_family=\"IPv4\",traffic_policy=\"external\"}}")
        ),
        "0"
    );
}

#[test]
fn rejected_objects_are_counted_per_kind_with_escaped_labels() {
    let m = Metrics::new();
    m.inc_objects_rejected("Service");
    m.inc_objects_rejected("Service");
    m.inc_objects_rejected("Endpoint\"Slice");
    let text = m.render();
    let n = "kubenft_objects_rejected_total";
    assert_eq!(sample(&text, &format!("{n}{{kind=\"Service\"}}")), "2");
    assert_eq!(
        sample(&text, &format!("{n}{{kind=\"Endpoint\\\"Slice\"}}")),
        "1"
    );
}

#[test]
fn transaction_sizes_land_in_their_buckets() {
    let m = Metrics::new();
    m.observe_transaction(5, 300);
    m.observe_transaction(1, 100);
    let text = m.render();
    let ops = "kubenft_transaction_operations";
    assert_eq!(sample(&text, &format!("{ops}_bucket{{le=\"1\"}}")), "1");
    assert_eq!(sample(&text, &format!("{ops}_bucket{{le=\"4\"}}")), "1");
    assert_eq!(sample(&text, &format!("{ops}_bucket{{le=\"16\"}}")), "2");
    assert_eq!(sample(&text, &format!("{ops}_sum")), "6");
    let bytes = "kubenft_transaction_bytes";
    assert_eq!(sample(&text, &format!("{bytes}_bucket{{le=\"256\"}}")), "1");
    assert_eq!(
        sample(&text, &format!("{bytes}_bucket{{le=\"1024\"}}")),
        "2"
    );
}

#[test]
fn updates_from_many_threads_are_all_counted() {
    let m = Metrics::new();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    m.record_sync(SyncKind::Partial, SyncResult::Success, 0.25, V4);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let text = m.render();
    let n = "kubeproxy_sync_proxy_rules_duration_seconds";
    assert_eq!(
        sample(&text, &format!("{n}_count{{ip_family=\"IPv4\"}}")),
        "4000"
    );
    assert_eq!(
        sample(&text, &format!("{n}_sum{{ip_family=\"IPv4\"}}")),
        "1000"
    );
}

#[test]
fn conntrack_reconciler_metrics_are_kept_per_ip_family_with_sync_buckets() {
    let m = Metrics::new();
    m.observe_conntrack_reconcile("IPv4", 0.003, 2);
    m.observe_conntrack_reconcile("IPv4", 0.0005, 0);
    m.observe_conntrack_reconcile("IPv6", 20.0, 1);
    let text = m.render();
    let d = "kubeproxy_conntrack_reconciler_sync_duration_seconds";
    assert_eq!(
        sample(
            &text,
            &format!("{d}_bucket{{ip_family=\"IPv4\",le=\"0.001\"}}")
        ),
        "1"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{d}_bucket{{ip_family=\"IPv4\",le=\"0.004\"}}")
        ),
        "2"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{d}_bucket{{ip_family=\"IPv4\",le=\"16.384\"}}")
        ),
        "2"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{d}_bucket{{ip_family=\"IPv6\",le=\"16.384\"}}")
        ),
        "0"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{d}_bucket{{ip_family=\"IPv6\",le=\"+Inf\"}}")
        ),
        "1"
    );
    assert_eq!(
        sample(&text, &format!("{d}_count{{ip_family=\"IPv4\"}}")),
        "2"
    );
    assert_eq!(
        sample(&text, &format!("{d}_sum{{ip_family=\"IPv6\"}}")),
        "20"
    );
    let n = "kubeproxy_conntrack_reconciler_deleted_entries_total";
    assert_eq!(sample(&text, &format!("{n}{{ip_family=\"IPv4\"}}")), "2");
    assert_eq!(sample(&text, &format!("{n}{{ip_family=\"IPv6\"}}")), "1");
}
