//! The sync engine: brings the kernel to the desired tables in ONE transaction per sync,
//! sending only the difference from what it last applied (a partial sync), or, when it cannot
//! trust that memory, from what it reads back from the kernel (a full sync).
//!
//! Guarantees: the kernel sees all of a sync or none of it; after a failure the engine forgets
//! what it applied, so the next sync is a full one that reads the kernel first; a partial sync
//! is guarded by the ruleset generation the engine left behind, so if another program changed
//! nftables in between (flushed or deleted our table, say) the engine re-reads before writing.

use crate::nft::diff::TableChange;
use crate::nft::model::{Family, Table};
use crate::nft::netlink::apply::Fill;
use crate::nft::netlink::{
    ApplyError, ApplyStats, DumpError, Nftables, canonicalize_elements, canonicalized,
};
use crate::nft::transaction::{ElementStream, SetElements, TableRef, Transaction};
use std::time::{Duration, Instant};

use super::{Observed, creation_transaction, reconcile_transaction_lending, return_elements};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The few kernel calls a sync needs; `Nftables` in production, a fake in tests.
pub trait Kernel {
    /// The ruleset generation (bumped by every commit, ours or anyone's).
    fn generation(&mut self) -> Result<u32, KernelError>;
    /// One of our tables as the kernel holds it.
    fn read_table(&mut self, family: Family, name: &str) -> Result<Observed, KernelError>;
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

