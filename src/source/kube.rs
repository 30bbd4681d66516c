//! Watching the Kubernetes API with kube-rs: Services and EndpointSlices with kube-proxy's label
//! selector, and this node's Node by name. Every event lands in the shared `ClusterStore` and
//! wakes the sync loop.
//!
//! Guarantees: a watch error (API down, 410 Expired, a dropped stream) is logged and retried
//! with backoff, never fatal, and never empties the store: a re-list replaces a kind's objects
//! only when it is complete (see `store`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;

use super::store::{Change, ClusterStore};

/// Label kube-proxy uses to leave a Service to another proxy.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// Label that marks a headless Service (and its slices).
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

#[derive(Debug, thiserror::Error)]
pub enum KubeSourceError {
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no --kubeconfig given and no in-cluster service account found")]
    InCluster(#[source] kube::config::InClusterError),
    #[error("building the API client")]
    Client(#[source] kube::Error),
}

/// The client: from `kubeconfig` when given, else the pod's in-cluster service account.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, KubeSourceError> {
    let config = match kubeconfig {
        Some(path) => {
            let err = |source| KubeSourceError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(err)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(err)?
        }
        None => kube::Config::incluster().map_err(KubeSourceError::InCluster)?,
    };
    Client::try_from(config).map_err(KubeSourceError::Client)
}

/// kube-proxy's label selector for Services and EndpointSlices: not headless, and not claimed
/// by another proxy (or, with a proxy name, claimed by this one).
pub fn label_selector(service_proxy_name: Option<&str>) -> String {
    let proxy = match service_proxy_name {
        Some(name) => format!("{SERVICE_PROXY_NAME_LABEL}={name}"),
        None => format!("!{SERVICE_PROXY_NAME_LABEL}"),
    };
    format!("{proxy},!{HEADLESS_LABEL}")
}

/// Runs the three watchers until the returned tasks are aborted.
pub fn spawn_watchers(
    client: Client,
    node_name: &str,
    service_proxy_name: Option<&str>,
    store: Arc<Mutex<ClusterStore>>,
    wake: Arc<Notify>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let labels = label_selector(service_proxy_name);
    let objects = watcher::Config::default().labels(&labels);
    let node = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    vec![
        tokio::spawn(watch(
            Api::<Service>::all(client.clone()),
            objects.clone(),
            store.clone(),
            wake.clone(),
            ClusterStore::apply_service,
        )),
        tokio::spawn(watch(
            Api::<EndpointSlice>::all(client.clone()),
            objects,
            store.clone(),
            wake.clone(),
            ClusterStore::apply_endpoint_slice,
        )),
        tokio::spawn(watch(
            Api::<Node>::all(client),
            node,
            store,
            wake,
            ClusterStore::apply_node,
        )),
    ]
}

async fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    store: Arc<Mutex<ClusterStore>>,
    wake: Arc<Notify>,
    apply: fn(&mut ClusterStore, watcher::Event<K>) -> Change,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let kind = K::kind(&());
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                if let watcher::Event::InitDone = event {
                    tracing::info!(%kind, "listed");
                }
                let change = apply(&mut store.lock().unwrap_or_else(|p| p.into_inner()), event);
                if change == Change::Changed {
                    wake.notify_one();
                }
            }
            // The watcher re-lists or resumes by itself; the store keeps the last good state.
            Err(e) => tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_kube_proxys() {
        assert_eq!(
            label_selector(None),
            "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
        );
        assert_eq!(
            label_selector(Some("kubenft")),
            "service.kubernetes.io/service-proxy-name=kubenft,!service.kubernetes.io/headless"
        );
    }
}
