//! The daemon's copy of the cluster: Services, EndpointSlices, this node's Node and the
//! ServiceCIDRs, kept up to date from watch events. A re-list (after an outage, a 410 Expired or a watch restart)
//! replaces a kind's objects only once the list is complete, so a half-read list never reaches
//! the planner and the last good state stays programmed until fresh state arrives.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

use super::Inputs;
pub use super::decoded::{Decoded, DecodedService, DecodedSlice};
use crate::cluster::kept::trigger_time;
pub use crate::cluster::kept::{Kept, KeptService, KeptSlice};
use crate::cluster::{LiveState, NodeInfo, ServiceRef};
use crate::metrics::{ChangeCounts, Metrics};

/// The objects of one kind, keyed `namespace/name`, as `Kept` keeps them.
#[derive(Debug, Clone)]
pub(crate) struct KindStore<K: Kept> {
    live: BTreeMap<String, K::Compact>,
    /// Objects of a re-list in progress, in the order received (a key again replaces the
    /// earlier object); swapped in at `InitDone`. A list arrives sorted by key, so appending
    /// here and building the map once at the end costs no search per object.
    relist: Option<Vec<(String, K::Compact)>>,
    /// True once the first complete list arrived.
    synced: bool,
}

impl<K: Kept> Default for KindStore<K> {
    fn default() -> Self {
        KindStore {
            live: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }
}

/// What an event did to a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The live objects changed (or a re-list completed): a sync is due.
    Changed,
    /// The live objects are as before in every field the store keeps (the event touched only
    /// fields no proxy reads, such as a label or an annotation): nothing to program.
    Unchanged,
    /// Only the pending re-list buffer moved: nothing to program yet.
    Buffered,
}

impl<K: Kept + kube::Resource> KindStore<K> {
    /// Applies one watch event. Live objects change on `Apply`, `Delete` and `InitDone`, never
    /// on `Init` or `InitApply`.
    pub(crate) fn apply(&mut self, event: Event<K>) -> Change {
        self.apply_observed(event, |_, _, _| {})
    }

    /// Applies one watch event and calls `changed(key, before, after)` for each live object
    /// it changed (`None`: absent). A completed re-list reports only the objects that differ
    /// from the ones it replaces.
    pub(crate) fn apply_observed(
        &mut self,
        event: Event<K>,
        changed: impl FnMut(&str, Option<&K::Compact>, Option<&K::Compact>),
    ) -> Change {
        self.apply_counted(event, changed).0
    }

    /// `apply_observed`, also returning how many of kube-proxy's informer notifications (add,
    /// update, delete) the event amounts to, whatever it changes: one per watch event, and for
    /// a completed list one per object listed (an add, or an update of an object already
    /// known) and one per object it no longer has (a delete). Objects of a list still in
    /// progress are not counted yet.
    fn apply_counted(
        &mut self,
        event: Event<K>,
        mut changed: impl FnMut(&str, Option<&K::Compact>, Option<&K::Compact>),
    ) -> (Change, u64) {
        let change = match event {
            Event::Apply(obj) => {
                let key = key(&obj);
                let before = self.live.insert(key.clone(), obj.compact());
                let after = self.live.get(&key);
                if before.as_ref() == after {
                    return (Change::Unchanged, 1);
                }
                changed(&key, before.as_ref(), after);
                Change::Changed
            }
            Event::Delete(obj) => {
                let key = key(&obj);
                let Some(before) = self.live.remove(&key) else {
                    return (Change::Unchanged, 1);
                };
                changed(&key, Some(&before), None);
                Change::Changed
            }
            Event::Init => {
                self.relist = Some(Vec::new());
                return (Change::Buffered, 0);
            }
            Event::InitApply(obj) => {
                self.relist
                    .get_or_insert_with(Vec::new)
                    .push((key(&obj), obj.compact()));
                return (Change::Buffered, 0);
            }
            Event::InitDone => {
                // Built at once from sorted order, the map's nodes are full (filled one object
                // at a time in key order, each node would stay half empty); of objects listed
                // under one key, the map keeps the last.
                let listed = self.relist.take().unwrap_or_default().into_iter().collect();
                let before = std::mem::replace(&mut self.live, listed);
                let mut gone = 0;
                for (key, old) in &before {
                    let now = self.live.get(key);
                    gone += u64::from(now.is_none());
                    if now != Some(old) {
                        changed(key, Some(old), now);
                    }
                }
                for (key, new) in &self.live {
                    if !before.contains_key(key) {
                        changed(key, None, Some(new));
                    }
                }
                self.synced = true;
                return (Change::Changed, self.live.len() as u64 + gone);
            }
        };
        (change, 1)
    }

    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    /// Every live object, as the model reads it.
    pub(crate) fn objects(&self) -> impl Iterator<Item = K::Object> {
        self.live.values().map(K::expand)
    }

    /// The live object under `key` (`namespace/name`), expanded.
    #[cfg(test)]
    pub(crate) fn get(&self, key: &str) -> Option<K::Object> {
        self.live.get(key).map(K::expand)
    }