    fn read_table(&mut self, family: Family, name: &str) -> Result<Observed, KernelError> {
        match self.dump_table(family, name) {
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

    fn apply(&mut self, tx: &Transaction) -> Result<usize, KernelError> {
        applied(Nftables::apply(self, tx))
    }

    fn apply_filling(&mut self, tx: &Transaction, fill: Fill<'_>) -> Result<usize, KernelError> {
        applied(Nftables::apply_filling(self, tx, fill))
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
}

impl<K: Kernel> Syncer<K> {
    pub fn new(kernel: K, table_name: &str) -> Self {
        Syncer {
            kernel,
            table_name: table_name.to_string(),
            generation: None,
            tables: None,
            read_back: false,
        }
    }

    #[cfg(test)]
    pub(crate) fn kernel(&mut self) -> &mut K {
        &mut self.kernel
    }

    /// Whether the next `sync` without `force_full` can be partial.
    pub(crate) fn has_applied_state(&self) -> bool {
        self.generation.is_some() && self.tables.is_some()
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
    /// what they hold (endpoint-map blocks) and the next `sync` sends only the difference from
    /// them, as a full sync would after its own read. A table that cannot be decoded leaves
    /// nothing remembered: the next sync is then a full one, which replaces it.
    pub fn read_back(&mut self) -> Result<(), SyncError> {
        self.generation = None;
        self.tables = None;
        let generation = self.kernel.generation().map_err(SyncError::Generation)?;
        let mut tables = Vec::new();
        for (_, observed) in self.read_tables()? {
            match observed {
                Observed::Read(t) => tables.push(t),
                Observed::Absent => {}
                Observed::Unreadable => return Ok(()),
            }
        }
        self.generation = Some(generation);
        self.tables = Some(tables);
        self.read_back = true;
        Ok(())
    }

    /// Brings the kernel to `desired`. Partial unless `force_full`, or nothing was applied yet,
    /// or the ruleset generation moved since our last commit. The tables are taken, not
    /// copied: they are the whole cluster's ruleset.
    pub fn sync(&mut self, desired: Vec<Table>, force_full: bool) -> Result<SyncReport, SyncError> {
        let mut desired: Vec<Table> = desired.into_iter().map(canonicalized).collect();
        let kind = if std::mem::take(&mut self.read_back) {
            SyncKind::Full
        } else {
            SyncKind::Partial
        };
        let applied = self.tables.take();
        let generation = self.generation.take();
        if !force_full && let (Some(applied), Some(generation)) = (applied, generation) {
            let observed = self.observed_from(applied);
            if self.still_at(generation)? {
                let tx = reconcile_transaction_lending(&observed, &mut desired, Some(generation));
                let committed = self.commit(&tx);
                return_elements(tx, &mut desired);
                match committed {
                    Ok(committed) => return Ok(self.remember(desired, committed, kind)),
                    Err(SyncError::Apply {
                        source: KernelError::GenerationChanged { .. },
                        ..
                    }) => {
                        tracing::info!("the ruleset changed under a partial sync; syncing fully")
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.full_sync(desired)
    }

    /// [`sync`](Self::sync) of `desired` tables whose sets are declared empty, the elements of
    /// each given by `elements`. Where the kernel is known to hold none of our tables (the
    /// usual first sync) they are created with each set's elements produced while the batch is
    /// encoded, so the whole cluster's elements are never held unpacked at once; otherwise they
    /// are filled and synced as `sync` does. Keeps no tables: the caller's plan has them.
    pub fn sync_filling(
        &mut self,
        mut desired: Vec<Table>,
        elements: &dyn SetElements,
        force_full: bool,
    ) -> Result<SyncReport, SyncError> {
        let kernel_has_none =
            self.generation.is_some() && self.tables.as_ref().is_some_and(Vec::is_empty);
        if force_full || !kernel_has_none {
            for t in &mut desired {
                for s in t.sets.values_mut() {
                    s.elements = elements.elements(t.family, &s.name).collect();
                }
            }
            let report = self.sync(desired, force_full);
            self.tables = None;
            return report;
        }
        let kind = if std::mem::take(&mut self.read_back) {
            SyncKind::Full
        } else {
            SyncKind::Partial
        };
        self.tables = None;
        let generation = self.generation.take().expect("checked above");
        let desired: Vec<Table> = desired.into_iter().map(canonicalized).collect();
        if self.still_at(generation)? {
            let tx = creation_transaction(
                &desired,
                |t| elements.sets_with_elements(t.family),
                Some(generation),
            );
            let mut fill = |t: &TableRef, set: &str| {
                let canonical = elements.elements(t.family, set).map(|mut e| {
                    canonicalize_elements(std::slice::from_mut(&mut e));
                    e
                });
                Box::new(canonical) as ElementStream<'_>
            };
            match self.commit_filling(&tx, Some(&mut fill)) {
                Ok(c) => {
                    self.generation = c.generation;
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
                }) => tracing::info!("the ruleset changed under a first sync; syncing fully"),
                Err(e) => return Err(e),
            }
        }
        self.sync_filling(desired, elements, true)
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
        let Some(generation) = self.generation.take() else {
            return Ok(None);
        };
        let tx = || super::changes_transaction(changes, Some(generation));
        Ok(self.commit_at(generation, tx)?.map(|c| {
            self.generation = c.generation;
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
        match self.commit(&tx()) {
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
            tracing::info!(
                expected = generation,
                found = now,
                "nftables changed since our last commit; syncing fully"
            );
        }
        Ok(now == generation)
    }

    fn full_sync(&mut self, mut desired: Vec<Table>) -> Result<SyncReport, SyncError> {
        for _ in 0..FULL_SYNC_ATTEMPTS {
            let generation = self.kernel.generation().map_err(SyncError::Generation)?;
            let observed = self.read_tables()?;
            // The elements are lent to the transaction and given back whatever the outcome:
            // a retry and the memory of what was applied need them.
            let tx = reconcile_transaction_lending(&observed, &mut desired, Some(generation));
            let committed = self.commit(&tx);
            return_elements(tx, &mut desired);
            match committed {
                Ok(committed) => return Ok(self.remember(desired, committed, SyncKind::Full)),
                Err(SyncError::Apply {
                    source: KernelError::GenerationChanged { .. },
                    ..
                }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(SyncError::Contended {
            attempts: FULL_SYNC_ATTEMPTS,
        })
    }

    /// Applies `tx`; returns what was sent and the generation our commit left behind.
    fn commit(&mut self, tx: &Transaction) -> Result<Committed, SyncError> {
        self.commit_filling(tx, None)
    }

    /// [`commit`](Self::commit), with the elements `tx` leaves out from `fill` (see
    /// `Kernel::apply_filling`).
    fn commit_filling(
        &mut self,
        tx: &Transaction,
        fill: Option<Fill<'_>>,
    ) -> Result<Committed, SyncError> {
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
    fn remember(&mut self, desired: Vec<Table>, c: Committed, kind: SyncKind) -> SyncReport {
        self.generation = c.generation;
        self.tables = c.generation.map(|_| desired);
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

    /// Our table of each family as the kernel holds it now.
    fn read_tables(&mut self) -> Result<Vec<(TableRef, Observed)>, SyncError> {
        let mut observed = Vec::new();
        for family in [Family::Ip, Family::Ip6] {
            let o = self
                .kernel
                .read_table(family, &self.table_name)
                .map_err(|source| SyncError::Read {
                    family,
                    table: self.table_name.clone(),
                    source,
                })?;
            observed.push((self.table_ref(family), o));
        }
        Ok(observed)
    }

    fn table_ref(&self, family: Family) -> TableRef {
        TableRef {
            family,
            name: self.table_name.clone(),
        }
    }
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
        fail_next: bool,
    }

    impl Kernel for Fake {
        fn generation(&mut self) -> Result<u32, KernelError> {
            Ok(self.generation)
        }
        fn read_table(&mut self, family: Family, name: &str) -> Result<Observed, KernelError> {
            self.reads += 1;
            let t = TableRef {
                family,
                name: name.into(),
            };
            Ok(self.kernel.table(&t).map_or(Observed::Absent, |t| {
                Observed::Read(crate::nft::netlink::canonical(t))
            }))
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
}
