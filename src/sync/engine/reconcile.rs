//! The difference between what the kernel holds (read, or remembered from our last commit)
//! and the desired tables, committed with the records of the sets' digests it calls for.
//!
//! Guarantees: the elements lent to the transaction are given back to the desired tables
//! whatever the outcome; a full sync reads again and retries when another program commits in
//! between, at most `FULL_SYNC_ATTEMPTS` times, then reports `SyncError::Contended`.

use std::collections::{BTreeMap, BTreeSet};

use crate::nft::kernel::canonicalize_elements;
use crate::nft::model::{Element, Family, Table};
use crate::nft::transaction::{SetElements, Transaction};
use crate::sync::kernel::{Kernel, KernelError};
use crate::sync::records::{self, Summary};
use crate::sync::{reconcile_transaction_lending, return_elements};

use super::{KernelRead, SyncError, SyncKind, SyncReport, Syncer};

/// Elements moved out of the desired tables while a transaction is built, by family and set.
type Lent = Vec<(Family, String, Vec<Element>)>;

/// How often a full sync re-reads and retries when another program commits in between.
const FULL_SYNC_ATTEMPTS: usize = 3;

impl<K: Kernel> Syncer<K> {
    /// Reads the kernel and commits the difference to `desired` (`planned`: as in
    /// `sync_from_memory`), again if another program commits in between.
    pub(super) fn full_sync(
        &mut self,
        mut desired: Vec<Table>,
        planned: Option<&dyn SetElements>,
    ) -> Result<SyncReport, SyncError> {
        for _ in 0..FULL_SYNC_ATTEMPTS {
            let generation = self.kernel.generation().map_err(SyncError::Generation)?;
            let read = self.read_tables()?;
            if let Some(report) =
                self.reconcile(read, &mut desired, planned, generation, SyncKind::Full)?
            {
                return Ok(report);
            }
        }
        Err(SyncError::Contended {
            attempts: FULL_SYNC_ATTEMPTS,
        })
    }

    /// Commits the difference between `read` and `desired`, with the records it calls for, if
    /// the ruleset is still at `generation`; `Ok(None)` if another program committed since.
    /// `planned`: as in `sync_from_memory`.
    pub(super) fn reconcile(
        &mut self,
        mut read: KernelRead,
        desired: &mut Vec<Table>,
        planned: Option<&dyn SetElements>,
        generation: u32,
        kind: SyncKind,
    ) -> Result<Option<SyncReport>, SyncError> {
        let (settled, _) = self.settle_unread(&mut read, desired, planned)?;
        let mut lent = Lent::new();
        // Only sets the plan puts elements in are filled: each costs a walk over the plan.
        let mut with_elements: BTreeMap<Family, BTreeSet<String>> = BTreeMap::new();
        for t in desired.iter_mut() {
            for s in t.sets.values_mut() {
                let is_settled = settled.contains(&(t.family, s.name.clone()));
                match planned {
                    // Its elements stay out of the difference, which sees the set empty on
                    // both sides.
                    None if is_settled => {
                        lent.push((t.family, s.name.clone(), std::mem::take(&mut s.elements)))
                    }
                    // Filled once: a retry after a foreign commit finds it filled.
                    Some(planned) if !is_settled && s.elements.is_empty() && !s.dynamic => {
                        let filled = with_elements
                            .entry(t.family)
                            .or_insert_with(|| planned.sets_with_elements(t.family));
                        if filled.contains(&s.name) {
                            s.elements = planned.elements(t.family, &s.name).collect();
                            canonicalize_elements(&mut s.elements);
                        }
                    }
                    _ => {}
                }
            }
        }
        // The elements are lent to the transaction and given back whatever the outcome: a
        // retry and the memory of what was applied need them.
        let mut tx = reconcile_transaction_lending(&read.observed, desired, Some(generation));
        let mut digests = read.digests;
        add_records(&self.table_name, &mut tx, &mut digests);
        let committed = self.commit(&mut tx);
        return_elements(tx, desired);
        for (family, set, elements) in lent {
            if let Some(s) = desired
                .iter_mut()
                .find(|t| t.family == family)
                .and_then(|t| t.sets.get_mut(&set))
            {
                s.elements = elements;
            }
        }
        match committed {
            Ok(c) => Ok(Some(self.remember(
                std::mem::take(desired),
                c,
                kind,
                digests,
            ))),
            Err(SyncError::Apply {
                source: KernelError::GenerationChanged { .. },
                ..
            }) => {
                self.trust_records = false;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Follows `tx` on `digests` and appends the operations that keep the kernel's records of
/// them in step, in the same transaction.
pub(super) fn add_records(table: &str, tx: &mut Transaction, digests: &mut Summary) {
    records::apply_ops(digests, table, &tx.ops);
    tx.ops.extend(records::record_ops(digests, table));
}
