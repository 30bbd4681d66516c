//! The outside world the proxy reads: Kubernetes objects (the API's watchers, or a directory of
//! YAML manifests) into one store, and this host's interface addresses.

#[cfg(feature = "daemon")]
pub mod kube;
pub mod local_addrs;
pub mod manifests;
#[cfg(feature = "daemon")]
pub mod store;
