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

use crate::nft::diff::{TableChange, same_set_type};
use crate::nft::digest::SetDigest;
use crate::nft::model::{Element, Family, Set, Table};
use crate::nft::netlink::apply::Fill;
use crate::nft::netlink::{
    ApplyError, ApplyStats, DumpError, Nftables, canonicalize_elements, canonicalized,
};
use crate::nft::outline::Outline;
use crate::nft::transaction::{ElementStream, Op, SetElements, TableRef, Transaction};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::digests::{self, DIGEST_SET, DIGESTED_MIN_ELEMENTS, Digests, Summary, TableDigests};
use super::leading::Leading;
use super::{Observed, creation_transaction, reconcile_transaction_lending, return_elements};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The few kernel calls a sync needs; `Nftables` in production, a fake in tests.
pub trait Kernel {
    /// The ruleset generation (bumped by every commit, ours or anyone's).
    fn generation(&mut self) -> Result<u32, KernelError>;
    /// One of our tables as the kernel holds it, the sets named in `unread` without elements.
    fn read_table(
        &mut self,
        family: Family,
        name: &str,
        unread: &BTreeSet<String>,
    ) -> Result<Observed, KernelError>;
    /// One set of one of our tables, with its elements (`None`: no such table or set).
    fn read_set(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
    ) -> Result<Option<Set>, KernelError>;
    /// Applies `tx` atomically; returns the bytes sent.
    fn apply(&mut self, tx: &Transaction) -> Result<usize, KernelError>;
    /// [`apply`](Self::apply), with the elements of each `AddElements` that carries none
    /// taken from `fill`. This default fills them all first; `Nftables` encodes each element
    /// as `fill` produces it, holding one at a time.
    fn apply_filling(&mut self, tx: &Transaction, fill: Fill<'_>) -> Result<usize, KernelError> {
        let mut tx = tx.clone();
        for op in &mut tx.ops {
            if let Some(filled) = op.with_filled_elements(fill) {
                *op = filled;
            }
        }
        self.apply(&tx)
    }
    /// The kernel's tables in outline, for the operations of a `Leading`.
    fn outline(&mut self) -> &mut dyn Outline;
}

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The transaction's generation guard failed: someone committed since it was read.
    #[error("the ruleset changed since generation {expected} was read")]
    GenerationChanged { expected: u32 },
    #[error("{0}")]
    Other(#[source] BoxError),
}

impl Kernel for Nftables {
    fn generation(&mut self) -> Result<u32, KernelError> {
        Nftables::generation(self).map_err(|e| KernelError::Other(e.into()))
    }

    fn read_table(
        &mut self,
        family: Family,
        name: &str,
        unread: &BTreeSet<String>,
    ) -> Result<Observed, KernelError> {
        match self.dump_table_without_elements_of(family, name, unread) {
            Ok(Some(t)) => Ok(Observed::Read(t)),
            Ok(None) => Ok(Observed::Absent),
            // Contents we cannot decode (someone else wrote into our table, or an older
            // kubenft wrote a construct this one does not know) are replaced wholesale.
            Err(e @ (DumpError::Lift(_) | DumpError::Decode { .. } | DumpError::Set { .. })) => {
                tracing::warn!(table = name, family = ?family, error = %e, "cannot read our table back; it will be replaced");
                Ok(Observed::Unreadable)
            }
            Err(e) => Err(KernelError::Other(e.into())),
        }
    }

    fn read_set(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
    ) -> Result<Option<Set>, KernelError> {
        self.dump_set(family, table, set)
            .map_err(|e| KernelError::Other(e.into()))
    }

    fn apply(&mut self, tx: &Transaction) -> Result<usize, KernelError> {
        applied(Nftables::apply(self, tx))
    }

    fn apply_filling(&mut self, tx: &Transaction, fill: Fill<'_>) -> Result<usize, KernelError> {
        applied(Nftables::apply_filling(self, tx, fill))
    }

    fn outline(&mut self) -> &mut dyn Outline {
        self
    }
}

fn applied(result: Result<ApplyStats, ApplyError>) -> Result<usize, KernelError> {
    match result {
        Ok(stats) => Ok(stats.bytes),
        Err(ApplyError::GenerationChanged { expected }) => {
            Err(KernelError::GenerationChanged { expected })
        }
        Err(e) => Err(KernelError::Other(e.into())),
    }
}

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

/// Elements moved out of the desired tables while a transaction is built, by family and set.
type Lent = Vec<(Family, String, Vec<Element>)>;

/// A successful commit: what it sent, and the generation to expect next (`None` if it could
/// not be read, which makes the next sync a full one).
struct Committed {
    ops: usize,
    bytes: usize,
    kernel_time: Duration,
    generation: Option<u32>,
}

