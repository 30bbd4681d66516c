//! One family's table as the planner keeps it between plans: the skeleton and each service
//! port's fragment, packed, with the sets they declare, the owners of each key of a shared set,
//! and how many elements each set holds.
//!
//! Guarantees: under each key of a shared set the table holds the element of the key's first
//! owner in service order, as `build` does; fragments declaring equal sets share one copy of
//! the declaration; the counts never fall below what a set holds, so an element beyond a
//! set's declared size never goes unnoticed.

use std::collections::{BTreeMap, BTreeSet, HashMap, btree_map};
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::cluster::{ClusterState, ServicePortName};
use crate::nft::model::{Chain, Element, Set, Table, Value};
use crate::proxier::config::ProxyConfig;
use crate::proxier::key_owners::KeyOwners;
use crate::proxier::layout::{
    BlockAllocator, EndpointBlocks, Fragment, FragmentBuilder, IpFamily, SlotLayouts, assemble,
    table_head,
};
use crate::proxier::names::{is_endpoint_map, is_pick_slots};
use crate::proxier::packed::{PackedFragment, PartOrderElements, SetNames, SortedElements};
use crate::proxier::set_sizes;

/// One family's table, kept as its fragments.
#[derive(Debug, Clone)]
pub(super) struct FamilyPlan {
    pub(super) fam: IpFamily,
    pub(super) head: Table,
    pub(super) skeleton: Fragment,
    pub(super) blocks: BlockAllocator,
    /// Packed: the planner holds every element of the table between plans.
    pub(super) fragments: BTreeMap<Arc<ServicePortName>, PackedFragment>,
    /// Sets declared by fragments (endpoint-map shards, affinity sets), with how many
    /// fragments declare each; the set exists while one does. Fragments share equal
    /// declarations with this copy.
    pub(super) declared: HashMap<String, (Arc<Set>, usize)>,
    /// The names of the sets fragments put elements in, shared by the fragments.
    pub(super) set_names: SetNames,
    /// For each key of a shared set, by a hash of set and key, the fragments that put it
    /// there, in service order: the table holds the first one's element. Hashed so keys are not
    /// held twice; a fragment whose key only shares the hash is skipped by looking into it.
    /// Endpoint maps are left out: a key there lies in its chain's own block, so exactly one
    /// fragment has it.
    pub(super) owners: KeyOwners,
    /// How many elements the skeleton and the fragments put in each set, a key several of
    /// them put there counted for each: never fewer than the set holds.
    pub(super) counts: HashMap<Arc<str>, usize, foldhash::fast::FixedState>,
    /// The size declared for each set that has one (`set_sizes`).
    pub(super) sizes: HashMap<String, u32>,
    /// Whether a set needs more elements than its declared size since the last whole plan.
    pub(super) outgrown: bool,
}

/// The `owners` key of `key` in `set`: a fast hash, as collisions cost a look, never a wrong
/// owner (`KeyOwners`).
pub(super) fn key_hash(set: &str, key: &[Value]) -> u64 {
    foldhash::fast::FixedState::default().hash_one((set, key))
}

impl FamilyPlan {
    pub(super) fn whole(
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

    pub(super) fn table(&self) -> Table {
        self.sized(assemble(
            &self.head,
            std::iter::once(self.skeleton.clone())
                .chain(self.fragments.values().map(PackedFragment::unpack)),
        ))
    }

    /// `table` with each set's declared size.
    pub(super) fn sized(&self, mut table: Table) -> Table {
        for set in table.sets.values_mut() {
            self.size(set);
        }
        table
    }

    /// Gives `set` the size declared for it, if any.
    pub(super) fn size(&self, set: &mut Set) {
        if let Some(&size) = self.sizes.get(&set.name) {
            set.size = Some(size);
        }
    }

    /// `table` without elements (see `Planner::plan_without_elements`).
    pub(super) fn table_without_elements(&self) -> Table {
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
    pub(super) fn set_elements(&self, set: &str) -> SortedElements<'_> {
        SortedElements::new(self.skeleton.elements_of(set), self.fragments.values(), set)
    }

    /// `set_elements` in the order the skeleton and the fragments hold them. A key of a shared
    /// set is looked for in other fragments only where the owners say it may have several.
    pub(super) fn set_elements_in_part_order<'a>(
        &'a self,
        set: &str,
    ) -> PartOrderElements<
        'a,
        btree_map::Values<'a, Arc<ServicePortName>, PackedFragment>,
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

    /// The declaration of `set` if it exists now.
    pub(super) fn declaration(&self, set: &str) -> Option<&Set> {
        self.skeleton
            .sets
            .iter()
            .find(|s| s.name == set)
            .or_else(|| self.declared.get(set).map(|(s, _)| &**s))
    }

    /// `fragment` of `name` packed as the planner keeps it, its keys' owners and element counts
    /// taken into account (`None` when it is empty); the caller keeps it in `fragments`.
    pub(super) fn remember(
        &mut self,
        name: &Arc<ServicePortName>,
        fragment: &Fragment,
    ) -> Option<PackedFragment> {
        if fragment.is_empty() {
            return None;
        }
        for (set, elements) in shared_elements(fragment) {
            for e in elements {
                self.add_owner(set, &e.key, name);
            }
        }
        let declared = &mut self.declared;
        let stored = PackedFragment::pack(
            fragment,
            |set| share_declaration(declared, set),
            &mut self.set_names,
        );
        self.count(&stored, true);
        Some(stored)
    }

    /// Adds what `stored` puts in each set to `counts` (`added`), or takes it away.
    pub(super) fn count(&mut self, stored: &PackedFragment, added: bool) {
        for (set, n) in stored.element_counts() {
            let count = self.counts.entry(set.clone()).or_default();
            *count = if added { *count + n } else { *count - n };
        }
    }

    /// Keeps `stored` as the fragment of `name`, its declarations shared with equal ones.
    pub(super) fn store(&mut self, name: &Arc<ServicePortName>, mut stored: PackedFragment) {
        stored.sets = stored
            .sets
            .iter()
            .map(|set| share_declaration(&mut self.declared, set))
            .collect();
        self.count(&stored, true);
        self.fragments.insert(name.clone(), stored);
    }

    /// Forgets that `fragment` declares its sets: a set no fragment declares any more goes.
    pub(super) fn undeclare(&mut self, fragment: &PackedFragment) {
        for set in &fragment.sets {
            if let Some((_, n)) = self.declared.get_mut(&set.name) {
                *n -= 1;
                if *n == 0 {
                    self.declared.remove(&set.name);
                }
            }
        }
    }

    pub(super) fn add_owner(&mut self, set: &str, key: &[Value], name: &Arc<ServicePortName>) {
        self.owners.add(key_hash(set, key), name);
    }

    pub(super) fn remove_owner(&mut self, set: &str, key: &[Value], name: &ServicePortName) {
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

/// Adds the slots `stored` gives endpoints in the shared slot maps to `layouts`.
pub(super) fn add_slot_layouts(layouts: &mut SlotLayouts, stored: &PackedFragment) {
    for set in stored.element_sets().filter(|s| is_pick_slots(s)) {
        layouts.add(set, stored.elements_of(set));
    }
}
