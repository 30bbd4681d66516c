//! Metrics registry: kube-proxy's sync metrics (same names, types and buckets, so existing
//! dashboards and alerts keep working) plus kubenft's own, updated lock-free from the sync loop
//! and rendered in the Prometheus text exposition format (version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which kind of sync a measurement belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// The whole table was rebuilt and reconciled.
    Full,
    /// Only the changed services were re-programmed.
    Partial,
}

impl SyncKind {
    fn label(self) -> &'static str {
        match self {
            SyncKind::Full => "full",
            SyncKind::Partial => "partial",
        }
    }
}

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncResult {
    Success,
    Failure,
}

impl SyncResult {
    fn label(self) -> &'static str {
        match self {
            SyncResult::Success => "success",
            SyncResult::Failure => "failure",
        }
    }
}

/// A float stored in an `AtomicU64` as its bit pattern, so gauges and sums need no lock.
#[derive(Debug, Default)]
struct AtomicF64(AtomicU64);

impl AtomicF64 {
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }

    fn add(&self, v: f64) {
        // fetch_update retries on contention; the closure never refuses.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }
}

/// A Prometheus histogram with fixed upper bounds. Buckets are stored non-cumulatively (one
/// increment per observation) and summed up when rendered.
#[derive(Debug)]
struct Histogram {
    bounds: Vec<f64>,
    /// One slot per bound plus the +Inf overflow slot.
    buckets: Vec<AtomicU64>,
    sum: AtomicF64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: Vec<f64>) -> Self {
        debug_assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "bounds must increase"
        );
        let buckets = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            bounds,
            buckets,
            sum: AtomicF64::default(),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, v: f64) {
        // Prometheus buckets are "less than or equal": v lands in the first bound >= v.
        let slot = self.bounds.partition_point(|b| *b < v);
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.sum.add(v);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str) {
        self.render_labelled(out, name, "");
    }

    /// Renders the series with `labels` (`key="value",…`, already escaped) before `le`.
    fn render_labelled(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (bound, slot) in self.bounds.iter().zip(&self.buckets) {
            cumulative += slot.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{}\"}} {cumulative}",
                fmt_f64(*bound)
            );
        }
        cumulative += self.buckets[self.bounds.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let braced = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braced} {}", fmt_f64(self.sum.get()));
        // The count is read after the buckets; a concurrent observation may make it lead the
        // +Inf bucket by one for a scrape, which Prometheus tolerates. Report the larger.
        let count = self.count.load(Ordering::Relaxed).max(cumulative);
        let _ = writeln!(out, "{name}_count{braced} {count}");
    }
}

/// `count` bounds starting at `start`, each `factor` times the previous.
fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    std::iter::successors(Some(start), |b| Some(b * factor))
        .take(count)
        .collect()
}

/// `count` bounds starting at `start`, `width` apart.
fn linear_buckets(start: f64, width: f64, count: usize) -> Vec<f64> {
    (0..count).map(|i| start + width * i as f64).collect()
}

/// kube-proxy's sync-duration layout: 1 ms doubling up to ~16 s.
fn sync_duration_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 15)
}

/// kube-proxy's network-programming layout: a 0 bucket, 0.25 s and 0.5 s, each second to 59 s,
/// every 5 s to 115 s, then every 30 s to 5 minutes.
fn network_programming_buckets() -> Vec<f64> {
    let mut b = vec![0.0];
    b.extend(linear_buckets(0.25, 0.25, 2));
    b.extend(linear_buckets(1.0, 1.0, 59));
    b.extend(linear_buckets(60.0, 5.0, 12));
    b.extend(linear_buckets(120.0, 30.0, 7));
    b
}

/// Prometheus float formatting: integers without a fraction, specials as Prometheus spells them.
fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

/// Escapes a label value as the exposition format requires (backslash, quote, newline).
fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// kube-proxy's `ip_family` label values, in the order of the per-family arrays.
pub const IP_FAMILIES: [&str; 2] = ["IPv4", "IPv6"];

