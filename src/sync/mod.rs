//! Turning desired tables into transactions (a wholesale replacement, a reconcile against what
//! the kernel holds, the cleanup), the engine that applies them, and the schedule of syncs.
//!
//! Guarantees: each function returns ONE transaction, so the kernel applies all of it or none
//! of it; neither needs to know what the kernel currently holds, and neither fails because a
//! table does or does not exist yet.

pub(crate) mod records;
pub use records::DIGEST_SET;
pub(crate) mod engine;
pub(crate) mod kernel;
pub(crate) mod leading;
pub(crate) mod schedule;

pub use engine::{SyncError, SyncKind, SyncReport, Syncer};
pub use kernel::{Kernel, KernelError};
pub use leading::Leading;
pub(crate) use schedule::Periods;
#[cfg(feature = "daemon")]
pub(crate) use schedule::Schedule;

use std::collections::BTreeSet;

use crate::nft::diff::TableChange;
use crate::nft::kernel::canonicalized;
use crate::nft::model::{Family, Table};
use crate::nft::transaction::{Op, TableRef, Transaction};

/// Replaces each table wholesale, in one transaction.
///
/// Per table: `AddTable` (so the delete cannot fail on a first run), `DeleteTable` (drops every
/// chain, set and rule we had, including ones no longer desired, which we could not name
/// without reading the kernel), then `AddTable` and the full contents. Inside one batch the
/// kernel swaps old for new: a packet sees the old ruleset or the new one, never an empty or
/// half-built table. The cost is that stateful parts of the table (dynamic affinity sets,
/// counters) restart empty; incremental syncs that keep them are the diff layer's job.
///
/// Contents are ordered so that every reference points backwards: chains first (rules and
/// verdict-map elements jump to them), then sets, then elements (which may name chains), then
/// rules (which may look up sets). Empty sets get no `AddElements`.
pub fn full_sync_transaction(tables: &[Table]) -> Transaction {
    Transaction {
        ops: tables.iter().flat_map(replace_table_ops).collect(),
        expected_generation: None,
    }
}

/// The ops that swap one table for `table` wholesale (see `full_sync_transaction`).
fn replace_table_ops(table: &Table) -> Vec<Op> {
    let mut ops = Vec::new();
    {
        let tref = TableRef {
            family: table.family,
            name: table.name.clone(),
        };
        ops.push(Op::AddTable {
            table: tref.clone(),
            comment: None,
        });
        ops.push(Op::DeleteTable {
            table: tref.clone(),
        });
        ops.push(Op::AddTable {
            table: tref.clone(),
            comment: table.comment.clone(),
        });
        for chain in table.chains.values() {
            ops.push(Op::AddChain {
                table: tref.clone(),
                chain: chain.clone(),
            });
        }
        for set in table.sets.values() {
            ops.push(Op::AddSet {
                table: tref.clone(),
                set: set.clone(),
            });
        }
        for set in table.sets.values().filter(|s| !s.elements.is_empty()) {
            ops.push(Op::AddElements {
                table: tref.clone(),
                set: set.name.clone(),
                elements: set.elements.clone(),
            });
        }
        for chain in table.chains.values() {
            for rule in &chain.rules {
                ops.push(Op::AddRule {
                    table: tref.clone(),
                    chain: chain.name.clone(),
                    rule: rule.clone(),
                });
            }
        }
    }
    ops
}

/// What the kernel holds of one of our tables, as read before a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// The table does not exist.
    Absent,
    /// The table was read and decoded.
    Read(Table),
    /// The table exists but could not be decoded (someone else wrote into it, or an older
    /// kubenft wrote a construct this one does not know): it is replaced wholesale.
    Unreadable,
}

/// One transaction that turns what the kernel holds into `desired`, touching only what differs.
///
/// `observed` holds our tables as read from the kernel, for every family we may own (a table
/// we own that is no longer desired is deleted). Readable tables get a minimal diff
/// (`nft::diff::plan`), so restarting on an unchanged cluster sends no operation and dynamic
/// affinity sets keep their entries; unreadable ones are replaced in the same atomic batch.
pub fn reconcile_transaction(
    observed: &[(TableRef, Observed)],
    desired: &[Table],
    expected_generation: Option<u32>,
) -> Transaction {
    let mut ops = Vec::new();
    for table in desired {
        let tref = table.table_ref();
        match observed.iter().find(|(r, _)| *r == tref).map(|(_, o)| o) {
            Some(Observed::Read(current)) => {
                ops.extend(crate::nft::diff::plan(Some(current), table))
            }
            Some(Observed::Unreadable) => ops.extend(replace_table_ops(table)),
            Some(Observed::Absent) | None => ops.extend(crate::nft::diff::plan(None, table)),
        }
    }
    ops.extend(deleted_tables(observed, desired));
    Transaction {
        ops,
        expected_generation,
    }
}

