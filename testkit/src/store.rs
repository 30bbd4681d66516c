//! An etcd-like object store: one global resourceVersion, server-set metadata, a bounded event
//! history, and consistent reads at any retained past revision.
//!
//! Guarantees: every write gets a strictly larger resourceVersion than every earlier write (of
//! any kind); a write that changes nothing is a no-op and gets none, as on a real API server;
//! the history keeps every event newer than [`Store::compacted`], so a watch or a read "as of"
//! a revision at or after it is served exactly, and one before it is reported as expired.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

/// Why the store refused an object or a read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("object is not a JSON object with apiVersion, kind and metadata.name")]
    ApplyMalformed,
    #[error("kind {kind:?} of {api_version:?} is not served by the test API server")]
    ApplyUnsupportedKind { api_version: String, kind: String },
    #[error("{plural} {name:?} not found")]
    DeleteNotFound { plural: &'static str, name: String },
    #[error("too old resource version: {requested} ({oldest})")]
    ReadExpired { requested: u64, oldest: u64 },
}

/// The object kinds the server stores, with their API coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// core/v1 Service (namespaced).
    Service,
    /// discovery.k8s.io/v1 EndpointSlice (namespaced).
    EndpointSlice,
    /// core/v1 Node (cluster-scoped).
    Node,
    /// networking.k8s.io/v1 ServiceCIDR (cluster-scoped).
    ServiceCIDR,
    /// events.k8s.io/v1 Event (namespaced), written by clients.
    Event,
}

impl Kind {
    /// Every served kind, for routing.
    pub const ALL: [Kind; 5] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Node,
        Kind::ServiceCIDR,
        Kind::Event,
    ];

    /// The `apiVersion` written in objects of this kind.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Service | Kind::Node => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::ServiceCIDR => "networking.k8s.io/v1",
            Kind::Event => "events.k8s.io/v1",
        }
    }

    /// The `kind` written in objects.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Node => "Node",
            Kind::ServiceCIDR => "ServiceCIDR",
            Kind::Event => "Event",
        }
    }

    /// The resource name in URL paths.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
            Kind::Node => "nodes",
            Kind::ServiceCIDR => "servicecidrs",
            Kind::Event => "events",
        }
    }

    /// Whether objects live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Node | Kind::ServiceCIDR)
    }

    /// The URL prefix of the kind's API group version (`/api/v1` or `/apis/GROUP/VERSION`).
    pub fn api_prefix(self) -> &'static str {
        match self {
            Kind::Service | Kind::Node => "/api/v1",
            Kind::EndpointSlice => "/apis/discovery.k8s.io/v1",
            Kind::ServiceCIDR => "/apis/networking.k8s.io/v1",
            Kind::Event => "/apis/events.k8s.io/v1",
        }
    }

    /// Finds the kind an object declares.
    pub fn of(api_version: &str, kind: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.api_version() == api_version && k.name() == kind)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Identity of a stored object; ordered like etcd keys (kind, namespace, name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: Kind,
    /// Empty for cluster-scoped kinds.
    pub namespace: String,
    pub name: String,
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Added,
    Modified,
    Deleted,
}

/// One committed write, as watches replay it.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub rv: u64,
    pub key: ObjectKey,
    pub action: Action,
    /// The object after the write; for a delete, the last state stamped with the delete's revision.
    pub object: Arc<Value>,
    /// The object before the write (None for Added); lets watches with selectors see an object
    /// entering or leaving the selection, and lets reads reconstruct past revisions.
    pub previous: Option<Arc<Value>>,
}

/// The object store. Not synchronised: the server wraps it in a mutex.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    compacted: u64,
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    history: VecDeque<Arc<StoredEvent>>,
    history_limit: usize,
    uids: u64,
}

impl Store {
    /// An empty store that keeps at most `history_limit` events (at least one).
    pub fn new(history_limit: usize) -> Self {
        // Start away from 0 and 1: "0" means "any version" to the API, so no real revision is 0.
        Self {
            rv: 100,
            compacted: 100,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            uids: 0,
        }
    }

