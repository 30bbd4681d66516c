//! The sync engine: brings the kernel to the desired tables in ONE transaction per sync,
//! sending only the difference from what it last applied (a partial sync), or, when it cannot
//! trust that memory, from what it reads back from the kernel (a full sync).
//!
//! Guarantees: the kernel sees all of a sync or none of it; after a failure the engine forgets
//! what it applied, so the next sync is a full one that reads the kernel first; a partial sync
//! is guarded by the ruleset generation the engine left behind, so if another program changed
//! nftables in between (flushed or deleted our table, say) the engine re-reads before writing.
//!
//! Every commit also keeps the kernel's records of our large sets' digests (`digests`) in step
//! with their elements, so a read can skip those sets: `sync` then adopts the planned elements
//! of each skipped set whose digest equals its record, and reads only the others.
//!
//! The engine by concept: this file holds its memory of the kernel and the syncs it offers;
//! `read` reads our tables back (and settles the large sets a restart leaves unread),
//! `create` makes a first sync's tables with their elements streamed into the batch,
//! `reconcile` commits the difference from what was read or remembered, and `commit` sends
//! one transaction behind its generation guard, with a `Leading`'s operations in front. The
//! kernel calls themselves are the `Kernel` trait (`sync::kernel`).

mod commit;
mod create;
mod read;
mod reconcile;
#[cfg(test)]
mod tests;

use crate::nft::diff::TableChange;
use crate::nft::kernel::canonicalized;
use crate::nft::model::{Family, Table};
use crate::nft::outline::Outline;
use crate::nft::transaction::{SetElements, TableRef};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::Observed;
use super::kernel::{Kernel, KernelError};
use super::leading::Leading;
use super::records::Summary;
use reconcile::add_records;

/// Whether a sync worked from memory or from a fresh read of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// The whole table was rebuilt and reconciled with what the kernel holds.
    Full,
    /// Only the changed services were re-programmed, against what the last sync applied.
    Partial,
}

/// What one successful sync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncReport {
    pub kind: SyncKind,
    /// Operations in the transaction (0: the kernel already matched).
    pub ops: usize,
    pub bytes: usize,
    /// Time spent sending the transaction and waiting for the kernel's answer.
    pub kernel_time: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("reading the ruleset generation: {0}")]
    Generation(#[source] KernelError),
    #[error("reading table {family:?} {table} back: {source}")]
    Read {
        family: Family,
        table: String,
        #[source]
        source: KernelError,
    },
    #[error("applying {ops} operations: {source}")]
    Apply {
        ops: usize,
        #[source]
        source: KernelError,
    },
    #[error("other programs kept changing the ruleset during {attempts} attempts to read it")]
    Contended { attempts: usize },
}

/// Our tables as read from the kernel, with the digests of their sets.
struct KernelRead {
    observed: Vec<(TableRef, Observed)>,
    digests: Summary,
    /// Sets left without their elements because a record vouches for them.
    unread: BTreeMap<Family, BTreeSet<String>>,
    /// Of those, the ones `Syncer::read_sets_differing_from` found planned as recorded.
    settled: BTreeSet<FamilySet>,
}

/// A set of one of our tables: its family and name.
type FamilySet = (Family, String);

/// A successful commit: what it sent, and the generation to expect next (`None` if it could
/// not be read, which makes the next sync a full one).
struct Committed {
    ops: usize,
    bytes: usize,
    kernel_time: Duration,
    generation: Option<u32>,
}

