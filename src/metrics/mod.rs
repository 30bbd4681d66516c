//! Metrics registry: kube-proxy's sync metrics (same names, types and buckets, so existing
//! dashboards and alerts keep working) plus kubenft's own, updated lock-free from the sync loop
//! and rendered in the Prometheus text exposition format (version 0.0.4).
//!
//! No HTTP here: the store, the Event recorder and the daemon update the registry, and `serve`
//! answers `/metrics` with its text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod exposition;
mod render;
#[cfg(test)]
mod tests;

use exposition::{
    AtomicF64, Histogram, escape_label, exponential_buckets, fmt_f64, header,
    network_programming_buckets, sync_duration_buckets,
};

pub(crate) use crate::sync::SyncKind;

/// The content type of [`Metrics::render`]'s output.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncResult {
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

/// The `protocol` label values of the loopback NodePort rejections, as Services spell them.
pub(crate) const LOCALHOST_REJECT_PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// kube-proxy's `ip_family` label values, in the order of the per-family arrays.
pub(crate) const IP_FAMILIES: [&str; 2] = ["IPv4", "IPv6"];

fn family_index(ip_family: &str) -> Option<usize> {
    let i = IP_FAMILIES.iter().position(|f| *f == ip_family);
    debug_assert!(i.is_some(), "unknown ip_family {ip_family}");
    i
}

/// Which kube-proxy probe endpoint answered (for `kubeproxy_proxy_{healthz,livez}_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    Healthz,
    Livez,
}

/// What became of one Event the daemon meant to record (`kubenft_events_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventOutcome {
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
pub(crate) struct ChangeCounts {
    pub service_changes_total: u64,
    pub service_changes_pending: u64,
    pub endpoint_changes_total: u64,
    pub endpoint_changes_pending: u64,
}

fn per_family<T>(f: impl Fn() -> T) -> [T; 2] {
    [f(), f()]
}

/// The kinds of `kubenft_foreign_proxy_rules`, and what each counts: kube-proxy's nftables
/// tables, its iptables-nft chains, IPVS virtual services (the `kube-ipvs0` interface counting
/// as one more), legacy iptables tables in use.
pub(crate) const FOREIGN_PROXY_KINDS: [&str; 4] =
    ["nftables", "iptables-nft", "ipvs", "iptables-legacy"];

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
    /// The userspace proxy's loopback NodePort listeners, by family as [`IP_FAMILIES`].
    localhost_nodeport_listeners: [AtomicU64; 2],
    localhost_nodeport_listener_failures: [AtomicU64; 2],
    /// By family, then protocol as [`LOCALHOST_REJECT_PROTOCOLS`].
    localhost_nodeport_rejected: [[AtomicU64; 3]; 2],
    nodeport_conflicts: AtomicU64,
    /// Indexed as [`FOREIGN_PROXY_KINDS`].
    foreign_proxy_rules: [AtomicU64; 4],
    /// Indexed as [`EventOutcome::ALL`].
    events: [AtomicU64; 4],
}