    /// The newest revision.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The oldest revision still readable: reads and watches from an older one are expired.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Creates or replaces an object, returning the event (None when nothing changed) and the
    /// stored object.
    pub fn apply(
        &mut self,
        mut object: Value,
    ) -> Result<(Option<Arc<StoredEvent>>, Arc<Value>), StoreError> {
        let fields = object.as_object().ok_or(StoreError::ApplyMalformed)?;
        let api_version = fields
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or(StoreError::ApplyMalformed)?;
        let kind_name = fields
            .get("kind")
            .and_then(Value::as_str)
            .ok_or(StoreError::ApplyMalformed)?;
        let kind =
            Kind::of(api_version, kind_name).ok_or_else(|| StoreError::ApplyUnsupportedKind {
                api_version: api_version.to_string(),
                kind: kind_name.to_string(),
            })?;
        let meta = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or(StoreError::ApplyMalformed)?;
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let name = name.ok_or(StoreError::ApplyMalformed)?.to_string();
        let namespace = if kind.namespaced() {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty());
            let ns = ns.unwrap_or("default").to_string();
            meta.insert("namespace".into(), ns.clone().into());
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        let key = ObjectKey {
            kind,
            namespace,
            name,
        };
        let previous = self.objects.get(&key).cloned();

        // Server-owned fields: keep identity from the stored object, then compare the rest.
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            meta.remove(field);
        }
        let (uid, created, generation) = match &previous {
            Some(prev) => (
                prev["metadata"]["uid"].clone(),
                prev["metadata"]["creationTimestamp"].clone(),
                prev["metadata"]["generation"].as_u64().unwrap_or(1)
                    + u64::from(prev.get("spec") != object.get("spec")),
            ),
            None => (Value::from(self.next_uid()), Value::from(now_rfc3339()), 1),
        };
        let meta = object["metadata"]
            .as_object_mut()
            .ok_or(StoreError::ApplyMalformed)?;
        meta.insert("uid".into(), uid);
        meta.insert("creationTimestamp".into(), created);
        meta.insert("generation".into(), generation.into());
        if let Some(prev) = &previous {
            let mut unchanged = (**prev).clone();
            if let Some(m) = unchanged["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            if unchanged == object {
                return Ok((None, prev.clone()));
            }
        }
        let action = if previous.is_some() {
            Action::Modified
        } else {
            Action::Added
        };
        self.rv += 1;
        set_resource_version(&mut object, self.rv);
        let object = Arc::new(object);
        self.objects.insert(key.clone(), object.clone());
        let event = self.record(key, action, object.clone(), previous);
        Ok((Some(event), object))
    }

    /// Deletes an object; the event carries its last state stamped with the delete's revision.
    pub fn delete(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<StoredEvent>, StoreError> {
        let namespace = if kind.namespaced() { namespace } else { "" };
        let key = ObjectKey {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let previous = self
            .objects
            .remove(&key)
            .ok_or_else(|| StoreError::DeleteNotFound {
                plural: kind.plural(),
                name: name.to_string(),
            })?;
        self.rv += 1;
        let mut last = (*previous).clone();
        set_resource_version(&mut last, self.rv);
        Ok(self.record(key, Action::Deleted, Arc::new(last), Some(previous)))
    }

    /// Forgets the whole history, after advancing the revision the way unrelated writes always
    /// do on a live cluster, so every revision handed out before this call is expired.
    pub fn compact(&mut self) {
        self.rv += 1;
        self.compacted = self.rv;
        self.history.clear();
    }

    /// One object as it is now.
    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let namespace = if kind.namespaced() { namespace } else { "" };
        let key = ObjectKey {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        self.objects.get(&key).cloned()
    }

    /// All objects of a kind as of revision `rv` (now, or a retained past revision), in key order.
    pub fn list_at(&self, kind: Kind, rv: u64) -> Result<Vec<(ObjectKey, Arc<Value>)>, StoreError> {
        let mut all = Vec::new();
        self.visit_at(kind, rv, None, |key, object| {
            all.push((key.clone(), object.clone()));
            true
        })?;
        Ok(all)
    }

    /// The objects of a kind as of revision `rv`, in key order, starting after the namespace
    /// and name `after`: `visit` sees each until it returns false. A page of a list costs its
    /// own length (plus the writes since `rv`), not the whole kind's, as in the real server.
    pub fn visit_at(
        &self,
        kind: Kind,
        rv: u64,
        after: Option<(&str, &str)>,
        mut visit: impl FnMut(&ObjectKey, &Arc<Value>) -> bool,
    ) -> Result<(), StoreError> {
        self.check_retained(rv)?;
        // What was different at `rv`: each key written since, as it was before its oldest
        // write since (None: it did not exist).
        let mut then: BTreeMap<&ObjectKey, Option<&Arc<Value>>> = BTreeMap::new();
        for event in self.history.iter().rev().take_while(|e| e.rv > rv) {
            if event.key.kind != kind {
                continue;
            }
            let before = match (&event.action, &event.previous) {
                (Action::Added, _) => None,
                (_, Some(prev)) => Some(prev),
                (_, None) => {
                    unreachable!("modify and delete events always carry the previous object")
                }
            };
            then.insert(&event.key, before);
        }
        let whole = kind_range(kind);
        let lower = match after {
            Some((namespace, name)) => Bound::Excluded(ObjectKey {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
            None => Bound::Included(whole.start().clone()),
        };
        let upper = Bound::Included(whole.end().clone());
        let mut now = self
            .objects
            .range((lower.clone(), upper.clone()))
            .peekable();
        let mut changed = then
            .range::<&ObjectKey, _>((lower.as_ref(), upper.as_ref()))
            .peekable();
        loop {
            // The next key of either, the past version winning where both have it.
            let next = match (now.peek(), changed.peek()) {
                (None, None) => break,
                (Some((key, _)), Some((old, _))) if *key < **old => {
                    now.next().map(|(k, v)| (k, Some(v)))
                }
                (Some((key, _)), Some((old, _))) if *key == **old => {
                    now.next();
                    changed.next().map(|(k, v)| (*k, *v))
                }
                (Some(_), None) => now.next().map(|(k, v)| (k, Some(v))),
                _ => changed.next().map(|(k, v)| (*k, *v)),
            };
            if let Some((key, Some(object))) = next
                && !visit(key, object)
            {
                break;
            }
        }
        Ok(())
    }

    /// Every retained event newer than `rv`, oldest first; expired when `rv` predates the history.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<StoredEvent>>, StoreError> {
        self.check_retained(rv)?;
        let first_newer = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.range(first_newer..).cloned().collect())
    }

    fn check_retained(&self, rv: u64) -> Result<(), StoreError> {
        if rv < self.compacted {
            return Err(StoreError::ReadExpired {
                requested: rv,
                oldest: self.compacted,
            });
        }
        Ok(())
    }

    fn record(
        &mut self,
        key: ObjectKey,
        action: Action,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) -> Arc<StoredEvent> {
        let event = Arc::new(StoredEvent {
            rv: self.rv,
            key,
            action,
            object,
            previous,
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(evicted) = self.history.pop_front() {
                self.compacted = evicted.rv;
            }
        }
        event
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        // Shaped like a version-4 UUID so clients that parse uids accept it.
        format!("6b75626e-6674-4000-8000-{:012x}", self.uids)
    }
}

fn kind_range(kind: Kind) -> std::ops::RangeInclusive<ObjectKey> {
    let lo = ObjectKey {
        kind,
        namespace: String::new(),
        name: String::new(),
    };
    let hi = ObjectKey {
        kind,
        namespace: char::MAX.to_string(),
        name: char::MAX.to_string(),
    };
    lo..=hi
}

fn set_resource_version(object: &mut Value, rv: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), rv.to_string().into());
    }
}

