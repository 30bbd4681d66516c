//! Plans the smallest ordered list of operations that turns one table's state into another, in
//! an order the kernel accepts inside one batch: things are created before anything refers to
//! them, and references are removed before what they point at is deleted.
//!
//! The unit of rule change is the chain: a chain whose rules differ is flushed and refilled,
//! so a one-endpoint change touches only the chains and map elements of that service.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{Chain, Element, Family, Set, Table, Value};
use super::transaction::{Op, TableRef};

impl Table {
    pub fn table_ref(&self) -> TableRef {
        TableRef {
            family: self.family,
            name: self.name.clone(),
        }
    }
}

/// How one of our tables changes: the parts that change, as they were and as they will be.
/// `before` holds exactly what the kernel has of those parts, so the difference between the two
/// is the transaction to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableChange {
    pub family: Family,
    /// `None`: the table does not exist yet.
    pub before: Option<Table>,
    /// `None`: the table goes away.
    pub after: Option<Table>,
}

fn same_rules(a: &Chain, b: &Chain) -> bool {
    a.rules.len() == b.rules.len()
        && a.rules
            .iter()
            .zip(&b.rules)
            .all(|(x, y)| x.stmts == y.stmts && x.comment == y.comment)
}

/// Whether `b` can keep the elements of `a`: same key, data, flags, timeout and size (a
/// kernel may raise a size in place, but the hash table keeps the buckets it was made with).
pub fn same_set_type(a: &Set, b: &Set) -> bool {
    a.key == b.key
        && a.data == b.data
        && a.interval == b.interval
        && a.dynamic == b.dynamic
        && a.timeout == b.timeout
        && a.size == b.size
}

fn without_rules(c: &Chain) -> Chain {
    Chain {
        rules: Vec::new(),
        ..c.clone()
    }
}

fn without_elements(s: &Set) -> Set {
    Set {
        elements: Vec::new(),
        ..s.clone()
    }
}

/// What differs between two tables, object by object: the plan's input.
struct Changes<'a> {
    removed_sets: BTreeSet<&'a str>,
    /// Sets whose type or flags changed: deleted and added again.
    recreated_sets: BTreeSet<&'a str>,
    new_sets: Vec<&'a Set>,
    removed_chains: Vec<&'a Chain>,
    /// Base chains whose hook, type or priority changed: deleted and added again.
    recreated_chains: Vec<&'a Chain>,
    recreated_names: BTreeSet<&'a str>,
    new_chains: Vec<&'a Chain>,
    /// Kept chains to refill: rules differ, or they use a set that is deleted or recreated.
    refilled: Vec<&'a Chain>,
}

/// Objects by name, as they are (`cur`) and as they will be (`desired`): those only `cur` has
/// (removed), those both have but whose kind `same_kind` says changed (recreated: the kernel
/// cannot change them in place), and those only `desired` has (new), each in name order.
fn split_by_name<'a, T>(
    cur: &'a BTreeMap<String, T>,
    desired: &'a BTreeMap<String, T>,
    same_kind: impl Fn(&T, &T) -> bool,
) -> (Vec<&'a T>, Vec<&'a T>, Vec<&'a T>) {
    let removed = cur
        .iter()
        .filter(|(n, _)| !desired.contains_key(*n))
        .map(|(_, o)| o)
        .collect();
    let recreated = desired
        .iter()
        .filter(|(n, o)| cur.get(*n).is_some_and(|old| !same_kind(old, o)))
        .map(|(_, o)| o)
        .collect();
    let new = desired
        .iter()
        .filter(|(n, _)| !cur.contains_key(*n))
        .map(|(_, o)| o)
        .collect();
    (removed, recreated, new)
}

