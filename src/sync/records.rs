//! Digests of our sets' elements, and the records of them kept in the kernel, so a restart
//! need not read back large sets (the kernel walks a set from its first element for every
//! 32 KiB message of a dump, so reading n elements costs O(n²)).
//!
//! Each of our tables holds a set `element-digests`, written in the same transaction as every
//! element change: one element per set of at least `DIGESTED_MIN_ELEMENTS` elements, its
//! comment naming the set with its element count and digest. The kernel commits the records
//! and the elements together, so after any commit of ours the records describe the sets.
//! A restart's read trusts them and skips those sets' elements, and the sync adopts the planned
//! elements of a set whose digest equals its record (`Syncer::read_back`).
//!
//! Limit: an operator's `nft add/delete element` (or `flush set`) in one of those sets does not
//! update its record. Only a restart trusts the records, so such an edit made while the daemon
//! runs is seen at once (it moves the generation, and the next sync reads every element), and
//! one made while it was down is seen by the periodic full sync.

use std::collections::BTreeMap;

use crate::nft::digest::SetDigest;
use crate::nft::model::{DataType, Element, Family, Set, Table, Value};
use crate::nft::transaction::{Op, TableRef};

/// The name of the set holding the records.
pub const DIGEST_SET: &str = "element-digests";

/// Sets smaller than this are read back whole (at most ~10 messages, milliseconds) and have no
/// record.
pub(crate) const DIGESTED_MIN_ELEMENTS: u64 = 4096;

/// The digest of each set (not dynamic) of one table, by name.
pub(crate) type Digests = BTreeMap<String, SetDigest>;

/// What the kernel holds of one of our tables, summed up: the digest of each set, and the
/// records its `element-digests` set holds (`None`: it has no such set).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TableDigests {
    pub(crate) sets: Digests,
    pub(crate) recorded: Option<Digests>,
}

/// Our tables by family, as the kernel holds them; a family absent here has no table.
pub(crate) type Summary = BTreeMap<Family, TableDigests>;

/// The set holding the records, as declared in the kernel.
pub(crate) fn declaration() -> Set {
    Set::new(DIGEST_SET, vec![DataType::Mark]).with_comment(
        "per set of this table: its element count and the sum of a hash of each element, as \
         kubenft last committed them; a restart reads back only the sets that differ from its plan",
    )
}

/// The digest of each set of `table` that is not dynamic (those hold runtime state).
pub(crate) fn digests_of(table: &Table) -> Digests {
    table
        .sets
        .values()
        .filter(|s| !s.dynamic && s.name != DIGEST_SET)
        .map(|s| (s.name.clone(), SetDigest::of(&s.elements)))
        .collect()
}

/// The records `digests` calls for: sets large enough to be worth not reading back.
pub(crate) fn wanted_records(digests: &Digests) -> Digests {
    digests
        .iter()
        .filter(|(_, d)| d.elements >= DIGESTED_MIN_ELEMENTS)
        .map(|(n, d)| (n.clone(), *d))
        .collect()
}

