//! The incremental planner. It remembers what each service port contributes to the tables (its
//! fragment), so a change to a few services is planned, and diffed, in time proportional to
//! those services rather than to the cluster: one new endpoint among 100,000 costs one fragment
//! rebuild and a few element changes.
//!
//! Guarantee: after any sequence of plans, the planned tables equal what `build_after` makes of
//! the same state with the same endpoint-map blocks, except for which slot of a shared slot map
//! each endpoint sits in (and so which one `pick-fallback` names: slot 0's): `build_after` lays
//! endpoints out in address order, the planner keeps each endpoint's slot across plans
//! (`build/slots.rs`). The same endpoints fill the same slots 0..n-1 either way; the property
//! tests check both.
//!
//! What every fragment depends on (configuration, node, families) replans everything when it
//! changes. The service CIDRs are the exception: only the skeleton's drop rules read them, so a
//! ServiceCIDR change replans the skeleton alone and changes only its chains that differ.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, btree_map};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use ipnet::IpNet;

use super::build::{
    BlockAllocator, EndpointBlocks, Fragment, FragmentBuilder, IpFamily, SlotLayouts, assemble,
    dropped_service_cidrs, families, table_head,
};
use super::config::ProxyConfig;
use super::key_owners::KeyOwners;
use super::names::{is_endpoint_map, is_pick_slots};
use super::set_sizes;
use super::stored::{PartOrderElements, SetNames, SortedElements, Stored, digests_of};
pub use crate::cluster::ServiceRef;
use crate::cluster::{ClusterState, Endpoint, NodeInfo, ServicePort, ServicePortName};
use crate::nft::diff::TableChange;
use crate::nft::digest::SetDigest;
use crate::nft::model::{Chain, Element, Family, Set, Table, Value};
use crate::nft::transaction::{ElementStream, SetElements};

/// What every fragment depends on besides its own service: a change here replans everything.
#[derive(Debug, Clone, PartialEq)]
struct Context {
    config: ProxyConfig,
    node: Option<NodeInfo>,
    families: Vec<IpFamily>,
}