fn classify<'a>(cur: &'a Table, desired: &'a Table) -> Changes<'a> {
    let (removed_sets, recreated_sets, new_sets) =
        split_by_name(&cur.sets, &desired.sets, same_set_type);
    let removed_sets: BTreeSet<&str> = removed_sets.iter().map(|s| s.name.as_str()).collect();
    let recreated_sets: BTreeSet<&str> = recreated_sets.iter().map(|s| s.name.as_str()).collect();

    // A base chain whose hook, type or priority changed is recreated.
    let (removed_chains, recreated_chains, new_chains) =
        split_by_name(&cur.chains, &desired.chains, |old, c| {
            old.base.map(|b| (b.kind, b.hook, b.priority))
                == c.base.map(|b| (b.kind, b.hook, b.priority))
        });
    let recreated_names: BTreeSet<&str> =
        recreated_chains.iter().map(|c| c.name.as_str()).collect();
    let refilled: Vec<&Chain> = desired
        .chains
        .values()
        .filter(|c| !recreated_names.contains(c.name.as_str()))
        .filter_map(|c| cur.chains.get(&c.name).map(|old| (old, c)))
        .filter(|(old, new)| {
            !same_rules(old, new)
                || old.rules.iter().any(|r| {
                    r.referenced_sets()
                        .iter()
                        .any(|s| removed_sets.contains(s) || recreated_sets.contains(s))
                })
        })
        .map(|(_, new)| new)
        .collect();

    Changes {
        removed_sets,
        recreated_sets,
        new_sets,
        removed_chains,
        recreated_chains,
        recreated_names,
        new_chains,
        refilled,
    }
}

/// The elements of a kept set to delete and to add. An element whose data or comment changed
/// is deleted and added again: an add does not replace an existing key's data or comment.
fn element_changes(old: &Set, s: &Set) -> (Vec<Element>, Vec<Element>) {
    fn by_key(set: &Set) -> BTreeMap<&Vec<Value>, &Element> {
        set.elements.iter().map(|e| (&e.key, e)).collect()
    }
    let (old_by_key, new_by_key) = (by_key(old), by_key(s));
    // `e` is not in the other set as it is: absent there, or with other data or comment.
    let changed = |e: &Element, other: &BTreeMap<&Vec<Value>, &Element>| {
        other
            .get(&e.key)
            .is_none_or(|o| o.data != e.data || o.comment != e.comment)
    };
    let deleted = old
        .elements
        .iter()
        .filter(|e| changed(e, &new_by_key))
        .cloned()
        .collect();
    let added = s
        .elements
        .iter()
        .filter(|e| changed(e, &old_by_key))
        .cloned()
        .collect();
    (deleted, added)
}

/// Operations that turn `current` (None: the table does not exist) into `desired`.
///
/// Dynamic sets (`flags dynamic`, filled by the data path, e.g. session affinity) keep the
/// kernel's elements: only their definition is managed here.
///
/// The order of the steps (see `plan_with`) is what makes every reference valid when the
/// kernel checks it.
pub fn plan(current: Option<&Table>, desired: &Table) -> Vec<Op> {
    plan_with(current, desired, |s| s.elements.clone())
}

/// [`plan`], with the elements of the sets it fills whole (new and recreated sets) moved out
/// of `desired` into the operations rather than copied: a new table's sets hold nearly all of
/// its memory, and a cold sync would otherwise hold the cluster's elements twice.
/// [`return_elements`] puts them back once the operations were sent.
pub(crate) fn plan_lending(current: Option<&Table>, desired: &mut Table) -> Vec<Op> {
    let mut lent: BTreeMap<String, Vec<Element>> = desired
        .sets
        .values_mut()
        .filter(|s| {
            current
                .and_then(|c| c.sets.get(&s.name))
                .is_none_or(|old| !same_set_type(old, s))
        })
        .map(|s| (s.name.clone(), std::mem::take(&mut s.elements)))
        .collect();
    plan_with(current, desired, |s| {
        lent.remove(&s.name).unwrap_or_default()
    })
}

/// Moves the elements [`plan_lending`] lent to `ops` back into their sets in `tables`. Only
/// whole-set fills were lent, and their sets were left empty: an `AddElements` of a set that
/// still holds elements carries copies (added elements of a kept set) and is left alone.
pub(crate) fn return_elements(ops: Vec<Op>, tables: &mut [Table]) {
    for op in ops {
        if let Op::AddElements {
            table,
            set,
            elements,
        } = op
            && let Some(t) = tables.iter_mut().find(|t| t.table_ref() == table)
            && let Some(s) = t.sets.get_mut(&set)
            && s.elements.is_empty()
        {
            s.elements = elements;
        }
    }
}

