//! `kubenft run`: the daemon. Sources (the API's watchers, or a manifests directory) feed one
//! store; one loop turns the store into desired tables and syncs them on kube-proxy's schedule;
//! after each sync it reconciles the UDP conntrack entries and the healthCheckNodePort
//! servers; `/healthz`, `/livez` and `/metrics` are served alongside.
//!
//! Guarantees: nothing is programmed before the kernel passed the start-up probe
//! (`kernel_support`): on a kernel that refuses it the daemon answers `/healthz` and `/livez`
//! with 503 and the reason, records a Warning Event on the Node, waits for that write (at most
//! `REFUSAL_EVENT_LIMIT`) and exits with an error; a `/healthz` or `/metrics` address that
//! cannot be bound stops the start the same way, with kube-proxy's Warning Event for it (as
//! with its `bindAddressHardFail`); nothing is programmed before every kind was
//! listed completely once; a failed sync leaves the previous rules, is logged and counted, and
//! is retried as a full sync; API outages never clear the rules; stopping (SIGTERM, SIGINT)
//! leaves the rules in place, so a restart drops no connection.
//!
//! `after_sync` and `full_sync` are public: the benchmark, the examples and the tests time or
//! check the daemon's steps with them.

pub mod after_sync;
mod events;
pub mod full_sync;
mod localhost_nodeports;
mod memory;
mod ruleset_watch;
mod sources;
mod sync_loop;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use self::events::{Limits, Occurrence, Recorder};
use self::sources::Source;
use self::sync_loop::SyncLoop;
use crate::config::RunSettings;
use crate::conntrack;
use crate::metrics::Metrics;
use crate::nft::kernel::Nftables;
use crate::node_inputs::kernel_families;
use crate::proxier::ProxyConfig;
use crate::serve::{self, HealthState};
use crate::source::kube as kube_source;
use crate::source::store::ClusterStore;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("opening the nf_tables netlink socket: {0}")]
    Netlink(#[source] crate::nft::kernel::SocketError),
    #[error("serving {what}: {source}")]
    Serve {
        what: &'static str,
        #[source]
        source: serve::ServeError,
    },
    #[error("connecting to the Kubernetes API: {0}")]
    Kube(#[source] kube_source::KubeSourceError),
    #[error("waiting for a stop signal: {0}")]
    Signal(#[source] std::io::Error),
    #[error("--init-only: {failed} conntrack setting(s) could not be applied (logged above)")]
    NodeSettings { failed: usize },
    /// The kernel refused the start-up probe: nothing was programmed.
    #[error("{0}")]
    KernelUnsupported(Box<crate::kernel_support::Unsupported>),
}

impl DaemonError {
    /// Whether the kernel refused the start-up probe (exit `EX_UNAVAILABLE`).
    pub(crate) fn is_kernel_unsupported(&self) -> bool {
        matches!(self, DaemonError::KernelUnsupported(_))
    }
}

/// How long a daemon that cannot run waits for its Warning event to be written before it
/// exits: the Event is the one place a cluster operator sees why the pod keeps restarting.
const REFUSAL_EVENT_LIMIT: Duration = Duration::from_secs(10);

/// Runs the daemon until SIGTERM or SIGINT.
pub(crate) fn run(proxy: &ProxyConfig, settings: RunSettings) -> Result<(), DaemonError> {
    let failed = apply_node_settings(&settings.conntrack);
    if settings.init_only {
        return match failed {
            0 => Ok(()),
            failed => Err(DaemonError::NodeSettings { failed }),
        };
    }
    let source = match &settings.manifests {
        Some(path) => Source::Manifests {
            path: path.clone(),
            poll: settings.manifests_poll_period,
        },
        None => Source::Api {
            kubeconfig: settings.kubeconfig.clone(),
            service_proxy_name: settings.service_proxy_name.clone(),
        },
    };
    memory::share_one_malloc_arena();
    memory::map_large_allocations_alone();
    memory::no_fast_bins();
    // The sync loop runs on this thread (`block_on`); one worker runs the watchers and the
    // servers beside it. A second worker only had the watchers decode list pages in parallel
    // on the one malloc arena: at 30,000 Services × 10 the listing took 0.3–0.4 s longer.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let proxy = ProxyConfig {
        supported_families: kernel_families(),
        ..proxy.clone()
    };
    runtime.block_on(run_async(proxy, settings, source))
}

/// Sets the conntrack sysctls as kube-proxy does at start, logging each decision; returns how
/// many could not be applied. The daemon runs on regardless: the rules do not depend on them.
fn apply_node_settings(settings: &conntrack::tuning::ConntrackSettings) -> usize {
    let roots = conntrack::tuning::Roots::host();
    let decisions = conntrack::tuning::apply(settings, &roots, roots.cpus());
    for d in &decisions {
        match d {
            conntrack::tuning::Decision::Set { .. } | conntrack::tuning::Decision::Kept { .. } => {
                tracing::info!("conntrack: {d}")
            }
            _ => tracing::warn!("conntrack: {d}"),
        }
    }
    decisions.iter().filter(|d| d.failed()).count()
}

async fn run_async(
    proxy: ProxyConfig,
    settings: RunSettings,
    source: Source,
) -> Result<(), DaemonError> {
    let metrics = Metrics::new();
    // kube-proxy: unhealthy when a queued change waited more than twice the sync period.
    let health = HealthState::new(2 * settings.periods.sync_period);
    let (stop_tx, stop_rx) = watch::channel(false);
    // Bind before anything else so a taken port fails the start, not a later probe.
    let servers = match start_servers(&settings, &health, &metrics, &stop_rx).await {
        Ok(servers) => servers,
        Err(e) => {
            // kube-proxy with bindAddressHardFail says so on the Node before it exits.
            if let DaemonError::Serve { what, .. } = &e {
                let failed =
                    Occurrence::server_failed(&proxy.hostname, *what == HEALTHZ, &with_causes(&e));
                record_before_exit(failed, &proxy, &source, &metrics).await;
            }
            return Err(e);
        }
    };

    let probed = tokio::task::block_in_place(|| {
        crate::kernel_support::check_at_start(&proxy, &proxy.supported_families)
    });
    if let Err(unsupported) = probed {
        report_unsupported_kernel(&unsupported, &proxy, &source, &health, &metrics).await;
        let _ = stop_tx.send(true);
        for server in servers {
            let _ = server.await;
        }
        return Err(DaemonError::KernelUnsupported(unsupported));
    }

    let nft = Nftables::open().map_err(DaemonError::Netlink)?;
    let store = Arc::new(Mutex::new(ClusterStore::publishing_to(metrics.clone())));
    let wake = Arc::new(Notify::new());
    let (source_tasks, events) =
        sources::start(source, &proxy.hostname, &metrics, &store, &wake).await?;
    let mut sync_loop = SyncLoop::new(nft, proxy, &settings, metrics, health, store, events);
    let stop = async {
        wait_for_stop_signal().await?;
        tracing::info!("stopping; the rules stay in place");
        Ok::<(), DaemonError>(())
    };
    let result = tokio::select! {
        r = stop => r,
        () = sync_loop.run(wake) => Ok(()),
    };
    let _ = stop_tx.send(true);
    for task in source_tasks {
        task.abort();
    }
    for server in servers {
        let _ = server.await;
    }
    result
}

/// `DaemonError::Serve`'s names for the two servers.
const HEALTHZ: &str = "healthz";
const METRICS: &str = "metrics";

/// Binds and starts the `/healthz` and `/metrics` servers the settings ask for; each stops
/// once `stop` says so.
async fn start_servers(
    settings: &RunSettings,
    health: &HealthState,
    metrics: &Metrics,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<Result<(), serve::ServeError>>>, DaemonError> {
    let mut servers = Vec::new();
    if let Some(addr) = settings.healthz_bind_address {
        let listener = listen(addr, HEALTHZ).await?;
        tracing::info!(%addr, "serving /healthz and /livez");
        servers.push(tokio::spawn(serve::serve_healthz_on(
            listener,
            health.clone(),
            metrics.clone(),
            stopped(stop.clone()),
        )));
    }
    if let Some(addr) = settings.metrics_bind_address {
        let listener = listen(addr, METRICS).await?;
        tracing::info!(%addr, "serving /metrics");
        servers.push(tokio::spawn(serve::serve_metrics_on(
            listener,
            metrics.clone(),
            stopped(stop.clone()),
        )));
    }
    Ok(servers)
}

/// Resolves once `stop` says so.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Says why the daemon cannot run, everywhere an operator looks: the log, `/healthz` and
/// `/livez`, and a Warning Event on the Node, written before this returns (or given up on
/// after `REFUSAL_EVENT_LIMIT`).
async fn report_unsupported_kernel(
    unsupported: &crate::kernel_support::Unsupported,
    proxy: &ProxyConfig,
    source: &Source,
    health: &HealthState,
    metrics: &Metrics,
) {
    let reason = unsupported.to_string();
    tracing::error!(kernel = %unsupported.kernel, "{reason}");
    health.kernel_unsupported(&reason);
    let refused = Occurrence::kernel_unsupported(&proxy.hostname, &reason);
    record_before_exit(refused, proxy, source, metrics).await;
}

/// Records `occurrence` (with the API as source) and waits for the write, at most
/// `REFUSAL_EVENT_LIMIT`: the daemon exits next, and the Event is the one place a cluster
/// operator sees why the pod keeps restarting.
async fn record_before_exit(
    occurrence: Occurrence,
    proxy: &ProxyConfig,
    source: &Source,
    metrics: &Metrics,
) {
    let Source::Api { kubeconfig, .. } = source else {
        return;
    };
    let client = match kube_source::client(kubeconfig.as_deref()).await {
        Ok(client) => client,
        Err(e) => {
            tracing::warn!(error = %e, "cannot record the Warning event: no API client");
            return;
        }
    };
    let events = Recorder::spawn(client, &proxy.hostname, metrics.clone(), Limits::default());
    events.record(occurrence);
    if !events.flush(REFUSAL_EVENT_LIMIT).await {
        tracing::warn!(limit = ?REFUSAL_EVENT_LIMIT, "the Warning event was not written in time");
    }
}

/// `e` and each of its causes, joined by ": " (an Event's note has no other way to them).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

async fn listen(addr: SocketAddr, what: &'static str) -> Result<TcpListener, DaemonError> {
    serve::bind(addr)
        .await
        .map_err(|source| DaemonError::Serve { what, source })
}

async fn wait_for_stop_signal() -> Result<(), DaemonError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

fn lock(store: &Mutex<ClusterStore>) -> std::sync::MutexGuard<'_, ClusterStore> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}
