//! An ordered list of operations on one or more tables, applied as ONE netlink batch: the kernel
//! takes all of them or none.
//!
//! Operations are plain data (printable, countable, comparable) so the planner and tests can
//! reason about a sync without a kernel; `netlink::apply` sends them.

use std::collections::BTreeSet;

use super::digest::SetDigest;
use super::model::{Chain, Element, Family, Rule, Set};

/// Which table an operation targets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableRef {
    pub family: Family,
    pub name: String,
}

impl std::fmt::Display for TableRef {
    /// As nft names it: `ip kubenft`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}",
            super::render::family_keyword(self.family),
            self.name
        )
    }
}

/// One operation, in the order the kernel will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create the table if missing (like `add table`: no error if it exists).
    AddTable {
        table: TableRef,
        comment: Option<String>,
    },
    DeleteTable {
        table: TableRef,
    },
    /// Remove every rule of every chain of the table (sets and chains stay).
    FlushTable {
        table: TableRef,
    },
    /// Create the chain (base or regular) if missing; `chain.rules` is ignored (add rules separately).
    AddChain {
        table: TableRef,
        chain: Chain,
    },
    FlushChain {
        table: TableRef,
        chain: String,
    },
    DeleteChain {
        table: TableRef,
        chain: String,
    },
    /// Create the set if missing; `set.elements` is ignored (add elements separately).
    AddSet {
        table: TableRef,
        set: Set,
    },
    FlushSet {
        table: TableRef,
        set: String,
    },
    DeleteSet {
        table: TableRef,
        set: String,
    },
    AddElements {
        table: TableRef,
        set: String,
        elements: Vec<Element>,
    },
    DeleteElements {
        table: TableRef,
        set: String,
        elements: Vec<Element>,
    },
    /// Append a rule at the end of the chain.
    AddRule {
        table: TableRef,
        chain: String,
        rule: Rule,
    },
    /// Delete a rule by its kernel handle.
    DeleteRule {
        table: TableRef,
        chain: String,
        handle: u64,
    },
}

impl Op {
    /// The table and set of an `AddElements` that carries no elements: a set filled as the
    /// batch is encoded.
    pub(crate) fn unfilled_elements(&self) -> Option<(&TableRef, &str)> {
        match self {
            Op::AddElements {
                table,
                set,
                elements,
            } if elements.is_empty() => Some((table, set)),
            _ => None,
        }
    }

    /// This op with its elements from `fill(table, set)`, if it is an `AddElements` that
    /// carries none.
    pub(crate) fn with_filled_elements<'a>(
        &self,
        fill: &mut dyn FnMut(&TableRef, &str) -> ElementStream<'a>,
    ) -> Option<Op> {
        let (table, set) = self.unfilled_elements()?;
        Some(Op::AddElements {
            table: table.clone(),
            set: set.to_owned(),
            elements: fill(table, set).collect(),
        })
    }
}

/// An ordered batch of operations. Applying it is all-or-nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Transaction {
    pub ops: Vec<Op>,
    /// When set, the kernel refuses the batch if the ruleset generation changed since this id
    /// was read (another program changed the ruleset in between).
    pub expected_generation: Option<u32>,
}

/// A set's elements, produced one at a time.
pub type ElementStream<'a> = Box<dyn Iterator<Item = Element> + 'a>;

/// The elements of desired tables' sets, handed out one at a time, for a sync that need not
/// hold them all at once (`Syncer::sync_filling`).
pub trait SetElements {
    /// The sets of the `family` table that hold elements.
    fn sets_with_elements(&self, family: Family) -> BTreeSet<String>;
    /// The elements of `set` in the `family` table, sorted as a `Table` holds them.
    fn elements(&self, family: Family, set: &str) -> ElementStream<'_>;
    /// The elements `elements(family, set)` gives, in any order: for a batch that creates the
    /// set, whose elements the kernel keeps in an order of its own.
    fn elements_in_any_order(&self, family: Family, set: &str) -> ElementStream<'_> {
        self.elements(family, set)
    }
    /// Whether `elements(family, set)` may yield `n` elements or more: true whenever it does
    /// (an implementation that can count more cheaply than it unpacks, and stop at `n`, says
    /// so here; it may count keys several parts share more than once).
    fn may_hold(&self, family: Family, set: &str, n: usize) -> bool {
        n == 0 || self.elements(family, set).nth(n - 1).is_some()
    }
    /// The digest of `elements(family, set)` as the kernel would hold them (see `SetDigest`).
    fn digest(&self, family: Family, set: &str) -> SetDigest {
        let mut digest = SetDigest::default();
        for e in self.elements(family, set) {
            digest.add(&e);
        }
        digest
    }
    /// `digest` of each of `sets`, in their order (one walk where the elements' source allows).
    fn digests(&self, family: Family, sets: &[&str]) -> Vec<SetDigest> {
        sets.iter().map(|s| self.digest(family, s)).collect()
    }
}