/// The element key of the record of `set`: a 32-bit FNV-1a hash of its name.
fn record_key(set: &str) -> u32 {
    set.bytes().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

fn record_element(set: &str, d: &SetDigest) -> Element {
    Element {
        key: vec![Value::Mark(record_key(set))],
        data: None,
        comment: Some(format!("{set} {} {:032x}", d.elements, d.sum)),
    }
}

/// The records that can be kept: sets whose names share a key get none (they are read back).
fn recordable(records: &Digests) -> BTreeMap<&str, SetDigest> {
    let mut sharing: BTreeMap<u32, usize> = BTreeMap::new();
    for name in records.keys() {
        *sharing.entry(record_key(name)).or_default() += 1;
    }
    records
        .iter()
        .filter(|(name, _)| sharing[&record_key(name)] == 1)
        .map(|(name, d)| (name.as_str(), *d))
        .collect()
}

/// The records held by the kernel's `element-digests` set. An element that does not read as a
/// record (edited by hand, or written by another version) vouches for nothing.
pub(crate) fn parse_records(set: &Set) -> Digests {
    set.elements
        .iter()
        .filter_map(|e| {
            let mut parts = e.comment.as_deref()?.split(' ');
            let (name, count, sum) = (parts.next()?, parts.next()?, parts.next()?);
            let d = SetDigest {
                elements: count.parse().ok()?,
                sum: u128::from_str_radix(sum, 16).ok()?,
            };
            (parts.next().is_none() && *e == record_element(name, &d))
                .then(|| (name.to_string(), d))
        })
        .collect()
}

/// Follows `ops`, in order, on the digests of what the kernel holds. Only operations on
/// tables named `table` count.
pub(crate) fn apply_ops(summary: &mut Summary, table: &str, ops: &[Op]) {
    let ours = |t: &TableRef| t.name == table;
    for op in ops {
        match op {
            Op::AddTable { table: t, .. } if ours(t) => {
                summary.entry(t.family).or_default();
            }
            Op::DeleteTable { table: t } if ours(t) => {
                summary.remove(&t.family);
            }
            Op::AddSet { table: t, set } if ours(t) && !set.dynamic => {
                if let Some(d) = summary.get_mut(&t.family) {
                    d.sets.entry(set.name.clone()).or_default();
                }
            }
            Op::DeleteSet { table: t, set } if ours(t) => {
                if let Some(d) = summary.get_mut(&t.family) {
                    d.sets.remove(set);
                }
            }
            Op::FlushSet { table: t, set } if ours(t) => {
                if let Some(d) = summary.get_mut(&t.family).and_then(|d| d.sets.get_mut(set)) {
                    *d = SetDigest::default();
                }
            }
            Op::AddElements {
                table: t,
                set,
                elements,
            } if ours(t) => {
                if let Some(d) = summary.get_mut(&t.family).and_then(|d| d.sets.get_mut(set)) {
                    elements.iter().for_each(|e| d.add(e));
                }
            }
            Op::DeleteElements {
                table: t,
                set,
                elements,
            } if ours(t) => {
                if let Some(d) = summary.get_mut(&t.family).and_then(|d| d.sets.get_mut(set)) {
                    elements.iter().for_each(|e| d.remove(e));
                }
            }
            _ => {}
        }
    }
}

/// The operations that bring each table's records to what its digests call for (creating the
/// set, changing the records that differ, or deleting the set once no set is large enough),
/// with `summary` updated to hold them.
pub(crate) fn record_ops(summary: &mut Summary, table: &str) -> Vec<Op> {
    let mut ops = Vec::new();
    for (&family, d) in summary.iter_mut() {
        let t = TableRef {
            family,
            name: table.to_string(),
        };
        let wanted = wanted_records(&d.sets);
        match d.recorded.take() {
            None if wanted.is_empty() => {}
            Some(_) if wanted.is_empty() => ops.push(Op::DeleteSet {
                table: t,
                set: DIGEST_SET.into(),
            }),
            None => {
                ops.push(Op::AddSet {
                    table: t.clone(),
                    set: declaration(),
                });
                ops.push(Op::AddElements {
                    table: t,
                    set: DIGEST_SET.into(),
                    elements: records_of(&d.sets),
                });
            }
            Some(old) => {
                let (old, new) = (recordable(&old), recordable(&wanted));
                let gone = changed_records(&old, &new);
                if !gone.is_empty() {
                    ops.push(Op::DeleteElements {
                        table: t.clone(),
                        set: DIGEST_SET.into(),
                        elements: gone,
                    });
                }
                let added = changed_records(&new, &old);
                if !added.is_empty() {
                    ops.push(Op::AddElements {
                        table: t,
                        set: DIGEST_SET.into(),
                        elements: added,
                    });
                }
            }
        }
        d.recorded = (!wanted.is_empty()).then_some(wanted);
    }
    ops
}

/// The operations that declare the records set of a table created in the same batch, its
/// `AddElements` carrying none: they are [`records_of`] the digests of the table's sets, summed
/// while their elements are sent, so the operations go after every other of the batch.
pub(crate) fn creation_record_ops(table: TableRef) -> [Op; 2] {
    [
        Op::AddSet {
            table: table.clone(),
            set: declaration(),
        },
        Op::AddElements {
            table,
            set: DIGEST_SET.into(),
            elements: Vec::new(),
        },
    ]
}

/// The record elements a table whose sets have `digests` holds.
pub(crate) fn records_of(digests: &Digests) -> Vec<Element> {
    changed_records(&recordable(&wanted_records(digests)), &BTreeMap::new())
}

/// The record elements of `records` that `other` does not hold as they are.
fn changed_records(
    records: &BTreeMap<&str, SetDigest>,
    other: &BTreeMap<&str, SetDigest>,
) -> Vec<Element> {
    records
        .iter()
        .filter(|(name, d)| other.get(*name) != Some(*d))
        .map(|(name, d)| record_element(name, d))
        .collect()
}