/// [`plan`], taking the elements of each set filled whole from `fill`.
///
/// The order of the numbered steps is what makes every reference valid when the kernel checks
/// it, so the order lives here, one call per step, each with the reason it comes where it does.
fn plan_with(
    current: Option<&Table>,
    desired: &Table,
    fill: impl FnMut(&Set) -> Vec<Element>,
) -> Vec<Op> {
    let empty = Table::new(desired.family, desired.name.clone());
    let cur = current.unwrap_or(&empty);
    let mut steps = Steps {
        table: desired.table_ref(),
        cur,
        desired,
        changes: classify(cur, desired),
        ops: Vec::new(),
    };

    if current.is_none() {
        steps.ops.push(Op::AddTable {
            table: steps.table.clone(),
            comment: desired.comment.clone(),
        });
    }

    // 1. Create what new references will point at.
    steps.add_new_chains_and_sets();
    // Base chain policy changes are an in-place update of the existing chain.
    steps.update_base_chain_policies();

    // 2. Remove references that are going away: rules of changed and doomed chains.
    steps.flush_chains_losing_rules();

    // 3. Element changes in sets that stay; a changed verdict is a delete then an add. The
    // deletions go now, the additions wait for the fill (step 6).
    let additions = steps.delete_changed_elements();

    // 4. Sets that go away or change type (nothing refers to them any more).
    steps.delete_and_recreate_sets();

    // 5. Recreated base chains come back with their new hook before anything is filled.
    steps.recreate_base_chains();

    // 6. Fill: rules, then elements of new and recreated sets and added elements. Rules come
    // first because the kernel walks every element of a map each time a rule in another chain
    // starts using it: thousands of service chains binding to a filled endpoint map would be
    // quadratic, while binding to it empty is free.
    steps.add_rules();
    steps.fill_fresh_sets(fill);
    steps.add_elements(additions);

    // 7. Chains nobody refers to any more.
    steps.delete_removed_chains();
    steps.ops
}

/// The operations of one table's plan as [`plan_with`] writes them, step by step, and what
/// they are computed from. Each step only appends: the order is [`plan_with`]'s.
struct Steps<'a> {
    table: TableRef,
    /// What the kernel holds (an empty table when it holds none).
    cur: &'a Table,
    desired: &'a Table,
    changes: Changes<'a>,
    ops: Vec<Op>,
}

