//! Events (events.k8s.io/v1) recorded as kube-proxy records them: a Normal `Starting` event on
//! the Node when the daemon starts (kube-proxy's "birth cry"), and Warnings for objects it had
//! to skip, for syncs that keep failing, for a healthz or metrics server that cannot start,
//! and for a kernel that cannot run the ruleset.
//!
//! Guarantees: recording never blocks and never fails the caller. Events go through a bounded
//! queue to a writer task of their own; a full queue drops the event, a refused or failed
//! write is logged; both are counted (`kubenft_events_total`). Identical events (same object,
//! type, reason and action) within [`Limits::interval`] are folded into the first one's
//! `series`, as client-go's recorder aggregates them, so a condition that persists writes at
//! most once per interval.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::{EventOutcome, Metrics};

/// The `reportingController` of every event, and the prefix of `reportingInstance`
/// (`kubenft-NODE`, as client-go's recorder names an instance).
pub(crate) const REPORTING_CONTROLLER: &str = "kubenft";

/// kube-proxy's reason and action for the event at start.
pub(crate) const REASON_STARTING: &str = "Starting";
pub(crate) const ACTION_START: &str = "StartKubeProxy";
/// A Service, EndpointSlice or ServiceCIDR (or the part of it the note names) was skipped.
pub(crate) const REASON_REJECTED: &str = "RejectedObject";
/// The kernel refused the start-up probe; the daemon exits without changing anything.
pub(crate) const REASON_KERNEL_UNSUPPORTED: &str = "KernelUnsupported";
/// Several syncs in a row failed; the previous rules stay in place.
pub(crate) const REASON_SYNC_FAILING: &str = "SyncProxyRulesFailed";
/// kube-proxy's reasons (with `bindAddressHardFail`, which kubenft always has) for a healthz
/// or metrics server that cannot start; the daemon exits.
pub(crate) const REASON_HEALTHZ_FAILED: &str = "FailedToStartProxierHealthcheck";
pub(crate) const REASON_METRICS_FAILED: &str = "FailedToStartMetricServer";
/// kubenft's own: kube-proxy's rules removed with the first sync (`--replace-kube-proxy`).
pub(crate) const REASON_KUBE_PROXY_REPLACED: &str = "KubeProxyReplaced";
/// kubenft's own: another proxy's rules are on the node (back after the takeover, or where
/// nf_tables cannot reach).
pub(crate) const REASON_FOREIGN_PROXY_RULES: &str = "ForeignProxyRules";
pub(crate) const ACTION_SYNC: &str = "SyncProxyRules";

/// The API server refuses notes longer than this.
const MAX_NOTE_BYTES: usize = 1024;

