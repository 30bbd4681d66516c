//! The incremental planner. It remembers what each service port contributes to the tables (its
//! fragment), so a change to a few services is planned, and diffed, in time proportional to
//! those services rather than to the cluster: one new endpoint among 100,000 costs one fragment
//! rebuild and a few element changes.
//!
//! Guarantee: after any sequence of plans, the planned tables equal what `build_after` makes of
//! the same state with the same endpoint-map blocks, except for which slot of a shared slot map
//! each endpoint sits in (and so which one `pick-fallback` names: slot 0's): `build_after` lays
//! endpoints out in address order, the planner keeps each endpoint's slot across plans
//! (`layout/slots.rs`). The same endpoints fill the same slots 0..n-1 either way; the property
//! tests check both.
//!
//! What every fragment depends on (configuration, node, families) replans everything when it
//! changes. The service CIDRs are the exception: only the skeleton's drop rules read them, so a
//! ServiceCIDR change replans the skeleton alone and changes only its chains that differ.
//!
//! By concept: this file holds the `Planner` (what changed since the last plan, the tables as
//! planned); `family` keeps one family's table as the fragments of its service ports, and
//! `update` replans a few of them into the parts of the table that change.

mod family;
mod update;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ipnet::IpNet;

use family::{FamilyPlan, add_slot_layouts};

use super::config::ProxyConfig;
use super::layout::{
    EndpointBlocks, Fragment, FragmentBuilder, IpFamily, SlotLayouts, dropped_service_cidrs,
    families,
};
use super::packed::{PackedFragment, digests_of};
pub use crate::cluster::ServiceRef;
use crate::cluster::{ClusterState, Endpoint, NodeInfo, ServicePort, ServicePortName};
use crate::nft::diff::TableChange;
use crate::nft::digest::SetDigest;
use crate::nft::model::{Family, Table};
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

/// One planned chain, where it lives and how many rules it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedChain<'a> {
    pub family: Family,
    pub table: &'a str,
    pub chain: &'a str,
    pub rules: usize,
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

    /// The base chains of the tables as last planned, each with its table and how many rules
    /// it holds: the chains that hook every other rule into the kernel's paths.
    pub fn base_chains(&self) -> Vec<PlannedChain<'_>> {
        self.tables
            .iter()
            .flat_map(|t| {
                let chains = t.skeleton.chains.iter().filter(|c| c.base.is_some());
                chains.map(|c| PlannedChain {
                    family: t.head.family,
                    table: &t.head.name,
                    chain: &c.name,
                    rules: c.rules.len(),
                })
            })
            .collect()
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
            .chain(t.fragments.values().flat_map(PackedFragment::element_sets))
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

#[cfg(test)]
mod tests;