/// Owns the kernel handle and the memory of what was last applied.
pub struct Syncer<K> {
    kernel: K,
    table_name: String,
    /// The ruleset generation our last commit (or read) left behind; `None` forces the next
    /// sync to be a full one.
    generation: Option<u32>,
    /// Canonical tables as last committed or read, for `sync`'s difference; `None` after
    /// `sync_changes` (its caller keeps the plan) or `release_tables`.
    tables: Option<Vec<Table>>,
    /// `tables` came from `read_back`, not from our own commit: the next sync, a difference
    /// against what was read, is reported as a full one.
    read_back: bool,
    /// The digests of the sets the kernel holds and its records of them, known with
    /// `generation`.
    digests: Option<Summary>,
    /// Sets `read_back` left without their elements (in `tables`), their records vouching for
    /// them; the next `sync` settles them against its desired tables.
    unread: BTreeMap<Family, BTreeSet<String>>,
    /// Sets `read_sets_differing_from` left unread because their planned digests equal their
    /// records; the next `sync` of the same plan takes them as settled.
    settled: BTreeSet<FamilySet>,
    /// Whether a read may leave out the elements of the sets the kernel's records vouch for
    /// (`digests`). Only on a restart: from a new engine's first read until its first sync.
    /// Later reads happen because something may have changed our table behind our back (a
    /// failure, another program's commit, the periodic full sync), and a hand edit of a set's
    /// elements does not change its record, so they read every element.
    trust_records: bool,
    /// Operations to put in front of the next commit (`lead_next_commit_with`).
    leading: Option<Box<dyn Leading>>,
}

impl<K: Kernel> Syncer<K> {
    pub fn new(kernel: K, table_name: &str) -> Self {
        Syncer {
            kernel,
            table_name: table_name.to_string(),
            generation: None,
            tables: None,
            read_back: false,
            digests: None,
            unread: BTreeMap::new(),
            settled: BTreeSet::new(),
            trust_records: true,
            leading: None,
        }
    }

    /// Puts `leading`'s operations in front of the next successful commit, in the same
    /// transaction (see `Leading`).
    pub fn lead_next_commit_with(&mut self, leading: Box<dyn Leading>) {
        self.leading = Some(leading);
    }

    /// The kernel's tables in outline (other programs' tables, say).
    pub fn outline(&mut self) -> &mut dyn Outline {
        self.kernel.outline()
    }

    /// Whether operations given to `lead_next_commit_with` still wait for a commit.
    pub fn leading_pending(&self) -> bool {
        self.leading.is_some()
    }

    #[cfg(any(test, feature = "daemon"))]
    pub(crate) fn kernel(&mut self) -> &mut K {
        &mut self.kernel
    }

    /// Whether the next `sync` without `force_full` can be partial.
    #[cfg(feature = "daemon")]
    pub(crate) fn has_applied_state(&self) -> bool {
        self.generation.is_some() && self.tables.is_some() && self.digests.is_some()
    }

    /// Whether the next `sync_changes` can be applied: nothing failed since our last commit.
    #[cfg(feature = "daemon")]
    pub(crate) fn has_generation(&self) -> bool {
        self.generation.is_some()
    }

    /// The ruleset generation our last commit (or read) left behind; `None` when something
    /// failed since, so the next sync reads the kernel anyway.
    #[cfg(feature = "daemon")]
    pub(crate) fn generation(&self) -> Option<u32> {
        self.generation
    }

    /// What the kernel holds as far as we know (our last commit, or the last `read_back`).
    pub fn applied_tables(&self) -> Option<&[Table]> {
        self.tables.as_deref()
    }

    /// Drops the applied tables (the caller's planner keeps them as a plan); the generation
    /// stays, so `sync_changes` still works.
    pub fn release_tables(&mut self) {
        self.tables = None;
    }

    /// This engine reads every element of our tables from its first read on, as it does after
    /// its first sync (see `trust_records`).
    pub fn reading_every_element(mut self) -> Self {
        self.trust_records = false;
        self
    }

    /// Forgets what the kernel holds: the next sync reads it.
    fn forget(&mut self) {
        self.generation = None;
        self.tables = None;
        self.digests = None;
        self.unread.clear();
        self.settled.clear();
    }

    /// Brings the kernel to `desired`. Partial unless `force_full`, or nothing was applied yet,
    /// or the ruleset generation moved since our last commit. The tables are taken, not
    /// copied: they are the whole cluster's ruleset.
    pub fn sync(&mut self, desired: Vec<Table>, force_full: bool) -> Result<SyncReport, SyncError> {
        let desired: Vec<Table> = desired.into_iter().map(canonicalized).collect();
        let result = self.sync_from_memory(desired, None, force_full);
        self.trust_records = false;
        result
    }

