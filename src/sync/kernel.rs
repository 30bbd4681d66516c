//! The few kernel calls a sync makes, behind one trait: `Nftables` in production, the
//! all-or-nothing fake in tests.
//!
//! Guarantees: the engine reaches the kernel only through `Kernel`; a table of ours that
//! cannot be decoded is reported as `Observed::Unreadable` (to be replaced wholesale), not as
//! an error; a commit refused by its generation guard is told apart from every other failure,
//! whose cause is kept.

use std::collections::BTreeSet;

use crate::nft::kernel::apply::Fill;
use crate::nft::kernel::{ApplyError, ApplyStats, DumpError, Nftables};
use crate::nft::model::{Family, Set};
use crate::nft::outline::Outline;
use crate::nft::transaction::Transaction;

use super::Observed;

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
