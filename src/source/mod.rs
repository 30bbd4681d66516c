//! The outside world the proxy reads: Kubernetes objects (the API's watchers, or a directory of
//! YAML manifests) into one store, and this host's interface addresses.

#[cfg(feature = "daemon")]
mod decoded;
#[cfg(feature = "daemon")]
pub(crate) mod kube;
pub(crate) mod local_addrs;
pub mod manifests;
#[cfg(feature = "daemon")]
pub mod store;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;

/// The objects a build starts from.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub services: Vec<Service>,
    pub endpoint_slices: Vec<EndpointSlice>,
    /// The Node named like this host, when the manifests have one.
    pub node: Option<Node>,
    /// Every ServiceCIDR: the ClusterIP ranges whose unallocated addresses are dropped.
    pub(crate) service_cidrs: Vec<ServiceCIDR>,
}