/// `Normal` or `Warning`, the only two types the API accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Regarding {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl Regarding {
    /// This node, as kube-proxy refers to it (no namespace).
    pub(crate) fn node(name: &str) -> Regarding {
        Regarding {
            api_version: "v1",
            kind: "Node",
            namespace: String::new(),
            name: name.to_string(),
        }
    }

    /// An object of one of the kinds the daemon reads (`kind` as the model names it).
    pub(crate) fn object(kind: &'static str, namespace: &str, name: &str) -> Regarding {
        let api_version = match kind {
            "EndpointSlice" => "discovery.k8s.io/v1",
            "ServiceCIDR" => "networking.k8s.io/v1",
            _ => "v1",
        };
        Regarding {
            api_version,
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// One thing that happened, to be recorded as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Occurrence {
    pub regarding: Regarding,
    pub event_type: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

impl Occurrence {
    /// kube-proxy's event at start: Normal, reason `Starting`, action `StartKubeProxy`, no note.
    pub(crate) fn starting(node: &str) -> Occurrence {
        Occurrence {
            regarding: Regarding::node(node),
            event_type: EventType::Normal,
            reason: REASON_STARTING,
            action: ACTION_START,
            note: String::new(),
        }
    }

    /// An object skipped for `reason`.
    pub(crate) fn rejected(
        kind: &'static str,
        namespace: &str,
        name: &str,
        reason: &str,
    ) -> Occurrence {
        Occurrence {
            regarding: Regarding::object(kind, namespace, name),
            event_type: EventType::Warning,
            reason: REASON_REJECTED,
            action: ACTION_SYNC,
            note: format!("skipped by kubenft, everything else is proxied: {reason}"),
        }
    }

    /// `failures` syncs in a row failed, the last with `error`.
    pub(crate) fn syncs_failing(node: &str, failures: u32, error: &str) -> Occurrence {
        Occurrence {
            regarding: Regarding::node(node),
            event_type: EventType::Warning,
            reason: REASON_SYNC_FAILING,
            action: ACTION_SYNC,
            note: format!(
                "{failures} syncs in a row failed; the previous rules stay in place: {error}"
            ),
        }
    }

    /// kube-proxy's rules (`removed`) went in the same transaction as the first sync.
    pub(crate) fn kube_proxy_replaced(node: &str, removed: &str) -> Occurrence {
        Occurrence {
            regarding: Regarding::node(node),
            event_type: EventType::Normal,
            reason: REASON_KUBE_PROXY_REPLACED,
            action: ACTION_SYNC,
            note: format!(
                "kube-proxy's rules removed in the same transaction as kubenft's first sync: {removed}"
            ),
        }
    }

    /// Another proxy's rules are on the node: `note` says which, and what kubenft does.
    pub(crate) fn foreign_proxy_rules(node: &str, note: String) -> Occurrence {
        Occurrence {
            regarding: Regarding::node(node),
            event_type: EventType::Warning,
            reason: REASON_FOREIGN_PROXY_RULES,
            action: ACTION_SYNC,
            note,
        }
    }

    /// The `/healthz` (`healthz`) or `/metrics` server could not start, for `error`.
    pub(crate) fn server_failed(node: &str, healthz: bool, error: &str) -> Occurrence {
        Occurrence {
            regarding: Regarding::node(node),
            event_type: EventType::Warning,
            reason: if healthz {
                REASON_HEALTHZ_FAILED
            } else {
                REASON_METRICS_FAILED
            },
            action: ACTION_START,
            note: error.to_string(),
        }
    }

    /// The kernel refused the start-up probe, for `reason`.
    pub(crate) fn kernel_unsupported(node: &str, reason: &str) -> Occurrence {
        Occurrence {
            regarding: Regarding::node(node),
            event_type: EventType::Warning,
            reason: REASON_KERNEL_UNSUPPORTED,
            action: ACTION_START,
            note: reason.to_string(),
        }
    }

    /// What makes two occurrences the same event. The note is left out: a failing sync's
    /// error text may differ each time and must not defeat the rate limit.
    fn key(&self) -> Key {
        (
            self.regarding.clone(),
            self.event_type,
            self.reason,
            self.action,
        )
    }
}

type Key = (Regarding, EventType, &'static str, &'static str);

/// How often one event may be written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// At most one write (the create, then series updates) per event and interval.
    pub interval: Duration,
    /// An event not seen for this long is finished: the next occurrence creates a new one
    /// (client-go finishes a series after 6 minutes).
    pub expiry: Duration,
    /// Occurrences waiting for the writer; more are dropped.
    pub queue: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            interval: Duration::from_secs(60),
            expiry: Duration::from_secs(6 * 60),
            queue: 256,
        }
    }
}

/// What to do with one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Create a new event with this name.
    Create { name: String },
    /// Update the series of the event `name`: `count` occurrences so far.
    Series { name: String, count: u32 },
    /// Folded into the existing event; written with a later occurrence.
    Fold,
}

#[derive(Debug)]
struct Series {
    name: String,
    count: u32,
    last_seen: Instant,
    last_write: Instant,
}

/// The rate limit as a pure state machine over (event, time): no I/O, no clock of its own.
#[derive(Debug, Default)]
pub(crate) struct Limiter {
    limits: Limits,
    series: HashMap<Key, Series>,
    created: u64,
}

impl Limiter {
    pub(crate) fn new(limits: Limits) -> Limiter {
        Limiter {
            limits,
            ..Limiter::default()
        }
    }

    /// Decides what to write for `occurrence` seen at `now`.
    pub(crate) fn observe(&mut self, occurrence: &Occurrence, now: Instant) -> Write {
        let limits = self.limits;
        self.series
            .retain(|_, s| now.duration_since(s.last_seen) < limits.expiry);
        let key = occurrence.key();
        if let Some(s) = self.series.get_mut(&key) {
            s.count += 1;
            s.last_seen = now;
            if now.duration_since(s.last_write) < limits.interval {
                return Write::Fold;
            }
            s.last_write = now;
            return Write::Series {
                name: s.name.clone(),
                count: s.count,
            };
        }
        self.created += 1;
        let name = event_name(&occurrence.regarding.name, self.created);
        self.series.insert(
            key,
            Series {
                name: name.clone(),
                count: 1,
                last_seen: now,
                last_write: now,
            },
        );
        Write::Create { name }
    }

    /// Forgets `occurrence`'s event (its create failed, or it is gone from the API), so the
    /// next occurrence creates it again.
    pub(crate) fn forget(&mut self, occurrence: &Occurrence) {
        self.series.remove(&occurrence.key());
    }
}

