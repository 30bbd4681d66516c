//! A first sync where the kernel holds none of our tables: they are created with each set's
//! elements produced while the batch is encoded, and the records of the large sets' digests
//! summed on the way.
//!
//! Guarantees: the whole cluster's elements are never held unpacked at once; the records go
//! last in the same batch and are the digests of exactly the elements sent; if another
//! program committed in between, the sync becomes a full one (read, then difference).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use crate::nft::digest::SetDigest;
use crate::nft::kernel::canonicalize_elements;
use crate::nft::model::{Family, Table};
use crate::nft::transaction::{ElementStream, SetElements, TableRef};
use crate::sync::creation_transaction;
use crate::sync::kernel::{Kernel, KernelError};
use crate::sync::records::{self, DIGEST_SET, DIGESTED_MIN_ELEMENTS, Digests, TableDigests};

use super::{FamilySet, SyncError, SyncKind, SyncReport, Syncer};

impl<K: Kernel> Syncer<K> {
    /// Creates `desired` (sets declared empty, filled from `elements` while the batch is
    /// encoded) where the kernel held none of our tables at the last read, with the records of
    /// the large sets' digests.
    pub(super) fn create_filling(
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
                    .extend(records::creation_record_ops(self.table_ref(family)));
            }
            let summed = |family: Family| -> Digests {
                sums.range((family, String::new())..)
                    .take_while(|((f, _), _)| *f == family)
                    .map(|((_, set), sum)| (set.clone(), sum.get()))
                    .collect()
            };
            let mut fill = |t: &TableRef, set: &str| -> ElementStream<'_> {
                if set == DIGEST_SET {
                    return Box::new(records::records_of(&summed(t.family)).into_iter());
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
                                .then(|| records::wanted_records(&sets));
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
}
