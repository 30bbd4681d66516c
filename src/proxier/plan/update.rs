//! Replanning a few service ports of one family's table (`FamilyPlan::update`): the parts of
//! the table that change, before and after, found in time proportional to those services.
//!
//! Guarantees: the parts hold the replanned services' chains and, for each key of a set their
//! elements differ under, the element the table holds there before and after (its first
//! owner's, which may be an unchanged service's); a set they declare is in the parts whole, as
//! it may appear, vanish or change type; a set that comes to need more elements than its
//! declared size marks the plan `outgrown` (a size changes only in a whole plan).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hasher;
use std::sync::Arc;

use crate::cluster::{ClusterState, ServicePortName};
use crate::nft::model::{Chain, Element, Set, Table, Value};
use crate::proxier::config::ProxyConfig;
use crate::proxier::layout::{Fragment, FragmentBuilder, SlotLayouts};
use crate::proxier::names::is_endpoint_map;
use crate::proxier::packed::PackedFragment;
use crate::proxier::set_sizes;

use super::family::{FamilyPlan, add_slot_layouts, key_hash};

impl FamilyPlan {
    /// Replans the services `changed` and takes `skeleton` (if given) as the new skeleton, whose
    /// sets and elements must equal the old one's; returns the parts of the table that change,
    /// before and after: of these services' elements, only those their old and new fragments do
    /// not share (each set of theirs that may appear, vanish or change type whole), and their
    /// chains.
    pub(super) fn update(
        &mut self,
        changed: &[Arc<ServicePortName>],
        skeleton: Option<Fragment>,
        state: &ClusterState,
        config: &ProxyConfig,
    ) -> (Table, Table) {
        let builder = FragmentBuilder::new(config, state, self.fam);
        let olds: Vec<Option<&PackedFragment>> =
            changed.iter().map(|n| self.fragments.get(n)).collect();
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
        let packed: Vec<PackedFragment> = new
            .iter()
            .map(|(_, f)| PackedFragment::pack(f, |s| Arc::new(s.clone()), &mut self.set_names))
            .collect();

        let mut before = Part::default();
        let mut after = Part::default();
        let (declared_here, differences) = set_differences(&olds, &new, &packed);
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

        let keys = touched_keys(&differences, &mut before, &mut after);
        let names: Vec<&ServicePortName> = new.iter().map(|(n, _)| &**n).collect();
        // The old fragments are still in the store, where `winner` finds them.
        let olds_in_store = InHand {
            names: &names,
            fragments: Vec::new(),
        };
        before.declare(self, &sets);
        before.winners(self, &keys, |t| t.old, &olds_in_store);

        let gone_chains = self.replace_fragments(&new, packed, &differences);
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
            self.replace_skeleton(skeleton, &mut before, &mut after);
        }
        (before.into_table(&self.head), after.into_table(&self.head))
    }

    /// Stores the replanned services' `new` fragments (`packed`) in place of their old ones,
    /// the owners of the keys they differ under (`differences`) changed; returns the chains of
    /// the old fragments the new ones no longer have, whose blocks the caller releases.
    fn replace_fragments(
        &mut self,
        new: &[(Arc<ServicePortName>, Fragment)],
        packed: Vec<PackedFragment>,
        differences: &[Vec<SetDifference>],
    ) -> Vec<String> {
        let mut gone_chains: Vec<String> = Vec::new();
        for (((name, fragment), now), differences) in new.iter().zip(packed).zip(differences) {
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
        gone_chains
    }

    /// Takes `skeleton` as the new skeleton; the chains that differ from the old one's go in
    /// `before` (the old ones) and `after` (the new ones).
    fn replace_skeleton(&mut self, skeleton: Fragment, before: &mut Part, after: &mut Part) {
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
}

/// How each replanned service's elements changed, set by set, from its old fragment (`olds`,
/// `None`: it had none) to its new one (`new`, packed as `packed`), and the sets the old and
/// new fragments declare. Those sets may appear, vanish or change type, and then all their
/// elements must be at hand; every other set stays as it is, so only the elements a service's
/// old and new fragments do not share can change there.
fn set_differences(
    olds: &[Option<&PackedFragment>],
    new: &[(Arc<ServicePortName>, Fragment)],
    packed: &[PackedFragment],
) -> (BTreeSet<String>, Vec<Vec<SetDifference>>) {
    let empty = PackedFragment::default();
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
        .zip(packed)
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
    (declared_here, differences)
}

/// The keys of shared sets the replanned services' elements differ under (`differences`, by
/// service), each with the service it was first seen in and that service's elements under it.
/// The endpoint maps' elements go straight into `before` and `after`: a key there lies in its
/// chain's own block, so no other service can hold it.
fn touched_keys<'a>(
    differences: &'a [Vec<SetDifference>],
    before: &mut Part,
    after: &mut Part,
) -> Vec<Touched<'a>> {
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
    keys
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
