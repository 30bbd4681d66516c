//! kube-proxy's behaviour changes since the flow tables of `parity.rs` were read (Kubernetes
//! 1.35 and 1.36), each restated as a flow table from its pull request and sent as real
//! traffic in IPv4 and IPv6, as `parity.rs` does. docs/parity.md names the pull request and
//! release of each.
//!
//! The addresses follow upstream's conventions (see `parity.rs`): pods 10.0.0.0/8, ClusterIPs
//! 172.30.0.0/16, the node `test-node` at 192.168.0.2 (also holding 192.168.99.11).

use crate::flows;
use crate::parity::{INTERNAL_EXTERNAL_CLUSTER, internal_external_flows};

use flows::{Expect, Flow, FlowTable, NodeSettings, Written, check, reach, reach_masqueraded};

const POD: &str = "10.0.0.2";
const EXTERNAL_CLIENT: &str = "203.0.113.2";

/// Conditions of a pod stuck terminating whose address was already given to a new pod.
const GHOST: &str = "{ready: false, serving: false, terminating: true}";
const READY: &str = "{ready: true, serving: true, terminating: false}";

fn table(name: &str, manifests: String, flows: Vec<Flow>) -> FlowTable {
    FlowTable {
        name: name.into(),
        manifests,
        node: NodeSettings::default(),
        flows,
    }
}

/// kubernetes#134024 (1.35, backported to 1.34): with `--detect-local-mode
/// InterfaceNamePrefix` kube-proxy matched the interface with `iif`, which takes an existing
/// interface's index, so a wildcard name failed to load. Upstream's TestInternalExternalMasquerade
/// base table, with pods told apart by the veth they arrive on instead of by the cluster CIDR,
/// must give every flow the same outcome: a rule that never matched would masquerade pods, one
/// that always matched would spare external clients.
#[test]
fn interface_name_local_traffic_detection() {
    let tables = [FlowTable {
        name: "TestInternalExternalMasquerade/base, InterfaceNamePrefix".into(),
        manifests: INTERNAL_EXTERNAL_CLUSTER.into(),
        node: NodeSettings {
            detect_local_by_interface: true,
            ..NodeSettings::default()
        },
        flows: internal_external_flows(),
    }];
    check("ifn", Written::V4, &tables);
}

/// A Service whose endpoint address 10.180.0.1 is listed twice: by `ghost_slice` for a pod on
/// this node stuck terminating (neither ready nor serving) and by `new_slice` for the pod that
/// now has the address, on another node.
fn reused_address(policy: &str, ghost_slice: &str, new_slice: &str, same_slice: bool) -> String {
    let service = format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec:
  type: NodePort
  clusterIP: 172.30.0.41
  externalTrafficPolicy: {policy}
  ports: [{{name: p80, port: 80, nodePort: 3001, protocol: TCP}}]
"#
    );
    let ghost = format!(
        "{{addresses: [10.180.0.1], conditions: {GHOST}, nodeName: test-node, \
         targetRef: {{kind: Pod, namespace: ns1, name: old, uid: u-old}}}}"
    );
    let new = format!(
        "{{addresses: [10.180.0.1], conditions: {READY}, nodeName: other-node, \
         targetRef: {{kind: Pod, namespace: ns1, name: new, uid: u-new}}}}"
    );
    let slice = |name: &str, endpoints: &str| {
        format!(
            r#"---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}, namespace: ns1, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: IPv4
endpoints: [{endpoints}]
ports: [{{name: p80, port: 80, protocol: TCP}}]
"#
        )
    };
    if same_slice {
        format!(
            "{service}{}",
            slice(ghost_slice, &format!("{ghost}, {new}"))
        )
    } else {
        format!(
            "{service}{}{}",
            slice(ghost_slice, &ghost),
            slice(new_slice, &new)
        )
    }
}

