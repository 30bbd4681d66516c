//! Watching the Kubernetes API with kube-rs: Services and EndpointSlices with kube-proxy's label
//! selector, this node's Node by name, and every ServiceCIDR. Every event lands in the shared
//! `ClusterStore` and wakes the sync loop.
//!
//! Guarantees: a watch error (API down, 410 Expired, a dropped stream) is logged and retried
//! with backoff, never fatal, and never empties the store: a re-list replaces a kind's objects
//! only when it is complete (see `store`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;

use super::store::{Change, ClusterStore, DecodedService, DecodedSlice};

/// Label kube-proxy uses to leave a Service to another proxy.
pub(crate) const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// Label that marks a headless Service (and its slices).
pub(crate) const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

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
pub(crate) async fn client(kubeconfig: Option<&Path>) -> Result<Client, KubeSourceError> {
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
pub(crate) fn label_selector(service_proxy_name: Option<&str>) -> String {
    let proxy = match service_proxy_name {
        Some(name) => format!("{SERVICE_PROXY_NAME_LABEL}={name}"),
        None => format!("!{SERVICE_PROXY_NAME_LABEL}"),
    };
    format!("{proxy},!{HEADLESS_LABEL}")
}

/// Services and EndpointSlices asked for per list page. kube-rs asks for 500, which makes a
/// cluster of 30,000 Services 120 round trips before the first sync. A page is decoded whole,
/// so its size bounds what the list adds to the peak: at 5,000 Services × 50 endpoints a page
/// of 5,000 slices added 60 MiB more than a page of 1,000 (peak 235 against 176 MiB).
const OBJECT_LIST_PAGE_SIZE: u32 = 1000;

/// Runs the four watchers until the returned tasks are aborted.
pub(crate) fn spawn_watchers(
    client: Client,
    node_name: &str,
    service_proxy_name: Option<&str>,
    store: Arc<Mutex<ClusterStore>>,
    wake: Arc<Notify>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let labels = label_selector(service_proxy_name);
    let objects = watcher::Config::default()
        .labels(&labels)
        .page_size(OBJECT_LIST_PAGE_SIZE);
    let node = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    vec![
        // Both decoded straight into what the store keeps.
        tokio::spawn(watch(
            Api::<DecodedService>::all(client.clone()),
            objects.clone(),
            store.clone(),
            wake.clone(),
            ClusterStore::apply_decoded_service,
        )),
        tokio::spawn(watch(
            Api::<DecodedSlice>::all(client.clone()),
            objects,
            store.clone(),
            wake.clone(),
            ClusterStore::apply_decoded_slice,
        )),
        tokio::spawn(watch(
            Api::<Node>::all(client.clone()),
            node,
            store.clone(),
            wake.clone(),
            ClusterStore::apply_node,
        )),
        // All of them, as kube-proxy: together they are the cluster's ClusterIP ranges.
        tokio::spawn(watch(
            Api::<ServiceCIDR>::all(client),
            watcher::Config::default(),
            store,
            wake,
            ClusterStore::apply_service_cidr,
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
    // The lasting refusal last reported, so that it is not repeated at every retry.
    let mut refused = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                refused = None;
                if let watcher::Event::InitDone = event {
                    tracing::info!(%kind, "listed");
                }
                let change = apply(&mut store.lock().unwrap_or_else(|p| p.into_inner()), event);
                if change == Change::Changed {
                    wake.notify_one();
                }
            }
            // The watcher re-lists or resumes by itself; the store keeps the last good state.
            Err(e) => match lasting_refusal(&e) {
                Some(code) if refused == Some(code) => {
                    tracing::debug!(%kind, error = %e, "watch still refused; retrying")
                }
                Some(code) => {
                    refused = Some(code);
                    tracing::warn!(%kind, error = %e, "the API server does not serve this kind (ServiceCIDRs: before Kubernetes 1.33) or does not let us read it; retrying with backoff, logged again only once it answers otherwise");
                }
                None => {
                    refused = None;
                    tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff");
                }
            },
        }
    }
}

/// The HTTP code of a refusal that retrying will not change soon: 404 (the API server does not
/// serve the kind) or 403 (our role does not grant it).
fn lasting_refusal(e: &watcher::Error) -> Option<u16> {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return None,
    };
    matches!(code, 403 | 404).then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_not_found_and_forbidden_are_lasting_refusals() {
        use kube::core::Status;
        let api = |code| kube::Error::Api(Status::failure("no", "x").with_code(code).boxed());
        let list = |code| watcher::Error::InitialListFailed(api(code));
        assert_eq!(lasting_refusal(&list(404)), Some(404));
        assert_eq!(lasting_refusal(&list(403)), Some(403));
        assert_eq!(
            lasting_refusal(&watcher::Error::WatchStartFailed(api(404))),
            Some(404)
        );
        assert_eq!(
            lasting_refusal(&list(503)),
            None,
            "an outage is reported each time"
        );
        let expired =
            watcher::Error::WatchError(Status::failure("old", "Expired").with_code(410).boxed());
        assert_eq!(lasting_refusal(&expired), None);
    }

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