/// A unique event name: the object's name, a dot, and a hex suffix from the clock and a
/// counter (client-go uses the object's name and the time in nanoseconds).
fn event_name(object: &str, n: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    // A rejected object may have no usable name; the event still needs a valid one.
    let valid = !object.is_empty()
        && object.len() <= 200
        && object
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let base = if valid { object } else { "kubenft" };
    format!("{base}.{:x}", nanos.wrapping_add(n))
}

/// What the writer task receives: an occurrence to write, or a request to say when everything
/// queued before it has been handled.
#[derive(Debug)]
enum Queued {
    Occurrence(Occurrence),
    Flush(oneshot::Sender<()>),
}

/// Records events; cheap to clone. Without an API (the manifests source) it records nothing.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    queue: Option<mpsc::Sender<Queued>>,
    metrics: Metrics,
}

impl Recorder {
    /// A recorder whose writer task, spawned here, writes through `client` as `node`'s
    /// instance.
    pub(crate) fn spawn(client: Client, node: &str, metrics: Metrics, limits: Limits) -> Recorder {
        let (tx, rx) = mpsc::channel(limits.queue.max(1));
        let writer = Writer {
            client,
            instance: format!("{REPORTING_CONTROLLER}-{node}"),
            limiter: Limiter::new(limits),
            metrics: metrics.clone(),
        };
        tokio::spawn(writer.run(rx));
        Recorder {
            queue: Some(tx),
            metrics,
        }
    }

    /// A recorder that records nothing (no API server to write to).
    pub(crate) fn disabled(metrics: Metrics) -> Recorder {
        Recorder {
            queue: None,
            metrics,
        }
    }

    /// Queues `occurrence` for writing; never waits.
    pub(crate) fn record(&self, occurrence: Occurrence) {
        let Some(queue) = &self.queue else {
            return;
        };
        if let Err(e) = queue.try_send(Queued::Occurrence(occurrence)) {
            self.metrics.count_event(EventOutcome::Dropped);
            let queued = match &e {
                mpsc::error::TrySendError::Full(q) | mpsc::error::TrySendError::Closed(q) => q,
            };
            if let Queued::Occurrence(o) = queued {
                tracing::debug!(reason = o.reason, object = %o.regarding.name, "event dropped: the writer is behind");
            }
        }
    }

    /// Waits until every occurrence recorded so far was written (or its write failed), at most
    /// `limit`: for a process about to exit. Returns whether they all were.
    pub(crate) async fn flush(&self, limit: Duration) -> bool {
        let Some(queue) = &self.queue else {
            return true;
        };
        let (done, written) = oneshot::channel();
        let flushed =
            async { queue.send(Queued::Flush(done)).await.is_ok() && written.await.is_ok() };
        tokio::time::timeout(limit, flushed).await.unwrap_or(false)
    }
}