impl Steps<'_> {
    /// New chains (without their rules) and new sets (without their elements).
    fn add_new_chains_and_sets(&mut self) {
        for c in &self.changes.new_chains {
            self.ops.push(Op::AddChain {
                table: self.table.clone(),
                chain: without_rules(c),
            });
        }
        for s in &self.changes.new_sets {
            self.ops.push(Op::AddSet {
                table: self.table.clone(),
                set: without_elements(s),
            });
        }
    }

    /// Kept base chains whose policy changed, added again with the new policy (the kernel
    /// updates an existing chain in place). Recreated chains get theirs in step 5.
    fn update_base_chain_policies(&mut self) {
        for c in self.desired.chains.values() {
            if let (Some(old), Some(base)) = (self.cur.chains.get(&c.name), c.base)
                && !self.changes.recreated_names.contains(c.name.as_str())
                && old.base.map(|b| b.policy) != Some(base.policy)
            {
                self.ops.push(Op::AddChain {
                    table: self.table.clone(),
                    chain: without_rules(c),
                });
            }
        }
    }

    /// Flushes each refilled, removed or recreated chain that holds rules in the kernel: its
    /// old rules are replaced or dropped, and may refer to what steps 4, 5 and 7 delete.
    fn flush_chains_losing_rules(&mut self) {
        let Changes {
            refilled,
            removed_chains,
            recreated_chains,
            ..
        } = &self.changes;
        for c in refilled
            .iter()
            .copied()
            .chain(removed_chains.iter().copied())
            .chain(recreated_chains.iter().copied())
        {
            if self
                .cur
                .chains
                .get(&c.name)
                .is_some_and(|old| !old.rules.is_empty())
            {
                self.ops.push(Op::FlushChain {
                    table: self.table.clone(),
                    chain: c.name.clone(),
                });
            }
        }
    }

    /// Deletes the elements that changed in kept sets (not dynamic, not recreated) and returns
    /// the elements to add to each, for [`Self::add_elements`].
    fn delete_changed_elements(&mut self) -> Vec<(String, Vec<Element>)> {
        let mut additions = Vec::new();
        for s in self.desired.sets.values() {
            if s.dynamic || self.changes.recreated_sets.contains(s.name.as_str()) {
                continue;
            }
            let Some(old) = self.cur.sets.get(&s.name) else {
                continue;
            };
            let (deleted, added) = element_changes(old, s);
            if !deleted.is_empty() {
                self.ops.push(Op::DeleteElements {
                    table: self.table.clone(),
                    set: s.name.clone(),
                    elements: deleted,
                });
            }
            if !added.is_empty() {
                additions.push((s.name.clone(), added));
            }
        }
        additions
    }

    /// Deletes removed and recreated sets, then adds the recreated ones (empty) with their new
    /// type.
    fn delete_and_recreate_sets(&mut self) {
        let Changes {
            removed_sets,
            recreated_sets,
            ..
        } = &self.changes;
        for name in removed_sets.iter().chain(recreated_sets.iter()) {
            self.ops.push(Op::DeleteSet {
                table: self.table.clone(),
                set: name.to_string(),
            });
        }
        for s in self
            .desired
            .sets
            .values()
            .filter(|s| recreated_sets.contains(s.name.as_str()))
        {
            self.ops.push(Op::AddSet {
                table: self.table.clone(),
                set: without_elements(s),
            });
        }
    }

    /// Deletes each recreated base chain and adds it again (without rules) with its new hook,
    /// type or priority.
    fn recreate_base_chains(&mut self) {
        for c in &self.changes.recreated_chains {
            self.ops.push(Op::DeleteChain {
                table: self.table.clone(),
                chain: c.name.clone(),
            });
            self.ops.push(Op::AddChain {
                table: self.table.clone(),
                chain: without_rules(c),
            });
        }
    }

    /// The rules of new, refilled and recreated chains, without kernel handles.
    fn add_rules(&mut self) {
        let Changes {
            new_chains,
            refilled,
            recreated_chains,
            ..
        } = &self.changes;
        for c in new_chains
            .iter()
            .chain(refilled.iter())
            .chain(recreated_chains.iter())
        {
            for rule in &c.rules {
                let mut rule = rule.clone();
                rule.handle = None;
                self.ops.push(Op::AddRule {
                    table: self.table.clone(),
                    chain: c.name.clone(),
                    rule,
                });
            }
        }
    }

    /// The elements of sets the kernel does not hold as they will be (new or recreated), each
    /// taken whole from `fill`.
    fn fill_fresh_sets(&mut self, mut fill: impl FnMut(&Set) -> Vec<Element>) {
        for s in self.desired.sets.values() {
            let fresh = !self.cur.sets.contains_key(&s.name)
                || self.changes.recreated_sets.contains(s.name.as_str());
            if !fresh {
                continue;
            }
            let elements = fill(s);
            if !elements.is_empty() {
                self.ops.push(Op::AddElements {
                    table: self.table.clone(),
                    set: s.name.clone(),
                    elements,
                });
            }
        }
    }

    /// The elements [`Self::delete_changed_elements`] found added to kept sets.
    fn add_elements(&mut self, additions: Vec<(String, Vec<Element>)>) {
        for (set, elements) in additions {
            self.ops.push(Op::AddElements {
                table: self.table.clone(),
                set,
                elements,
            });
        }
    }

    fn delete_removed_chains(&mut self) {
        for c in &self.changes.removed_chains {
            self.ops.push(Op::DeleteChain {
                table: self.table.clone(),
                chain: c.name.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
