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
mod tests;
