//! The daemon's full sync: read our tables back, plan keeping what they hold (endpoint-map
//! blocks, pick slots), and send the difference. Shared with the benchmark and the tests, which
//! time or check its steps. It joins the planner and the sync engine, which know nothing of
//! each other (the engine sees the planner's elements only as `nft::transaction::SetElements`),
//! so it lives above both, here.
//!
//! A restart trusts the kernel's digest records and leaves large sets unread, so the planner
//! cannot keep the slots of a large `pick-M-slots` map it did not see: it plans them in address
//! order. Where churn moved endpoints off that order, the planned digest differs from the
//! record and the map is read back; the planner then plans again keeping the slots read, so
//! the sync rewrites none of them.

use crate::cluster::ClusterState;
use crate::nft::model::Table;
use crate::proxier::names::is_pick_slots;
use crate::proxier::{Planner, ProxyConfig};
use crate::sync::{Kernel, SyncError, SyncReport, Syncer};

/// Reads our tables back and brings the kernel to `state`'s plan, keeping what the kernel
/// holds. If the read fails, the sync reads again (as a full one). `planned` runs between
/// planning and encoding, when planning's temporaries are freed and the batch not yet made.
pub fn full_sync<K: Kernel>(
    syncer: &mut Syncer<K>,
    planner: &mut Planner,
    state: &ClusterState,
    proxy: &ProxyConfig,
    planned: impl FnOnce(),
) -> Result<SyncReport, SyncError> {
    let mut full = true;
    match syncer.read_back() {
        Ok(()) => full = !syncer.has_applied_state(),
        Err(e) => tracing::warn!(error = %e, "cannot read our tables back before planning"),
    }
    let mut tables = plan_as_held(syncer, planner, state, proxy);
    read_differing_sets(syncer, planner, &mut tables, state, proxy)?;
    planned();
    // The planner holds the tables' elements packed, service by service: they are unpacked
    // one at a time as the sync encodes them.
    syncer.sync_filling(tables, planner, full)
}

/// `state` planned whole, keeping what the kernel holds as last read (`Syncer::read_back`);
/// the tables' sets are declared empty, their elements are the planner's.
pub fn plan_as_held<K: Kernel>(
    syncer: &Syncer<K>,
    planner: &mut Planner,
    state: &ClusterState,
    proxy: &ProxyConfig,
) -> Vec<Table> {
    planner.reset_to(syncer.applied_tables().unwrap_or_default());
    planner.plan_without_elements(state, proxy)
}

/// Reads back the sets the last read left unread whose planned elements differ from the
/// kernel's records; if a pick slot map is among them, plans `tables` again keeping its slots.
pub fn read_differing_sets<K: Kernel>(
    syncer: &mut Syncer<K>,
    planner: &mut Planner,
    tables: &mut Vec<Table>,
    state: &ClusterState,
    proxy: &ProxyConfig,
) -> Result<(), SyncError> {
    // Each round reads sets not read before, so it ends.
    loop {
        let read = syncer.read_sets_differing_from(tables, planner)?;
        if !read.iter().any(|(_, set)| is_pick_slots(set)) {
            return Ok(());
        }
        *tables = plan_as_held(syncer, planner, state, proxy);
    }
}
