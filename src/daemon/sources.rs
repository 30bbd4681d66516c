//! Where the daemon's cluster objects come from: the API's watchers (with the Event recorder,
//! which needs the same client), or a manifests directory polled for changes. Each source
//! writes into the one store and wakes the sync loop.
//!
//! Guarantees: a manifests read that fails keeps the last objects; a read that succeeds
//! replaces them as a whole.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::events::{Limits, Occurrence, Recorder};
use super::{DaemonError, lock};
use crate::metrics::Metrics;
use crate::node_inputs::load_inputs;
use crate::source::kube as kube_source;
use crate::source::store::ClusterStore;

/// Where the cluster objects come from.
#[derive(Debug, Clone)]
pub(super) enum Source {
    Api {
        kubeconfig: Option<PathBuf>,
        service_proxy_name: Option<String>,
    },
    Manifests {
        path: PathBuf,
        poll: Duration,
    },
}

/// Starts `source` feeding `store` (waking `wake` on each change), and the Event recorder:
/// with the API, it records kube-proxy's "birth cry" once the watchers run; with manifests,
/// there is no API server to write to, and the recorder records nothing.
pub(super) async fn start(
    source: Source,
    hostname: &str,
    metrics: &Metrics,
    store: &Arc<Mutex<ClusterStore>>,
    wake: &Arc<Notify>,
) -> Result<(Vec<JoinHandle<()>>, Recorder), DaemonError> {
    Ok(match source {
        Source::Api {
            kubeconfig,
            service_proxy_name,
        } => {
            let client = kube_source::client(kubeconfig.as_deref())
                .await
                .map_err(DaemonError::Kube)?;
            let events =
                Recorder::spawn(client.clone(), hostname, metrics.clone(), Limits::default());
            let watchers = kube_source::spawn_watchers(
                client,
                hostname,
                service_proxy_name.as_deref(),
                store.clone(),
                wake.clone(),
            );
            // kube-proxy's "birth cry", once its watchers run.
            events.record(Occurrence::starting(hostname));
            (watchers, events)
        }
        Source::Manifests { path, poll } => (
            vec![tokio::spawn(poll_manifests(
                path,
                hostname.to_string(),
                poll,
                store.clone(),
                wake.clone(),
            ))],
            Recorder::disabled(metrics.clone()),
        ),
    })
}

/// Re-reads `path` whenever a file in it changed (size, modification time, or the set of
/// files), replacing the store's objects as a whole. A read that fails keeps the last objects.
async fn poll_manifests(
    path: PathBuf,
    hostname: String,
    every: Duration,
    store: Arc<Mutex<ClusterStore>>,
    wake: Arc<Notify>,
) {
    let mut seen: Option<Vec<(PathBuf, u64, SystemTime)>> = None;
    loop {
        let now = fingerprint(&path);
        if seen.as_ref() != Some(&now) {
            match load_inputs(&path, &hostname) {
                Ok(inputs) => {
                    tracing::info!(path = %path.display(), services = inputs.services.len(), slices = inputs.endpoint_slices.len(), "manifests read");
                    lock(&store).replace_all(inputs);
                    wake.notify_one();
                    seen = Some(now);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read manifests; keeping the last ones");
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Each file under `path` (recursively) with its size and modification time, sorted.
fn fingerprint(path: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out = Vec::new();
    let mut todo = vec![path.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                todo.extend(entries.flatten().map(|e| e.path()));
            }
        } else {
            let modified = meta.modified().unwrap_or(UNIX_EPOCH);
            out.push((p, meta.len(), modified));
        }
    }
    out.sort();
    out
}