impl Context {
    fn of(state: &ClusterState, config: &ProxyConfig) -> Self {
        Context {
            config: config.clone(),
            node: state.node.clone(),
            families: families(state, config),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Planner {
    context: Option<Context>,
    /// The service CIDRs the skeletons were planned with.
    service_cidrs: Vec<IpNet>,
    tables: Vec<FamilyPlan>,
    /// A digest of each planned service port's inputs (the port and its endpoints).
    inputs: BTreeMap<Arc<ServicePortName>, u64>,
    /// Blocks the next whole plan starts from.
    start_blocks: EndpointBlocks,
    /// Slot layouts the next whole plan keeps (once: later whole plans start afresh).
    start_layouts: SlotLayouts,
    /// Declared set sizes the next whole plan keeps where they still fit (once).
    start_sizes: BTreeMap<Family, HashMap<String, u32>>,
}

impl Planner {
    pub fn new() -> Self {
        Planner::default()
    }

    /// Forgets every plan. The next plan is a whole one that keeps what `kernel` (our tables as
    /// read back) holds: each chain's endpoint-map block and, where its service stays in the
    /// same shared slot map, each endpoint's slot. Unchanged services then plan to unchanged
    /// rules and elements, after a restart too, whatever slots churn left endpoints in.
    pub fn reset_to(&mut self, kernel: &[Table]) {
        *self = Planner {
            start_blocks: EndpointBlocks::of_tables(kernel),
            start_layouts: SlotLayouts::of_tables(kernel),
            start_sizes: kernel
                .iter()
                .map(|t| {
                    let sizes = t
                        .sets
                        .values()
                        .filter_map(|s| Some((s.name.clone(), s.size?)));
                    (t.family, sizes.collect())
                })
                .collect(),
            ..Planner::default()
        };
    }

    /// Whether the last plan needs more elements in a set than its declared size: the changes
    /// it returned cannot be applied, and a whole plan (`plan`, `plan_without_elements`)
    /// declares the set larger, to be recreated.
    pub fn outgrown(&self) -> bool {
        self.tables.iter().any(|t| t.outgrown)
    }

    /// Whether a plan is remembered, so `changes` can work from it.
    pub fn has_plan(&self) -> bool {
        self.context.is_some()
    }

    /// Plans `state` whole and returns its tables.
    pub fn plan(&mut self, state: &ClusterState, config: &ProxyConfig) -> Vec<Table> {
        self.replan(state, config);
        self.tables()
    }

    /// The tables as last planned.
    pub fn tables(&self) -> Vec<Table> {
        self.tables.iter().map(FamilyPlan::table).collect()
    }

    /// Plans `state` whole and returns its tables with every set declared but empty: a set's
    /// elements come from `SetElements::elements`, unpacked one at a time, so a cold sync need
    /// not hold the whole cluster's elements unpacked at once.
    pub fn plan_without_elements(
        &mut self,
        state: &ClusterState,
        config: &ProxyConfig,
    ) -> Vec<Table> {
        self.replan(state, config);
        self.tables
            .iter()
            .map(FamilyPlan::table_without_elements)
            .collect()
    }

    /// Plans `state` and returns how the tables change from the last plan. Only the services in
    /// `scope` are looked at (`None`: every service is compared with its last plan, which costs
    /// a digest of each). A change of node facts or configuration replans everything, and the
    /// changes are then whole tables; a change of the service CIDRs replans the skeleton.
    pub fn changes(
        &mut self,
        state: &ClusterState,
        config: &ProxyConfig,
        scope: Option<&BTreeSet<ServiceRef>>,
    ) -> Vec<TableChange> {
        let mut skeletons = None;
        if self.context.as_ref() == Some(&Context::of(state, config)) {
            skeletons = self.new_skeletons(state, config);
        }
        let Some(skeletons) = skeletons else {
            let before = self.tables();
            self.start_blocks = self.blocks();
            self.start_layouts = self.layouts();
            self.start_sizes = self
                .tables
                .iter()
                .map(|t| (t.head.family, t.sizes.clone()))
                .collect();
            self.replan(state, config);
            return whole_table_changes(before, self.tables());
        };
        let changed = self.changed_services(state, scope);
        if changed.is_empty() && skeletons.is_empty() {
            return Vec::new();
        }
        let mut skeletons = skeletons.into_iter();
        self.tables
            .iter_mut()
            .filter_map(|t| {
                let (before, after) = t.update(&changed, skeletons.next(), state, config);
                (before != after).then_some(TableChange {
                    family: t.head.family,
                    before: Some(before),
                    after: Some(after),
                })
            })
            .collect()
    }

    /// The shared slot maps' layouts, as planned.
    fn layouts(&self) -> SlotLayouts {
        let mut layouts = SlotLayouts::default();
        for t in &self.tables {
            for f in t.fragments.values() {
                add_slot_layouts(&mut layouts, f);
            }
        }
        layouts
    }

    /// Each family's chains and their blocks, as planned.
    pub fn blocks(&self) -> EndpointBlocks {
        EndpointBlocks::from_families(
            self.tables
                .iter()
                .map(|t| (t.head.family, t.blocks.blocks().clone()))
                .collect(),
        )
    }

    /// The skeleton of each table, in table order, replanned if the service CIDRs changed since
    /// the last plan (none otherwise). `None` when more than chains of a skeleton changed: only
    /// a whole plan can tell which fragment then holds an element, so the caller replans
    /// everything.
    fn new_skeletons(
        &mut self,
        state: &ClusterState,
        config: &ProxyConfig,
    ) -> Option<Vec<Fragment>> {
        let cidrs = dropped_service_cidrs(state, config);
        if cidrs == self.service_cidrs.as_slice() {
            return Some(Vec::new());
        }
        let mut skeletons = Vec::new();
        for t in &self.tables {
            let skeleton = FragmentBuilder::new(config, state, t.fam).skeleton();
            if skeleton.sets != t.skeleton.sets || skeleton.elements != t.skeleton.elements {
                return None;
            }
            skeletons.push(skeleton);
        }
        self.service_cidrs = cidrs.to_vec();
        Some(skeletons)
    }

    fn replan(&mut self, state: &ClusterState, config: &ProxyConfig) {
        let context = Context::of(state, config);
        self.service_cidrs = dropped_service_cidrs(state, config).to_vec();
        let layouts = std::mem::take(&mut self.start_layouts);
        let mut sizes = std::mem::take(&mut self.start_sizes);
        self.tables = context
            .families
            .iter()
            .map(|&fam| {
                let sizes = sizes.remove(&fam.table_family()).unwrap_or_default();
                FamilyPlan::whole(fam, state, config, &self.start_blocks, &layouts, &sizes)
            })
            .collect();
        self.inputs = state
            .ports_with_endpoints()
            .map(|(n, sp, eps)| (n.clone(), input_digest(sp, eps)))
            .collect();
        self.context = Some(context);
    }

    /// The service ports in `scope` whose inputs differ from their last plan (new and deleted
    /// ones included), in name order, with their digests updated.
    fn changed_services(
        &mut self,
        state: &ClusterState,
        scope: Option<&BTreeSet<ServiceRef>>,
    ) -> Vec<Arc<ServicePortName>> {
        let digest = |n: &ServicePortName, sp| input_digest(sp, state.endpoints_of(n));
        let mut changed = Vec::new();
        let Some(services) = scope else {
            // Each port whose digest moved, with it, and each planned port gone, without one.
            let candidates: BTreeMap<Arc<ServicePortName>, Option<u64>> = state
                .ports_with_endpoints()
                .map(|(n, sp, eps)| (n, input_digest(sp, eps)))
                .filter(|(n, now)| self.inputs.get(*n) != Some(now))
                .map(|(n, now)| (n.clone(), Some(now)))
                .chain(
                    self.inputs
                        .keys()
                        .filter(|n| !state.services.contains_key(*n))
                        .map(|n| (n.clone(), None)),
                )
                .collect();
            for (name, now) in candidates {
                changed.extend(self.record_input(&name, now));
            }
            return changed;
        };
        // Each service's ports are adjacent in name order, where they are now and where they
        // were planned: one range of each per service, and every port's digest from its range.
        for s in services {
            let lowest = ServicePortName::lowest_of(s);
            let now: Vec<(&Arc<ServicePortName>, u64)> = state
                .services
                .range::<ServicePortName, _>(&lowest..)
                .take_while(|(n, _)| n.is_port_of(s))
                .map(|(n, sp)| (n, digest(n, sp)))
                .collect();
            let gone: Vec<Arc<ServicePortName>> = self
                .inputs
                .range::<ServicePortName, _>(&lowest..)
                .map(|(n, _)| n)
                .take_while(|n| n.is_port_of(s))
                .filter(|n| !now.iter().any(|(m, _)| m == n))
                .cloned()
                .collect();
            let first = changed.len();
            for (name, d) in now {
                changed.extend(self.record_input(name, Some(d)));
            }
            for name in gone {
                changed.extend(self.record_input(&name, None));
            }
            changed[first..].sort();
        }
        changed
    }

    /// Keeps `now` as the digest of `name`'s inputs (`None`: it has none, the port is gone);
    /// returns the name if that changed its digest, as the planner holds it.
    fn record_input(
        &mut self,
        name: &Arc<ServicePortName>,
        now: Option<u64>,
    ) -> Option<Arc<ServicePortName>> {
        let (held, was) = match self.inputs.get_key_value(&**name) {
            Some((held, was)) => (Some(held.clone()), Some(*was)),
            None => (None, None),
        };
        if now == was {
            return None;
        }
        let name = held.unwrap_or_else(|| name.clone());
        match now {
            Some(d) => self.inputs.insert(name.clone(), d),
            None => self.inputs.remove(&*name),
        };
        Some(name)
    }
}

/// The tables as last planned, their elements one at a time (`plan_without_elements`).
impl SetElements for Planner {
    /// The sets of the `family` table as last planned that hold elements.
    fn sets_with_elements(&self, family: Family) -> BTreeSet<String> {
        let Some(t) = self.tables.iter().find(|t| t.head.family == family) else {
            return BTreeSet::new();
        };
        // Many fragments name few sets: each name is hashed, not compared along a tree path.
        let skeleton = t.skeleton.elements.iter().filter(|(_, e)| !e.is_empty());
        let names: HashSet<&str, foldhash::fast::FixedState> = skeleton
            .map(|(s, _)| s.as_str())
            .chain(t.fragments.values().flat_map(Stored::element_sets))
            .collect();
        names.into_iter().map(str::to_string).collect()
    }

    /// The elements of `set` in the `family` table as last planned, as `tables` holds them.
    fn elements(&self, family: Family, set: &str) -> ElementStream<'_> {
        match self.tables.iter().find(|t| t.head.family == family) {
            Some(t) => Box::new(t.set_elements(set)),
            None => Box::new(std::iter::empty()),
        }
    }

    /// Unsorted, read from the fragments in the order they are kept; sorted still for an
    /// interval set, whose ranges the encoder reads in order.
    fn elements_in_any_order(&self, family: Family, set: &str) -> ElementStream<'_> {
        match self.tables.iter().find(|t| t.head.family == family) {
            Some(t) if t.declaration(set).is_some_and(|s| !s.interval) => {
                Box::new(t.set_elements_in_part_order(set))
            }
            _ => self.elements(family, set),
        }
    }

    /// Counts the elements each part of the table puts in `set`, packed, until there are `n`:
    /// parts that put in the same key count it more than once.
    fn may_hold(&self, family: Family, set: &str, n: usize) -> bool {
        let Some(t) = self.tables.iter().find(|t| t.head.family == family) else {
            return n == 0;
        };
        let mut count = t.skeleton.elements_of(set).len();
        let mut fragments = t.fragments.values();
        while count < n {
            match fragments.next() {
                Some(f) => count += f.count_of(set),
                None => return false,
            }
        }
        true
    }

    /// The digest of `elements(family, set)`, found without sorting them.
    fn digest(&self, family: Family, set: &str) -> SetDigest {
        self.digests(family, &[set])[0]
    }

    /// The digests of `elements(family, set)` for each of `sets`, in one walk over the plan.
    fn digests(&self, family: Family, sets: &[&str]) -> Vec<SetDigest> {
        match self.tables.iter().find(|t| t.head.family == family) {
            Some(t) => digests_of(
                |set| t.skeleton.elements_of(set),
                t.fragments.values(),
                sets,
            ),
            None => vec![SetDigest::default(); sets.len()],
        }
    }
}

fn input_digest(sp: &ServicePort, endpoints: &[Endpoint]) -> u64 {
    let mut h = DefaultHasher::new();
    sp.hash(&mut h);
    endpoints.hash(&mut h);
    h.finish()
}

/// Changes that replace whole tables, family by family.
fn whole_table_changes(before: Vec<Table>, after: Vec<Table>) -> Vec<TableChange> {
    let families: BTreeSet<Family> = before.iter().chain(&after).map(|t| t.family).collect();
    let take = |tables: &[Table], f: Family| tables.iter().find(|t| t.family == f).cloned();
    families
        .into_iter()
        .map(|family| TableChange {
            family,
            before: take(&before, family),
            after: take(&after, family),
        })
        .filter(|c| c.before != c.after)
        .collect()
}

/// One family's table, kept as its fragments.
#[derive(Debug, Clone)]
struct FamilyPlan {
    fam: IpFamily,
    head: Table,
    skeleton: Fragment,
    blocks: BlockAllocator,
    /// Packed: the planner holds every element of the table between plans.
    fragments: BTreeMap<Arc<ServicePortName>, Stored>,
    /// Sets declared by fragments (endpoint-map shards, affinity sets), with how many
    /// fragments declare each; the set exists while one does. Fragments share equal
    /// declarations with this copy.
    declared: HashMap<String, (Arc<Set>, usize)>,
    /// The names of the sets fragments put elements in, shared by the fragments.
    set_names: SetNames,
    /// For each key of a shared set, by a hash of set and key, the fragments that put it
    /// there, in service order: the table holds the first one's element. Hashed so keys are not
    /// held twice; a fragment whose key only shares the hash is skipped by looking into it.
    /// Endpoint maps are left out: a key there lies in its chain's own block, so exactly one
    /// fragment has it.
    owners: KeyOwners,
    /// How many elements the skeleton and the fragments put in each set, a key several of
    /// them put there counted for each: never fewer than the set holds.
    counts: HashMap<Arc<str>, usize, foldhash::fast::FixedState>,
    /// The size declared for each set that has one (`set_sizes`).
    sizes: HashMap<String, u32>,
    /// Whether a set needs more elements than its declared size since the last whole plan.
    outgrown: bool,
}

/// The `owners` key of `key` in `set`: a fast hash, as collisions cost a look, never a wrong
/// owner (`KeyOwners`).
fn key_hash(set: &str, key: &[Value]) -> u64 {
    foldhash::fast::FixedState::default().hash_one((set, key))
}

impl FamilyPlan {
    fn whole(
        fam: IpFamily,
        state: &ClusterState,
        config: &ProxyConfig,
        start: &EndpointBlocks,
        layouts: &SlotLayouts,
        kept_sizes: &HashMap<String, u32>,
    ) -> Self {
        let builder = FragmentBuilder::new(config, state, fam);
        let mut plan = FamilyPlan {
            fam,
            head: table_head(config, fam),
            skeleton: builder.skeleton(),
            blocks: BlockAllocator::new(start.of_family(fam.table_family())),
            fragments: BTreeMap::new(),
            declared: HashMap::new(),
            set_names: SetNames::default(),
            owners: KeyOwners::default(),
            counts: HashMap::default(),
            sizes: HashMap::new(),
            outgrown: false,
        };
        for (set, elements) in &plan.skeleton.elements {
            let set = plan.set_names.get(set);
            *plan.counts.entry(set).or_default() += elements.len();
        }
        // In service order: the map is built at once, not searched for each service.
        let mut fragments = Vec::with_capacity(state.services.len());
        for (name, sp, eps) in state.ports_with_endpoints() {
            let fragment = builder.service(sp, eps, &mut plan.blocks, layouts);
            fragments.extend(plan.remember(name, &fragment).map(|f| (name.clone(), f)));
        }
        plan.fragments = fragments.into_iter().collect();
        let declarations = plan.skeleton.sets.iter();
        let declarations = declarations.chain(plan.declared.values().map(|(s, _)| &**s));
        plan.sizes = declarations
            .filter_map(|set| {
                let elements = plan.counts.get(set.name.as_str()).copied().unwrap_or(0);
                let size = set_sizes::chosen(set, elements, kept_sizes.get(&set.name).copied())?;
                Some((set.name.clone(), size))
            })
            .collect();
        // Blocks of chains the kernel had and this plan dropped are free from now on.
        let used: BTreeSet<&str> = plan
            .fragments
            .values()
            .flat_map(|f| f.chains.iter().map(|c| c.name.as_str()))
            .collect();
        let unused: Vec<String> = plan
            .blocks
            .blocks()
            .keys()
            .filter(|c| !used.contains(c.as_str()))
            .cloned()
            .collect();
        for chain in unused {
            plan.blocks.release(&chain);
        }
        plan
    }