/// kubernetes#135593 (1.36): a pod stuck terminating whose IP was reused by a new pod listed
/// the address twice, and kube-proxy could keep the ghost (the first listed, or the one on this
/// node), leaving the Service without endpoints. Now the endpoint that is not terminating wins
/// wherever each is listed, and the "prefer the local copy" rule is gone: with
/// externalTrafficPolicy Local the address is remote, so outside clients of the NodePort are
/// dropped while pods still reach it.
#[test]
fn pod_ip_reused_while_the_old_pod_terminates() {
    let cluster_policy_flows = || {
        vec![
            Flow::tcp(
                "pod to ClusterIP",
                POD,
                "172.30.0.41:80",
                reach(&["10.180.0.1:80"]),
            ),
            Flow::tcp(
                "external to NodePort",
                EXTERNAL_CLIENT,
                "192.168.0.2:3001",
                reach_masqueraded(&["10.180.0.1:80"]),
            ),
        ]
    };
    let local_policy_flows = vec![
        Flow::tcp(
            "pod to ClusterIP",
            POD,
            "172.30.0.41:80",
            reach(&["10.180.0.1:80"]),
        ),
        Flow::tcp(
            "pod to NodePort, short-circuited to the cluster's endpoints",
            POD,
            "192.168.0.2:3001",
            reach(&["10.180.0.1:80"]),
        ),
        Flow::tcp(
            "external to NodePort: the address is not local",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            Expect::Drop,
        ),
    ];
    let tables = [
        table(
            "reused address, one slice, the ghost listed first",
            reused_address("Cluster", "svc1-1", "", true),
            cluster_policy_flows(),
        ),
        table(
            "reused address, the ghost's slice sorting first",
            reused_address("Cluster", "svc1-a", "svc1-b", false),
            cluster_policy_flows(),
        ),
        table(
            "reused address, the ghost's slice sorting last",
            reused_address("Cluster", "svc1-b", "svc1-a", false),
            cluster_policy_flows(),
        ),
        table(
            "reused address, eTP Local, the ghost on this node",
            reused_address("Local", "svc1-a", "svc1-b", false),
            local_policy_flows,
        ),
    ];
    check("reu", Written::V4, &tables);
}

/// kubernetes#135800 and #136499 (1.36) moved kube-proxy's hairpin masquerading from each
/// endpoint's chain to one set of (endpoint, endpoint) pairs checked after routing. The
/// packet-visible rule is unchanged: an endpoint reaching itself through any of its Service's
/// addresses is masqueraded (so the reply comes back through the node), another pod is not.
#[test]
fn hairpin_through_every_frontend() {
    let manifests = r#"
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.41
  externalIPs: [192.168.99.11]
  externalTrafficPolicy: Local
  healthCheckNodePort: 30001
  ports:
  - {name: p80, port: 80, nodePort: 3001, protocol: TCP}
  - {name: u80, port: 80, nodePort: 3001, protocol: UDP}
status: {loadBalancer: {ingress: [{ip: 1.2.3.4}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-1, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.1], nodeName: test-node}]
ports: [{name: p80, port: 80, protocol: TCP}, {name: u80, port: 80, protocol: UDP}]
"#;
    const EP: &[&str] = &["10.180.0.1:80"];
    const ENDPOINT: &str = "10.180.0.1";
    // (the endpoint's flow, another pod's flow, the frontend)
    let frontends = [
        (
            "endpoint to itself via ClusterIP",
            "another pod via ClusterIP",
            "172.30.0.41:80",
        ),
        (
            "endpoint to itself via NodePort",
            "another pod via NodePort",
            "192.168.0.2:3001",
        ),
        (
            "endpoint to itself via LB IP",
            "another pod via LB IP",
            "1.2.3.4:80",
        ),
        (
            "endpoint to itself via external IP",
            "another pod via external IP",
            "192.168.99.11:80",
        ),
    ];
    let mut flows = Vec::new();
    for (hairpin, other, to) in frontends {
        flows.push(Flow::tcp(hairpin, ENDPOINT, to, reach_masqueraded(EP)));
        flows.push(Flow::tcp(other, POD, to, reach(EP)));
    }
    flows.push(Flow::udp(
        "endpoint to itself via ClusterIP, UDP",
        ENDPOINT,
        "172.30.0.41:80",
        reach_masqueraded(EP),
    ));
    check(
        "hrp",
        Written::V4,
        &[table(
            "hairpin through every frontend",
            manifests.into(),
            flows,
        )],
    );
}