    /// The live object under `key` as kept.
    pub(crate) fn kept(&self, key: &str) -> Option<&K::Compact> {
        self.live.get(key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

/// An event of a k8s-openapi object as the event of its decoded form.
fn decoded<K: Kept + k8s_openapi::Metadata<Ty = ObjectMeta>>(event: Event<K>) -> Event<Decoded<K>> {
    match event {
        Event::Apply(object) => Event::Apply(object.into()),
        Event::Delete(object) => Event::Delete(object.into()),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(object.into()),
        Event::InitDone => Event::InitDone,
    }
}

fn key<K: kube::Resource>(obj: &K) -> String {
    let meta = obj.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

/// Services, EndpointSlices, Nodes (the watch selects only ours) and ServiceCIDRs, plus the
/// change-trigger times of slices not yet programmed and the services whose objects changed
/// since the last sync took them.
#[derive(Debug, Default)]
pub struct ClusterStore {
    pub(crate) services: KindStore<DecodedService>,
    pub(crate) endpoint_slices: KindStore<DecodedSlice>,
    pub(crate) nodes: KindStore<Node>,
    pub(crate) service_cidrs: KindStore<ServiceCIDR>,
    /// Whether a ServiceCIDR changed since the last `update_model`.
    service_cidrs_changed: bool,
    /// Trigger times of EndpointSlice changes received since the last sync took them.
    pending_triggers: Vec<SystemTime>,
    /// The store keys of each service's objects, so a sync converts only changed services.
    members: BTreeMap<ServiceRef, Members>,
    /// Services whose Service object or slices changed since the last `take_changed`.
    changed: Changed,
    /// kube-proxy's change counts: Service and EndpointSlice notifications since start (every
    /// event, as kube-proxy's informer handlers count them, see `KindStore::notifications`).
    service_changes: u64,
    endpoint_changes: u64,
    /// Where the counts are published as they move, if anywhere: an event that changes nothing
    /// the model reads wakes no sync, yet kube-proxy's counters count it at once.
    metrics: Option<Metrics>,
}

/// Store keys of the objects that make up one service.
#[derive(Debug, Default)]
struct Members {
    services: Keys,
    slices: Keys,
}

/// A few store keys, sorted, each once, in one allocation: a service has one Service object
/// and one or a few slices, and a `Vec` of boxed keys would cost two allocations for each.
/// Each key is written as its length in bytes, `:`, then the key, so any text can be a key.
#[derive(Debug, Default)]
struct Keys(Box<str>);

impl Keys {
    fn of(keys: &[&str]) -> Keys {
        let digits = |n: usize| n.checked_ilog10().map_or(1, |d| d as usize + 1);
        let size = keys.iter().map(|k| digits(k.len()) + 1 + k.len()).sum();
        // Sized exactly, so boxing it keeps the one allocation.
        let mut packed = String::with_capacity(size);
        for key in keys {
            let _ = write!(packed, "{}:{key}", key.len());
        }
        Keys(packed.into_boxed_str())
    }

    fn insert(&mut self, key: &str) {
        let mut keys: Vec<&str> = self.iter().collect();
        if let Err(i) = keys.binary_search(&key) {
            keys.insert(i, key);
            let packed = Keys::of(&keys);
            *self = packed;
        }
    }

    fn remove(&mut self, key: &str) {
        let keys: Vec<&str> = self.iter().filter(|k| *k != key).collect();
        let packed = Keys::of(&keys);
        *self = packed;
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        let mut rest = &*self.0;
        std::iter::from_fn(move || {
            let (len, tail) = rest.split_once(':')?;
            let (key, tail) = tail.split_at_checked(len.parse().ok()?)?;
            rest = tail;
            Some(key)
        })
    }
}

impl Members {
    fn is_empty(&self) -> bool {
        self.services.is_empty() && self.slices.is_empty()
    }
}

/// When at least one service in this many changed, a sync walks every object
/// (`ClusterStore::kept_of_each`) rather than searching for each changed service's.
const WALK_WHEN_CHANGED_ONE_IN: usize = 4;

/// The objects of the service `names` in `grouped` (sorted by service), searched for from
/// `next`, which moves past them: called for services in order, the search walks `grouped` once.
fn run_of<'a, T>(
    grouped: &[((&str, &str), &'a T)],
    next: &mut usize,
    names: (&str, &str),
) -> Vec<&'a T> {
    // Stepping, not bisecting: the run is almost always right at `next`.
    let mut run = Vec::new();
    while let Some((n, object)) = grouped.get(*next) {
        match n.cmp(&names) {
            Ordering::Less => {}
            Ordering::Equal => run.push(*object),
            Ordering::Greater => break,
        }
        *next += 1;
    }
    run
}

/// Which of a service's member lists an object kind goes to.
type MemberList = fn(&mut Members) -> &mut Keys;

/// The kind of object a change came in, as kube-proxy's change trackers count them.
#[derive(Debug, Clone, Copy)]
enum Via {
    Service,
    EndpointSlice,
}

/// The services whose objects changed since a sync last took them, with kube-proxy's pending
/// counts: how many of them have a change of each kind (to the object as it is now, or as it
/// was if gone) no sync has taken yet. Flags rather than sets of their own: at the first sync
/// every service would be in all three sets, its name copied into each and freed from each.
#[derive(Debug, Default)]
struct Changed {
    services: BTreeMap<ServiceRef, Pending>,
    services_pending: u64,
    slices_pending: u64,
}

/// Which kinds of a changed service's objects have changes no sync has taken yet.
#[derive(Debug, Default)]
struct Pending {
    service: bool,
    slices: bool,
}

impl Changed {
    /// Marks `service` changed and, if `pending` says by which kind, pending for that kind.
    fn mark(&mut self, service: ServiceRef, pending: Option<Via>) {
        let flags = self.services.entry(service).or_default();
        let (flag, count) = match pending {
            None => return,
            Some(Via::Service) => (&mut flags.service, &mut self.services_pending),
            Some(Via::EndpointSlice) => (&mut flags.slices, &mut self.slices_pending),
        };
        if !std::mem::replace(flag, true) {
            *count += 1;
        }
    }

    fn take(&mut self) -> BTreeSet<ServiceRef> {
        self.services_pending = 0;
        self.slices_pending = 0;
        std::mem::take(&mut self.services).into_keys().collect()
    }
}

/// Moves object `key` (of kind `via`) from the service it was part of `before` to the one it
/// is part of `after`, and marks both changed; the service of the object as it is now, or as
/// it was if gone, is also marked pending.
fn track<K: Kept>(
    members: &mut BTreeMap<ServiceRef, Members>,
    changed: &mut Changed,
    list: MemberList,
    via: Via,
    key: &str,
    before: Option<&K::Compact>,
    after: Option<&K::Compact>,
) {
    let after = after.and_then(K::service);
    if let Some(service) = before.and_then(K::service) {
        if let Some(m) = members.get_mut(&service) {
            list(m).remove(key);
            if m.is_empty() {
                members.remove(&service);
            }
        }
        changed.mark(service, after.is_none().then_some(via));
    }
    if let Some(service) = after {
        list(members.entry(service.clone()).or_default()).insert(key);
        changed.mark(service, Some(via));
    }
}

impl ClusterStore {
    /// An empty store that publishes its change counts to `metrics` whenever they move.
    pub(crate) fn publishing_to(metrics: Metrics) -> ClusterStore {
        let store = ClusterStore {
            metrics: Some(metrics),
            ..ClusterStore::default()
        };
        store.publish_counts();
        store
    }

    fn publish_counts(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.set_changes(self.change_counts());
        }
    }

    pub fn apply_service(&mut self, event: Event<Service>) -> Change {
        self.apply_decoded_service(decoded(event))
    }

    /// `apply_service` for a Service the watch decoded straight into its kept form.
    pub fn apply_decoded_service(&mut self, event: Event<DecodedService>) -> Change {
        let completes_list = matches!(event, Event::InitDone);
        let (members, changed) = (&mut self.members, &mut self.changed);
        let (change, notifications) = self.services.apply_counted(event, |key, before, after| {
            let list: MemberList = |m| &mut m.services;
            track::<DecodedService>(members, changed, list, Via::Service, key, before, after);
        });
        self.service_changes += notifications;
        if completes_list {
            self.pack_members();
        }
        self.publish_counts();
        change
    }

    /// Rebuilds the member index from sorted order after a list moved many services in it:
    /// filled one service at a time in order, each node of the map would stay half empty.
    fn pack_members(&mut self) {
        self.members = std::mem::take(&mut self.members).into_iter().collect();
    }

    pub fn apply_endpoint_slice(&mut self, event: Event<EndpointSlice>) -> Change {
        self.apply_decoded_slice(decoded(event))
    }

    /// `apply_endpoint_slice` for a slice the watch decoded straight into its kept form.
    pub fn apply_decoded_slice(&mut self, event: Event<DecodedSlice>) -> Change {
        let completes_list = matches!(event, Event::InitDone);
        let trigger = match &event {
            Event::Apply(slice) => slice.kept().trigger_time(),
            _ => None,
        };
        let (members, changed) = (&mut self.members, &mut self.changed);
        let (change, notifications) =
            self.endpoint_slices
                .apply_counted(event, |key, before, after| {
                    let list: MemberList = |m| &mut m.slices;
                    let via = Via::EndpointSlice;
                    track::<DecodedSlice>(members, changed, list, via, key, before, after);
                });
        self.endpoint_changes += notifications;
        // As kube-proxy: a trigger time is observed only with a change to program.
        if change == Change::Changed {
            self.pending_triggers.extend(trigger);
        }
        if completes_list {
            self.pack_members();
        }
        self.publish_counts();
        change
    }

    pub(crate) fn apply_node(&mut self, event: Event<Node>) -> Change {
        self.nodes.apply(event)
    }

    pub(crate) fn apply_service_cidr(&mut self, event: Event<ServiceCIDR>) -> Change {
        let changed = &mut self.service_cidrs_changed;
        self.service_cidrs
            .apply_observed(event, |_, _, _| *changed = true)
    }

    /// True once every kind that decides where traffic goes has been listed completely at
    /// least once: syncing before that would program a partial cluster (e.g. Services without
    /// their endpoints, which rejects their traffic). ServiceCIDRs are not waited for, as
    /// kube-proxy does not: they only add the drop of unallocated ClusterIPs, and an API server
    /// that does not serve them (before Kubernetes 1.33) must not keep the node unprogrammed.
    pub(crate) fn synced(&self) -> bool {
        self.services.synced() && self.endpoint_slices.synced() && self.nodes.synced()
    }

    /// Takes the services whose objects changed since the last call.
    pub(crate) fn take_changed(&mut self) -> BTreeSet<ServiceRef> {
        let changed = self.changed.take();
        self.publish_counts();
        changed
    }

    /// Service and EndpointSlice changes seen since start, and the services with changes that
    /// no sync has taken yet (kube-proxy's change-tracker metrics).
    pub(crate) fn change_counts(&self) -> ChangeCounts {
        ChangeCounts {
            service_changes_total: self.service_changes,
            service_changes_pending: self.changed.services_pending,
            endpoint_changes_total: self.endpoint_changes,
            endpoint_changes_pending: self.changed.slices_pending,
        }
    }

    /// Brings `live` up to date with the objects: re-converts the services whose objects
    /// changed since the last call (every one, the first time) and the node's facts. Returns
    /// those services.
    pub fn update_model(&mut self, live: &mut LiveState, hostname: &str) -> BTreeSet<ServiceRef> {
        let changed = self.take_changed();
        // Searching three maps per service costs more than walking every object once when
        // many services changed (the first sync, a re-list).
        if changed.len() >= self.members.len() / WALK_WHEN_CHANGED_ONE_IN {
            live.update_services(self.kept_of_each(&changed));
        } else {
            live.update_services(changed.iter().map(|service| {
                let (services, slices) = self.kept_of(service);
                (service, services, slices)
            }));
        }
        live.state.node = self.node(hostname).as_ref().map(NodeInfo::of);
        if std::mem::take(&mut self.service_cidrs_changed) {
            let objects: Vec<ServiceCIDR> = self.service_cidrs.objects().collect();
            live.update_service_cidrs(&objects);
        }
        changed
    }

    /// The live Services (one, unless a manifests directory repeats a name) and EndpointSlices
    /// of `service`, as kept.
    fn kept_of(&self, service: &ServiceRef) -> (Vec<&KeptService>, Vec<&KeptSlice>) {
        let Some(m) = self.members.get(service) else {
            return (Vec::new(), Vec::new());
        };
        (
            m.services
                .iter()
                .filter_map(|k| self.services.kept(k))
                .collect(),
            m.slices
                .iter()
                .filter_map(|k| self.endpoint_slices.kept(k))
                .collect(),
        )
    }

    /// `kept_of` for each of `services`, in their order, found by walking the live objects
    /// once, grouped by service in sorted runs, rather than by searching for each.
    fn kept_of_each<'a>(
        &'a self,
        services: &'a BTreeSet<ServiceRef>,
    ) -> impl Iterator<Item = (&'a ServiceRef, Vec<&'a KeptService>, Vec<&'a KeptSlice>)> {
        // In key order, which is the order `kept_of` gives a service's objects in; the stable
        // sort keeps it within each service. Keys (`namespace/name`) sort almost as services
        // do, and slices' generated names after their service's, so the runs are long.
        let mut objects: Vec<_> = (self.services.live.values())
            .map(|s| (s.service_names(), s))
            .collect();
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        let mut slices: Vec<_> = (self.endpoint_slices.live.values())
            .map(|s| (s.service_names(), s))
            .collect();
        slices.sort_by(|a, b| a.0.cmp(&b.0));
        let (mut next_object, mut next_slice) = (0, 0);
        services.iter().map(move |service| {
            let names = (service.0.as_str(), service.1.as_str());
            (
                service,
                run_of(&objects, &mut next_object, names),
                run_of(&slices, &mut next_slice, names),
            )
        })
    }

    /// This node's Node object, named `hostname`, if present.
    pub(crate) fn node(&self, hostname: &str) -> Option<Node> {
        // Nodes have no namespace; a manifest may still give one.
        self.nodes
            .live
            .iter()
            .find(|(k, _)| k.rsplit_once('/').is_some_and(|(_, name)| name == hostname))
            .map(|(_, kept)| Node::expand(kept))
    }

    /// Takes the change-trigger times gathered since the last call.
    pub(crate) fn take_triggers(&mut self) -> Vec<SystemTime> {
        std::mem::take(&mut self.pending_triggers)
    }

    /// Puts back trigger times of a sync that failed, to be observed when a later one succeeds.
    pub(crate) fn requeue_triggers(&mut self, triggers: Vec<SystemTime>) {
        self.pending_triggers.extend(triggers);
    }

    /// Replaces everything with a complete set of objects at once (the manifests source, which
    /// always reads whole directories).
    pub fn replace_all(&mut self, inputs: Inputs) {
        fn whole<K>(
            store: &mut ClusterStore,
            apply: fn(&mut ClusterStore, Event<K>) -> Change,
            objects: Vec<K>,
        ) {
            apply(store, Event::Init);
            for o in objects {
                apply(store, Event::InitApply(o));
            }
            apply(store, Event::InitDone);
        }
        // A re-read returns every slice again; only a new trigger time is a change to program
        // (an unchanged one was observed when it first arrived).
        for slice in &inputs.endpoint_slices {
            let Some(t) = trigger_time(slice) else {
                continue;
            };
            let before = self.endpoint_slices.kept(&key(slice));
            let unchanged = before.is_some_and(|b| *b == slice.clone().compact());
            if unchanged {
                continue;
            }
            if before.and_then(KeptSlice::trigger_time) != Some(t) {
                self.pending_triggers.push(t);
            }
        }
        whole(self, ClusterStore::apply_service, inputs.services);
        whole(
            self,
            ClusterStore::apply_endpoint_slice,
            inputs.endpoint_slices,
        );
        whole(
            self,
            ClusterStore::apply_node,
            inputs.node.into_iter().collect(),
        );
        whole(self, ClusterStore::apply_service_cidr, inputs.service_cidrs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SERVICE_NAME_LABEL;
    use crate::cluster::kept::LAST_CHANGE_TRIGGER_TIME;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn svc(name: &str, port: i32) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                    port,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn names<K: Kept<Object = Service> + kube::Resource>(store: &KindStore<K>) -> Vec<String> {
        store
            .objects()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn member_keys_stay_sorted_and_unique_whatever_their_text() {
        let mut keys = Keys::default();
        let long = format!("demo/{}", "x".repeat(250));
        for key in [
            "demo/web-2",
            "12:demo/odd",
            &long,
            "demo/web-1",
            "",
            "demo/web-2",
        ] {
            keys.insert(key);
        }
        let all: Vec<&str> = keys.iter().collect();
        assert_eq!(all, ["", "12:demo/odd", "demo/web-1", "demo/web-2", &long]);
        keys.remove(&long);
        keys.remove("demo/web-1");
        keys.remove("demo/absent");
        let all: Vec<&str> = keys.iter().collect();
        assert_eq!(all, ["", "12:demo/odd", "demo/web-2"]);
        let owned: Vec<String> = all.iter().map(|k| k.to_string()).collect();
        for key in &owned {
            keys.remove(key);
        }
        assert!(keys.is_empty());
    }

    #[test]
    fn a_relist_in_progress_keeps_the_previous_objects_live() {
        let mut store = KindStore::default();
        store.apply(Event::Init);
        store.apply(Event::InitApply(svc("a", 80)));
        store.apply(Event::InitApply(svc("b", 80)));
        assert!(!store.synced(), "not synced before InitDone");
        assert!(store.is_empty(), "nothing live before the first InitDone");
        assert_eq!(store.apply(Event::InitDone), Change::Changed);
        assert_eq!(names(&store), ["a", "b"]);

        // A watch restart: the old objects stay until the new list is complete.
        assert_eq!(store.apply(Event::Init), Change::Buffered);
        assert_eq!(
            store.apply(Event::InitApply(svc("b", 81))),
            Change::Buffered
        );
        assert_eq!(names(&store), ["a", "b"]);
        store.apply(Event::InitDone);
        assert_eq!(names(&store), ["b"], "a vanished during the outage");
        assert_eq!(
            store
                .objects()
                .next()
                .unwrap()
                .spec
                .as_ref()
                .unwrap()
                .ports
                .as_ref()
                .unwrap()[0]
                .port,
            81
        );
    }

    #[test]
    fn objects_come_back_with_what_the_model_reads_as_received_and_nothing_else() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo", "uid": "7c8a0f2e", "resourceVersion": "12345",
                "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                "kubenft.io/consistent-endpoint": " client"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.010", "clusterIPs": ["10.96.0.010"],
                "selector": {"app": "web"}, "externalIPs": ["not an address"],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080,
                           "targetPort": 8080}],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "hostname": "lb"},
                                                     {"ip": "192.0.2.2", "ipMode": "Proxy"}]}}
        }))
        .unwrap();
        let expected: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo",
                "annotations": {"kubenft.io/consistent-endpoint": " client"}},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.010", "clusterIPs": ["10.96.0.010"],
                "externalIPs": ["not an address"],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"},
                                                     {"ip": "192.0.2.2", "ipMode": "Proxy"}]}}
        }))
        .unwrap();
        let mut services = KindStore::default();
        services.apply(Event::Apply(service));
        assert_eq!(services.get("demo/web"), Some(expected));
        assert_eq!(services.get("demo/other"), None::<Service>);

        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-abc", "namespace": "demo", "uid": "1",
                "labels": {"kubernetes.io/service-name": "web", "app": "web"},
                "annotations": {LAST_CHANGE_TRIGGER_TIME: "2026-11-22T10:00:00Z"}},
            "addressType": "IPv6",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}],
            "endpoints": [
                {"addresses": ["FD00::1", "fd00::2"], "nodeName": "node-a", "zone": "z1",
                 "conditions": {"ready": false}, "hostname": "web-0",
                 "targetRef": {"kind": "Pod", "name": "web-0"},
                 "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "node-a"}]}},
                {"addresses": ["fd00::3"]},
                {"addresses": []}
            ]
        }))
        .unwrap();
        let expected: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-abc", "namespace": "demo",
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv6",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["FD00::1"], "nodeName": "node-a", "zone": "z1",
                 "conditions": {"ready": false},
                 "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "node-a"}]}},
                {"addresses": ["fd00::3"], "conditions": {}},
                {"addresses": [], "conditions": {}}
            ]
        }))
        .unwrap();
        let mut slices = KindStore::default();
        slices.apply(Event::Apply(slice));
        assert_eq!(slices.get("demo/web-abc"), Some(expected));
        let kept = slices.kept("demo/web-abc").unwrap();
        assert_eq!(
            kept.trigger_time()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
            Some(1_795_341_600)
        );
    }

    #[test]
    fn applies_and_deletes_change_live_objects_at_once() {
        let mut store = KindStore::default();
        store.apply(Event::Init);
        store.apply(Event::InitDone);
        assert!(store.synced());
        store.apply(Event::Apply(svc("a", 80)));
        store.apply(Event::Apply(svc("a", 81)));
        assert_eq!(store.len(), 1);
        store.apply(Event::Delete(svc("a", 81)));
        assert!(store.is_empty());
    }

    #[test]
    fn the_cluster_is_synced_only_when_every_kind_was_listed() {
        let mut store = ClusterStore::default();
        store.apply_service(Event::Init);
        store.apply_service(Event::InitDone);
        store.apply_endpoint_slice(Event::Init);
        store.apply_endpoint_slice(Event::InitDone);
        assert!(!store.synced(), "the Node was not listed yet");
        store.apply_node(Event::Init);
        store.apply_node(Event::InitDone);
        assert!(store.synced());
    }

    fn service_cidr(name: &str, cidrs: &[&str]) -> ServiceCIDR {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "spec": {"cidrs": cidrs}
        }))
        .unwrap()
    }

    #[test]
    fn service_cidrs_reach_the_model_as_they_change_and_never_hold_back_the_first_sync() {
        let mut store = ClusterStore::default();
        store.apply_service(Event::Init);
        store.apply_service(Event::InitDone);
        store.apply_endpoint_slice(Event::Init);
        store.apply_endpoint_slice(Event::InitDone);
        store.apply_node(Event::Init);
        store.apply_node(Event::InitDone);
        assert!(store.synced(), "ServiceCIDRs are not waited for");

        let mut live = LiveState::default();
        let kubernetes = service_cidr("kubernetes", &["fd00:96::/112", "10.96.0.0/16"]);
        store.apply_service_cidr(Event::Init);
        store.apply_service_cidr(Event::InitApply(kubernetes.clone()));
        store.update_model(&mut live, "node-a");
        assert!(live.state.service_cidrs.is_empty(), "a list in progress");
        assert_eq!(store.apply_service_cidr(Event::InitDone), Change::Changed);
        store.update_model(&mut live, "node-a");
        let shown = |live: &LiveState| -> Vec<String> {
            live.state
                .service_cidrs
                .iter()
                .map(|c| c.to_string())
                .collect()
        };
        assert_eq!(shown(&live), ["10.96.0.0/16", "fd00:96::/112"]);

        let bad = service_cidr("bad", &["not-a-cidr", "10.96.0.0/16", "10.97.0.0/16"]);
        store.apply_service_cidr(Event::Apply(bad.clone()));
        store.update_model(&mut live, "node-a");
        assert_eq!(
            shown(&live),
            ["10.96.0.0/16", "10.97.0.0/16", "fd00:96::/112"]
        );
        let rejected: Vec<_> = live.rejected().map(|r| (r.kind, r.name.as_str())).collect();
        assert_eq!(rejected, [("ServiceCIDR", "bad")]);

        // A range two objects list stays while one of them does.
        store.apply_service_cidr(Event::Delete(kubernetes));
        store.update_model(&mut live, "node-a");
        assert_eq!(shown(&live), ["10.96.0.0/16", "10.97.0.0/16"]);
        store.apply_service_cidr(Event::Delete(bad));
        store.update_model(&mut live, "node-a");
        assert!(live.state.service_cidrs.is_empty());
        assert_eq!(live.rejected().count(), 0);
    }

    #[test]
    fn every_event_is_counted_as_kube_proxy_counts_it_and_pending_until_a_sync_takes_it() {
        let mut store = ClusterStore::default();
        store.apply_service(Event::Apply(svc("a", 80)));
        store.apply_service(Event::Apply(svc("a", 81)));
        store.apply_service(Event::Apply(svc("b", 80)));
        // Rewriting an identical object is an update kube-proxy counts, with nothing to program.
        assert_eq!(
            store.apply_service(Event::Apply(svc("b", 80))),
            Change::Unchanged
        );
        let c = store.change_counts();
        assert_eq!(c.service_changes_total, 4);
        assert_eq!(c.service_changes_pending, 2, "two services wait");
        assert_eq!(c.endpoint_changes_total, 0);
        store.take_changed();
        store.apply_service(Event::Delete(svc("a", 81)));
        // A delete of an object never seen changes nothing, but is an event all the same.
        assert_eq!(
            store.apply_service(Event::Delete(svc("c", 80))),
            Change::Unchanged
        );
        let c = store.change_counts();
        assert_eq!(c.service_changes_total, 6);
        assert_eq!(c.service_changes_pending, 1);
        assert_eq!(c.endpoint_changes_pending, 0);

        store.apply_endpoint_slice(Event::Apply(slice("s", "a", &[])));
        store.take_changed();
        // A slice relabelled: both services are converted again, the one it belongs to now
        // is the one pending; deleted, it is pending for the one it belonged to.
        store.apply_endpoint_slice(Event::Apply(slice("s", "b", &[])));
        let c = store.change_counts();
        assert_eq!(
            (c.service_changes_pending, c.endpoint_changes_pending),
            (0, 1)
        );
        store.apply_endpoint_slice(Event::Delete(slice("s", "b", &[])));
        assert_eq!(store.change_counts().endpoint_changes_pending, 1);
        let service = |name: &str| ("default".to_string(), name.to_string());
        assert_eq!(store.take_changed(), [service("a"), service("b")].into());
        let c = store.change_counts();
        assert_eq!(
            (c.service_changes_pending, c.endpoint_changes_pending),
            (0, 0)
        );
    }

    fn slice(name: &str, service: &str, labels: &[(&str, &str)]) -> EndpointSlice {
        let mut slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {LAST_CHANGE_TRIGGER_TIME: "2026-11-22T10:00:00Z"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"port": 8080, "protocol": "TCP"}]
        }))
        .unwrap();
        let mut all: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        all.insert(SERVICE_NAME_LABEL.into(), service.into());
        slice.metadata.labels = Some(all);
        slice
    }

    #[test]
    fn walking_every_object_finds_what_searching_finds_for_each_service() {
        let mut store = ClusterStore::default();
        let in_namespace = |mut object: Service, namespace: Option<&str>| {
            object.metadata.namespace = namespace.map(str::to_string);
            object
        };
        // Namespaces and names where `namespace/name` keys sort otherwise than services do
        // ("a-b/…" before "a/…"; "web-1" before "web-abc"), a Service without namespace (the
        // default one), a Service without slices, slices without a Service or a label.
        for (name, namespace) in [
            ("web", Some("a")),
            ("web-1", Some("a")),
            ("web", Some("a-b")),
            ("solo", Some("a")),
            ("web", None),
        ] {
            store.apply_service(Event::Apply(in_namespace(svc(name, 80), namespace)));
        }
        for (name, service, namespace) in [
            ("web-zz", "web", "a"),
            ("web-abc", "web", "a"),
            ("web-1-x", "web-1", "a"),
            ("web-q", "web", "a-b"),
            ("ghost-1", "ghost", "a"),
            ("web-d", "web", "default"),
        ] {
            let mut object = slice(name, service, &[]);
            object.metadata.namespace = Some(namespace.into());
            store.apply_endpoint_slice(Event::Apply(object));
        }
        let mut unlabelled = slice("loose", "", &[]);
        unlabelled.metadata.labels = None;
        unlabelled.metadata.namespace = Some("a".into());
        store.apply_endpoint_slice(Event::Apply(unlabelled));

        let mut services: BTreeSet<ServiceRef> = store.members.keys().cloned().collect();
        // Services with no object left (deleted since) are asked for too.
        services.insert(("a".into(), "gone".into()));
        services.insert(("zz".into(), "gone".into()));
        let walked: Vec<_> = store.kept_of_each(&services).collect();
        assert_eq!(walked.len(), services.len());
        for ((service, objects, slices), expected) in walked.into_iter().zip(&services) {
            assert_eq!(service, expected);
            let (want_objects, want_slices) = store.kept_of(service);
            assert_eq!(objects, want_objects, "{service:?}");
            assert_eq!(slices, want_slices, "{service:?}");
        }
        let (_, slices) = store.kept_of(&("a".into(), "web".into()));
        let found: Vec<_> = slices.iter().map(|s| s.names.name.as_deref()).collect();
        assert_eq!(
            found,
            [Some("web-abc"), Some("web-zz")],
            "the test's premise: several slices of one service"
        );
    }

    #[test]
    fn an_update_of_fields_no_proxy_reads_is_counted_and_programs_nothing() {
        let metrics = Metrics::new();
        let mut store = ClusterStore::publishing_to(metrics.clone());
        store.apply_service(Event::Apply(svc("web", 80)));
        store.apply_endpoint_slice(Event::Apply(slice("web-1", "web", &[])));
        store.take_changed();
        store.take_triggers();

        let mut labelled = svc("web", 80);
        labelled.metadata.labels = Some([("team".to_string(), "blue".to_string())].into());
        labelled.metadata.annotations =
            Some([("example.com/owner".to_string(), "ops".to_string())].into());
        assert_eq!(
            store.apply_service(Event::Apply(labelled)),
            Change::Unchanged,
            "no sync is due"
        );
        assert_eq!(
            store.apply_endpoint_slice(Event::Apply(slice("web-1", "web", &[("app", "web")]))),
            Change::Unchanged
        );
        let c = store.change_counts();
        assert_eq!(
            (c.service_changes_total, c.endpoint_changes_total),
            (2, 2),
            "both updates counted"
        );
        assert_eq!(
            (c.service_changes_pending, c.endpoint_changes_pending),
            (0, 0),
            "nothing waits for a sync"
        );
        assert!(store.take_changed().is_empty());
        assert!(
            store.take_triggers().is_empty(),
            "no trigger time without a change to program"
        );
        let page = metrics.render();
        assert!(
            page.contains("kubeproxy_sync_proxy_rules_service_changes_total 2\n")
                && page.contains("kubeproxy_sync_proxy_rules_endpoint_changes_total 2\n"),
            "published without a sync:\n{page}"
        );
    }

    #[test]
    fn a_completed_relist_counts_every_object_listed_and_every_one_gone() {
        let mut store = ClusterStore::default();
        for name in ["a", "b", "c"] {
            store.apply_service(Event::Apply(svc(name, 80)));
        }
        store.take_changed();
        store.apply_service(Event::Init);
        store.apply_service(Event::InitApply(svc("a", 80)));
        store.apply_service(Event::InitApply(svc("b", 81)));
        store.apply_service(Event::InitApply(svc("d", 80)));
        assert_eq!(
            store.change_counts().service_changes_total,
            3,
            "not before InitDone"
        );
        store.apply_service(Event::InitDone);
        let c = store.change_counts();
        assert_eq!(c.service_changes_total, 3 + 3 + 1, "three listed, c gone");
        assert_eq!(
            c.service_changes_pending, 3,
            "b, c and d changed; a did not"
        );
    }

    #[test]
    fn a_relist_naming_an_object_twice_keeps_the_last_and_counts_it_once() {
        let mut store = ClusterStore::default();
        store.apply_service(Event::Init);
        store.apply_service(Event::InitApply(svc("b", 80)));
        store.apply_service(Event::InitApply(svc("a", 80)));
        store.apply_service(Event::InitApply(svc("b", 81)));
        store.apply_service(Event::InitDone);
        assert_eq!(names(&store.services), ["a", "b"]);
        let ports = |s: Service| s.spec.and_then(|s| s.ports).unwrap()[0].port;
        assert_eq!(store.services.get("default/b").map(ports), Some(81));
        assert_eq!(store.change_counts().service_changes_total, 2);
        assert_eq!(store.change_counts().service_changes_pending, 2);
    }

    #[test]
    fn endpoint_addresses_come_back_as_received_even_when_they_do_not_print_back() {
        let texts = [
            "10.1.2.3",
            "10.1.2.03",
            "010.1.2.3",
            "10.1.2.3 ",
            "10.1.2",
            "fd00::1",
            "FD00::1",
            "fd00:0::1",
        ];
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some("web-1".into()),
                namespace: Some("demo".into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: texts
                .iter()
                .map(|a| k8s_openapi::api::discovery::v1::Endpoint {
                    addresses: vec![a.to_string()],
                    ..Default::default()
                })
                .collect(),
            ports: None,
        };
        let mut slices = KindStore::default();
        slices.apply(Event::Apply(slice));
        let back: Vec<String> = slices
            .get("demo/web-1")
            .unwrap()
            .endpoints
            .into_iter()
            .map(|e| e.addresses[0].clone())
            .collect();
        assert_eq!(back, texts);
    }

    #[test]
    fn slice_trigger_times_are_collected_until_taken() {
        let mut store = ClusterStore::default();
        let mut slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: vec![],
            metadata: ObjectMeta {
                name: Some("web-abc".into()),
                namespace: Some("default".into()),
                annotations: Some(
                    [(
                        LAST_CHANGE_TRIGGER_TIME.to_string(),
                        "2026-11-22T10:00:00Z".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            ports: None,
        };
        store.apply_endpoint_slice(Event::Apply(slice.clone()));
        slice.metadata.annotations = Some(
            [(
                LAST_CHANGE_TRIGGER_TIME.to_string(),
                "not a time".to_string(),
            )]
            .into(),
        );
        store.apply_endpoint_slice(Event::Apply(slice));
        let taken = store.take_triggers();
        assert_eq!(taken.len(), 1, "the malformed annotation is ignored");
        let secs = taken[0]
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(secs, 1_795_341_600);
        assert!(store.take_triggers().is_empty());
    }

    #[test]
    fn rereading_unchanged_manifests_observes_no_trigger_time_again() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-abc", "namespace": "default",
                         "annotations": {LAST_CHANGE_TRIGGER_TIME: "2026-11-22T10:00:00Z"}},
            "addressType": "IPv4", "endpoints": []
        }))
        .unwrap();
        let inputs = Inputs {
            endpoint_slices: vec![slice.clone()],
            ..Inputs::default()
        };
        let mut store = ClusterStore::default();
        store.replace_all(inputs.clone());
        assert_eq!(store.take_triggers().len(), 1, "first read");
        store.replace_all(inputs);
        assert!(store.take_triggers().is_empty(), "same slice read again");
        let mut changed = slice;
        changed.metadata.annotations = Some(
            [(
                LAST_CHANGE_TRIGGER_TIME.to_string(),
                "2026-11-22T10:05:00Z".to_string(),
            )]
            .into(),
        );
        store.replace_all(Inputs {
            endpoint_slices: vec![changed],
            ..Inputs::default()
        });
        assert_eq!(store.take_triggers().len(), 1, "a new trigger time");
    }
}
