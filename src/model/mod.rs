//! The cluster as the proxy sees it: service ports, their endpoints and this node's facts,
//! converted from Kubernetes objects and validated.