fn now_rfc3339() -> String {
    // Kubernetes Time has second precision.
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = i64::try_from(since_epoch.as_secs()).unwrap_or(0);
    Timestamp::from_second(seconds)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// An object as the items of a list carry it: without `kind` and `apiVersion`, as the API
/// server sends them. It serializes straight from the stored object, so a page of thousands
/// of objects is not copied first.
pub struct WithoutTypeMeta<'a>(pub &'a Value);

impl serde::Serialize for WithoutTypeMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = self.0.as_object().into_iter().flatten();
        s.collect_map(fields.filter(|(k, _)| !matches!(k.as_str(), "kind" | "apiVersion")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(name: &str, port: u16) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name}, "spec": {"ports": [{"port": port}]}})
    }

    fn names(list: &[(ObjectKey, Arc<Value>)]) -> Vec<String> {
        list.iter()
            .map(|(k, v)| format!("{}:{}", k.name, v["spec"]["ports"][0]["port"]))
            .collect()
    }

    #[test]
    fn writes_get_increasing_versions_and_keep_identity_across_updates() {
        let mut store = Store::new(100);
        let (_, a1) = store.apply(svc("a", 80)).unwrap();
        let (_, a2) = store.apply(svc("a", 81)).unwrap();
        assert!(
            a2["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
                > a1["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
        );
        assert_eq!(a1["metadata"]["uid"], a2["metadata"]["uid"]);
        assert_eq!(a1["metadata"]["namespace"], "default");
        assert_eq!(a2["metadata"]["generation"], 2);
    }

    #[test]
    fn rewriting_an_unchanged_object_is_a_no_op() {
        let mut store = Store::new(100);
        store.apply(svc("a", 80)).unwrap();
        let rv = store.resource_version();
        let (event, _) = store.apply(svc("a", 80)).unwrap();
        assert!(event.is_none());
        assert_eq!(store.resource_version(), rv);
    }

    #[test]
    fn a_past_revision_reads_as_it_was_then() {
        let mut store = Store::new(100);
        store.apply(svc("a", 80)).unwrap();
        store.apply(svc("b", 80)).unwrap();
        let then = store.resource_version();
        store.apply(svc("a", 81)).unwrap();
        store.delete(Kind::Service, "default", "b").unwrap();
        store.apply(svc("c", 80)).unwrap();
        assert_eq!(
            names(&store.list_at(Kind::Service, then).unwrap()),
            ["a:80", "b:80"]
        );
        let now = store.resource_version();
        assert_eq!(
            names(&store.list_at(Kind::Service, now).unwrap()),
            ["a:81", "c:80"]
        );
    }

    #[test]
    fn evicted_history_expires_older_revisions_only() {
        let mut store = Store::new(2);
        for port in 1..=4 {
            store.apply(svc("a", port)).unwrap();
        }
        let now = store.resource_version();
        assert_eq!(store.events_since(now - 2).unwrap().len(), 2);
        assert!(matches!(
            store.events_since(now - 3),
            Err(StoreError::ReadExpired { .. })
        ));
    }

    #[test]
    fn compaction_expires_every_revision_handed_out_before_it() {
        let mut store = Store::new(100);
        store.apply(svc("a", 80)).unwrap();
        let seen = store.resource_version();
        store.compact();
        assert!(matches!(
            store.events_since(seen),
            Err(StoreError::ReadExpired { .. })
        ));
        assert!(
            store
                .events_since(store.resource_version())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn deletes_are_stamped_with_their_own_revision_and_nodes_have_no_namespace() {
        let mut store = Store::new(100);
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "namespace": "x"}});
        let (_, stored) = store.apply(node).unwrap();
        assert!(stored["metadata"].get("namespace").is_none());
        let event = store.delete(Kind::Node, "", "n1").unwrap();
        assert_eq!(
            event.object["metadata"]["resourceVersion"],
            store.resource_version().to_string()
        );
        assert_eq!(
            store.delete(Kind::Node, "", "n1").unwrap_err(),
            StoreError::DeleteNotFound {
                plural: "nodes",
                name: "n1".into()
            }
        );
    }

    #[test]
    fn unknown_kinds_are_refused() {
        let mut store = Store::new(10);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(matches!(
            store.apply(pod),
            Err(StoreError::ApplyUnsupportedKind { .. })
        ));
    }
}