    fn table(&self) -> Table {
        self.sized(assemble(
            &self.head,
            std::iter::once(self.skeleton.clone())
                .chain(self.fragments.values().map(Stored::unpack)),
        ))
    }

    /// `table` with each set's declared size.
    fn sized(&self, mut table: Table) -> Table {
        for set in table.sets.values_mut() {
            self.size(set);
        }
        table
    }

    /// Gives `set` the size declared for it, if any.
    fn size(&self, set: &mut Set) {
        if let Some(&size) = self.sizes.get(&set.name) {
            set.size = Some(size);
        }
    }

    /// `table` without elements (see `Planner::plan_without_elements`).
    fn table_without_elements(&self) -> Table {
        let bare = |chains: &[Chain], sets: Vec<Set>| Fragment {
            chains: chains.to_vec(),
            sets,
            elements: Vec::new(),
        };
        self.sized(assemble(
            &self.head,
            std::iter::once(bare(&self.skeleton.chains, self.skeleton.sets.clone())).chain(
                self.fragments
                    .values()
                    .map(|f| bare(&f.chains, f.sets.iter().map(|s| Set::clone(s)).collect())),
            ),
        ))
    }

    /// The elements `table` puts in `set`: every fragment's, in fragment order, the first of
    /// equal keys kept, sorted as `assemble` sorts them; unpacked one at a time.
    fn set_elements(&self, set: &str) -> SortedElements<'_> {
        SortedElements::new(self.skeleton.elements_of(set), self.fragments.values(), set)
    }

