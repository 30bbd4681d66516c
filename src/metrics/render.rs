//! The registry as Prometheus text: every metric with its HELP and TYPE lines, in a fixed
//! order, kube-proxy's under kube-proxy's names and labels.

use super::*;

impl Metrics {
    /// Renders every metric in the Prometheus text exposition format.
    pub(crate) fn render(&self) -> String {
        let r = &self.inner;
        let mut out = String::with_capacity(16 * 1024);
        histograms(&mut out, r);
        per_family_values(&mut out, r);
        unlabelled(&mut out, r);
        labelled_counters(&mut out, r);
        out
    }
}

/// The latency and size histograms, per family where kube-proxy keeps them per family.
fn histograms(out: &mut String, r: &Registry) {
    let per_family_histograms: [(&str, &str, &[Histogram; 2]); 5] = [
        (
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            &r.sync_duration,
        ),
        (
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            &r.sync_full_duration,
        ),
        (
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            &r.sync_partial_duration,
        ),
        (
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            &r.network_programming,
        ),
        (
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "ReconcileConntrackFlowsLatency latency in seconds",
            &r.conntrack_reconcile_duration,
        ),
    ];
    for (name, help, hs) in per_family_histograms {
        header(out, name, "histogram", help);
        for (family, h) in IP_FAMILIES.iter().zip(hs) {
            h.render_labelled(out, name, &format!("ip_family=\"{family}\""));
        }
    }

    for (name, help, h) in [
        (
            "kubenft_transaction_operations",
            "Number of operations in each nftables transaction sent to the kernel",
            &r.transaction_operations,
        ),
        (
            "kubenft_transaction_bytes",
            "Size in bytes of each netlink batch sent to the kernel",
            &r.transaction_bytes,
        ),
    ] {
        header(out, name, "histogram", help);
        h.render(out, name);
    }
}