/// [`reconcile_transaction`], with the elements of the sets it fills whole moved out of
/// `desired` rather than copied (see `diff::plan_lending`); `return_elements(tx, desired)`
/// puts them back. Same operations, in the same order.
pub(crate) fn reconcile_transaction_lending(
    observed: &[(TableRef, Observed)],
    desired: &mut [Table],
    expected_generation: Option<u32>,
) -> Transaction {
    let mut ops = Vec::new();
    for table in desired.iter_mut() {
        let tref = table.table_ref();
        match observed.iter().find(|(r, _)| *r == tref).map(|(_, o)| o) {
            Some(Observed::Read(current)) => {
                ops.extend(crate::nft::diff::plan_lending(Some(current), table))
            }
            Some(Observed::Unreadable) => ops.extend(replace_table_ops(table)),
            Some(Observed::Absent) | None => {
                ops.extend(crate::nft::diff::plan_lending(None, table))
            }
        }
    }
    ops.extend(deleted_tables(observed, desired));
    Transaction {
        ops,
        expected_generation,
    }
}

/// The transaction [`reconcile_transaction`] makes where the kernel holds none of our tables,
/// for `tables` whose sets are declared empty: each set `filled(table)` names gets its
/// `AddElements`, in the same place, carrying no elements (`Kernel::apply_filling` supplies
/// them while it sends).
pub fn creation_transaction(
    tables: &[Table],
    filled: impl Fn(&Table) -> BTreeSet<String>,
    expected_generation: Option<u32>,
) -> Transaction {
    let mut ops = Vec::new();
    for table in tables {
        // A new table's sets are filled last, in set order (`diff::plan`).
        ops.extend(crate::nft::diff::plan(None, table));
        let filled = filled(table);
        ops.extend(
            table
                .sets
                .keys()
                .filter(|s| filled.contains(*s))
                .map(|set| Op::AddElements {
                    table: table.table_ref(),
                    set: set.clone(),
                    elements: Vec::new(),
                }),
        );
    }
    Transaction {
        ops,
        expected_generation,
    }
}

/// Gives the elements a [`reconcile_transaction_lending`] moved into `tx` back to `desired`.
pub(crate) fn return_elements(tx: Transaction, desired: &mut [Table]) {
    crate::nft::diff::return_elements(tx.ops, desired);
}

/// Deletes our tables the kernel holds that are no longer desired.
fn deleted_tables(observed: &[(TableRef, Observed)], desired: &[Table]) -> Vec<Op> {
    observed
        .iter()
        .filter(|(tref, o)| {
            *o != Observed::Absent && !desired.iter().any(|t| t.table_ref() == *tref)
        })
        .map(|(tref, _)| Op::DeleteTable {
            table: tref.clone(),
        })
        .collect()
}

/// One transaction that applies planned changes: for each table, the difference between the
/// parts it changes as they are and as they will be (canonical, as the kernel stores them), or
/// its deletion.
pub fn changes_transaction(
    changes: Vec<TableChange>,
    expected_generation: Option<u32>,
) -> Transaction {
    let mut ops = Vec::new();
    for change in changes {
        // Taken, not copied: a sync of hundreds of services holds thousands of elements here.
        let before = change.before.map(canonicalized);
        match (change.after, before) {
            (Some(after), before) => ops.extend(crate::nft::diff::plan(
                before.as_ref(),
                &canonicalized(after),
            )),
            (None, Some(before)) => ops.push(Op::DeleteTable {
                table: before.table_ref(),
            }),
            (None, None) => {}
        }
    }
    Transaction {
        ops,
        expected_generation,
    }
}

/// Deletes our `ip` and `ip6` tables named `table_name`, and nothing else. Each delete is
/// preceded by an `AddTable` so that a missing table is not an error (the add creates it empty,
/// the delete removes it, all in the same batch).
pub fn cleanup_transaction(table_name: &str) -> Transaction {
    let mut ops = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        let table = TableRef {
            family,
            name: table_name.to_string(),
        };
        ops.push(Op::AddTable {
            table: table.clone(),
            comment: None,
        });
        ops.push(Op::DeleteTable { table });
    }
    Transaction {
        ops,
        expected_generation: None,
    }
}

#[cfg(test)]
mod tests;