    /// `set_elements` in the order the skeleton and the fragments hold them. A key of a shared
    /// set is looked for in other fragments only where the owners say it may have several.
    fn set_elements_in_part_order<'a>(
        &'a self,
        set: &str,
    ) -> PartOrderElements<
        'a,
        btree_map::Values<'a, Arc<ServicePortName>, Stored>,
        impl FnMut(&[Value]) -> bool + use<'a>,
    > {
        let shared = !is_endpoint_map(set);
        let name: Box<str> = set.into();
        let may_repeat =
            move |key: &[Value]| shared && self.owners.may_be_several(key_hash(&name, key));
        PartOrderElements::new(
            self.skeleton.elements_of(set),
            self.fragments.values(),
            set,
            may_repeat,
        )
    }

    /// Replans the services `changed` and takes `skeleton` (if given) as the new skeleton, whose
    /// sets and elements must equal the old one's; returns the parts of the table that change,
    /// before and after: of these services' elements, only those their old and new fragments do
    /// not share (each set of theirs that may appear, vanish or change type whole), and their
    /// chains.
    fn update(
        &mut self,
        changed: &[Arc<ServicePortName>],
        skeleton: Option<Fragment>,
        state: &ClusterState,
        config: &ProxyConfig,
    ) -> (Table, Table) {
        let builder = FragmentBuilder::new(config, state, self.fam);
        let olds: Vec<Option<&Stored>> = changed.iter().map(|n| self.fragments.get(n)).collect();
        // The endpoints of the replanned services keep the slots their old fragments gave them.
        let mut layouts = SlotLayouts::default();
        for old in olds.iter().flatten() {
            add_slot_layouts(&mut layouts, old);
        }
        let new: Vec<(Arc<ServicePortName>, Fragment)> = changed
            .iter()
            .map(|name| {
                let fragment = state
                    .services
                    .get(&**name)
                    .map(|sp| {
                        let eps = state.endpoints_of(name);
                        builder.service(sp, eps, &mut self.blocks, &layouts)
                    })
                    .unwrap_or_default();
                (name.clone(), fragment)
            })
            .collect();
        // Packed as the planner keeps them, to be compared with the old ones as they are kept.
        let packed: Vec<Stored> = new
            .iter()
            .map(|(_, f)| Stored::pack(f, |s| Arc::new(s.clone()), &mut self.set_names))
            .collect();
        let empty = Stored::default();

        let mut before = Part::default();
        let mut after = Part::default();
        // Sets the replanned fragments declare may appear, vanish or change type, and then all
        // their elements must be at hand; every other set stays as it is, so only the elements
        // a service's old and new fragments do not share can change there.
        let declared_here: BTreeSet<String> = olds
            .iter()
            .flatten()
            .flat_map(|f| f.sets.iter().map(|s| s.name.clone()))
            .chain(
                new.iter()
                    .flat_map(|(_, f)| f.sets.iter().map(|s| s.name.clone())),
            )
            .collect();
        let differences: Vec<Vec<SetDifference>> = olds
            .iter()
            .zip(&packed)
            .map(|(old, now)| {
                let old = old.unwrap_or(&empty);
                let sets: BTreeSet<&str> = old.element_sets().chain(now.element_sets()).collect();
                sets.into_iter()
                    .filter_map(|set| {
                        let (gone, came) = if declared_here.contains(set) {
                            (by_key(old.elements_of(set)), by_key(now.elements_of(set)))
                        } else {
                            old.differing(now, set)
                        };
                        let differ = !gone.is_empty() || !came.is_empty();
                        differ.then(|| SetDifference {
                            set: set.to_string(),
                            gone,
                            came,
                        })
                    })
                    .collect()
            })
            .collect();
        for (old, (_, fragment)) in olds.iter().zip(&new) {
            if let Some(old) = old {
                before.chains.extend(old.chains.iter().cloned());
            }
            after.chains.extend(fragment.chains.iter().cloned());
        }
        drop(olds);
        let sets: BTreeSet<&str> = declared_here
            .iter()
            .map(String::as_str)
            .chain(differences.iter().flatten().map(|d| d.set.as_str()))
            .collect();

        // Keys of shared sets these services' elements differ under.
        let mut keys: Vec<Touched> = Vec::new();
        let mut seen: HashMap<KeyRef, usize> = HashMap::new();
        for (i, service) in differences.iter().enumerate() {
            for SetDifference { set, gone, came } in service {
                if is_endpoint_map(set) {
                    before.push(set, gone.iter().cloned());
                    after.push(set, came.iter().cloned());
                    continue;
                }
                let sides = gone.iter().map(|e| (e, false));
                for (e, is_new) in sides.chain(came.iter().map(|e| (e, true))) {
                    let key = KeyRef {
                        hash: key_hash(set, &e.key),
                        set,
                        key: &e.key,
                    };
                    let at = *seen.entry(key).or_insert_with(|| {
                        keys.push(Touched {
                            key,
                            service: i,
                            old: None,
                            new: None,
                        });
                        keys.len() - 1
                    });
                    let touched = &mut keys[at];
                    if touched.service == i {
                        *(if is_new {
                            &mut touched.new
                        } else {
                            &mut touched.old
                        }) = Some(e);
                    }
                }
            }
        }
        let names: Vec<&ServicePortName> = new.iter().map(|(n, _)| &**n).collect();
        // The old fragments are still in the store, where `winner` finds them.
        let olds_in_store = InHand {
            names: &names,
            fragments: Vec::new(),
        };
        before.declare(self, &sets);
        before.winners(self, &keys, |t| t.old, &olds_in_store);

        let mut gone_chains: Vec<String> = Vec::new();
        for (((name, fragment), now), differences) in new.iter().zip(packed).zip(&differences) {
            if let Some(old) = self.fragments.remove(&**name) {
                self.count(&old, false);
                let kept = |c: &&Chain| fragment.chains.iter().any(|n| n.name == c.name);
                gone_chains.extend(
                    old.chains
                        .iter()
                        .filter(|c| !kept(c))
                        .map(|c| c.name.clone()),
                );
                self.undeclare(&old);
            }
            for d in differences.iter().filter(|d| !is_endpoint_map(&d.set)) {
                self.change_owners(name, d);
            }
            if !fragment.is_empty() {
                self.store(name, now);
            }
        }
        self.resize(&sets);
        let news_at_hand = InHand {
            names: &names,
            fragments: new.iter().map(|(_, f)| Some(f)).collect(),
        };
        after.declare(self, &sets);
        after.winners(self, &keys, |t| t.new, &news_at_hand);
        for chain in &gone_chains {
            self.blocks.release(chain);
        }
        if let Some(skeleton) = skeleton {
            let old = std::mem::replace(&mut self.skeleton, skeleton);
            let differs = |a: &Fragment, b: &Fragment| {
                a.chains
                    .iter()
                    .filter(|c| !b.chains.contains(c))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            before.chains.extend(differs(&old, &self.skeleton));
            after.chains.extend(differs(&self.skeleton, &old));
        }
        (before.into_table(&self.head), after.into_table(&self.head))
    }

    /// After an update touching `sets`: a new one is declared `size_for` its elements, one that
    /// went forgets its size, and one that needs more than its size is `outgrown` (a size
    /// changes only in a whole plan, which recreates the set).
    fn resize(&mut self, sets: &BTreeSet<&str>) {
        for &name in sets {
            let elements = self.counts.get(name).copied().unwrap_or(0);
            let Some(set) = self.declaration(name).filter(|s| set_sizes::is_sized(s)) else {
                self.sizes.remove(name);
                continue;
            };
            match self.sizes.get(name) {
                Some(&size) => self.outgrown |= elements > size as usize,
                None => {
                    let size = set_sizes::size_for(elements);
                    self.sizes.insert(set.name.clone(), size);
                }
            }
        }
    }

    /// The declaration of `set` if it exists now.
    fn declaration(&self, set: &str) -> Option<&Set> {
        self.skeleton
            .sets
            .iter()
            .find(|s| s.name == set)
            .or_else(|| self.declared.get(set).map(|(s, _)| &**s))
    }

    /// The element the table holds under `touched`'s key now: its first owner's. The
    /// replanned services' fragments are read `at_hand` (`own`: the element of the service the
    /// key came from, nearly always its only owner) rather than unpacked again for every key,
    /// which was most of the planning of a sync of hundreds of services.
    fn winner(
        &self,
        touched: &Touched,
        own: Option<&Element>,
        at_hand: &InHand,
    ) -> Option<Element> {
        let KeyRef { hash, set, key } = touched.key;
        self.owners.of(hash).find_map(|o| {
            if **o == *at_hand.names[touched.service] {
                return own.cloned();
            }
            match at_hand.fragment(o) {
                Some(f) => f?.elements_of(set).iter().find(|e| e.key == key).cloned(),
                None => self.fragments[o].find(set, key),
            }
        })
    }

    /// `fragment` of `name` packed as the planner keeps it, its keys' owners and element counts
    /// taken into account (`None` when it is empty); the caller keeps it in `fragments`.
    fn remember(&mut self, name: &Arc<ServicePortName>, fragment: &Fragment) -> Option<Stored> {
        if fragment.is_empty() {
            return None;
        }
        for (set, elements) in shared_elements(fragment) {
            for e in elements {
                self.add_owner(set, &e.key, name);
            }
        }
        let declared = &mut self.declared;
        let stored = Stored::pack(
            fragment,
            |set| share_declaration(declared, set),
            &mut self.set_names,
        );
        self.count(&stored, true);
        Some(stored)
    }

    /// Adds what `stored` puts in each set to `counts` (`added`), or takes it away.
    fn count(&mut self, stored: &Stored, added: bool) {
        for (set, n) in stored.element_counts() {
            let count = self.counts.entry(set.clone()).or_default();
            *count = if added { *count + n } else { *count - n };
        }
    }

    /// Keeps `stored` as the fragment of `name`, its declarations shared with equal ones.
    fn store(&mut self, name: &Arc<ServicePortName>, mut stored: Stored) {
        stored.sets = stored
            .sets
            .iter()
            .map(|set| share_declaration(&mut self.declared, set))
            .collect();
        self.count(&stored, true);
        self.fragments.insert(name.clone(), stored);
    }

    /// The owners of the keys in `d`, a replanned service's elements of a set that changed:
    /// only keys its old or its new fragment lacks change owners, so the keys it keeps are
    /// neither hashed nor looked up.
    fn change_owners(&mut self, name: &Arc<ServicePortName>, d: &SetDifference) {
        // Both sorted by key; a key on both sides only changed its data or comment.
        let (mut gone, mut came) = (d.gone.iter().peekable(), d.came.iter().peekable());
        loop {
            match (gone.peek(), came.peek()) {
                (Some(a), Some(b)) if a.key == b.key => {
                    gone.next();
                    came.next();
                }
                (Some(a), Some(b)) if a.key < b.key => {
                    self.remove_owner(&d.set, &a.key, name);
                    gone.next();
                }
                (_, Some(b)) => {
                    self.add_owner(&d.set, &b.key, name);
                    came.next();
                }
                (Some(a), None) => {
                    self.remove_owner(&d.set, &a.key, name);
                    gone.next();
                }
                (None, None) => break,
            }
        }
    }

    /// Forgets that `fragment` declares its sets: a set no fragment declares any more goes.
    fn undeclare(&mut self, fragment: &Stored) {
        for set in &fragment.sets {
            if let Some((_, n)) = self.declared.get_mut(&set.name) {
                *n -= 1;
                if *n == 0 {
                    self.declared.remove(&set.name);
                }
            }
        }
    }

    fn add_owner(&mut self, set: &str, key: &[Value], name: &Arc<ServicePortName>) {
        self.owners.add(key_hash(set, key), name);
    }

    fn remove_owner(&mut self, set: &str, key: &[Value], name: &ServicePortName) {
        self.owners.remove(key_hash(set, key), name);
    }
}