fn family_index(ip_family: &str) -> Option<usize> {
    let i = IP_FAMILIES.iter().position(|f| *f == ip_family);
    debug_assert!(i.is_some(), "unknown ip_family {ip_family}");
    i
}

/// Which kube-proxy probe endpoint answered (for `kubeproxy_proxy_{healthz,livez}_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Healthz,
    Livez,
}

/// What became of one Event the daemon meant to record (`kubenft_events_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    /// Created, or its series updated, in the API.
    Written,
    /// Folded into the series of an identical recent event; written later, or never if it
    /// does not recur.
    Aggregated,
    /// The API refused it or could not be reached.
    Failed,
    /// The queue to the writer was full (the API is slow or down).
    Dropped,
}

impl EventOutcome {
    const ALL: [EventOutcome; 4] = [
        EventOutcome::Written,
        EventOutcome::Aggregated,
        EventOutcome::Failed,
        EventOutcome::Dropped,
    ];

    fn label(self) -> &'static str {
        match self {
            EventOutcome::Written => "written",
            EventOutcome::Aggregated => "aggregated",
            EventOutcome::Failed => "failed",
            EventOutcome::Dropped => "dropped",
        }
    }
}

/// kube-proxy's change-tracker counts: changes seen since start, and services whose changes
/// wait for the next sync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeCounts {
    pub service_changes_total: u64,
    pub service_changes_pending: u64,
    pub endpoint_changes_total: u64,
    pub endpoint_changes_pending: u64,
}

fn per_family<T>(f: impl Fn() -> T) -> [T; 2] {
    [f(), f()]
}

#[derive(Debug)]
struct Registry {
    /// The sync metrics are kept per family, as kube-proxy keeps one proxier per family; one
    /// kubenft sync programs every active family at once and is recorded under each.
    sync_duration: [Histogram; 2],
    sync_full_duration: [Histogram; 2],
    sync_partial_duration: [Histogram; 2],
    network_programming: [Histogram; 2],
    last_sync_timestamp: [AtomicF64; 2],
    last_queued_timestamp: [AtomicF64; 2],
    nftables_sync_failures: [AtomicU64; 2],
    nftables_cleanup_failures: [AtomicU64; 2],
    no_local_endpoints_internal: [AtomicU64; 2],
    no_local_endpoints_external: [AtomicU64; 2],
    service_changes_total: AtomicU64,
    service_changes_pending: AtomicU64,
    endpoint_changes_total: AtomicU64,
    endpoint_changes_pending: AtomicU64,
    /// Probe answers by HTTP status code; few codes, so a lock is fine.
    healthz: Mutex<BTreeMap<u16, u64>>,
    livez: Mutex<BTreeMap<u16, u64>>,
    transaction_operations: Histogram,
    transaction_bytes: Histogram,
    /// Rejections are rare and keyed by free-form kind, so a lock is fine here.
    objects_rejected: Mutex<BTreeMap<String, u64>>,
    /// Indexed by [full, partial] x [success, failure].
    syncs: [[AtomicU64; 2]; 2],
    /// kube-proxy's conntrack reconciler metrics, indexed by family as [`IP_FAMILIES`].
    conntrack_reconcile_duration: [Histogram; 2],
    conntrack_deleted: [AtomicU64; 2],
    nodeport_conflicts: AtomicU64,
    /// Indexed as [`EventOutcome::ALL`].
    events: [AtomicU64; 4],
}

