//! Sending one transaction: the generation guard, a `Leading`'s operations in front of it,
//! and the generation the commit leaves behind.
//!
//! Guarantees: a transaction built from memory is sent only if the ruleset is still at the
//! generation that memory came from; a pending `Leading`'s operations ride at the front of the
//! next commit and nowhere else: taken when it succeeds, abandoned when the kernel refuses it
//! (unless only the generation guard did: they are listed again at the retry); the caller's
//! transaction is handed back as it came.

use std::time::Instant;

use crate::nft::kernel::apply::Fill;
use crate::nft::transaction::{Op, Transaction};
use crate::sync::kernel::{Kernel, KernelError};

use super::{Committed, SyncError, Syncer};

impl<K: Kernel> Syncer<K> {
    /// Commits the transaction `tx` builds if the ruleset is still at `generation`, the one our
    /// last commit left. `Ok(None)`: another program committed since (seen before building, or
    /// by the kernel's guard at commit), so what we remember of the kernel is stale.
    pub(super) fn commit_at(
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
    pub(super) fn still_at(&mut self, generation: u32) -> Result<bool, SyncError> {
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

    /// Applies `tx`; returns what was sent and the generation our commit left behind.
    pub(super) fn commit(&mut self, tx: &mut Transaction) -> Result<Committed, SyncError> {
        self.commit_filling(tx, None)
    }

    /// [`commit`](Self::commit), with the elements `tx` leaves out from `fill` (see
    /// `Kernel::apply_filling`). A pending `Leading` puts its operations in front of `tx` for
    /// the commit; `tx` is given back as it came.
    pub(super) fn commit_filling(
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
    pub(super) fn leading_ops(&mut self) -> Vec<Op> {
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

    pub(super) fn send(
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
}