/// A fragment's elements of sets other fragments may share (all but the endpoint maps, whose
/// keys lie in one chain's own block).
fn shared_elements(fragment: &Fragment) -> impl Iterator<Item = &(String, Vec<Element>)> {
    fragment
        .elements
        .iter()
        .filter(|(set, _)| !is_endpoint_map(set))
}

/// The declaration kept for `set` in `declared`, counted once more: the one held already if
/// equal, so fragments declaring the same set share one copy.
fn share_declaration(declared: &mut HashMap<String, (Arc<Set>, usize)>, set: &Set) -> Arc<Set> {
    let (shared, n) = declared
        .entry(set.name.clone())
        .or_insert_with(|| (Arc::new(set.clone()), 0));
    *n += 1;
    if **shared == *set {
        shared.clone()
    } else {
        Arc::new(set.clone())
    }
}

/// How a replanned service's elements of one set changed: those only its old fragment holds
/// as they are, and those only its new one holds, each sorted by key.
struct SetDifference {
    set: String,
    gone: Vec<Element>,
    came: Vec<Element>,
}

fn by_key(elements: impl Iterator<Item = Element>) -> Vec<Element> {
    let mut elements: Vec<Element> = elements.collect();
    elements.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    elements
}

/// Adds the slots `stored` gives endpoints in the shared slot maps to `layouts`.
fn add_slot_layouts(layouts: &mut SlotLayouts, stored: &Stored) {
    for set in stored.element_sets().filter(|s| is_pick_slots(s)) {
        layouts.add(set, stored.elements_of(set));
    }
}

