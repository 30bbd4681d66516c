//! The start-up check that this kernel can run kubenft's ruleset: before anything is
//! programmed, the planner's tables for a synthetic cluster that uses every construct the
//! planner emits (`cluster.yaml`), planned with this node's configuration under a scratch
//! table name, are sent to the kernel as one dry-run batch (`Nftables::check`).
//!
//! Guarantees: the probe never changes the ruleset (the batch is never committed; the
//! ruleset generation does not move); a kernel that refuses anything is reported with every
//! refused operation, its errno and what it needs (`report`); nothing is derived from version
//! numbers: what the kernel accepts decides. What the dry run does not cover: the kernel's
//! validation at commit (which hook or chain type a rule may sit in, loops), which it only
//! runs for a batch it commits.

mod report;

pub use report::Unsupported;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster::ClusterState;
use crate::nft::kernel::{ApplyError, Nftables, SocketError};
use crate::nft::model::Table;
use crate::nft::transaction::Transaction;
use crate::proxier::{IpFamily, ProxyConfig};
use crate::source::manifests;

/// The oldest kernel the project supports, for the refusal's message only: whether this
/// kernel will do is decided by the probe, never by comparing versions. The kernel matrix
/// (Debian 11's 5.10, Debian 12's 6.1, current) settles the value.
pub const MINIMUM_KERNEL: &str = "5.10";

/// The synthetic cluster the probe plans.
const PROBE_CLUSTER: &str = include_str!("cluster.yaml");
/// The node the synthetic cluster's local endpoints are on.
const PROBE_NODE: &str = "kubenft-probe";

#[derive(Debug, thiserror::Error)]
pub enum KernelSupportError {
    /// The kernel refused part of the ruleset: kubenft cannot run here.
    #[error("{0}")]
    Unsupported(Box<Unsupported>),
    /// The probe could not ask the kernel (no permission, say): inconclusive.
    #[error("kernel probe: opening the nf_tables netlink socket: {0}")]
    Open(#[source] SocketError),
    #[error("kernel probe: {0}")]
    Check(#[source] ApplyError),
}

/// A probe the kernel passed: what it cost.
#[derive(Debug, Clone, Copy)]
pub struct Passed {
    pub operations: usize,
    pub elapsed: Duration,
}

/// Probes the kernel of the calling thread's network namespace for what `config`'s ruleset
/// needs, in the `families` it will program.
pub fn probe(config: &ProxyConfig, families: &[IpFamily]) -> Result<Passed, KernelSupportError> {
    let started = Instant::now();
    let tables = probe_tables(config, families, &scratch_name(config));
    let tx = injected(probe_transaction(&tables));
    let mut nft = Nftables::open().map_err(KernelSupportError::Open)?;
    let refusals = nft.check(&tx).map_err(KernelSupportError::Check)?;
    let elapsed = started.elapsed();
    if refusals.is_empty() {
        return Ok(Passed {
            operations: tx.ops.len(),
            elapsed,
        });
    }
    Err(KernelSupportError::Unsupported(Box::new(Unsupported::new(
        kernel_release(),
        &tables,
        tx.ops.len(),
        refusals,
    ))))
}

/// The scratch table name: this process's, so two probes never meet, and never our table's.
fn scratch_name(config: &ProxyConfig) -> String {
    format!("{}-probe-{}", config.table_name, std::process::id())
}

/// The tables the planner makes of the synthetic cluster with `config`, named `table_name`,
/// for `families`.
pub(crate) fn probe_tables(
    config: &ProxyConfig,
    families: &[IpFamily],
    table_name: &str,
) -> Vec<Table> {
    let (state, _) = probe_cluster();
    let config = ProxyConfig {
        table_name: table_name.to_owned(),
        hostname: PROBE_NODE.to_owned(),
        supported_families: families.to_vec(),
        // What `--nodeport-addresses` CIDRs and the no-node-IP fallback select from.
        local_addresses: vec![
            "10.0.0.10".parse().expect("an address"),
            "fd00:10::10".parse().expect("an address"),
        ],
        ..config.clone()
    };
    crate::proxier::build(&state, &config)
}

/// The synthetic cluster, through the path `--manifests` takes, and the objects it rejected
/// (none: a test keeps it so).
pub(crate) fn probe_cluster() -> (ClusterState, Vec<crate::cluster::Rejected>) {
    let mut m = manifests::Manifests::default();
    let mut warnings = Vec::new();
    manifests::parse_file(
        Path::new("kernel_support/cluster.yaml"),
        PROBE_CLUSTER,
        &mut m,
        &mut warnings,
    );
    debug_assert!(warnings.is_empty(), "{warnings:?}");
    let node = m
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(PROBE_NODE));
    let (mut state, mut rejected) =
        ClusterState::from_objects(&m.services, &m.endpoint_slices, node);
    rejected.extend(state.update_service_cidrs(&m.service_cidrs));
    (state, rejected)
}

/// What a first sync sends for `tables`: each created whole, in one batch.
pub(crate) fn probe_transaction(tables: &[Table]) -> Transaction {
    crate::sync::full_sync_transaction(tables)
}

/// The kernel's release (`uname -r`), or "unknown".
pub fn kernel_release() -> String {
    // SAFETY: uname only writes into the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname NUL-terminates each field.
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Test builds only: with `KUBENFT_TEST_PROBE_REFUSED` set, the probe also sends a rule this
/// kernel refuses (`numgen random mod 0`), so the refusal's wiring (exit code, `/healthz`,
/// the Event) can be tested end to end against the real kernel. `fake-kernel` is the feature
/// every test build turns on and the product never does.
#[cfg(feature = "fake-kernel")]
fn injected(mut tx: Transaction) -> Transaction {
    use crate::nft::model::{Rule, Stmt};
    use crate::nft::transaction::Op;
    if std::env::var_os("KUBENFT_TEST_PROBE_REFUSED").is_none() {
        return tx;
    }
    let chain = tx.ops.iter().find_map(|op| match op {
        Op::AddChain { table, chain } => Some((table.clone(), chain.name.clone())),
        _ => None,
    });
    if let Some((table, chain)) = chain {
        tx.ops.push(Op::AddRule {
            table,
            chain,
            rule: Rule::new(vec![Stmt::NumgenIs {
                modulus: 0,
                value: 0,
            }]),
        });
    }
    tx
}

#[cfg(not(feature = "fake-kernel"))]
fn injected(tx: Transaction) -> Transaction {
    tx
}

/// Probes and logs the outcome: Ok when kubenft may go on (the kernel passed, or the probe
/// could not ask it, in which case each sync reports its own errors), the refusal otherwise.
pub fn check_at_start(config: &ProxyConfig, families: &[IpFamily]) -> Result<(), Box<Unsupported>> {
    match probe(config, families) {
        Ok(p) => {
            tracing::info!(
                kernel = %kernel_release(),
                operations = p.operations,
                seconds = p.elapsed.as_secs_f64(),
                "the kernel accepts every construct of the ruleset"
            );
            Ok(())
        }
        Err(KernelSupportError::Unsupported(u)) => Err(u),
        Err(e) => {
            tracing::warn!(error = %e, "could not probe the kernel's nf_tables; going on, each sync reports its own errors");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
