//! The outside world the proxy reads: Kubernetes objects (a directory of YAML manifests) and
//! this host's interface addresses.

pub mod local_addrs;
pub mod manifests;