/// The fragments of the services an update replans, as the planner holds them before it or
/// after it, by the services' names (sorted, as `changed_services` lists them).
struct InHand<'a> {
    names: &'a [&'a ServicePortName],
    fragments: Vec<Option<&'a Fragment>>,
}

impl InHand<'_> {
    /// The fragment of `name` if it is one of the replanned services (`Some(None)`: it has
    /// none). A name not found here is looked up in the planner's own store, which holds the
    /// same fragments: this only saves time.
    fn fragment(&self, name: &ServicePortName) -> Option<Option<&Fragment>> {
        let i = self.names.binary_search(&name).ok()?;
        self.fragments.get(i).copied()
    }
}

/// A key of a shared set that replanned services touch, with its `owners` hash computed once.
#[derive(Debug, Clone, Copy)]
struct KeyRef<'a> {
    hash: u64,
    set: &'a str,
    key: &'a [Value],
}

impl std::hash::Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for KeyRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.set == other.set && self.key == other.key
    }
}

impl Eq for KeyRef<'_> {}

/// A touched key, the replanned service it was first seen in, and that service's elements
/// under it before and after.
struct Touched<'a> {
    key: KeyRef<'a>,
    service: usize,
    old: Option<&'a Element>,
    new: Option<&'a Element>,
}