struct Writer {
    client: Client,
    instance: String,
    limiter: Limiter,
    metrics: Metrics,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Queued>) {
        while let Some(queued) = rx.recv().await {
            let occurrence = match queued {
                Queued::Occurrence(o) => o,
                Queued::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
            };
            let write = self.limiter.observe(&occurrence, Instant::now());
            let outcome = match &write {
                Write::Fold => Ok(EventOutcome::Aggregated),
                Write::Create { name } => self.create(&occurrence, name).await,
                Write::Series { name, count } => self.series(&occurrence, name, *count).await,
            };
            match outcome {
                Ok(o) => self.metrics.count_event(o),
                Err(e) => {
                    self.metrics.count_event(EventOutcome::Failed);
                    if let kube::Error::Api(status) = &e
                        && status.code == 404
                    {
                        self.limiter.forget(&occurrence);
                    }
                    if matches!(write, Write::Create { .. }) {
                        self.limiter.forget(&occurrence);
                    }
                    tracing::warn!(reason = occurrence.reason, object = %occurrence.regarding.name, error = %e, "cannot record an event; nothing else is affected");
                }
            }
        }
    }

    fn api(&self, o: &Occurrence) -> Api<Event> {
        Api::namespaced(self.client.clone(), namespace_of(&o.regarding))
    }

    async fn create(&self, o: &Occurrence, name: &str) -> Result<EventOutcome, kube::Error> {
        let event = to_event(o, name, &self.instance, now());
        self.api(o).create(&PostParams::default(), &event).await?;
        Ok(EventOutcome::Written)
    }

    async fn series(
        &self,
        o: &Occurrence,
        name: &str,
        count: u32,
    ) -> Result<EventOutcome, kube::Error> {
        let patch = serde_json::json!({
            "series": {"count": count, "lastObservedTime": now()}
        });
        self.api(o)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(EventOutcome::Written)
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Events about cluster-scoped objects go to `default`, as client-go puts them.
fn namespace_of(regarding: &Regarding) -> &str {
    if regarding.namespace.is_empty() {
        "default"
    } else {
        &regarding.namespace
    }
}

/// The Event object for `o`.
pub(crate) fn to_event(o: &Occurrence, name: &str, instance: &str, at: MicroTime) -> Event {
    let r = &o.regarding;
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace_of(r).to_string()),
            ..ObjectMeta::default()
        },
        event_time: Some(at),
        type_: Some(o.event_type.as_str().to_string()),
        reason: Some(o.reason.to_string()),
        action: Some(o.action.to_string()),
        note: Some(truncate(&o.note, MAX_NOTE_BYTES)).filter(|n| !n.is_empty()),
        regarding: Some(ObjectReference {
            api_version: Some(r.api_version.to_string()),
            kind: Some(r.kind.to_string()),
            namespace: Some(r.namespace.clone()).filter(|n| !n.is_empty()),
            name: Some(r.name.clone()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
        reporting_instance: Some(instance.to_string()),
        ..Event::default()
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            interval: Duration::from_secs(60),
            expiry: Duration::from_secs(360),
            queue: 4,
        }
    }

    #[test]
    fn a_repeating_event_is_created_once_then_updated_at_most_once_per_interval() {
        let mut l = Limiter::new(limits());
        let t0 = Instant::now();
        let o = Occurrence::syncs_failing("node-a", 3, "EPERM");
        let Write::Create { name } = l.observe(&o, t0) else {
            panic!("first occurrence creates");
        };
        assert!(name.starts_with("node-a."), "{name}");
        // Within the interval: folded, whatever the note says.
        let again = Occurrence::syncs_failing("node-a", 4, "another error");
        assert_eq!(l.observe(&again, t0 + Duration::from_secs(10)), Write::Fold);
        assert_eq!(l.observe(&again, t0 + Duration::from_secs(59)), Write::Fold);
        assert_eq!(
            l.observe(&again, t0 + Duration::from_secs(61)),
            Write::Series {
                name: name.clone(),
                count: 4
            }
        );
        assert_eq!(l.observe(&again, t0 + Duration::from_secs(90)), Write::Fold);
    }

    #[test]
    fn different_objects_or_reasons_are_different_events() {
        let mut l = Limiter::new(limits());
        let t0 = Instant::now();
        let a = Occurrence::rejected("Service", "ns", "a", "bad port");
        let b = Occurrence::rejected("Service", "ns", "b", "bad port");
        let failing = Occurrence::syncs_failing("a", 3, "x");
        for o in [&a, &b, &failing] {
            assert!(matches!(l.observe(o, t0), Write::Create { .. }), "{o:?}");
        }
    }

    #[test]
    fn a_quiet_event_expires_and_a_failed_create_is_retried() {
        let mut l = Limiter::new(limits());
        let t0 = Instant::now();
        let o = Occurrence::starting("node-a");
        assert!(matches!(l.observe(&o, t0), Write::Create { .. }));
        assert!(matches!(
            l.observe(&o, t0 + Duration::from_secs(361)),
            Write::Create { .. }
        ));
        l.forget(&o);
        assert!(matches!(
            l.observe(&o, t0 + Duration::from_secs(362)),
            Write::Create { .. }
        ));
    }

    #[test]
    fn the_start_event_is_kube_proxys_and_notes_fit_the_apis_limit() {
        let at = MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let e = to_event(
            &Occurrence::starting("node-a"),
            "node-a.1",
            "kubenft-node-a",
            at,
        );
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.reason.as_deref(), Some("Starting"));
        assert_eq!(e.action.as_deref(), Some("StartKubeProxy"));
        assert_eq!(e.note, None);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        let r = e.regarding.unwrap();
        assert_eq!(r.kind.as_deref(), Some("Node"));
        assert_eq!(r.namespace, None);

        let long = Occurrence::rejected("Service", "ns", "a", &"é".repeat(1000));
        let e = to_event(
            &long,
            "a.1",
            "kubenft-node-a",
            MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        let note = e.note.unwrap();
        assert!(note.len() <= 1024 && note.len() > 1000, "{}", note.len());
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.regarding.unwrap().namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn unusable_object_names_still_give_valid_event_names() {
        assert!(event_name("", 1).starts_with("kubenft."));
        assert!(event_name("Bad_Name", 1).starts_with("kubenft."));
        assert!(event_name("web", 1).starts_with("web."));
    }
}
