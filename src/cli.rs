//! The subcommands' glue: read the inputs, build the desired tables, then print or apply them.
//!
//! Guarantees: every skipped manifest and every rejected object is logged as a warning naming
//! it; `sync --once` and `cleanup` change the kernel in exactly one transaction; `cleanup`
//! touches only our `ip` and `ip6` tables; `sync --once` on a kernel that refuses the
//! start-up probe (`kernel_support`) changes nothing and exits `EX_UNAVAILABLE`.

use std::path::Path;

use crate::config::Config;
use crate::node_inputs::{
    InputError, add_local_addresses, kernel_families, load_inputs, log_nodeport_fallbacks,
    nodeport_fallbacks,
};
use crate::proxier::ProxyConfig;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Loading the manifests or reading the local addresses.
    #[error(transparent)]
    Inputs(#[from] InputError),
    #[error("writing the configuration to {path}: {source}")]
    WriteConfig {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the rendered tables: {0}")]
    Output(#[source] std::io::Error),
    #[error("opening the nf_tables netlink socket: {0}")]
    Open(#[source] BoxError),
    #[error("{command}: applying the transaction ({ops} operations): {source}")]
    Apply {
        command: &'static str,
        ops: usize,
        #[source]
        source: BoxError,
    },
    #[error("explain: {0}")]
    Explain(#[source] Box<crate::explain::ExplainError>),
    #[error("demo: {0}")]
    Demo(#[source] Box<crate::demo::DemoError>),
    #[error("sync: {0}")]
    Sync(#[source] Box<crate::sync::SyncError>),
    /// The kernel refused the start-up probe: nothing was changed.
    #[error("{0}")]
    KernelUnsupported(Box<crate::kernel_support::Unsupported>),
    #[cfg(feature = "daemon")]
    #[error("run: {0}")]
    Run(#[source] Box<crate::daemon::DaemonError>),
    #[cfg(not(feature = "daemon"))]
    #[error("run: this kubenft was built without the daemon (feature `daemon`)")]
    NoDaemon,
}

/// sysexits.h EX_UNAVAILABLE: this kernel lacks what the ruleset needs.
pub const EX_UNAVAILABLE: u8 = 69;

impl CliError {
    /// The process's exit status for this error: `EX_UNAVAILABLE` when the kernel refused the
    /// start-up probe (`sync --once` or `run`), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::KernelUnsupported(_) => EX_UNAVAILABLE,
            #[cfg(feature = "daemon")]
            CliError::Run(e) if e.is_kernel_unsupported() => EX_UNAVAILABLE,
            _ => 1,
        }
    }
}

pub use glue::run;

mod glue {
    use std::io::Write;

    use super::*;
    use crate::config::Task;
    use crate::nft::kernel::Nftables;
    use crate::nft::model::Table;
    use crate::nft::transaction::Transaction;

    /// Runs the validated subcommand.
    pub fn run(config: &Config) -> Result<(), CliError> {
        match &config.task {
            // `render` is for reading, on any machine: it shows both families, as on a node
            // whose kernel has both.
            Task::Render { manifests } => {
                let tables = build_tables(manifests, config.proxy.clone())?;
                let mut out = std::io::stdout().lock();
                for table in &tables {
                    write!(out, "{}", crate::nft::render::render_table(table))
                        .map_err(CliError::Output)?;
                }
                out.flush().map_err(CliError::Output)
            }
            Task::Sync {
                manifests,
                replace_kube_proxy,
            } => {
                let proxy = ProxyConfig {
                    supported_families: kernel_families(),
                    ..config.proxy.clone()
                };
                // Before reading anything: a kernel that cannot run the ruleset is told apart
                // from a bad input, and nothing is changed.
                crate::kernel_support::check_at_start(&proxy, &proxy.supported_families)
                    .map_err(CliError::KernelUnsupported)?;
                sync_once(&config.proxy.table_name, *replace_kube_proxy, || {
                    build_tables(manifests, proxy.clone())
                })
            }
            Task::Demo => crate::demo::run().map_err(|e| CliError::Demo(Box::new(e))),
            Task::Explain(flags) => {
                let answer = crate::explain::run(flags, &config.proxy.table_name)
                    .map_err(|e| CliError::Explain(Box::new(e)))?;
                let text = match flags.output {
                    crate::explain::OutputFormat::Text => answer.to_text(),
                    crate::explain::OutputFormat::Json => {
                        let mut json = serde_json::to_string_pretty(&answer)
                            .expect("an explanation serializes");
                        json.push('\n');
                        json
                    }
                };
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes()).map_err(CliError::Output)?;
                out.flush().map_err(CliError::Output)
            }
            #[cfg(feature = "daemon")]
            Task::Run(settings) => crate::daemon::run(&config.proxy, settings.clone())
                .map_err(|e| CliError::Run(Box::new(e))),
            #[cfg(not(feature = "daemon"))]
            Task::Run(_) => Err(CliError::NoDaemon),
            Task::WriteConfig { path, yaml } => {
                std::fs::write(path, yaml).map_err(|source| CliError::WriteConfig {
                    path: path.display().to_string(),
                    source,
                })?;
                tracing::info!(path = %path.display(), "configuration written");
                Ok(())
            }
            Task::Cleanup => apply(
                "cleanup",
                &crate::sync::cleanup_transaction(&config.proxy.table_name),
            ),
        }
    }

    /// Manifests → cluster state → desired tables, warning about every rejected object.
    fn build_tables(path: &Path, mut proxy: ProxyConfig) -> Result<Vec<Table>, CliError> {
        let inputs = load_inputs(path, &proxy.hostname)?;
        let (mut state, mut rejected) = crate::cluster::ClusterState::from_objects(
            &inputs.services,
            &inputs.endpoint_slices,
            inputs.node.as_ref(),
        );
        rejected.extend(state.update_service_cidrs(&inputs.service_cidrs));
        for r in &rejected {
            tracing::warn!(
                kind = ?r.kind,
                namespace = ?r.namespace,
                name = ?r.name,
                reason = %r.reason,
                "rejected an object"
            );
        }
        add_local_addresses(&mut proxy, state.node.as_ref())?;
        log_nodeport_fallbacks(&nodeport_fallbacks(&state, &proxy), &state, &proxy);
        // Fresh endpoint-map blocks: the same manifests give the same blocks, so re-running
        // `sync --once` on unchanged input sends nothing.
        Ok(crate::proxier::build(&state, &proxy))
    }

    /// Reads our tables back, plans the difference and applies it in one transaction guarded by
    /// the generation it read (the daemon's full sync, once); with `replace_kube_proxy`, what
    /// kube-proxy left goes in that transaction. If the kernel refuses the removal, the sync is
    /// made again without it: kube-proxy's rules never keep ours out.
    fn sync_once(
        table_name: &str,
        replace_kube_proxy: bool,
        desired: impl Fn() -> Result<Vec<Table>, CliError>,
    ) -> Result<(), CliError> {
        let nft = Nftables::open().map_err(|e| CliError::Open(e.into()))?;
        let mut syncer = crate::sync::Syncer::new(nft, table_name);
        let takeover = replace_kube_proxy.then(|| crate::takeover::Takeover::new(table_name));
        let outcome = takeover.as_ref().map(|t| t.outcome());
        if let Some(t) = takeover {
            syncer.lead_next_commit_with(Box::new(t));
        }
        let mut result = syncer.sync(desired()?, true);
        let abandoned = |o: &Option<crate::takeover::TakeoverOutcome>| {
            matches!(
                o.as_ref().map(|o| o.get()),
                Some(crate::takeover::Outcome::Abandoned { .. })
            )
        };
        if result.is_err() && abandoned(&outcome) {
            result = syncer.sync(desired()?, true);
        }
        let report = result.map_err(|e| CliError::Sync(Box::new(e)))?;
        tracing::info!(
            command = "sync",
            ops = report.ops,
            bytes = report.bytes,
            "transaction applied"
        );
        if replace_kube_proxy {
            crate::takeover::report_unreachable();
        }
        Ok(())
    }

    fn apply(command: &'static str, tx: &Transaction) -> Result<(), CliError> {
        let mut nft = Nftables::open().map_err(|e| CliError::Open(e.into()))?;
        nft.apply(tx).map_err(|e| CliError::Apply {
            command,
            ops: tx.ops.len(),
            source: e.into(),
        })?;
        tracing::info!(command, ops = tx.ops.len(), "transaction applied");
        Ok(())
    }
}