/// Part of a table: some chains, and some elements of some sets.
#[derive(Default)]
struct Part {
    chains: Vec<Chain>,
    /// Declarations of the sets that exist, without elements.
    sets: BTreeMap<String, Set>,
    /// Elements by set; those of a set that does not exist are dropped.
    elements: BTreeMap<String, Vec<Element>>,
}

impl Part {
    fn push(&mut self, set: &str, elements: impl Iterator<Item = Element>) {
        match self.elements.get_mut(set) {
            Some(held) => held.extend(elements),
            None => {
                self.elements.insert(set.to_string(), elements.collect());
            }
        }
    }

    /// Declares each of `sets` that exists in `plan` now.
    fn declare(&mut self, plan: &FamilyPlan, sets: &BTreeSet<&str>) {
        for &name in sets {
            if let Some(set) = plan.declaration(name) {
                let mut set = set.clone();
                plan.size(&mut set);
                self.sets.insert(name.to_string(), set);
            }
        }
    }

    /// The elements `plan` holds now under `keys`; `own` picks, of a key's service's elements
    /// under it, the one of this side (before or after).
    fn winners<'a>(
        &mut self,
        plan: &FamilyPlan,
        keys: &[Touched<'a>],
        own: impl Fn(&Touched<'a>) -> Option<&'a Element>,
        at_hand: &InHand,
    ) {
        for t in keys {
            if let Some(e) = plan.winner(t, own(t), at_hand) {
                self.push(t.key.set, std::iter::once(e));
            }
        }
    }

    fn into_table(self, head: &Table) -> Table {
        let mut t = Table {
            chains: self
                .chains
                .into_iter()
                .map(|c| (c.name.clone(), c))
                .collect(),
            sets: self.sets,
            ..head.clone()
        };
        for (set, elements) in self.elements {
            if let Some(s) = t.sets.get_mut(&set) {
                s.elements.extend(elements);
            }
        }
        t.normalize();
        t
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