/// How often a full sync re-reads and retries when another program commits in between.
const FULL_SYNC_ATTEMPTS: usize = 3;

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

    #[cfg(test)]
    pub(crate) fn kernel(&mut self) -> &mut K {
        &mut self.kernel
    }

    /// Whether the next `sync` without `force_full` can be partial.
    pub(crate) fn has_applied_state(&self) -> bool {
        self.generation.is_some() && self.tables.is_some() && self.digests.is_some()
    }

    /// Whether the next `sync_changes` can be applied: nothing failed since our last commit.
    pub(crate) fn has_generation(&self) -> bool {
        self.generation.is_some()
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

    /// Reads our tables from the kernel and remembers them as applied, so the planner can keep
    /// what they hold (endpoint-map blocks, in the rules) and the next `sync` sends only the
    /// difference from them, as a full sync would after its own read. On a restart (see
    /// `trust_records`), sets vouched for by a record come back without elements
    /// (`applied_tables` shows them empty) until that `sync` settles them. A table that cannot
    /// be decoded leaves nothing remembered: the next sync is then a full one, which replaces
    /// it.
    pub fn read_back(&mut self) -> Result<(), SyncError> {
        self.forget();
        let generation = self.kernel.generation().map_err(SyncError::Generation)?;
        let read = self.read_tables()?;
        let mut tables = Vec::new();
        for (_, observed) in read.observed {
            match observed {
                Observed::Read(t) => tables.push(t),
                Observed::Absent => {}
                Observed::Unreadable => return Ok(()),
            }
        }
        self.generation = Some(generation);
        self.tables = Some(tables);
        self.digests = Some(read.digests);
        self.unread = read.unread;
        self.read_back = true;
        Ok(())
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

    /// Creates `desired` (sets declared empty, filled from `elements` while the batch is
    /// encoded) where the kernel held none of our tables at the last read, with the records of
    /// the large sets' digests.
    fn create_filling(
        &mut self,
        desired: Vec<Table>,
        elements: &dyn SetElements,
    ) -> Result<SyncReport, SyncError> {
        let kind = if std::mem::take(&mut self.read_back) {
            SyncKind::Full
        } else {
            SyncKind::Partial
        };
        self.tables = None;
        self.digests = None;
        let generation = self.generation.take().expect("checked by the caller");
        if self.still_at(generation)? {
            let filled: BTreeMap<Family, BTreeSet<String>> = desired
                .iter()
                .map(|t| (t.family, elements.sets_with_elements(t.family)))
                .collect();
            let mut tx =
                creation_transaction(&desired, |t| filled[&t.family].clone(), Some(generation));
            // The records go last in the same batch: each set's digest is summed while its
            // elements stream into the batch, and the records are made from the sums when their
            // turn comes. Whether a table gets them is decided first, from element counts.
            let sums: BTreeMap<FamilySet, Cell<SetDigest>> = desired
                .iter()
                .flat_map(|t| {
                    filled[&t.family]
                        .iter()
                        .filter(|s| t.sets.get(*s).is_some_and(|s| !s.dynamic))
                        .map(|s| ((t.family, s.clone()), Cell::default()))
                })
                .collect();
            let recorded: BTreeSet<Family> = sums
                .keys()
                .filter(|(family, set)| {
                    elements.may_hold(*family, set, DIGESTED_MIN_ELEMENTS as usize)
                })
                .map(|(family, _)| *family)
                .collect();
            for &family in &recorded {
                tx.ops
                    .extend(digests::creation_record_ops(self.table_ref(family)));
            }
            let summed = |family: Family| -> Digests {
                sums.range((family, String::new())..)
                    .take_while(|((f, _), _)| *f == family)
                    .map(|((_, set), sum)| (set.clone(), sum.get()))
                    .collect()
            };
            let mut fill = |t: &TableRef, set: &str| -> ElementStream<'_> {
                if set == DIGEST_SET {
                    return Box::new(digests::records_of(&summed(t.family)).into_iter());
                }
                let canonical = elements.elements_in_any_order(t.family, set).map(|mut e| {
                    canonicalize_elements(std::slice::from_mut(&mut e));
                    e
                });
                match sums.get(&(t.family, set.to_string())) {
                    Some(sum) => Box::new(canonical.inspect(move |e| {
                        let mut d = sum.get();
                        d.add(e);
                        sum.set(d);
                    })),
                    None => Box::new(canonical),
                }
            };
            match self.commit_filling(&mut tx, Some(&mut fill)) {
                Ok(c) => {
                    let summary = desired
                        .iter()
                        .map(|t| {
                            let sets = summed(t.family);
                            let recorded = recorded
                                .contains(&t.family)
                                .then(|| digests::wanted_records(&sets));
                            (t.family, TableDigests { sets, recorded })
                        })
                        .collect();
                    self.generation = c.generation;
                    self.digests = c.generation.map(|_| summary);
                    return Ok(SyncReport {
                        kind,
                        ops: c.ops,
                        bytes: c.bytes,
                        kernel_time: c.kernel_time,
                    });
                }
                Err(SyncError::Apply {
                    source: KernelError::GenerationChanged { .. },
                    ..
                }) => {
                    self.trust_records = false;
                    tracing::info!("the ruleset changed under a first sync; syncing fully")
                }
                Err(e) => return Err(e),
            }
        }
        self.full_sync(desired, Some(elements))
    }

    /// Commits the difference between `read` and `desired`, with the records it calls for, if
    /// the ruleset is still at `generation`; `Ok(None)` if another program committed since.
    /// `planned`: as in `sync_from_memory`.
    fn reconcile(
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

    /// Settles each set of `read` left without elements against `desired`: if the desired set
    /// has the same type and its planned elements (from `planned`, or held by `desired`) have
    /// the digest the kernel's record holds, the kernel holds exactly them, and the set is
    /// returned as settled (with those `read` settled already); otherwise the set is read now,
    /// and returned among the sets read. Sets the difference deletes or recreates need neither.
    fn settle_unread(
        &mut self,
        read: &mut KernelRead,
        desired: &[Table],
        planned: Option<&dyn SetElements>,
    ) -> Result<(BTreeSet<FamilySet>, Vec<FamilySet>), SyncError> {
        let mut settled = std::mem::take(&mut read.settled);
        let mut read_sets = Vec::new();
        for (family, names) in std::mem::take(&mut read.unread) {
            let Some((_, Observed::Read(current))) =
                read.observed.iter_mut().find(|(t, _)| t.family == family)
            else {
                continue;
            };
            let Some(digests) = read.digests.get_mut(&family) else {
                continue;
            };
            let Some(wanted) = desired.iter().find(|t| t.family == family) else {
                continue;
            };
            let names: Vec<String> = names
                .into_iter()
                .filter(
                    |name| match (current.sets.get(name), wanted.sets.get(name)) {
                        (Some(set), Some(want)) => same_set_type(set, want),
                        _ => false,
                    },
                )
                .collect();
            // One walk over the plan for all of them.
            let planned_digests = match planned {
                Some(planned) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    planned.digests(family, &names)
                }
                None => (names.iter())
                    .map(|n| SetDigest::of(&wanted.sets[n].elements))
                    .collect(),
            };
            for (name, digest) in names.into_iter().zip(planned_digests) {
                if digests.sets.get(&name) == Some(&digest) {
                    settled.insert((family, name));
                    continue;
                }
                tracing::info!(set = %name, family = ?family, "a set differs from its plan; reading it back");
                let kernel_set = self
                    .kernel
                    .read_set(family, &self.table_name, &name)
                    .map_err(|source| SyncError::Read {
                        family,
                        table: self.table_name.clone(),
                        source,
                    })?;
                // A set gone since the read: the generation guard refuses the commit.
                let set = current.sets.get_mut(&name).expect("filtered above");
                set.elements = kernel_set.map(|s| s.elements).unwrap_or_default();
                digests
                    .sets
                    .insert(name.clone(), SetDigest::of(&set.elements));
                read_sets.push((family, name));
            }
        }
        Ok((settled, read_sets))
    }

    /// Before a sync of `desired` (sets declared empty, their elements from `planned`): reads
    /// back each set `read_back` left without elements whose planned digest differs from its
    /// record, and returns them. The others stay unread, settled for the next sync, which must
    /// be of the same plan. A caller that plans again, keeping what the sets read hold
    /// (`applied_tables`), calls this again with the new plan: every set is then checked
    /// against it. Nothing happens unless the last `read_back` left sets unread.
    pub fn read_sets_differing_from(
        &mut self,
        desired: &[Table],
        planned: &dyn SetElements,
    ) -> Result<Vec<FamilySet>, SyncError> {
        if self.unread.is_empty() && self.settled.is_empty() {
            return Ok(Vec::new());
        }
        let (Some(applied), Some(digests)) = (self.tables.take(), self.digests.take()) else {
            return Ok(Vec::new());
        };
        let mut read = KernelRead {
            observed: self.observed_from(applied),
            digests,
            unread: std::mem::take(&mut self.unread),
            settled: BTreeSet::new(),
        };
        for (family, name) in std::mem::take(&mut self.settled) {
            read.unread.entry(family).or_default().insert(name);
        }
        let desired: Vec<Table> = desired.iter().cloned().map(canonicalized).collect();
        let result = self.settle_unread(&mut read, &desired, Some(planned));
        self.tables = Some(
            (read.observed.into_iter())
                .filter_map(|(_, o)| match o {
                    Observed::Read(t) => Some(t),
                    _ => None,
                })
                .collect(),
        );
        self.digests = Some(read.digests);
        let (settled, read_sets) = result.inspect_err(|_| self.forget())?;
        self.settled = settled;
        Ok(read_sets)
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

    /// Commits the transaction `tx` builds if the ruleset is still at `generation`, the one our
    /// last commit left. `Ok(None)`: another program committed since (seen before building, or
    /// by the kernel's guard at commit), so what we remember of the kernel is stale.
    fn commit_at(
        &mut self,
        generation: u32,
        tx: impl FnOnce() -> Transaction,
    ) -> Result<Option<Committed>, SyncError> {
        if !self.still_at(generation)? {
            return Ok(None);
        }
        match self.commit(&mut tx()) {
            Ok(committed) => Ok(Some(committed)),
            Err(SyncError::Apply {
                source: KernelError::GenerationChanged { .. },
                ..
            }) => {
                tracing::info!("the ruleset changed under a partial sync; syncing fully");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the ruleset is still at `generation`, the one our last commit left; if not,
    /// another program committed since and what we remember of the kernel is stale.
    fn still_at(&mut self, generation: u32) -> Result<bool, SyncError> {
        let now = self.kernel.generation().map_err(SyncError::Generation)?;
        if now != generation {
            // Another program committed, perhaps to our table: read everything.
            self.trust_records = false;
            tracing::info!(
                expected = generation,
                found = now,
                "nftables changed since our last commit; syncing fully"
            );
        }
        Ok(now == generation)
    }

    /// Reads the kernel and commits the difference to `desired` (`planned`: as in
    /// `sync_from_memory`), again if another program commits in between.
    fn full_sync(
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

    /// Applies `tx`; returns what was sent and the generation our commit left behind.
    fn commit(&mut self, tx: &mut Transaction) -> Result<Committed, SyncError> {
        self.commit_filling(tx, None)
    }

    /// [`commit`](Self::commit), with the elements `tx` leaves out from `fill` (see
    /// `Kernel::apply_filling`). A pending `Leading` puts its operations in front of `tx` for
    /// the commit; `tx` is given back as it came.
    fn commit_filling(
        &mut self,
        tx: &mut Transaction,
        fill: Option<Fill<'_>>,
    ) -> Result<Committed, SyncError> {
        let had_leading = self.leading.is_some();
        let leading = self.leading_ops();
        let led = leading.len();
        tx.ops.splice(0..0, leading);
        let result = self.send(tx, fill);
        tx.ops.drain(..led);
        if had_leading {
            match &result {
                Ok(_) => {
                    if let Some(mut l) = self.leading.take() {
                        l.committed();
                    }
                }
                // Listed again at the retry, from the ruleset as it is then.
                Err(SyncError::Apply {
                    source: KernelError::GenerationChanged { .. },
                    ..
                }) => {}
                Err(e) if led > 0 => {
                    if let Some(mut l) = self.leading.take() {
                        tracing::warn!(error = %e, "the operations leading this sync were refused with it; the next sync goes without them");
                        l.abandoned(e);
                    }
                }
                Err(_) => {}
            }
        }
        result
    }

    /// The pending `Leading`'s operations, listed now; none if listing fails (it is then
    /// abandoned).
    fn leading_ops(&mut self) -> Vec<Op> {
        let Some(leading) = self.leading.as_mut() else {
            return Vec::new();
        };
        match leading.ops(self.kernel.outline()) {
            Ok(ops) => ops,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the operations to lead this sync; syncing without them");
                leading.abandoned(&e);
                self.leading = None;
                Vec::new()
            }
        }
    }

    fn send(&mut self, tx: &Transaction, fill: Option<Fill<'_>>) -> Result<Committed, SyncError> {
        let started = Instant::now();
        let bytes = if tx.ops.is_empty() {
            0
        } else {
            match fill {
                Some(fill) => self.kernel.apply_filling(tx, fill),
                None => self.kernel.apply(tx),
            }
            .map_err(|source| SyncError::Apply {
                ops: tx.ops.len(),
                source,
            })?
        };
        let kernel_time = started.elapsed();
        // Read after our commit: a commit by someone else in this short window goes unnoticed
        // until the next full sync, which is periodic.
        let generation = if tx.ops.is_empty() {
            tx.expected_generation
        } else {
            self.kernel.generation().ok()
        };
        Ok(Committed {
            ops: tx.ops.len(),
            bytes,
            kernel_time,
            generation,
        })
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

    /// Our last commit, seen as a read of the kernel (the tables are moved into it).
    fn observed_from(&self, mut applied: Vec<Table>) -> Vec<(TableRef, Observed)> {
        [Family::Ip, Family::Ip6]
            .into_iter()
            .map(|family| {
                let o = match applied.iter().position(|t| t.family == family) {
                    Some(i) => Observed::Read(applied.swap_remove(i)),
                    None => Observed::Absent,
                };
                (self.table_ref(family), o)
            })
            .collect()
    }

    /// Our table of each family as the kernel holds it now, read as `trust_records` says, with
    /// the digests of its sets (the records' for sets left unread). The records set itself is
    /// left out of the tables: the difference must not see it.
    fn read_tables(&mut self) -> Result<KernelRead, SyncError> {
        let mut read = KernelRead {
            observed: Vec::new(),
            digests: Summary::new(),
            unread: BTreeMap::new(),
            settled: BTreeSet::new(),
        };
        for family in [Family::Ip, Family::Ip6] {
            let table = self.table_name.clone();
            let err = |source| SyncError::Read {
                family,
                table,
                source,
            };
            let recorded = self.read_records(family);
            let mut unread = match &recorded {
                Some(r) if self.trust_records => r.keys().cloned().collect(),
                _ => BTreeSet::new(),
            };
            // The records were just read.
            let mut skipped = unread.clone();
            skipped.insert(DIGEST_SET.to_string());
            let observed = self
                .kernel
                .read_table(family, &self.table_name, &skipped)
                .map_err(err)?;
            match &observed {
                Observed::Read(t) => {
                    unread.retain(|n| n != DIGEST_SET && t.sets.get(n).is_some_and(|s| !s.dynamic));
                    let mut sets = digests::digests_of(t);
                    for name in &unread {
                        if let Some(d) = recorded.as_ref().and_then(|r| r.get(name)) {
                            sets.insert(name.clone(), *d);
                        }
                    }
                    read.digests.insert(family, TableDigests { sets, recorded });
                    if !unread.is_empty() {
                        read.unread.insert(family, unread);
                    }
                }
                // Replaced wholesale: the records go with the table.
                Observed::Unreadable => {
                    read.digests.insert(family, TableDigests::default());
                }
                Observed::Absent => {}
            }
            let observed = match observed {
                Observed::Read(mut t) => {
                    t.sets.remove(DIGEST_SET);
                    Observed::Read(t)
                }
                other => other,
            };
            read.observed.push((self.table_ref(family), observed));
        }
        Ok(read)
    }

    /// The records our table of `family` holds; `None` if it has none, or they cannot be read
    /// (the table's sets are then all read back).
    fn read_records(&mut self, family: Family) -> Option<digests::Digests> {
        match self.kernel.read_set(family, &self.table_name, DIGEST_SET) {
            Ok(set) => set.map(|s| digests::parse_records(&s)),
            Err(e) => {
                tracing::warn!(error = %e, family = ?family, "cannot read the digests of our sets; reading every set back");
                None
            }
        }
    }

    fn table_ref(&self, family: Family) -> TableRef {
        TableRef {
            family,
            name: self.table_name.clone(),
        }
    }
}

/// Follows `tx` on `digests` and appends the operations that keep the kernel's records of
/// them in step, in the same transaction.
fn add_records(table: &str, tx: &mut Transaction, digests: &mut Summary) {
    digests::apply_ops(digests, table, &tx.ops);
    tx.ops.extend(digests::record_ops(digests, table));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::fake::FakeKernel;
    use crate::nft::model::{Chain, Element};

    /// The fake kernel with a generation counter, as `Kernel` needs.
    #[derive(Default)]
    struct Fake {
        kernel: FakeKernel,
        generation: u32,
        applied: Vec<usize>,
        reads: usize,
        /// Elements read back, of every set.
        elements_read: usize,
        fail_next: bool,
    }

    impl Kernel for Fake {
        fn generation(&mut self) -> Result<u32, KernelError> {
            Ok(self.generation)
        }
        fn read_table(
            &mut self,
            family: Family,
            name: &str,
            unread: &BTreeSet<String>,
        ) -> Result<Observed, KernelError> {
            self.reads += 1;
            let t = TableRef {
                family,
                name: name.into(),
            };
            Ok(self.kernel.table(&t).map_or(Observed::Absent, |t| {
                let mut t = crate::nft::netlink::canonical(t);
                for (name, set) in &mut t.sets {
                    if unread.contains(name) {
                        set.elements.clear();
                    } else {
                        self.elements_read += set.elements.len();
                    }
                }
                Observed::Read(t)
            }))
        }
        fn read_set(
            &mut self,
            family: Family,
            table: &str,
            set: &str,
        ) -> Result<Option<Set>, KernelError> {
            let t = TableRef {
                family,
                name: table.into(),
            };
            let set = self.kernel.table(&t).and_then(|t| t.sets.get(set)).cloned();
            self.elements_read += set.as_ref().map_or(0, |s| s.elements.len());
            Ok(set)
        }
        fn apply(&mut self, tx: &Transaction) -> Result<usize, KernelError> {
            if let Some(g) = tx.expected_generation
                && g != self.generation
            {
                return Err(KernelError::GenerationChanged { expected: g });
            }
            if std::mem::take(&mut self.fail_next) {
                return Err(KernelError::Other("injected failure".into()));
            }
            self.kernel
                .apply(tx)
                .map_err(|e| KernelError::Other(e.into()))?;
            self.generation += 1;
            self.applied.push(tx.ops.len());
            Ok(tx.ops.len() * 100)
        }
        fn outline(&mut self) -> &mut dyn Outline {
            &mut self.kernel
        }
    }

    fn table(chains: &[&str]) -> Table {
        Table {
            family: Family::Ip,
            name: "kubenft".into(),
            comment: None,
            chains: chains
                .iter()
                .map(|c| {
                    (
                        c.to_string(),
                        Chain {
                            name: c.to_string(),
                            base: None,
                            comment: None,
                            rules: vec![],
                        },
                    )
                })
                .collect(),
            sets: Default::default(),
        }
    }

    fn change(before: &[&str], after: &[&str]) -> TableChange {
        TableChange {
            family: Family::Ip,
            before: Some(table(before)),
            after: Some(table(after)),
        }
    }

    /// Whole tables, handed out one set at a time.
    struct Whole(Vec<Table>);

    impl SetElements for Whole {
        fn sets_with_elements(&self, family: Family) -> std::collections::BTreeSet<String> {
            let t = self.0.iter().find(|t| t.family == family);
            t.into_iter()
                .flat_map(|t| t.sets.values())
                .filter(|s| !s.elements.is_empty())
                .map(|s| s.name.clone())
                .collect()
        }

        fn elements(&self, family: Family, set: &str) -> ElementStream<'_> {
            let t = self.0.iter().find(|t| t.family == family);
            let set = t.and_then(|t| t.sets.get(set));
            Box::new(set.into_iter().flat_map(|s| s.elements.iter().cloned()))
        }

        fn may_hold(&self, family: Family, set: &str, n: usize) -> bool {
            let t = self.0.iter().find(|t| t.family == family);
            t.and_then(|t| t.sets.get(set))
                .map_or(0, |s| s.elements.len())
                >= n
        }
    }

    /// `table(chains)` with a set of `ports`, each element commented with a quote the kernel
    /// stores as an apostrophe.
    fn table_with_set(chains: &[&str], ports: &[u16]) -> Table {
        use crate::nft::model::{DataType, Set, Value};
        let elements = ports
            .iter()
            .map(|&p| Element {
                key: vec![Value::Port(p)],
                data: None,
                comment: Some(format!("port \"{p}\"")),
            })
            .collect();
        let set = Set::new("ports", vec![DataType::InetService]).with_elements(elements);
        let mut t = table(chains);
        t.sets.insert(set.name.clone(), set);
        t
    }

    fn without_elements(mut t: Table) -> Table {
        for s in t.sets.values_mut() {
            s.elements.clear();
        }
        t
    }

    #[test]
    fn a_first_sync_filled_set_by_set_sends_what_a_whole_one_sends() {
        let desired = table_with_set(&["a", "b"], &[443, 80]);
        let mut whole = Syncer::new(Fake::default(), "kubenft");
        whole.read_back().unwrap();
        let sent = whole.sync(vec![desired.clone()], false).unwrap();

        let mut filling = Syncer::new(Fake::default(), "kubenft");
        filling.read_back().unwrap();
        let heads = vec![without_elements(desired.clone())];
        let report = filling
            .sync_filling(heads, &Whole(vec![desired.clone()]), false)
            .unwrap();
        let sent_as = |r: SyncReport| (r.kind, r.ops, r.bytes);
        assert_eq!(sent_as(report), sent_as(sent));
        let kernel = |s: &Syncer<Fake>| {
            s.kernel
                .kernel
                .table(&desired.table_ref())
                .map(crate::nft::netlink::canonical)
        };
        assert_eq!(kernel(&filling), kernel(&whole));
        assert_eq!(
            kernel(&filling).unwrap().sets["ports"].elements[0].comment,
            Some("port '80'".into())
        );
        // The plan is the caller's; the generation stays for planned changes.
        assert!(filling.applied_tables().is_none());
        assert!(filling.has_generation());
    }

    /// `Whole`, counting how often each set's elements are asked for; its digests are refused.
    struct Asked(Whole, std::cell::RefCell<BTreeMap<String, usize>>);

    impl SetElements for Asked {
        fn sets_with_elements(&self, family: Family) -> BTreeSet<String> {
            self.0.sets_with_elements(family)
        }

        fn elements(&self, family: Family, set: &str) -> ElementStream<'_> {
            *self.1.borrow_mut().entry(set.to_string()).or_default() += 1;
            self.0.elements(family, set)
        }

        fn may_hold(&self, family: Family, set: &str, n: usize) -> bool {
            self.0.may_hold(family, set, n)
        }

        fn digest(&self, _: Family, set: &str) -> SetDigest {
            panic!("the digest of {set} was asked for: its elements are read twice")
        }
    }

    #[test]
    fn a_first_sync_filled_set_by_set_reads_each_set_once_and_sends_the_records_a_whole_one_sends()
    {
        let desired = sets_table(0..BIG);
        let mut whole = Syncer::new(Fake::default(), "kubenft");
        whole.read_back().unwrap();
        let sent = whole.sync(vec![desired.clone()], false).unwrap();

        let mut filling = Syncer::new(Fake::default(), "kubenft");
        filling.read_back().unwrap();
        let asked = Asked(Whole(vec![desired.clone()]), Default::default());
        let report = filling
            .sync_filling(vec![without_elements(desired.clone())], &asked, false)
            .unwrap();
        assert_eq!((report.ops, report.bytes), (sent.ops, sent.bytes));
        assert_eq!(
            asked.1.into_inner(),
            BTreeMap::from([("big".to_string(), 1), ("small".to_string(), 1)])
        );
        let kernel = |s: &Syncer<Fake>| s.kernel.kernel.table(&ip()).cloned();
        assert_eq!(kernel(&filling), kernel(&whole));
        assert_eq!(kernel(&filling).unwrap().sets[DIGEST_SET].elements.len(), 1);

        // What the engine remembers of the kernel is what the whole sync remembers: the next
        // change sends the same operations.
        let change = |s: &mut Syncer<Fake>| {
            s.release_tables();
            let change = TableChange {
                family: Family::Ip,
                before: Some(desired.clone()),
                after: Some(sets_table(1..BIG + 1)),
            };
            let r = s.sync_changes(vec![change]).unwrap().unwrap();
            (r.ops, r.bytes)
        };
        assert_eq!(change(&mut filling), change(&mut whole));
        assert_eq!(kernel(&filling), kernel(&whole));
    }

    #[test]
    fn a_first_sync_filled_set_by_set_declares_no_records_for_small_sets() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.read_back().unwrap();
        let desired = sets_table(0..10);
        s.sync_filling(
            vec![without_elements(desired.clone())],
            &Whole(vec![desired]),
            false,
        )
        .unwrap();
        let sets = &s.kernel().kernel.table(&ip()).unwrap().sets;
        assert_eq!(sets.keys().collect::<Vec<_>>(), ["big", "small"]);
    }

    #[test]
    fn a_sync_filled_set_by_set_over_a_table_the_kernel_holds_sends_only_the_difference() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![table_with_set(&["a"], &[80])], true).unwrap();
        s.read_back().unwrap();
        let desired = table_with_set(&["a"], &[80, 443]);
        let heads = vec![without_elements(desired.clone())];
        let report = s
            .sync_filling(heads, &Whole(vec![desired.clone()]), false)
            .unwrap();
        assert_eq!((report.kind, report.ops), (SyncKind::Full, 1));
        let held = s.kernel.kernel.table(&desired.table_ref()).unwrap();
        assert_eq!(
            crate::nft::netlink::canonical(held),
            crate::nft::netlink::canonical(&desired)
        );
    }

    #[test]
    fn planned_changes_apply_after_a_commit_and_send_only_their_difference() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        assert_eq!(
            s.sync_changes(vec![change(&[], &["a"])]).unwrap(),
            None,
            "nothing committed yet"
        );
        s.sync(vec![table(&["a", "b"])], false).unwrap();
        s.release_tables();

        // Parts only: "b" is not mentioned, so it stays.
        let r = s
            .sync_changes(vec![change(&["a"], &["c"])])
            .unwrap()
            .unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Partial, 2), "add c, delete a");
        let t = &s.kernel().kernel.tables.values().next().unwrap().chains;
        assert_eq!(t.keys().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(s.kernel().reads, 2, "only the first sync read the kernel");

        let r = s.sync_changes(vec![]).unwrap().unwrap();
        assert_eq!(r.ops, 0);
    }

    #[test]
    fn planned_changes_are_refused_after_a_foreign_commit_or_a_failure() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![table(&["a"])], false).unwrap();
        s.kernel().generation += 1;
        assert_eq!(s.sync_changes(vec![change(&["a"], &["b"])]).unwrap(), None);
        assert_eq!(s.kernel().applied.len(), 1, "nothing sent");
        assert!(!s.has_generation(), "the caller must sync fully");

        s.sync(vec![table(&["a"])], false).unwrap();
        s.kernel().fail_next = true;
        assert!(s.sync_changes(vec![change(&["a"], &["b"])]).is_err());
        assert_eq!(s.sync_changes(vec![change(&["a"], &["b"])]).unwrap(), None);
    }

    #[test]
    fn the_first_sync_reads_the_kernel_and_later_ones_work_from_memory() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        let r = s.sync(vec![table(&["a", "b"])], false).unwrap();
        assert_eq!(r.kind, SyncKind::Full);
        assert_eq!(s.kernel().reads, 2, "both families read");

        let r = s.sync(vec![table(&["a", "b", "c"])], false).unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Partial, 1));
        assert_eq!(s.kernel().reads, 2, "no read for a partial sync");

        let r = s.sync(vec![table(&["a", "b", "c"])], false).unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Partial, 0), "nothing to do");
    }

    #[test]
    fn a_foreign_commit_turns_the_next_sync_into_a_full_one_that_repairs_our_table() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![table(&["a", "b"])], false).unwrap();
        // Another program deletes our table.
        let t = TableRef {
            family: Family::Ip,
            name: "kubenft".into(),
        };
        s.kernel().kernel.tables.remove(&t);
        s.kernel().generation += 1;

        let r = s.sync(vec![table(&["a", "b"])], false).unwrap();
        assert_eq!(r.kind, SyncKind::Full);
        assert!(r.ops > 0, "the table is recreated");
        assert_eq!(s.kernel().kernel.table(&t).map(|t| t.chains.len()), Some(2));
    }

    #[test]
    fn a_failed_sync_leaves_the_kernel_as_it_was_and_makes_the_next_sync_full() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![table(&["a"])], false).unwrap();
        let before = s.kernel().kernel.clone();
        s.kernel().fail_next = true;
        assert!(s.sync(vec![table(&["a", "b"])], false).is_err());
        assert_eq!(s.kernel().kernel, before, "nothing half-applied");
        assert!(!s.has_applied_state());

        let r = s.sync(vec![table(&["a", "b"])], false).unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Full, 1));
    }

    #[test]
    fn a_forced_full_sync_on_an_unchanged_kernel_sends_nothing() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![table(&["a", "b"])], false).unwrap();
        let r = s.sync(vec![table(&["a", "b"])], true).unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Full, 0));
        assert_eq!(s.kernel().applied, [3], "only the first sync committed");
    }

    /// A table holding `big` marks in set "big" (recorded: at least DIGESTED_MIN_ELEMENTS) and
    /// 3 in set "small" (read back whole).
    fn sets_table(big: impl IntoIterator<Item = u32>) -> Table {
        use crate::nft::model::{DataType, Value};
        let marks = |m: Vec<u32>| m.into_iter().map(|m| Element::new(vec![Value::Mark(m)]));
        let mut t = table(&["a"]);
        for (name, elements) in [
            ("big", marks(big.into_iter().collect()).collect()),
            ("small", marks(vec![1, 2, 3]).collect()),
        ] {
            t.sets.insert(
                name.into(),
                Set::new(name, vec![DataType::Mark]).with_elements(elements),
            );
        }
        t
    }

    const BIG: u32 = super::digests::DIGESTED_MIN_ELEMENTS as u32;

    fn ip() -> TableRef {
        TableRef {
            family: Family::Ip,
            name: "kubenft".into(),
        }
    }

    /// A new syncer on `kernel`, as after a restart: reads back trusting the records.
    fn restarted(kernel: Fake) -> Syncer<Fake> {
        let mut s = Syncer::new(kernel, "kubenft");
        s.read_back().unwrap();
        s
    }

    fn kernel_of(s: Syncer<Fake>) -> Fake {
        let mut fake = s.kernel;
        fake.elements_read = 0;
        fake.applied.clear();
        fake
    }

    #[test]
    fn a_restart_on_an_unchanged_kernel_reads_no_recorded_set_and_sends_nothing() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..BIG)], false).unwrap();
        let records = &s.kernel().kernel.table(&ip()).unwrap().sets[DIGEST_SET];
        assert_eq!(records.elements.len(), 1, "only the big set has a record");

        let mut s = restarted(kernel_of(s));
        assert!(
            s.applied_tables().unwrap()[0].sets["big"]
                .elements
                .is_empty(),
            "its record vouches for it"
        );
        let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Full, 0));
        assert_eq!(
            s.kernel().elements_read,
            3 + 1,
            "the small set and the record"
        );

        // What it remembers is whole: the next change is a difference from it.
        let r = s.sync(vec![sets_table(1..BIG + 1)], false).unwrap();
        assert_eq!(r.kind, SyncKind::Partial);
        assert_eq!(r.ops, 2 + 2, "one element out, one in; the record replaced");
    }

    #[test]
    fn a_set_changed_while_down_is_read_back_alone_and_its_record_follows() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..BIG)], false).unwrap();

        let mut s = restarted(kernel_of(s));
        let r = s.sync(vec![sets_table(1..BIG + 1)], false).unwrap();
        assert_eq!(r.ops, 2 + 2);
        assert_eq!(s.kernel().elements_read, 3 + 1 + BIG as usize);

        // The record now vouches for the new elements.
        let mut s = restarted(kernel_of(s));
        let r = s.sync(vec![sets_table(1..BIG + 1)], false).unwrap();
        assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
    }

    #[test]
    fn records_follow_planned_changes_and_partial_syncs() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..BIG)], false).unwrap();
        s.sync(vec![sets_table(0..BIG + 5)], false).unwrap();
        s.release_tables();
        let change = TableChange {
            family: Family::Ip,
            before: Some(sets_table(0..BIG + 5)),
            after: Some(sets_table(2..BIG + 5)),
        };
        let r = s.sync_changes(vec![change]).unwrap().unwrap();
        assert_eq!(r.ops, 1 + 2, "two elements out; the record replaced");

        let mut s = restarted(kernel_of(s));
        let r = s.sync(vec![sets_table(2..BIG + 5)], false).unwrap();
        assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
    }

    /// Deletes element 7 of set "big" behind the engine's back, as `nft delete element` does.
    fn hand_edit(kernel: &mut Fake) {
        let table = kernel.kernel.tables.get_mut(&ip()).unwrap();
        table.sets.get_mut("big").unwrap().elements.remove(7);
        kernel.generation += 1;
    }

    fn big_set_len(s: &mut Syncer<Fake>) -> usize {
        s.kernel().kernel.table(&ip()).unwrap().sets["big"]
            .elements
            .len()
    }

    #[test]
    fn a_hand_edit_made_while_down_is_unseen_by_the_restart_and_repaired_by_the_next_full_sync() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..BIG)], false).unwrap();
        let mut kernel = kernel_of(s);
        // The record still vouches for the deleted element.
        hand_edit(&mut kernel);

        let mut s = restarted(kernel);
        let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
        assert_eq!(r.ops, 0, "trusting the record, the edit goes unseen");

        // The daemon's periodic full sync: the engine synced once, so it reads every element.
        s.read_back().unwrap();
        assert_eq!(
            s.kernel().elements_read,
            (3 + 1) + (1 + 3 + BIG as usize - 1),
            "then the record, the small set and every element of the big one"
        );
        let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
        assert_eq!(r.ops, 1, "the element is added back, as its record says");
        assert_eq!(big_set_len(&mut s), BIG as usize);
        let mut s = restarted(kernel_of(s));
        let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
        assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
    }

    #[test]
    fn a_hand_edit_made_while_running_is_repaired_by_the_next_sync_reading_every_element() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..BIG)], false).unwrap();
        hand_edit(s.kernel());
        s.kernel().elements_read = 0;
        let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Full, 1));
        assert_eq!(s.kernel().elements_read, 1 + 3 + BIG as usize - 1);
        assert_eq!(big_set_len(&mut s), BIG as usize);
    }

    #[test]
    fn a_foreign_commit_during_a_restart_makes_it_read_every_element() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..BIG)], false).unwrap();
        let mut s = restarted(kernel_of(s));
        // Between the restart's read and its commit, someone edits our set.
        hand_edit(s.kernel());
        let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
        assert_eq!(r.ops, 1, "the edit is repaired");
        assert_eq!(big_set_len(&mut s), BIG as usize);
    }

    #[test]
    fn a_first_sync_filled_set_by_set_records_large_sets_and_a_filling_restart_trusts_them() {
        let desired = sets_table(0..BIG);
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.read_back().unwrap();
        let heads = vec![without_elements(desired.clone())];
        s.sync_filling(heads.clone(), &Whole(vec![desired.clone()]), false)
            .unwrap();
        let records = &s.kernel().kernel.table(&ip()).unwrap().sets[DIGEST_SET];
        assert_eq!(records.elements.len(), 1, "the big set's record");

        let mut s = restarted(kernel_of(s));
        let r = s
            .sync_filling(heads.clone(), &Whole(vec![desired.clone()]), false)
            .unwrap();
        assert_eq!((r.kind, r.ops), (SyncKind::Full, 0));
        assert_eq!(s.kernel().elements_read, 3 + 1);

        // A planned change is a partial sync from the records the first sync left.
        let change = TableChange {
            family: Family::Ip,
            before: Some(desired.clone()),
            after: Some(sets_table(1..BIG + 1)),
        };
        let r = s.sync_changes(vec![change]).unwrap().unwrap();
        assert_eq!(r.ops, 2 + 2, "one element out, one in; the record replaced");
        let mut s = restarted(kernel_of(s));
        let changed = sets_table(1..BIG + 1);
        let r = s
            .sync_filling(
                vec![without_elements(changed.clone())],
                &Whole(vec![changed]),
                false,
            )
            .unwrap();
        assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
    }

    #[test]
    fn the_records_go_once_no_set_is_large_and_a_small_table_has_none() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..10)], false).unwrap();
        let sets = |s: &mut Syncer<Fake>| {
            let t = s.kernel().kernel.table(&ip()).unwrap();
            t.sets.keys().cloned().collect::<Vec<_>>()
        };
        assert_eq!(sets(&mut s), ["big", "small"]);
        s.sync(vec![sets_table(0..BIG)], false).unwrap();
        assert_eq!(sets(&mut s), ["big", DIGEST_SET, "small"]);
        s.sync(vec![sets_table(0..10)], false).unwrap();
        assert_eq!(sets(&mut s), ["big", "small"]);
    }

    #[test]
    fn a_recorded_set_whose_type_changes_is_recreated_without_reading_it() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        s.sync(vec![sets_table(0..BIG)], false).unwrap();
        let mut s = restarted(kernel_of(s));
        let mut t = sets_table(0..BIG);
        t.sets.get_mut("big").unwrap().timeout = Some(60);
        s.sync(vec![t.clone()], false).unwrap();
        assert_eq!(s.kernel().elements_read, 3 + 1);
        let kernel = s.kernel().kernel.table(&ip()).unwrap();
        assert_eq!(kernel.sets["big"].timeout, Some(60));
        assert_eq!(kernel.sets["big"].elements.len(), BIG as usize);
    }

    /// Leads with the deletion of table `ip other` when the kernel holds it; records how its
    /// commits went.
    #[derive(Default, Clone)]
    struct DeleteOther {
        log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Leading for DeleteOther {
        fn ops(
            &mut self,
            kernel: &mut dyn Outline,
        ) -> Result<Vec<Op>, crate::nft::outline::OutlineError> {
            let other = kernel.tables()?.into_iter().find(|t| t.name == "other");
            self.log
                .lock()
                .unwrap()
                .push(format!("listed {}", other.is_some()));
            Ok(other
                .map(|table| Op::DeleteTable { table })
                .into_iter()
                .collect())
        }
        fn committed(&mut self) {
            self.log.lock().unwrap().push("committed".into());
        }
        fn abandoned(&mut self, _: &dyn std::error::Error) {
            self.log.lock().unwrap().push("abandoned".into());
        }
    }

    fn other_table() -> TableRef {
        TableRef {
            family: Family::Ip,
            name: "other".into(),
        }
    }

    fn with_other_table() -> Fake {
        let mut fake = Fake::default();
        let mut t = table(&["x"]);
        t.name = "other".into();
        fake.kernel.tables.insert(other_table(), t);
        fake
    }

    #[test]
    fn leading_operations_ride_in_the_same_transaction_as_the_sync_once() {
        let mut s = Syncer::new(with_other_table(), "kubenft");
        let leading = DeleteOther::default();
        s.lead_next_commit_with(Box::new(leading.clone()));
        s.sync(vec![table(&["a"])], false).unwrap();
        assert_eq!(
            s.kernel().applied,
            [3],
            "one commit: the deletion and the table"
        );
        assert!(s.kernel().kernel.table(&other_table()).is_none());
        assert!(!s.leading_pending());
        s.sync(vec![table(&["a", "b"])], true).unwrap();
        assert_eq!(*leading.log.lock().unwrap(), ["listed true", "committed"]);
    }

    #[test]
    fn refused_leading_operations_are_abandoned_and_the_next_sync_goes_without_them() {
        let mut s = Syncer::new(with_other_table(), "kubenft");
        let leading = DeleteOther::default();
        s.lead_next_commit_with(Box::new(leading.clone()));
        s.kernel().fail_next = true;
        assert!(s.sync(vec![table(&["a"])], false).is_err());
        assert!(!s.leading_pending(), "never offered again");
        s.sync(vec![table(&["a"])], false).unwrap();
        assert!(s.kernel().kernel.table(&other_table()).is_some());
        assert_eq!(*leading.log.lock().unwrap(), ["listed true", "abandoned"]);
    }

    #[test]
    fn a_failed_commit_without_leading_operations_keeps_them_for_the_next() {
        let mut s = Syncer::new(Fake::default(), "kubenft");
        let leading = DeleteOther::default();
        s.lead_next_commit_with(Box::new(leading.clone()));
        s.kernel().fail_next = true;
        assert!(s.sync(vec![table(&["a"])], false).is_err());
        assert!(s.leading_pending(), "the failure was the sync's own");
        s.sync(vec![table(&["a"])], false).unwrap();
        assert_eq!(
            *leading.log.lock().unwrap(),
            ["listed false", "listed false", "committed"]
        );
    }
}
