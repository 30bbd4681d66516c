//! Which block of the endpoint map each endpoint-picking chain owns, kept across builds.

use std::collections::BTreeMap;

use super::{MAX_BLOCKS, SLOTS_PER_BLOCK};
use crate::nft::model::{Family, Stmt, Table};
use crate::proxier::names::is_endpoint_map;

/// Which block of the endpoint map each endpoint-picking chain owns, per table family. Blocks
/// are kept across builds (read back from the previous tables) so a service whose endpoints
/// change keeps its rule; a new chain takes the lowest block nobody held before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointBlocks {
    by_family: BTreeMap<Family, BTreeMap<String, u32>>,
}

impl EndpointBlocks {
    /// Blocks given per family.
    pub(crate) fn from_families(by_family: BTreeMap<Family, BTreeMap<String, u32>>) -> Self {
        EndpointBlocks { by_family }
    }

    /// The blocks the chains of `tables` use (from their `dnat … map @service-endpoints` rules).
    pub fn of_tables(tables: &[Table]) -> Self {
        let mut by_family: BTreeMap<Family, BTreeMap<String, u32>> = BTreeMap::new();
        for t in tables {
            let blocks = by_family.entry(t.family).or_default();
            for (name, chain) in &t.chains {
                for stmt in chain.rules.iter().flat_map(|r| &r.stmts) {
                    if let Stmt::DnatNumgenMap {
                        modulus: SLOTS_PER_BLOCK,
                        offset,
                        map,
                    }
                    | Stmt::DnatHashMap {
                        modulus: SLOTS_PER_BLOCK,
                        offset,
                        map,
                        ..
                    } = stmt
                        && is_endpoint_map(map)
                    {
                        blocks.insert(name.clone(), offset / SLOTS_PER_BLOCK);
                    }
                }
            }
        }
        EndpointBlocks { by_family }
    }

    /// The blocks of the chains of a table of `family`.
    pub(crate) fn of_family(&self, family: Family) -> BTreeMap<String, u32> {
        self.by_family.get(&family).cloned().unwrap_or_default()
    }

    /// The block of `chain` in a table of `family`, if it has one.
    #[cfg(test)]
    pub(crate) fn block(&self, family: Family, chain: &str) -> Option<u32> {
        self.by_family.get(&family)?.get(chain).copied()
    }
}

/// Hands out blocks: previous owners keep theirs, a new chain takes the lowest block nobody
/// holds. A block is free again only once released, after the plan that dropped its chain, so
/// no block changes hands within one transaction (its old elements may still be deleted in the
/// same transaction that would add the new ones).
#[derive(Debug, Clone, Default)]
pub(crate) struct BlockAllocator {
    owners: BTreeMap<String, u32>,
    taken: std::collections::BTreeSet<u32>,
    next_free: u32,
}

impl BlockAllocator {
    pub(crate) fn new(previous: BTreeMap<String, u32>) -> Self {
        let taken = previous.values().copied().collect();
        BlockAllocator {
            owners: previous,
            taken,
            next_free: 0,
        }
    }

    pub(super) fn block_for(&mut self, chain: &str) -> Option<u32> {
        if let Some(&b) = self.owners.get(chain) {
            return Some(b);
        }
        while self.taken.contains(&self.next_free) {
            self.next_free += 1;
        }
        if self.next_free >= MAX_BLOCKS {
            return None;
        }
        let b = self.next_free;
        self.taken.insert(b);
        self.owners.insert(chain.to_string(), b);
        Some(b)
    }

    /// Frees the block of `chain` (if it has one) for later plans.
    pub(crate) fn release(&mut self, chain: &str) {
        if let Some(b) = self.owners.remove(chain) {
            self.taken.remove(&b);
            self.next_free = self.next_free.min(b);
        }
    }

    /// Each chain's block.
    pub(crate) fn blocks(&self) -> &BTreeMap<String, u32> {
        &self.owners
    }
}