/// Gauges and counters kube-proxy keeps per family.
fn per_family_values(out: &mut String, r: &Registry) {
    let name = "kubeproxy_nftables_localhost_nodeport_rejected_packets_total";
    header(
        out,
        name,
        "counter",
        "Loopback NodePort packets rejected because no userspace proxy serves them",
    );
    for (family, counts) in IP_FAMILIES.iter().zip(&r.localhost_nodeport_rejected) {
        for (protocol, n) in LOCALHOST_REJECT_PROTOCOLS.iter().zip(counts) {
            let _ = writeln!(
                out,
                "{name}{{ip_family=\"{family}\",protocol=\"{protocol}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
    }
    for (name, help, g) in [
        (
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            &r.last_sync_timestamp,
        ),
        (
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            &r.last_queued_timestamp,
        ),
    ] {
        header(out, name, "gauge", help);
        for (family, g) in IP_FAMILIES.iter().zip(g) {
            let _ = writeln!(out, "{name}{{ip_family=\"{family}\"}} {}", fmt_f64(g.get()));
        }
    }

    for (name, kind, help, c) in [
        (
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
            "counter",
            "Cumulative proxy nftables sync failures",
            &r.nftables_sync_failures,
        ),
        (
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
            "counter",
            "Cumulative proxy nftables cleanup failures",
            &r.nftables_cleanup_failures,
        ),
        (
            "kubeproxy_conntrack_reconciler_deleted_entries_total",
            "counter",
            "Cumulative conntrack flows deleted by conntrack reconciler",
            &r.conntrack_deleted,
        ),
        (
            "kubeproxy_nftables_localhost_nodeport_listeners",
            "gauge",
            "Number of loopback NodePort listeners of the userspace proxy",
            &r.localhost_nodeport_listeners,
        ),
        (
            "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total",
            "counter",
            "Cumulative loopback NodePort listeners the userspace proxy could not open",
            &r.localhost_nodeport_listener_failures,
        ),
    ] {
        header(out, name, kind, help);
        for (family, n) in IP_FAMILIES.iter().zip(c) {
            let _ = writeln!(
                out,
                "{name}{{ip_family=\"{family}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
    }

    let name = "kubeproxy_sync_proxy_rules_no_local_endpoints_total";
    header(
        out,
        name,
        "gauge",
        "Number of services with a Local traffic policy and no endpoints",
    );
    for (i, family) in IP_FAMILIES.iter().enumerate() {
        for (policy, v) in [
            ("external", &r.no_local_endpoints_external[i]),
            ("internal", &r.no_local_endpoints_internal[i]),
        ] {
            let _ = writeln!(
                out,
                "{name}{{ip_family=\"{family}\",traffic_policy=\"{policy}\"}} {}",
                v.load(Ordering::Relaxed)
            );
        }
    }
}

/// Change counts and other values without labels.
fn unlabelled(out: &mut String, r: &Registry) {
    for (name, kind, help, v) in [
        (
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "gauge",
            "Pending proxy rules Endpoint changes",
            &r.endpoint_changes_pending,
        ),
        (
            "kubeproxy_sync_proxy_rules_endpoint_changes_total",
            "counter",
            "Cumulative proxy rules Endpoint changes",
            &r.endpoint_changes_total,
        ),
        (
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "gauge",
            "Pending proxy rules Service changes",
            &r.service_changes_pending,
        ),
        (
            "kubeproxy_sync_proxy_rules_service_changes_total",
            "counter",
            "Cumulative proxy rules Service changes",
            &r.service_changes_total,
        ),
        (
            "kubenft_nodeport_conflicts",
            "gauge",
            "NodePorts that a process on the node also listens on, as found after the last sync",
            &r.nodeport_conflicts,
        ),
    ] {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
    }
}

/// Counters by status code, kind, outcome or sync kind and result.
fn labelled_counters(out: &mut String, r: &Registry) {
    for (name, help, codes) in [
        (
            "kubeproxy_proxy_healthz_total",
            "Cumulative proxy healthz HTTP status",
            &r.healthz,
        ),
        (
            "kubeproxy_proxy_livez_total",
            "Cumulative proxy livez HTTP status",
            &r.livez,
        ),
    ] {
        header(out, name, "counter", help);
        let codes = codes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (code, n) in codes {
            let _ = writeln!(out, "{name}{{code=\"{code}\"}} {n}");
        }
    }

    let name = "kubenft_objects_rejected_total";
    header(
        out,
        name,
        "counter",
        "API objects that could not be turned into rules, by kind",
    );
    let rejected = r
        .objects_rejected
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    for (kind, n) in rejected {
        let _ = writeln!(out, "{name}{{kind=\"{}\"}} {n}", escape_label(&kind));
    }

    let name = "kubenft_events_total";
    header(
        out,
        name,
        "counter",
        "Events the daemon meant to record, by what became of them",
    );
    for (outcome, n) in EventOutcome::ALL.iter().zip(&r.events) {
        let _ = writeln!(
            out,
            "{name}{{result=\"{}\"}} {}",
            outcome.label(),
            n.load(Ordering::Relaxed)
        );
    }

    let name = "kubenft_foreign_proxy_rules";
    header(
        out,
        name,
        "gauge",
        "What another proxy (kube-proxy) has on the node, by kind, as found after the last full sync",
    );
    for (kind, n) in super::FOREIGN_PROXY_KINDS
        .iter()
        .zip(&r.foreign_proxy_rules)
    {
        let _ = writeln!(
            out,
            "{name}{{kind=\"{kind}\"}} {}",
            n.load(Ordering::Relaxed)
        );
    }

    let name = "kubenft_sync_total";
    header(out, name, "counter", "Sync attempts by kind and result");
    for kind in [SyncKind::Full, SyncKind::Partial] {
        for result in [SyncResult::Success, SyncResult::Failure] {
            let k = matches!(kind, SyncKind::Partial) as usize;
            let s = matches!(result, SyncResult::Failure) as usize;
            let _ = writeln!(
                out,
                "{name}{{kind=\"{}\",result=\"{}\"}} {}",
                kind_label(kind),
                result.label(),
                r.syncs[k][s].load(Ordering::Relaxed)
            );
        }
    }
}

/// The `kind` label of a sync measurement.
fn kind_label(kind: SyncKind) -> &'static str {
    match kind {
        SyncKind::Full => "full",
        SyncKind::Partial => "partial",
    }
}