/// The daemon's metrics. Cloning is cheap and every clone updates the same registry; all
/// updates are atomic adds or stores, safe from any thread.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    inner: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
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
                localhost_nodeport_listeners: Default::default(),
                localhost_nodeport_listener_failures: Default::default(),
                localhost_nodeport_rejected: Default::default(),
                nodeport_conflicts: AtomicU64::new(0),
                foreign_proxy_rules: Default::default(),
                events: Default::default(),
            }),
        }
    }

    /// Records one finished sync attempt of the `ip_families` it programmed: its duration (in
    /// the overall and the per-kind histogram) and its outcome. A failure also counts as an
    /// nftables sync failure of each family.
    pub(crate) fn record_sync(
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
    pub(crate) fn observe_network_programming(&self, seconds: f64, ip_families: &[&str]) {
        for i in ip_families.iter().filter_map(|f| family_index(f)) {
            self.inner.network_programming[i].observe(seconds);
        }
    }

    /// Sets the Unix time (seconds) of the last successful sync of `ip_families`.
    pub(crate) fn set_last_sync_timestamp(&self, unix_seconds: f64, ip_families: &[&str]) {
        for i in ip_families.iter().filter_map(|f| family_index(f)) {
            self.inner.last_sync_timestamp[i].set(unix_seconds);
        }
    }

    /// Sets the Unix time (seconds) at which a sync of `ip_families` was last queued.
    pub(crate) fn set_last_queued_timestamp(&self, unix_seconds: f64, ip_families: &[&str]) {
        for i in ip_families.iter().filter_map(|f| family_index(f)) {
            self.inner.last_queued_timestamp[i].set(unix_seconds);
        }
    }

    /// Sets how many services of `ip_family` with a Local internal / external traffic policy
    /// have no local endpoint, as counted by the last sync (a gauge despite the `_total` name,
    /// like kube-proxy's).
    pub(crate) fn set_no_local_endpoints(&self, ip_family: &str, internal: u64, external: u64) {
        let Some(i) = family_index(ip_family) else {
            return;
        };
        let r = &self.inner;
        r.no_local_endpoints_internal[i].store(internal, Ordering::Relaxed);
        r.no_local_endpoints_external[i].store(external, Ordering::Relaxed);
    }

    /// Sets the Service and EndpointSlice change counts.
    pub(crate) fn set_changes(&self, c: ChangeCounts) {
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
    pub(crate) fn count_probe(&self, probe: Probe, code: u16) {
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
    /// Sets what another proxy (kube-proxy) has on the node, by kind of
    /// [`FOREIGN_PROXY_KINDS`], as found after the last full sync.
    pub(crate) fn set_foreign_proxy_rules(&self, counts: [u64; 4]) {
        for (gauge, n) in self.inner.foreign_proxy_rules.iter().zip(counts) {
            gauge.store(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn set_nodeport_conflicts(&self, n: u64) {
        self.inner.nodeport_conflicts.store(n, Ordering::Relaxed);
    }

    /// Counts what became of one Event.
    pub(crate) fn count_event(&self, outcome: EventOutcome) {
        let i = EventOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or_default();
        self.inner.events[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Records the size of one transaction sent to the kernel.
    pub(crate) fn observe_transaction(&self, operations: usize, bytes: usize) {
        self.inner.transaction_operations.observe(operations as f64);
        self.inner.transaction_bytes.observe(bytes as f64);
    }

    /// Records one family's conntrack reconciliation (`ip_family` is `IPv4` or `IPv6`): how long
    /// it took and how many entries it deleted.
    pub(crate) fn observe_conntrack_reconcile(&self, ip_family: &str, seconds: f64, deleted: u64) {
        let Some(i) = family_index(ip_family) else {
            return;
        };
        self.inner.conntrack_reconcile_duration[i].observe(seconds);
        self.inner.conntrack_deleted[i].fetch_add(deleted, Ordering::Relaxed);
    }

    /// Sets how many loopback NodePort listeners the userspace proxy has in `ip_family`.
    pub(crate) fn set_localhost_nodeport_listeners(&self, ip_family: &str, n: u64) {
        if let Some(i) = family_index(ip_family) {
            self.inner.localhost_nodeport_listeners[i].store(n, Ordering::Relaxed);
        }
    }

    /// Counts a loopback NodePort listener that could not be opened in `ip_family`.
    pub(crate) fn inc_localhost_nodeport_listener_failures(&self, ip_family: &str) {
        if let Some(i) = family_index(ip_family) {
            self.inner.localhost_nodeport_listener_failures[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sets the loopback NodePort packets of `protocol` (one of [`LOCALHOST_REJECT_PROTOCOLS`])
    /// rejected in `ip_family`, as the reject rule's counter holds them.
    pub(crate) fn set_localhost_nodeport_rejected(
        &self,
        ip_family: &str,
        protocol: &str,
        packets: u64,
    ) {
        let p = LOCALHOST_REJECT_PROTOCOLS
            .iter()
            .position(|p| *p == protocol);
        if let (Some(i), Some(p)) = (family_index(ip_family), p) {
            self.inner.localhost_nodeport_rejected[i][p].store(packets, Ordering::Relaxed);
        }
    }

    /// Counts an API object that could not be turned into rules (e.g. kind "Service").
    pub(crate) fn inc_objects_rejected(&self, kind: &str) {
        let mut map = self
            .inner
            .objects_rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *map.entry(kind.to_owned()).or_insert(0) += 1;
    }
}
