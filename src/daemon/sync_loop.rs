//! The daemon's sync loop: it waits for the first complete list of every kind, brings the model
//! up to date with the store (ahead of a sync that must wait, so the sync itself converts only
//! the latest changes), syncs on kube-proxy's schedule (partial when the kernel holds what the
//! planner remembers, full otherwise), then reconciles conntrack and the healthCheckNodePort
//! servers and records the sync in the metrics, the health state, the log and Events.
//!
//! Guarantees: nothing is programmed before every kind was listed completely once; a failed
//! sync leaves the previous rules, is logged and counted, gives its change triggers back to the
//! store, and the sync after it is full; each rejected object and each NodePort conflict is
//! logged once while it lasts.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Node;
use tokio::sync::Notify;

use super::after_sync::{AfterSyncFacts, tcp_frontends};
use super::events::{Occurrence, Recorder};
use super::full_sync;
use super::localhost_nodeports::LocalhostNodePorts;
use super::lock;
use super::memory::release_freed_memory;
use super::ruleset_watch::{self, RulesetWatch};
use crate::cluster::{LiveState, ServiceRef};
use crate::config::RunSettings;
use crate::conntrack;
use crate::metrics::{self, Metrics, SyncResult};
use crate::nft::kernel::Nftables;
use crate::node_inputs::{add_local_addresses, log_nodeport_fallbacks, nodeport_fallbacks};
use crate::proxier::{IpFamily, Planner, ProxyConfig, families};
use crate::serve::{HealthCheckServers, HealthState};
use crate::source::store::ClusterStore;
use crate::sync::{Schedule, SyncKind, SyncReport, Syncer};
use crate::takeover::watch::Say;

/// How long changes may wait in the store before they are converted into the model ahead of
/// their sync: often enough that a sync finds only the last moments' changes to convert, seldom
/// enough that a burst is converted in one go.
const CONVERT_AHEAD_AFTER: Duration = Duration::from_millis(100);

/// Failed syncs in a row before a Warning event says so: one failure is retried at once and
/// usually passes; three mean something needs a look.
const FAILURES_BEFORE_EVENT: u32 = 3;

/// Where a sync's time went, for its log line. `seconds` is the sync up to and including the
/// commit: `model_seconds` of it brought the model up to date from the store, and the
/// report's kernel time was the transaction's round trip; planning and encoding are the rest.
/// The after-sync steps follow the commit.
struct SyncTimings {
    seconds: f64,
    model_seconds: f64,
    after_sync_seconds: f64,
    conntrack: ConntrackWork,
}

/// What the conntrack reconciler did after a sync, over both families.
#[derive(Debug, Default)]
struct ConntrackWork {
    seconds: f64,
    /// Whether the table was read at all ([`conntrack::Reconciler`] reads it only when a flow
    /// can have gone stale).
    read: bool,
    examined: usize,
    deleted: usize,
}

