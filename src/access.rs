//! The Kubernetes API access kubenft needs, in one place: the watchers use exactly these
//! resources and the deploy test checks that the shipped ClusterRole grants exactly this.

/// One RBAC grant: API group ("" is core), resource, verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

const READ: &[&str] = &["get", "list", "watch"];
/// What a watcher does: a list, then watches from its revision.
const WATCH: &[&str] = &["list", "watch"];
const RECORD: &[&str] = &["create", "patch"];

/// Everything the daemon reads or writes through the API server.
pub const API_ACCESS: &[Access] = &[
    // Service ports, ClusterIPs, NodePorts, LB ingress, policies.
    Access {
        group: "",
        resource: "services",
        verbs: READ,
    },
    // Only this node's object (field selector), for podCIDRs, addresses and zone labels.
    Access {
        group: "",
        resource: "nodes",
        verbs: READ,
    },
    // Endpoints of every Service.
    Access {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: READ,
    },
    // The cluster's ClusterIP ranges: unallocated addresses in them are dropped.
    Access {
        group: "networking.k8s.io",
        resource: "servicecidrs",
        verbs: WATCH,
    },
    // Events (events.k8s.io/v1 only): the start, skipped objects, syncs that keep failing.
    // Created once, then patched as their series grows.
    Access {
        group: "events.k8s.io",
        resource: "events",
        verbs: RECORD,
    },
];