/// The daemon's metrics. Cloning is cheap and every clone updates the same registry; all
/// updates are atomic adds or stores, safe from any thread.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            inner: Arc::new(Registry {
                sync_duration: per_family(|| Histogram::new(sync_duration_buckets())),
                sync_full_duration: per_family(|| Histogram::new(sync_duration_buckets())),
                sync_partial_duration: per_family(|| Histogram::new(sync_duration_buckets())),
                network_programming: per_family(|| Histogram::new(network_programming_buckets())),
                last_sync_timestamp: Default::default(),
                last_queued_timestamp: Default::default(),
                nftables_sync_failures: Default::default(),
                nftables_cleanup_failures: Default::default(),
                no_local_endpoints_internal: Default::default(),
                no_local_endpoints_external: Default::default(),
                service_changes_total: AtomicU64::new(0),
                service_changes_pending: AtomicU64::new(0),
                endpoint_changes_total: AtomicU64::new(0),
                endpoint_changes_pending: AtomicU64::new(0),
                healthz: Mutex::new(BTreeMap::new()),
                livez: Mutex::new(BTreeMap::new()),
                // 1 .. 4^11 (~4M) operations: one service is a handful, a full sync of a big
                // cluster hundreds of thousands.
                transaction_operations: Histogram::new(exponential_buckets(1.0, 4.0, 12)),
                // 256 B .. 256 MiB of netlink batch.
                transaction_bytes: Histogram::new(exponential_buckets(256.0, 4.0, 11)),
                objects_rejected: Mutex::new(BTreeMap::new()),
                syncs: Default::default(),
                conntrack_reconcile_duration: per_family(
                    || Histogram::new(sync_duration_buckets()),
                ),
                conntrack_deleted: Default::default(),
                nodeport_conflicts: AtomicU64::new(0),
                events: Default::default(),
            }),
        }
    }

    /// Records one finished sync attempt of the `ip_families` it programmed: its duration (in
    /// the overall and the per-kind histogram) and its outcome. A failure also counts as an
    /// nftables sync failure of each family.
    pub fn record_sync(
        &self,
        kind: SyncKind,
        result: SyncResult,
        seconds: f64,
        ip_families: &[&str],
    ) {
        let r = &self.inner;
        for i in ip_families.iter().filter_map(|f| family_index(f)) {
            r.sync_duration[i].observe(seconds);
            match kind {
                SyncKind::Full => r.sync_full_duration[i].observe(seconds),
                SyncKind::Partial => r.sync_partial_duration[i].observe(seconds),
            }
            if result == SyncResult::Failure {
                r.nftables_sync_failures[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        let k = matches!(kind, SyncKind::Partial) as usize;
        let s = matches!(result, SyncResult::Failure) as usize;
        r.syncs[k][s].fetch_add(1, Ordering::Relaxed);
    }

    /// Records the time from a Service/EndpointSlice change to its rules being in the kernel.
    pub fn observe_network_programming(&self, seconds: f64, ip_families: &[&str]) {
        for i in ip_families.iter().filter_map(|f| family_index(f)) {
            self.inner.network_programming[i].observe(seconds);
        }
    }

    /// Sets the Unix time (seconds) of the last successful sync of `ip_families`.
    pub fn set_last_sync_timestamp(&self, unix_seconds: f64, ip_families: &[&str]) {
        for i in ip_families.iter().filter_map(|f| family_index(f)) {
            self.inner.last_sync_timestamp[i].set(unix_seconds);
        }
    }

    /// Sets the Unix time (seconds) at which a sync of `ip_families` was last queued.
    pub fn set_last_queued_timestamp(&self, unix_seconds: f64, ip_families: &[&str]) {
        for i in ip_families.iter().filter_map(|f| family_index(f)) {
            self.inner.last_queued_timestamp[i].set(unix_seconds);
        }
    }

    /// Sets how many services of `ip_family` with a Local internal / external traffic policy
    /// have no local endpoint, as counted by the last sync (a gauge despite the `_total` name,
    /// like kube-proxy's).
    pub fn set_no_local_endpoints(&self, ip_family: &str, internal: u64, external: u64) {
        let Some(i) = family_index(ip_family) else {
            return;
        };
        let r = &self.inner;
        r.no_local_endpoints_internal[i].store(internal, Ordering::Relaxed);
        r.no_local_endpoints_external[i].store(external, Ordering::Relaxed);
    }

    /// Sets the Service and EndpointSlice change counts.
    pub fn set_changes(&self, c: ChangeCounts) {
        let r = &self.inner;
        r.service_changes_total
            .store(c.service_changes_total, Ordering::Relaxed);
        r.service_changes_pending
            .store(c.service_changes_pending, Ordering::Relaxed);
        r.endpoint_changes_total
            .store(c.endpoint_changes_total, Ordering::Relaxed);
        r.endpoint_changes_pending
            .store(c.endpoint_changes_pending, Ordering::Relaxed);
    }

    /// Counts one answer of `/healthz` or `/livez` with HTTP status `code`.
    pub fn count_probe(&self, probe: Probe, code: u16) {
        let map = match probe {
            Probe::Healthz => &self.inner.healthz,
            Probe::Livez => &self.inner.livez,
        };
        *map.lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(code)
            .or_insert(0) += 1;
    }

    /// Sets how many NodePorts a local process also listens on.
    pub fn set_nodeport_conflicts(&self, n: u64) {
        self.inner.nodeport_conflicts.store(n, Ordering::Relaxed);
    }

    /// Counts what became of one Event.
    pub fn count_event(&self, outcome: EventOutcome) {
        let i = EventOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or_default();
        self.inner.events[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Records the size of one transaction sent to the kernel.
    pub fn observe_transaction(&self, operations: usize, bytes: usize) {
        self.inner.transaction_operations.observe(operations as f64);
        self.inner.transaction_bytes.observe(bytes as f64);
    }

    /// Records one family's conntrack reconciliation (`ip_family` is `IPv4` or `IPv6`): how long
    /// it took and how many entries it deleted.
    pub fn observe_conntrack_reconcile(&self, ip_family: &str, seconds: f64, deleted: u64) {
        let Some(i) = family_index(ip_family) else {
            return;
        };
        self.inner.conntrack_reconcile_duration[i].observe(seconds);
        self.inner.conntrack_deleted[i].fetch_add(deleted, Ordering::Relaxed);
    }

    /// Counts an API object that could not be turned into rules (e.g. kind "Service").
    pub fn inc_objects_rejected(&self, kind: &str) {
        let mut map = self
            .inner
            .objects_rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *map.entry(kind.to_owned()).or_insert(0) += 1;
    }

    /// Renders every metric in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let r = &self.inner;
        let mut out = String::with_capacity(16 * 1024);

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
            header(&mut out, name, "histogram", help);
            for (family, h) in IP_FAMILIES.iter().zip(hs) {
                h.render_labelled(&mut out, name, &format!("ip_family=\"{family}\""));
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
            header(&mut out, name, "histogram", help);
            h.render(&mut out, name);
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
            header(&mut out, name, "gauge", help);
            for (family, g) in IP_FAMILIES.iter().zip(g) {
                let _ = writeln!(out, "{name}{{ip_family=\"{family}\"}} {}", fmt_f64(g.get()));
            }
        }

        for (name, help, c) in [
            (
                "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
                "Cumulative proxy nftables sync failures",
                &r.nftables_sync_failures,
            ),
            (
                "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
                "Cumulative proxy nftables cleanup failures",
                &r.nftables_cleanup_failures,
            ),
            (
                "kubeproxy_conntrack_reconciler_deleted_entries_total",
                "Cumulative conntrack flows deleted by conntrack reconciler",
                &r.conntrack_deleted,
            ),
        ] {
            header(&mut out, name, "counter", help);
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
            &mut out,
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
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
        }

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
            header(&mut out, name, "counter", help);
            let codes = codes.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for (code, n) in codes {
                let _ = writeln!(out, "{name}{{code=\"{code}\"}} {n}");
            }
        }

        let name = "kubenft_objects_rejected_total";
        header(
            &mut out,
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
            &mut out,
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

        let name = "kubenft_sync_total";
        header(
            &mut out,
            name,
            "counter",
            "Sync attempts by kind and result",
        );
        for kind in [SyncKind::Full, SyncKind::Partial] {
            for result in [SyncResult::Success, SyncResult::Failure] {
                let k = matches!(kind, SyncKind::Partial) as usize;
                let s = matches!(result, SyncResult::Failure) as usize;
                let _ = writeln!(
                    out,
                    "{name}{{kind=\"{}\",result=\"{}\"}} {}",
                    kind.label(),
                    result.label(),
                    r.syncs[k][s].load(Ordering::Relaxed)
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
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
}