pub(super) struct SyncLoop {
    proxy: ProxyConfig,
    /// The `ip_family` labels of the tables the last sync programmed (kube-proxy keeps one
    /// proxier, and one set of sync metrics, per family).
    ip_families: Vec<&'static str>,
    events: Recorder,
    /// NodePorts a local process listens on, as last found (each logged once).
    nodeport_conflicts: BTreeSet<crate::nodeport_conflicts::Conflict>,
    /// Failed syncs since the last successful one.
    failures_in_a_row: u32,
    syncer: Syncer<Nftables>,
    /// Between syncs: whether another program took our rules away.
    ruleset_watch: RulesetWatch,
    /// When `ruleset_watch` looks next.
    next_ruleset_check: Instant,
    /// What has been said about kube-proxy's rules on the node.
    foreign_proxies: crate::takeover::watch::Watch,
    /// What the last successful sync planned, service by service, so the next one replans and
    /// sends only the services that changed.
    planner: Planner,
    schedule: Schedule,
    metrics: Metrics,
    health: HealthState,
    health_checks: HealthCheckServers,
    /// Loopback NodePorts (KubeProxyNFTablesLocalhostNodePorts).
    localhost_nodeports: LocalhostNodePorts,
    store: Arc<Mutex<ClusterStore>>,
    /// UDP services and local endpoints as of the last successful sync.
    after_sync: AfterSyncFacts,
    conntrack: conntrack::Reconciler,
    /// The cluster as of the last sync, kept up to date service by service (and ahead of the
    /// next sync, while it waits out `min_sync_period`).
    live: LiveState,
    /// The services converted into `live` since the last sync took its changes.
    converted: BTreeSet<ServiceRef>,
    /// When the store first had changes not yet converted into `live`.
    unconverted_since: Option<Instant>,
    /// Objects rejected at the last sync, so each rejection is logged and counted once.
    rejected_before: BTreeSet<(&'static str, String, String, String)>,
    /// The families whose NodePorts take every local address, as last logged: logged again
    /// only when this changes (a node IP appears, say).
    nodeport_fallbacks_logged: Vec<(IpFamily, &'static str)>,
}

impl SyncLoop {
    /// A loop that syncs `proxy`'s tables from `store` through `nft`; with
    /// `--replace-kube-proxy`, its first commit removes what kube-proxy left.
    pub(super) fn new(
        nft: Nftables,
        proxy: ProxyConfig,
        settings: &RunSettings,
        metrics: Metrics,
        health: HealthState,
        store: Arc<Mutex<ClusterStore>>,
        events: Recorder,
    ) -> SyncLoop {
        let after_sync = AfterSyncFacts::new(&proxy.hostname);
        let mut syncer = Syncer::new(nft, &proxy.table_name);
        let takeover = settings.replace_kube_proxy.then(|| {
            let takeover = crate::takeover::Takeover::new(&proxy.table_name);
            let outcome = takeover.outcome();
            syncer.lead_next_commit_with(Box::new(takeover));
            outcome
        });
        let ip_families = family_labels(&families(&Default::default(), &proxy));
        SyncLoop {
            nodeport_conflicts: BTreeSet::new(),
            ip_families,
            events,
            failures_in_a_row: 0,
            syncer,
            ruleset_watch: RulesetWatch::default(),
            next_ruleset_check: Instant::now(),
            foreign_proxies: crate::takeover::watch::Watch::new(takeover),
            planner: Planner::new(),
            proxy,
            schedule: Schedule::new(settings.periods),
            health: health.clone(),
            health_checks: HealthCheckServers::new(Vec::new(), health),
            localhost_nodeports: LocalhostNodePorts::new(metrics.clone()),
            metrics,
            store,
            after_sync,
            conntrack: conntrack::Reconciler::default(),
            live: LiveState::default(),
            converted: BTreeSet::new(),
            unconverted_since: None,
            rejected_before: BTreeSet::new(),
            nodeport_fallbacks_logged: Vec::new(),
        }
    }

    pub(super) async fn run(&mut self, wake: Arc<Notify>) {
        let mut announced_wait = false;
        let mut first_list_pending = true;
        loop {
            let synced = lock(&self.store).synced();
            if !synced {
                if !announced_wait {
                    tracing::info!("waiting for the first complete list of every kind");
                    announced_wait = true;
                }
                wake.notified().await;
                self.queued();
                continue;
            }
            if std::mem::take(&mut first_list_pending) {
                // Every list page has been decoded and dropped by now, leaving holes between
                // the store's kept objects; hand them back before the first sync allocates
                // the model, the plan and the batch, or the start-up peak holds both.
                release_freed_memory();
            }
            let now = Instant::now();
            let at = self.schedule.next_sync(now);
            // Changes that wait for the sync are converted ahead of it, so the sync itself
            // converts only the latest ones and programs them that much sooner. A sync that is
            // due (the first one, say) converts its changes itself: nothing waits there.
            let convert_at = self
                .unconverted_since
                .map(|t| (t + CONVERT_AHEAD_AFTER).max(now))
                .filter(|c| *c + CONVERT_AHEAD_AFTER < at);
            tokio::select! {
                () = wake.notified() => {
                    self.queued();
                    continue;
                }
                () = tokio::time::sleep_until(self.next_ruleset_check.into()) => {
                    self.check_ruleset();
                    continue;
                }
                () = tokio::time::sleep_until(convert_at.unwrap_or(at).into()) => {}
            }
            if convert_at.is_some() {
                self.convert_changes(|_| ());
                continue;
            }
            if self.sync_once().await == SyncKind::Full {
                release_freed_memory();
            }
        }
    }

    /// Brings the next sync forward if another program took our rules away since our last
    /// commit (`ruleset_watch`).
    fn check_ruleset(&mut self) {
        self.next_ruleset_check = Instant::now() + ruleset_watch::CHECK_EVERY;
        if let Some(missing) = self
            .ruleset_watch
            .missing_rules(&mut self.syncer, &self.planner)
        {
            tracing::warn!(%missing, "another program removed kubenft's rules; repairing them now");
            self.schedule.changed();
        }
    }

    fn queued(&mut self) {
        self.schedule.changed();
        self.unconverted_since.get_or_insert_with(Instant::now);
        let now = SystemTime::now();
        self.health.queued(now);
        self.metrics
            .set_last_queued_timestamp(unix_seconds(now), &self.ip_families);
    }

    /// One sync; returns whether it was (or fell back to) a full one.
    async fn sync_once(&mut self) -> SyncKind {
        // The duration covers the whole sync: bringing the model up to date too. The schedule
        // counts `min_sync_period` from the sync's end, after the after-sync steps, as
        // kube-proxy counts it from the end of its sync function (conntrack cleanup and the
        // health-check servers included).
        let started = Instant::now();
        let force_full = self.schedule.start(started);
        let (changed, triggers) = self.update_model();
        let model_seconds = started.elapsed().as_secs_f64();
        self.after_sync.changed(&changed);
        let mut proxy = self.proxy.clone();
        if let Err(e) = add_local_addresses(&mut proxy, self.live.state.node.as_ref()) {
            tracing::warn!(error = %e, "cannot read local addresses; NodePorts use the previous ones");
        }
        self.ip_families = family_labels(&families(&self.live.state, &proxy));
        self.report_rejected();
        let fallbacks = nodeport_fallbacks(&self.live.state, &proxy);
        if fallbacks != self.nodeport_fallbacks_logged {
            log_nodeport_fallbacks(&fallbacks, &self.live.state, &proxy);
            self.nodeport_fallbacks_logged = fallbacks;
        }

        // A partial sync needs our last commit to have succeeded (the kernel then holds what
        // the planner remembers); otherwise, or when the schedule asks, the sync is full.
        let mut attempted =
            if force_full || !self.syncer.has_generation() || !self.planner.has_plan() {
                SyncKind::Full
            } else {
                SyncKind::Partial
            };
        let mut partial = None;
        if attempted == SyncKind::Partial {
            let changes = self
                .planner
                .changes(&self.live.state, &proxy, Some(&changed));
            if self.planner.outgrown() {
                tracing::info!(
                    "a set needs more elements than its declared size; syncing fully to recreate it larger"
                );
            } else {
                partial =
                    tokio::task::block_in_place(|| self.syncer.sync_changes(changes)).transpose();
            }
        }
        let result = match partial {
            Some(result) => result,
            // Refused: the kernel may not hold what the planner remembers.
            None => {
                attempted = SyncKind::Full;
                self.full_sync(&proxy)
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        let now = SystemTime::now();
        match result {
            Ok(report) => {
                let after_started = Instant::now();
                // A full sync that sent anything rewrote rules the kernel held otherwise.
                let rules_repaired = report.kind == SyncKind::Full && report.ops > 0;
                let conntrack = self.after_sync(&proxy, rules_repaired).await;
                let after_sync_seconds = after_started.elapsed().as_secs_f64();
                let timings = SyncTimings {
                    seconds,
                    model_seconds,
                    after_sync_seconds,
                    conntrack,
                };
                if report.kind == SyncKind::Full {
                    self.watch_foreign_proxies();
                }
                self.succeeded(report, timings, now, &triggers);
            }
            Err(e) => {
                self.metrics.record_sync(
                    attempted,
                    SyncResult::Failure,
                    seconds,
                    &self.ip_families,
                );
                self.schedule.finished(Instant::now(), None);
                if self.foreign_proxies.abandoned_just_now() {
                    // Refused with the takeover it carried: the next sync goes without it.
                    self.schedule.retry_soon();
                }
                lock(&self.store).requeue_triggers(triggers);
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), retry_in = ?self.schedule.periods().sync_period, "sync failed; the previous rules stay in place");
                self.failures_in_a_row += 1;
                if self.failures_in_a_row >= FAILURES_BEFORE_EVENT {
                    let error = match std::error::Error::source(&e) {
                        Some(source) => format!("{e}: {source}"),
                        None => e.to_string(),
                    };
                    self.events.record(Occurrence::syncs_failing(
                        &self.proxy.hostname,
                        self.failures_in_a_row,
                        &error,
                    ));
                }
            }
        }
        attempted
    }

    /// Plans everything and brings the kernel to it. The kernel is read first, before planning,
    /// so that services keep the endpoint-map blocks and slots it already has (after a restart
    /// too): unchanged services then plan to unchanged rules and elements and nothing is sent
    /// for them (`full_sync`). If the read fails, the sync reads again.
    fn full_sync(&mut self, proxy: &ProxyConfig) -> Result<SyncReport, crate::sync::SyncError> {
        // Planning leaves its temporaries freed in heap holes that the batch, mapped on its
        // own, does not reuse: handed back before encoding, the peak holds one, not both.
        tokio::task::block_in_place(|| {
            full_sync::full_sync(
                &mut self.syncer,
                &mut self.planner,
                &self.live.state,
                proxy,
                release_freed_memory,
            )
        })
    }

    fn succeeded(
        &mut self,
        report: SyncReport,
        t: SyncTimings,
        now: SystemTime,
        triggers: &[SystemTime],
    ) {
        self.metrics.record_sync(
            report.kind,
            SyncResult::Success,
            t.seconds,
            &self.ip_families,
        );
        if report.ops > 0 {
            self.metrics.observe_transaction(report.ops, report.bytes);
            tracing::info!(
                kind = ?report.kind,
                ops = report.ops,
                bytes = report.bytes,
                seconds = t.seconds,
                model_seconds = t.model_seconds,
                kernel_seconds = report.kernel_time.as_secs_f64(),
                after_sync_seconds = t.after_sync_seconds,
                conntrack_read = t.conntrack.read,
                conntrack_seconds = t.conntrack.seconds,
                conntrack_examined = t.conntrack.examined,
                conntrack_deleted = t.conntrack.deleted,
                "synced"
            );
        } else {
            tracing::debug!(
                kind = ?report.kind,
                seconds = t.seconds,
                conntrack_read = t.conntrack.read,
                conntrack_seconds = t.conntrack.seconds,
                conntrack_examined = t.conntrack.examined,
                conntrack_deleted = t.conntrack.deleted,
                "synced; nothing to change"
            );
        }
        self.metrics
            .set_last_sync_timestamp(unix_seconds(now), &self.ip_families);
        self.health.synced(now);
        for t in triggers {
            if let Ok(d) = now.duration_since(*t) {
                self.metrics
                    .observe_network_programming(d.as_secs_f64(), &self.ip_families);
            }
        }
        self.schedule.finished(Instant::now(), Some(report.kind));
        self.failures_in_a_row = 0;
    }

    /// What follows a successful sync: stale UDP conntrack entries, healthCheckNodePorts,
    /// loopback NodePorts and the no-local-endpoints gauges.
    async fn after_sync(&mut self, proxy: &ProxyConfig, rules_repaired: bool) -> ConntrackWork {
        self.after_sync.update(&self.live.state);
        let conntrack = self.reconcile_conntrack(rules_repaired);
        self.check_nodeport_conflicts();
        let counts = self.after_sync.no_local_endpoints();
        for (family, (internal, external)) in metrics::IP_FAMILIES.iter().zip(counts) {
            self.metrics
                .set_no_local_endpoints(family, internal, external);
        }
        let state = &self.live.state;
        self.localhost_nodeports.after_sync(state, proxy);
        self.health_checks.set_addresses(
            proxy.health_check_addresses(&families(state, proxy), state.node.as_ref()),
        );
        if let Err(e) = self
            .health_checks
            .sync(self.after_sync.health_checks())
            .await
        {
            tracing::warn!(error = %e, "healthCheckNodePort servers not all open; retried at the next sync");
        }
        conntrack
    }

    /// Deletes stale UDP conntrack entries, if any can be stale (`conntrack::Reconciler`).
    fn reconcile_conntrack(&mut self, rules_repaired: bool) -> ConntrackWork {
        let started = Instant::now();
        let (reconciler, frontends) = (&mut self.conntrack, self.after_sync.frontends_mut());
        let reading =
            tokio::task::block_in_place(|| reconciler.after_sync(frontends, rules_repaired));
        let mut work = ConntrackWork {
            read: reading.is_some(),
            ..ConntrackWork::default()
        };
        if let Some(r) = reading {
            work.examined = r.examined.iter().sum();
            work.deleted = r.deleted();
            // One reading covers both families: each family's histogram gets its duration.
            for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
                let deleted = r.outcome.as_ref().map_or(0, |d| d[i].deleted);
                self.metrics.observe_conntrack_reconcile(
                    family.label(),
                    r.elapsed.as_secs_f64(),
                    deleted as u64,
                );
            }
            match &r.outcome {
                Ok(reports) => {
                    let (already_gone, failed) = reports
                        .iter()
                        .fold((0, 0), |(g, f), d| (g + d.already_gone, f + d.failed.len()));
                    if work.deleted + failed > 0 {
                        tracing::info!(
                            examined = work.examined,
                            deleted = work.deleted,
                            already_gone,
                            failed,
                            seconds = r.elapsed.as_secs_f64(),
                            "stale UDP conntrack entries deleted"
                        );
                    } else {
                        tracing::debug!(
                            examined = work.examined,
                            already_gone,
                            unfiltered = r.unfiltered,
                            seconds = r.elapsed.as_secs_f64(),
                            "conntrack reconciled; nothing stale"
                        );
                    }
                    for f in reports.iter().flat_map(|d| &d.failed) {
                        tracing::warn!(flow = %f.flow, error = %f.error, "stale conntrack entry not deleted");
                    }
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "conntrack reconciliation failed; retried at the next sync"
                ),
            }
        }
        if rules_repaired {
            self.delete_never_dnated(&mut work);
        }
        work.seconds = started.elapsed().as_secs_f64();
        work
    }

    /// After a sync that (re)wrote rules the kernel lacked: TCP flows that began meanwhile
    /// were never DNATed, and would keep a client reusing their source port from its service
    /// until they expire (`conntrack::delete_never_dnated`).
    fn delete_never_dnated(&mut self, work: &mut ConntrackWork) {
        let frontends = tcp_frontends(&self.live.state);
        if frontends.is_empty() {
            return; // nothing to read, and no reading to report
        }
        let r = tokio::task::block_in_place(|| conntrack::delete_never_dnated(&frontends));
        work.read = true;
        work.examined += r.examined.iter().sum::<usize>();
        work.deleted += r.deleted();
        match &r.outcome {
            Ok(_) if r.deleted() > 0 => tracing::info!(
                deleted = r.deleted(),
                seconds = r.elapsed.as_secs_f64(),
                "TCP conntrack entries begun while the rules were missing deleted"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                error = %e,
                "TCP conntrack entries begun while the rules were missing not read; they expire by themselves"
            ),
        }
        for f in r.outcome.iter().flatten().flat_map(|d| &d.failed) {
            tracing::warn!(flow = %f.flow, error = %f.error, "stale conntrack entry not deleted");
        }
    }

    /// After a full sync: what kube-proxy has on the node, counted in the gauge, each kind of
    /// finding said once (`takeover::watch`).
    fn watch_foreign_proxies(&mut self) {
        let leftovers = match crate::takeover::survey(self.syncer.outline(), &self.proxy.table_name)
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list other programs' tables for kube-proxy's rules");
                return;
            }
        };
        let unreachable = crate::takeover::unreachable::Unreachable::survey();
        let finding = self.foreign_proxies.observe(&leftovers, &unreachable);
        self.metrics.set_foreign_proxy_rules(finding.counts);
        let node = &self.proxy.hostname;
        for say in finding.say {
            match say {
                Say::Replaced(removed) => self
                    .events
                    .record(Occurrence::kube_proxy_replaced(node, &removed)),
                Say::Warn(note) => {
                    tracing::warn!("{note}");
                    self.events
                        .record(Occurrence::foreign_proxy_rules(node, note));
                }
                Say::Beside(note) => tracing::info!("{note}"),
            }
        }
    }

    /// Brings the model up to date with the store for a sync: returns the services converted
    /// since the last sync took its changes (every one at the first sync) and the
    /// change-trigger times to observe, taken together so no trigger comes without its change.
    fn update_model(&mut self) -> (BTreeSet<ServiceRef>, Vec<SystemTime>) {
        let triggers = self.convert_changes(ClusterStore::take_triggers);
        (std::mem::take(&mut self.converted), triggers)
    }

    /// Re-converts the services whose objects changed since the last conversion, and the
    /// node's facts, then calls `then` on the store, still locked.
    fn convert_changes<T>(&mut self, then: impl FnOnce(&mut ClusterStore) -> T) -> T {
        let store = self.store.clone();
        let mut store = lock(&store);
        let changed = store.update_model(&mut self.live, &self.proxy.hostname);
        if !self.proxy.serve_external_ips {
            self.live.state.withhold_external_ips(&changed);
        }
        self.converted.extend(changed);
        self.unconverted_since = None;
        self.health
            .set_node_eligible(node_eligible(store.node(&self.proxy.hostname).as_ref()));
        then(&mut store)
    }

    /// Warns once about each NodePort a local process also listens on, and counts them.
    fn check_nodeport_conflicts(&mut self) {
        use crate::nodeport_conflicts::{conflicts, node_port_range, read_listeners};
        let listeners = node_port_range(&self.live.state)
            .map(|ports| read_listeners(&ports))
            .unwrap_or_default();
        let found = conflicts(&self.live.state, &listeners);
        for c in found.difference(&self.nodeport_conflicts) {
            tracing::warn!(service = %c.service, node_port = c.node_port, protocol = ?c.listener.protocol, address = %c.listener.addr, "a local process listens on a NodePort's port; the Service takes its traffic");
        }
        let ports: BTreeSet<_> = found
            .iter()
            .map(|c| (c.listener.protocol, c.node_port))
            .collect();
        self.metrics.set_nodeport_conflicts(ports.len() as u64);
        self.nodeport_conflicts = found;
    }

    fn report_rejected(&mut self) {
        let now: BTreeSet<_> = self
            .live
            .rejected()
            .map(|r| {
                (
                    r.kind,
                    r.namespace.clone(),
                    r.name.clone(),
                    r.reason.clone(),
                )
            })
            .collect();
        for (kind, namespace, name, reason) in now.difference(&self.rejected_before) {
            tracing::warn!(%kind, %namespace, %name, %reason, "skipped: the object, or the part of it the reason names; everything else is unaffected");
            self.metrics.inc_objects_rejected(kind);
            self.events
                .record(Occurrence::rejected(kind, namespace, name, reason));
        }
        self.rejected_before = now;
    }
}

/// kube-proxy's `ip_family` label values of `families`.
fn family_labels(families: &[IpFamily]) -> Vec<&'static str> {
    families.iter().map(|f| f.label()).collect()
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// False once the Node is being deleted or the cluster autoscaler marked it for deletion, so
/// load balancers drain it (kube-proxy's `nodeEligible`).
fn node_eligible(node: Option<&Node>) -> bool {
    let Some(node) = node else {
        return true;
    };
    let deleting = node.metadata.deletion_timestamp.is_some();
    let to_be_deleted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == "ToBeDeletedByClusterAutoscaler"));
    !(deleting || to_be_deleted)
}