    /// `sync` from what we remember of the kernel, if anything and still current, else from a
    /// fresh read. `planned`: where the elements of `desired`'s sets come from when they are
    /// declared empty (`sync_filling`); `None` when `desired` holds them.
    fn sync_from_memory(
        &mut self,
        mut desired: Vec<Table>,
        planned: Option<&dyn SetElements>,
        force_full: bool,
    ) -> Result<SyncReport, SyncError> {
        let kind = if std::mem::take(&mut self.read_back) {
            SyncKind::Full
        } else {
            SyncKind::Partial
        };
        let applied = self.tables.take();
        let generation = self.generation.take();
        let digests = self.digests.take();
        let unread = std::mem::take(&mut self.unread);
        let settled = std::mem::take(&mut self.settled);
        if !force_full
            && let (Some(applied), Some(digests), Some(generation)) = (applied, digests, generation)
        {
            let read = KernelRead {
                observed: self.observed_from(applied),
                digests,
                unread,
                settled,
            };
            if self.still_at(generation)? {
                if let Some(report) =
                    self.reconcile(read, &mut desired, planned, generation, kind)?
                {
                    return Ok(report);
                }
                tracing::info!("the ruleset changed under a partial sync; syncing fully");
            }
        }
        self.full_sync(desired, planned)
    }

    /// [`sync`](Self::sync) of `desired` tables whose sets are declared empty, the elements of
    /// each given by `elements`. Where the kernel is known to hold none of our tables (the
    /// usual first sync) they are created with each set's elements produced while the batch is
    /// encoded, so the whole cluster's elements are never held unpacked at once; otherwise each
    /// set is filled as the difference needs it, and a large set whose planned digest equals
    /// its record is not filled at all (`settle_unread`). Keeps no tables: the caller's plan
    /// has them.
    pub fn sync_filling(
        &mut self,
        desired: Vec<Table>,
        elements: &dyn SetElements,
        force_full: bool,
    ) -> Result<SyncReport, SyncError> {
        let desired: Vec<Table> = desired.into_iter().map(canonicalized).collect();
        let kernel_has_none =
            self.generation.is_some() && self.tables.as_ref().is_some_and(Vec::is_empty);
        let result = if force_full || !kernel_has_none {
            self.sync_from_memory(desired, Some(elements), force_full)
        } else {
            self.create_filling(desired, elements)
        };
        self.tables = None;
        self.trust_records = false;
        result
    }

    /// Applies planned changes (partial tables before and after, see `TableChange`) in one
    /// transaction guarded by the generation of our last commit. `Ok(None)`: the kernel cannot
    /// be trusted to hold the `before` parts (nothing committed yet, a failure since, or another
    /// program committed in between); the caller then plans whole and calls `sync`.
    pub fn sync_changes(
        &mut self,
        changes: Vec<TableChange>,
    ) -> Result<Option<SyncReport>, SyncError> {
        self.tables = None;
        self.read_back = false;
        self.unread.clear();
        self.trust_records = false;
        let (Some(generation), Some(mut digests)) = (self.generation.take(), self.digests.take())
        else {
            self.forget();
            return Ok(None);
        };
        let table = self.table_name.clone();
        let tx = || {
            let mut tx = super::changes_transaction(changes, Some(generation));
            add_records(&table, &mut tx, &mut digests);
            tx
        };
        Ok(self.commit_at(generation, tx)?.map(|c| {
            self.generation = c.generation;
            self.digests = c.generation.map(|_| digests);
            SyncReport {
                kind: SyncKind::Partial,
                ops: c.ops,
                bytes: c.bytes,
                kernel_time: c.kernel_time,
            }
        }))
    }

    /// Keeps `desired` (moved, not copied: it is the whole cluster's ruleset) as what the kernel
    /// now holds.
    fn remember(
        &mut self,
        desired: Vec<Table>,
        c: Committed,
        kind: SyncKind,
        digests: Summary,
    ) -> SyncReport {
        self.generation = c.generation;
        self.tables = c.generation.map(|_| desired);
        self.digests = c.generation.map(|_| digests);
        SyncReport {
            kind,
            ops: c.ops,
            bytes: c.bytes,
            kernel_time: c.kernel_time,
        }
    }

    fn table_ref(&self, family: Family) -> TableRef {
        TableRef {
            family,
            name: self.table_name.clone(),
        }
    }
}
