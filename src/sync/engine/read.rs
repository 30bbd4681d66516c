//! Reading our tables back from the kernel, and settling the large sets a restart leaves
//! unread against the plan.
//!
//! Guarantees: a set is left without its elements only while the engine trusts the kernel's
//! records (a restart, until its first sync) and only when a record of its digest vouches for
//! it; before a sync uses it, such a set is either settled (its planned digest equals the
//! record, so the kernel holds exactly the planned elements) or read now. The records set
//! itself never reaches the difference.

use std::collections::{BTreeMap, BTreeSet};

use crate::nft::diff::same_set_type;
use crate::nft::digest::SetDigest;
use crate::nft::kernel::canonicalized;
use crate::nft::model::{Family, Table};
use crate::nft::transaction::{SetElements, TableRef};
use crate::sync::Observed;
use crate::sync::kernel::Kernel;
use crate::sync::records::{self, DIGEST_SET, Summary, TableDigests};

use super::{FamilySet, KernelRead, SyncError, Syncer};

impl<K: Kernel> Syncer<K> {
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

    /// Our table of each family as the kernel holds it now, read as `trust_records` says, with
    /// the digests of its sets (the records' for sets left unread). The records set itself is
    /// left out of the tables: the difference must not see it.
    pub(super) fn read_tables(&mut self) -> Result<KernelRead, SyncError> {
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
                    let mut sets = records::digests_of(t);
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
    pub(super) fn read_records(&mut self, family: Family) -> Option<records::Digests> {
        match self.kernel.read_set(family, &self.table_name, DIGEST_SET) {
            Ok(set) => set.map(|s| records::parse_records(&s)),
            Err(e) => {
                tracing::warn!(error = %e, family = ?family, "cannot read the digests of our sets; reading every set back");
                None
            }
        }
    }

    /// Our last commit, seen as a read of the kernel (the tables are moved into it).
    pub(super) fn observed_from(&self, mut applied: Vec<Table>) -> Vec<(TableRef, Observed)> {
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

    /// Settles each set of `read` left without elements against `desired`: if the desired set
    /// has the same type and its planned elements (from `planned`, or held by `desired`) have
    /// the digest the kernel's record holds, the kernel holds exactly them, and the set is
    /// returned as settled (with those `read` settled already); otherwise the set is read now,
    /// and returned among the sets read. Sets the difference deletes or recreates need neither.
    pub(super) fn settle_unread(
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
}
