//! kube-proxy's own packet-flow tables (kubernetes/kubernetes `pkg/proxy/nftables/
//! proxier_test.go`), restated as data and sent as real traffic through kubenft's tables, in
//! IPv4 and IPv6. One test per upstream test function; docs/parity.md maps every upstream test
//! to its port here or says why it has none.
//!
//! Upstream's conventions, kept: pods 10.0.0.0/8, ClusterIPs 172.30.0.0/16, the node
//! `test-node` at 192.168.0.2 (also holding 192.168.1.2 and 192.168.99.11), load-balancer IPs
//! 1.2.3.4, 5.6.7.8 and 9.10.11.12, external clients 203.0.113.2 (inside the source ranges
//! 203.0.113.0/25) and 203.0.113.130 (outside). Endpoints without a `nodeName` or on another
//! node are remote.

use crate::flows;

use flows::{Expect, Flow, FlowTable, NodeSettings, Written, check, reach, reach_masqueraded};

const POD: &str = "10.0.0.2";
const NODE_IP: &str = "192.168.0.2";
const EXTERNAL_CLIENT: &str = "203.0.113.2";
const BLOCKED_CLIENT: &str = "203.0.113.130";

fn table(name: &str, manifests: &str, flows: Vec<Flow>) -> FlowTable {
    FlowTable {
        name: name.into(),
        manifests: manifests.into(),
        node: NodeSettings::default(),
        flows,
    }
}

/// Services with no endpoints reject connections to every address they are reached at.
#[test]
fn no_endpoints_reject() {
    let cluster = r#"
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.41
  externalIPs: [192.168.99.11]
  ports: [{name: p80, port: 80, nodePort: 3001, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 1.2.3.4}]}}
"#;
    let flows = vec![
        Flow::tcp(
            "pod to cluster IP with no endpoints",
            POD,
            "172.30.0.41:80",
            Expect::Reject,
        ),
        Flow::tcp(
            "external to external IP with no endpoints",
            EXTERNAL_CLIENT,
            "192.168.99.11:80",
            Expect::Reject,
        ),
        Flow::tcp(
            "pod to NodePort with no endpoints",
            POD,
            "192.168.0.2:3001",
            Expect::Reject,
        ),
        Flow::tcp(
            "external to NodePort with no endpoints",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            Expect::Reject,
        ),
        Flow::tcp(
            "pod to LoadBalancer IP with no endpoints",
            POD,
            "1.2.3.4:80",
            Expect::Reject,
        ),
        Flow::tcp(
            "external to LoadBalancer IP with no endpoints",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            Expect::Reject,
        ),
    ];
    check(
        "ner",
        Written::V4,
        &[table("TestNoEndpointsReject", cluster, flows)],
    );
}

/// ClusterIPs: one and several endpoints, hairpin, target ports, one port number in TCP, UDP
/// and SCTP, ports a ClusterIP does not serve, and unallocated addresses of the range.
#[test]
fn cluster_ip_general() {
    let cluster = r#"
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  clusterIP: 172.30.0.41
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: svc2, namespace: ns2}
spec:
  clusterIP: 172.30.0.42
  ports:
  - {name: http, port: 80, protocol: TCP}
  - {name: https, port: 443, targetPort: 8443, protocol: TCP}
  - {name: dns-udp, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 5353, protocol: TCP}
  - {name: dns-sctp, port: 53, protocol: SCTP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-1, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.1], nodeName: test-node}]
ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc2-1, namespace: ns2, labels: {kubernetes.io/service-name: svc2}}
addressType: IPv4
endpoints:
- {addresses: [10.180.0.1], nodeName: test-node}
- {addresses: [10.180.2.1], nodeName: node2}
ports:
- {name: http, port: 80, protocol: TCP}
- {name: https, port: 8443, protocol: TCP}
- {name: dns-udp, port: 53, protocol: UDP}
- {name: dns-tcp, port: 5353, protocol: TCP}
- {name: dns-sctp, port: 53, protocol: SCTP}
"#;
    const SVC2_HTTP: &[&str] = &["10.180.0.1:80", "10.180.2.1:80"];
    let flows = vec![
        Flow::tcp(
            "simple clusterIP",
            "10.180.0.2",
            "172.30.0.41:80",
            reach(&["10.180.0.1:80"]),
        ),
        Flow::tcp(
            "hairpin to cluster IP",
            "10.180.0.1",
            "172.30.0.41:80",
            reach_masqueraded(&["10.180.0.1:80"]),
        ),
        Flow::tcp(
            "clusterIP with multiple endpoints",
            "10.180.0.2",
            "172.30.0.42:80",
            reach(SVC2_HTTP),
        ),
        Flow::tcp(
            "clusterIP with TargetPort",
            "10.180.0.2",
            "172.30.0.42:443",
            reach(&["10.180.0.1:8443", "10.180.2.1:8443"]),
        ),
        Flow::tcp(
            "clusterIP with TCP, UDP, and SCTP on same port (TCP)",
            "10.180.0.2",
            "172.30.0.42:53",
            reach(&["10.180.0.1:5353", "10.180.2.1:5353"]),
        ),
        Flow::udp(
            "clusterIP with TCP, UDP, and SCTP on same port (UDP)",
            "10.180.0.2",
            "172.30.0.42:53",
            reach(&["10.180.0.1:53", "10.180.2.1:53"]),
        ),
        Flow::sctp(
            "clusterIP with TCP, UDP, and SCTP on same port (SCTP)",
            "10.180.0.2",
            "172.30.0.42:53",
            reach(&["10.180.0.1:53", "10.180.2.1:53"]),
        ),
        Flow::udp(
            "TCP-only port does not match UDP traffic",
            "10.180.0.2",
            "172.30.0.42:80",
            Expect::Reject,
        ),
        Flow::tcp(
            "svc1 does not accept svc2's ports",
            "10.180.0.2",
            "172.30.0.41:443",
            Expect::Reject,
        ),
        Flow::tcp(
            "packet to unallocated cluster ip",
            "10.180.0.2",
            "172.30.0.50:80",
            Expect::Drop,
        ),
    ];
    check(
        "cig",
        Written::V4,
        &[table("TestClusterIPGeneral", cluster, flows)],
    );
}

/// LoadBalancer IPs with source ranges: listed sources (and the node, and the LB IP itself
/// for a node whose connection something SNATs to it) get in, others are dropped; NodePorts
/// ignore the ranges.
#[test]
fn load_balancer() {
    let cluster = r#"
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.41
  ports: [{name: p80, port: 80, nodePort: 3001, protocol: TCP}]
  loadBalancerSourceRanges: [192.168.0.0/24, " 203.0.113.0/25"]
status: {loadBalancer: {ingress: [{ip: 1.2.3.4}, {ip: 5.6.7.8}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-1, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.1]}]
ports: [{name: p80, port: 80, protocol: TCP}]
"#;
    const EP: &[&str] = &["10.180.0.1:80"];
    let flows = vec![
        Flow::tcp("pod to cluster IP", POD, "172.30.0.41:80", reach(EP)),
        Flow::tcp(
            "external to nodePort",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "nodePort bypasses LoadBalancerSourceRanges",
            BLOCKED_CLIENT,
            "192.168.0.2:3001",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "accepted external to LB1",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "accepted external to LB2",
            EXTERNAL_CLIENT,
            "5.6.7.8:80",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "blocked external to LB1",
            BLOCKED_CLIENT,
            "1.2.3.4:80",
            Expect::Drop,
        ),
        Flow::tcp(
            "blocked external to LB2",
            BLOCKED_CLIENT,
            "5.6.7.8:80",
            Expect::Drop,
        ),
        Flow::tcp(
            "pod to LB1 (blocked by LoadBalancerSourceRanges)",
            POD,
            "1.2.3.4:80",
            Expect::Drop,
        ),
        Flow::tcp(
            "pod to LB2 (blocked by LoadBalancerSourceRanges)",
            POD,
            "5.6.7.8:80",
            Expect::Drop,
        ),
        Flow::tcp(
            "node to LB1 (allowed by LoadBalancerSourceRanges)",
            NODE_IP,
            "1.2.3.4:80",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "node to LB2 (allowed by LoadBalancerSourceRanges)",
            NODE_IP,
            "5.6.7.8:80",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "same node to LB1, SNATted to LB1 (implicitly allowed)",
            "1.2.3.4",
            "1.2.3.4:80",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "same node to LB2, SNATted to LB2 (implicitly allowed)",
            "5.6.7.8",
            "5.6.7.8:80",
            reach_masqueraded(EP),
        ),
    ];
    check(
        "lb",
        Written::V4,
        &[table("TestLoadBalancer", cluster, flows)],
    );
}

/// NodePorts on the primary node IP, and on every node address inside
/// `--nodeport-addresses`; upstream writes its IPv4 and IPv6 variants out, so each runs in its
/// own family only.
#[test]
fn node_ports() {
    let cluster = |svc_ip: &str, family: &str, ep1: &str, ep2: &str| {
        format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec:
  type: NodePort
  clusterIP: "{svc_ip}"
  ports: [{{name: p80, port: 80, nodePort: 3001, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc1-1, namespace: ns1, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: {family}
endpoints: [{{addresses: ["{ep1}"]}}, {{addresses: ["{ep2}"], nodeName: test-node}}]
ports: [{{name: p80, port: 80, protocol: TCP}}]
"#
        )
    };
    const V4_BOTH: &[&str] = &["10.180.0.1:80", "10.180.2.1:80"];
    const V6_BOTH: &[&str] = &["[fd00:10:180::1]:80", "[fd00:10:180::2:1]:80"];
    let v4 = cluster("172.30.0.41", "IPv4", "10.180.0.1", "10.180.2.1");
    let v6 = cluster(
        "fd00:172:30::41",
        "IPv6",
        "fd00:10:180::1",
        "fd00:10:180::2:1",
    );
    let v4_flows = |secondary: Flow| {
        vec![
            Flow::tcp("pod to cluster IP", POD, "172.30.0.41:80", reach(V4_BOTH)),
            Flow::tcp(
                "external to nodePort",
                EXTERNAL_CLIENT,
                "192.168.0.2:3001",
                reach_masqueraded(V4_BOTH),
            ),
            Flow::tcp(
                "node to nodePort",
                NODE_IP,
                "192.168.0.2:3001",
                reach_masqueraded(V4_BOTH),
            ),
            secondary,
        ]
    };
    let v6_flows = |secondary: Flow| {
        vec![
            Flow::tcp(
                "pod to cluster IP",
                "fd00:10::2",
                "[fd00:172:30::41]:80",
                reach(V6_BOTH),
            ),
            Flow::tcp(
                "external to nodePort",
                "2600:5200::1",
                "[2001:db8::1]:3001",
                reach_masqueraded(V6_BOTH),
            ),
            Flow::tcp(
                "node to nodePort",
                "2001:db8::1",
                "[2001:db8::1]:3001",
                reach_masqueraded(V6_BOTH),
            ),
            secondary,
        ]
    };
    let with_addresses = |mut t: FlowTable, cidrs: &[&'static str]| {
        t.node.nodeport_addresses = Some(cidrs.to_vec());
        t
    };
    let v4_tables = [
        table(
            "TestNodePorts/ipv4",
            &v4,
            v4_flows(Flow::tcp(
                "secondary nodeIP ignores NodePorts",
                EXTERNAL_CLIENT,
                "192.168.1.2:3001",
                Expect::NotProxied,
            )),
        ),
        with_addresses(
            table(
                "TestNodePorts/ipv4, multiple nodeport-addresses",
                &v4,
                v4_flows(Flow::tcp(
                    "external to nodePort on secondary IP",
                    EXTERNAL_CLIENT,
                    "192.168.1.2:3001",
                    reach_masqueraded(V4_BOTH),
                )),
            ),
            &["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"],
        ),
    ];
    let v6_tables = [
        table(
            "TestNodePorts/ipv6",
            &v6,
            v6_flows(Flow::tcp(
                "secondary nodeIP ignores NodePorts",
                "2600:5200::1",
                "[2001:db8:1::2]:3001",
                Expect::NotProxied,
            )),
        ),
        with_addresses(
            table(
                "TestNodePorts/ipv6, multiple nodeport-addresses",
                &v6,
                v6_flows(Flow::tcp(
                    "external to nodePort on secondary IP",
                    "2600:5200::1",
                    "[2001:db8:1::2]:3001",
                    reach_masqueraded(V6_BOTH),
                )),
            ),
            &[
                "192.168.0.0/24",
                "192.168.1.0/24",
                "2001:db8::/64",
                "2001:db8:1::2/128",
            ],
        ),
    ];
    std::thread::scope(|s| {
        let v4 = s.spawn(|| check("np4", Written::V4Only, &v4_tables));
        check("np6", Written::V6, &v6_tables);
        v4.join().unwrap();
    });
}

/// A LoadBalancer Service with an external IP (a node address in upstream's tests), a
/// NodePort and two endpoints, the second on this node, under `policy`.
fn external_policy_cluster(policy: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec:
  type: LoadBalancer
  externalTrafficPolicy: {policy}
  clusterIP: 172.30.0.41
  externalIPs: [192.168.99.11]
  healthCheckNodePort: 30000
  ports: [{{name: p80, port: 80, targetPort: 80, nodePort: 3001, protocol: TCP}}]
status: {{loadBalancer: {{ingress: [{{ip: 1.2.3.4}}]}}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc1-1, namespace: ns1, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: IPv4
endpoints: [{{addresses: [10.180.0.1]}}, {{addresses: [10.180.2.1], nodeName: test-node}}]
ports: [{{name: p80, port: 80, protocol: TCP}}]
"#
    )
}

const BOTH: &[&str] = &["10.180.0.1:80", "10.180.2.1:80"];

/// externalTrafficPolicy Local: traffic from outside reaches only the local endpoint and keeps
/// its source; pods reach every endpoint through any of the service's addresses.
#[test]
fn external_traffic_policy_local() {
    const LOCAL: &[&str] = &["10.180.2.1:80"];
    let flows = vec![
        Flow::tcp(
            "pod to cluster IP hits both endpoints, unmasqueraded",
            POD,
            "172.30.0.41:80",
            reach(BOTH),
        ),
        Flow::tcp(
            "pod to external IP hits both endpoints, unmasqueraded",
            POD,
            "192.168.99.11:80",
            reach(BOTH),
        ),
        Flow::tcp(
            "external to external IP hits only local endpoint, unmasqueraded",
            EXTERNAL_CLIENT,
            "192.168.99.11:80",
            reach(LOCAL),
        ),
        Flow::tcp(
            "pod to LB IP hits only both endpoints, unmasqueraded",
            POD,
            "1.2.3.4:80",
            reach(BOTH),
        ),
        Flow::tcp(
            "external to LB IP hits only local endpoint, unmasqueraded",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            reach(LOCAL),
        ),
        Flow::tcp(
            "pod to NodePort hits both endpoints, unmasqueraded",
            POD,
            "192.168.0.2:3001",
            reach(BOTH),
        ),
        Flow::tcp(
            "external to NodePort hits only local endpoint, unmasqueraded",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            reach(LOCAL),
        ),
    ];
    let cluster = external_policy_cluster("Local");
    check(
        "etpl",
        Written::V4,
        &[table("TestExternalTrafficPolicyLocal", &cluster, flows)],
    );
}

/// externalTrafficPolicy Local on a node without a local endpoint while other nodes have
/// some: pods and the node itself still reach every endpoint through the service's external
/// addresses (the node masqueraded), and only traffic from outside is dropped.
#[test]
fn external_traffic_policy_local_without_local_endpoints() {
    let remote_only =
        external_policy_cluster("Local").replace("nodeName: test-node", "nodeName: host-2");
    let flows = vec![
        Flow::tcp(
            "pod to cluster IP hits both endpoints, unmasqueraded",
            POD,
            "172.30.0.41:80",
            reach(BOTH),
        ),
        Flow::tcp(
            "pod to NodePort hits both endpoints, unmasqueraded",
            POD,
            "192.168.0.2:3001",
            reach(BOTH),
        ),
        Flow::tcp(
            "pod to LB IP hits both endpoints, unmasqueraded",
            POD,
            "1.2.3.4:80",
            reach(BOTH),
        ),
        Flow::tcp(
            "pod to external IP hits both endpoints, unmasqueraded",
            POD,
            "192.168.99.11:80",
            reach(BOTH),
        ),
        Flow::tcp(
            "node to NodePort hits both endpoints, masqueraded",
            NODE_IP,
            "192.168.0.2:3001",
            reach_masqueraded(BOTH),
        ),
        Flow::tcp(
            "node to LB IP hits both endpoints, masqueraded",
            NODE_IP,
            "1.2.3.4:80",
            reach_masqueraded(BOTH),
        ),
        Flow::tcp(
            "external to NodePort finds no local endpoint, dropped",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            Expect::Drop,
        ),
        Flow::tcp(
            "external to LB IP finds no local endpoint, dropped",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            Expect::Drop,
        ),
        Flow::tcp(
            "external to external IP finds no local endpoint, dropped",
            EXTERNAL_CLIENT,
            "192.168.99.11:80",
            Expect::Drop,
        ),
    ];
    check(
        "etpn",
        Written::V4,
        &[table(
            "ExternalTrafficPolicyLocalWithoutLocalEndpoints",
            &remote_only,
            flows,
        )],
    );
}

/// externalTrafficPolicy Cluster: traffic to the service's external addresses is masqueraded
/// and reaches every endpoint, whoever sends it.
#[test]
fn external_traffic_policy_cluster() {
    let flows = vec![
        Flow::tcp(
            "pod to cluster IP hits both endpoints, unmasqueraded",
            POD,
            "172.30.0.41:80",
            reach(BOTH),
        ),
        Flow::tcp(
            "pod to external IP hits both endpoints, masqueraded",
            POD,
            "192.168.99.11:80",
            reach_masqueraded(BOTH),
        ),
        Flow::tcp(
            "external to external IP hits both endpoints, masqueraded",
            EXTERNAL_CLIENT,
            "192.168.99.11:80",
            reach_masqueraded(BOTH),
        ),
        Flow::tcp(
            "pod to LB IP hits both endpoints, masqueraded",
            POD,
            "1.2.3.4:80",
            reach_masqueraded(BOTH),
        ),
        Flow::tcp(
            "external to LB IP hits both endpoints, masqueraded",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            reach_masqueraded(BOTH),
        ),
        Flow::tcp(
            "pod to NodePort hits both endpoints, masqueraded",
            POD,
            "192.168.0.2:3001",
            reach_masqueraded(BOTH),
        ),
        Flow::tcp(
            "external to NodePort hits both endpoints, masqueraded",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            reach_masqueraded(BOTH),
        ),
    ];
    let cluster = external_policy_cluster("Cluster");
    check(
        "etpc",
        Written::V4,
        &[table("TestExternalTrafficPolicyCluster", &cluster, flows)],
    );
}

/// An endpoint: address, node name, and conditions in YAML flow style ("" for none).
type Endpoint<'a> = (&'a str, &'a str, &'a str);

/// An EndpointSlice of ns1/svc1 with one unnamed TCP port 80 and these endpoints.
fn slice(endpoints: &[Endpoint]) -> String {
    let eps: Vec<String> = endpoints
        .iter()
        .map(|(ip, node, conditions)| {
            let conditions = if conditions.is_empty() {
                String::new()
            } else {
                format!(", conditions: {conditions}")
            };
            format!("- {{addresses: [{ip}], nodeName: {node}{conditions}}}")
        })
        .collect();
    format!(
        r#"
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc1-1, namespace: ns1, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: IPv4
ports: [{{name: "", port: 80, protocol: TCP}}]
endpoints:
{}
"#,
        eps.join("\n")
    )
}

const READY: &str = "{ready: true}";

/// internalTrafficPolicy of a ClusterIP service: Local uses only this node's endpoints, and
/// drops traffic when there are none here; with no endpoints at all it rejects.
#[test]
fn internal_traffic_policy() {
    let service = |policy: &str| {
        format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec:
  clusterIP: 172.30.1.1
  selector: {{foo: bar}}
  internalTrafficPolicy: {policy}
  ports: [{{name: "", port: 80, protocol: TCP}}]
"#
        )
    };
    let to_service = |name: &'static str, expect| Flow::tcp(name, POD, "172.30.1.1:80", expect);
    let cases = [
        (
            "internalTrafficPolicy is cluster",
            "Cluster",
            [
                ("10.0.1.1", "test-node"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            to_service(
                "pod to ClusterIP hits all endpoints",
                reach(&["10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80"]),
            ),
        ),
        (
            "internalTrafficPolicy is local and there is one local endpoint",
            "Local",
            [
                ("10.0.1.1", "test-node"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            to_service(
                "pod to ClusterIP hits only local endpoint",
                reach(&["10.0.1.1:80"]),
            ),
        ),
        (
            "internalTrafficPolicy is local and there are multiple local endpoints",
            "Local",
            [
                ("10.0.1.1", "test-node"),
                ("10.0.1.2", "test-node"),
                ("10.0.1.3", "node2"),
            ],
            to_service(
                "pod to ClusterIP hits all local endpoints",
                reach(&["10.0.1.1:80", "10.0.1.2:80"]),
            ),
        ),
        (
            "internalTrafficPolicy is local and there are no local endpoints",
            "Local",
            [
                ("10.0.1.1", "node0"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            to_service("no endpoints", Expect::Drop),
        ),
    ];
    let mut tables = Vec::new();
    for (name, policy, endpoints, flow) in cases {
        let eps: Vec<_> = endpoints
            .iter()
            .map(|(ip, node)| (*ip, *node, READY))
            .collect();
        let with = format!("{}{}", service(policy), slice(&eps));
        tables.push(table(
            &format!("TestInternalTrafficPolicy/{name}"),
            &with,
            vec![flow],
        ));
        tables.push(table(
            &format!("TestInternalTrafficPolicy/{name}, endpoints deleted"),
            &service(policy),
            vec![to_service("endpoints deleted", Expect::Reject)],
        ));
    }
    check("itp", Written::V4, &tables);
}

/// A LoadBalancer Service (no NodePort) at 172.30.1.1 and 1.2.3.4 under `policy`.
fn terminating_service(policy: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec:
  type: LoadBalancer
  externalTrafficPolicy: {policy}
  clusterIP: 172.30.1.1
  healthCheckNodePort: 30000
  ports: [{{name: "", port: 80, targetPort: 80, protocol: TCP}}]
status: {{loadBalancer: {{ingress: [{{ip: 1.2.3.4}}]}}}}
"#
    )
}

const TERMINATING: &str = "{ready: false, serving: true, terminating: true}";
const GONE: &str = "{ready: false, serving: false, terminating: true}";
const SERVING: &str = "{ready: true, serving: true, terminating: false}";

/// The terminating-endpoint tables: each case, then the same service with its slice deleted
/// (which rejects from inside and outside).
fn terminating_tables(
    test: &str,
    policy: &str,
    cases: Vec<(&str, Vec<Endpoint>, Vec<Flow>)>,
) -> Vec<FlowTable> {
    let mut tables = Vec::new();
    for (name, endpoints, flows) in cases {
        let with = format!("{}{}", terminating_service(policy), slice(&endpoints));
        tables.push(table(&format!("{test}/{name}"), &with, flows));
        tables.push(table(
            &format!("{test}/{name}, endpoints deleted"),
            &terminating_service(policy),
            vec![
                Flow::tcp(
                    "pod to clusterIP after endpoints deleted",
                    POD,
                    "172.30.1.1:80",
                    Expect::Reject,
                ),
                Flow::tcp(
                    "external to LB after endpoints deleted",
                    EXTERNAL_CLIENT,
                    "1.2.3.4:80",
                    Expect::Reject,
                ),
            ],
        ));
    }
    tables
}

/// externalTrafficPolicy Local with terminating endpoints: ready endpoints win; without any,
/// serving terminating ones are used, chosen separately for the cluster-wide and the local set.
#[test]
fn terminating_endpoints_traffic_policy_local() {
    let pod = |eps| Flow::tcp("pod to clusterIP", POD, "172.30.1.1:80", eps);
    let ext = |name, eps| Flow::tcp(name, EXTERNAL_CLIENT, "1.2.3.4:80", eps);
    let cases = vec![
        (
            "ready endpoints exist",
            vec![
                ("10.0.1.1", "test-node", SERVING),
                ("10.0.1.2", "test-node", SERVING),
                ("10.0.1.3", "test-node", TERMINATING),
                ("10.0.1.4", "test-node", GONE),
                ("10.0.1.5", "node-1", SERVING),
            ],
            vec![
                pod(reach(&["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"])),
                ext("external to LB", reach(&["10.0.1.1:80", "10.0.1.2:80"])),
            ],
        ),
        (
            "only terminating endpoints exist",
            vec![
                ("10.0.1.2", "test-node", TERMINATING),
                ("10.0.1.3", "test-node", TERMINATING),
                ("10.0.1.4", "test-node", GONE),
                ("10.0.1.5", "node-1", SERVING),
            ],
            vec![
                pod(reach(&["10.0.1.5:80"])),
                ext("external to LB", reach(&["10.0.1.2:80", "10.0.1.3:80"])),
            ],
        ),
        (
            "terminating endpoints on remote node",
            vec![("10.0.1.5", "node-1", TERMINATING)],
            vec![
                pod(reach(&["10.0.1.5:80"])),
                ext("external to LB, no locally-usable endpoints", Expect::Drop),
            ],
        ),
        (
            "no usable endpoints on any node",
            vec![
                ("10.0.1.5", "test-node", GONE),
                ("10.0.1.5", "node-1", GONE),
            ],
            vec![
                Flow::tcp(
                    "pod to clusterIP, no usable endpoints",
                    POD,
                    "172.30.1.1:80",
                    Expect::Reject,
                ),
                ext("external to LB, no usable endpoints", Expect::Reject),
            ],
        ),
    ];
    let tables = terminating_tables("TestTerminatingEndpointsTrafficPolicyLocal", "Local", cases);
    check("tel", Written::V4, &tables);
}

/// externalTrafficPolicy Cluster with terminating endpoints: the same choice over all nodes,
/// for internal and (masqueraded) external traffic alike.
#[test]
fn terminating_endpoints_traffic_policy_cluster() {
    let pod = |eps| Flow::tcp("pod to clusterIP", POD, "172.30.1.1:80", eps);
    let ext = |eps| Flow::tcp("external to LB", EXTERNAL_CLIENT, "1.2.3.4:80", eps);
    let cases = vec![
        (
            "ready endpoints exist",
            vec![
                ("10.0.1.1", "test-node", SERVING),
                ("10.0.1.2", "test-node", SERVING),
                ("10.0.1.3", "another-node", TERMINATING),
                ("10.0.1.4", "another-node", GONE),
                ("10.0.1.5", "another-node", SERVING),
            ],
            vec![
                pod(reach(&["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"])),
                ext(reach_masqueraded(&[
                    "10.0.1.1:80",
                    "10.0.1.2:80",
                    "10.0.1.5:80",
                ])),
            ],
        ),
        (
            "only terminating endpoints exist",
            vec![
                ("10.0.1.2", "test-node", TERMINATING),
                ("10.0.1.3", "test-node", TERMINATING),
                ("10.0.1.4", "another-node", GONE),
                ("10.0.1.5", "another-node", TERMINATING),
            ],
            vec![
                pod(reach(&["10.0.1.2:80", "10.0.1.3:80", "10.0.1.5:80"])),
                ext(reach_masqueraded(&[
                    "10.0.1.2:80",
                    "10.0.1.3:80",
                    "10.0.1.5:80",
                ])),
            ],
        ),
        (
            "terminating endpoints on remote node",
            vec![("10.0.1.5", "node-1", TERMINATING)],
            vec![
                pod(reach(&["10.0.1.5:80"])),
                ext(reach_masqueraded(&["10.0.1.5:80"])),
            ],
        ),
        (
            "no usable endpoints on any node",
            vec![
                ("10.0.1.5", "test-node", GONE),
                ("10.0.1.5", "node-1", GONE),
            ],
            vec![pod(Expect::Reject), ext(Expect::Reject)],
        ),
    ];
    let tables = terminating_tables(
        "TestTerminatingEndpointsTrafficPolicyCluster",
        "Cluster",
        cases,
    );
    check("tec", Written::V4, &tables);
}

/// Three LoadBalancer Services, each with an endpoint here and one elsewhere: svc1 plain, svc2
/// with externalTrafficPolicy Local, svc3 with internalTrafficPolicy Local.
pub(crate) const INTERNAL_EXTERNAL_CLUSTER: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.41
  healthCheckNodePort: 30001
  ports: [{name: p80, port: 80, nodePort: 3001, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 1.2.3.4}]}}
---
apiVersion: v1
kind: Service
metadata: {name: svc2, namespace: ns2}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.42
  externalTrafficPolicy: Local
  healthCheckNodePort: 30002
  ports: [{name: p80, port: 80, nodePort: 3002, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 5.6.7.8}]}}
---
apiVersion: v1
kind: Service
metadata: {name: svc3, namespace: ns3}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.43
  internalTrafficPolicy: Local
  healthCheckNodePort: 30003
  ports: [{name: p80, port: 80, nodePort: 3003, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 9.10.11.12}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-1, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.1], nodeName: test-node}, {addresses: [10.180.1.1], nodeName: remote}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc2-1, namespace: ns2, labels: {kubernetes.io/service-name: svc2}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.2], nodeName: test-node}, {addresses: [10.180.1.2], nodeName: remote}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc3-1, namespace: ns3, labels: {kubernetes.io/service-name: svc3}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.3], nodeName: test-node}, {addresses: [10.180.1.3], nodeName: remote}]
ports: [{name: p80, port: 80, protocol: TCP}]
"#;

/// The flows of every variant, for a node with a working local detector and no
/// `--masquerade-all`.
pub(crate) fn internal_external_flows() -> Vec<Flow> {
    const SVC1: &[&str] = &["10.180.0.1:80", "10.180.1.1:80"];
    const SVC2: &[&str] = &["10.180.0.2:80", "10.180.1.2:80"];
    const SVC2_LOCAL: &[&str] = &["10.180.0.2:80"];
    const SVC3: &[&str] = &["10.180.0.3:80", "10.180.1.3:80"];
    const SVC3_LOCAL: &[&str] = &["10.180.0.3:80"];
    let t = Flow::tcp;
    vec![
        t("pod to ClusterIP", POD, "172.30.0.41:80", reach(SVC1)),
        t(
            "pod to NodePort",
            POD,
            "192.168.0.2:3001",
            reach_masqueraded(SVC1),
        ),
        t("pod to LB", POD, "1.2.3.4:80", reach_masqueraded(SVC1)),
        t(
            "node to ClusterIP",
            NODE_IP,
            "172.30.0.41:80",
            reach_masqueraded(SVC1),
        ),
        t(
            "node to NodePort",
            NODE_IP,
            "192.168.0.2:3001",
            reach_masqueraded(SVC1),
        ),
        t("node to LB", NODE_IP, "1.2.3.4:80", reach_masqueraded(SVC1)),
        t(
            "external to ClusterIP",
            EXTERNAL_CLIENT,
            "172.30.0.41:80",
            reach_masqueraded(SVC1),
        ),
        t(
            "external to NodePort",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            reach_masqueraded(SVC1),
        ),
        t(
            "external to LB",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            reach_masqueraded(SVC1),
        ),
        // externalTrafficPolicy does not apply to ClusterIP traffic.
        t(
            "pod to ClusterIP with eTP:Local",
            POD,
            "172.30.0.42:80",
            reach(SVC2),
        ),
        // Pod traffic to the external addresses is short-circuited to all endpoints, as if it
        // had come back from the load balancer, without masquerading.
        t(
            "pod to NodePort with eTP:Local",
            POD,
            "192.168.0.2:3002",
            reach(SVC2),
        ),
        t("pod to LB with eTP:Local", POD, "5.6.7.8:80", reach(SVC2)),
        t(
            "node to ClusterIP with eTP:Local",
            NODE_IP,
            "172.30.0.42:80",
            reach_masqueraded(SVC2),
        ),
        // Upstream's case targets svc1's NodePort (3001), not svc2's: kept as written.
        t(
            "node to NodePort with eTP:Local",
            NODE_IP,
            "192.168.0.2:3001",
            reach_masqueraded(SVC1),
        ),
        // Host traffic is short-circuited too, and masqueraded.
        t(
            "node to LB with eTP:Local",
            NODE_IP,
            "5.6.7.8:80",
            reach_masqueraded(SVC2),
        ),
        t(
            "external to ClusterIP with eTP:Local",
            EXTERNAL_CLIENT,
            "172.30.0.42:80",
            reach_masqueraded(SVC2),
        ),
        t(
            "external to NodePort with eTP:Local",
            EXTERNAL_CLIENT,
            "192.168.0.2:3002",
            reach(SVC2_LOCAL),
        ),
        t(
            "external to LB with eTP:Local",
            EXTERNAL_CLIENT,
            "5.6.7.8:80",
            reach(SVC2_LOCAL),
        ),
        // internalTrafficPolicy applies to ClusterIP traffic only, and never to masquerading.
        t(
            "pod to ClusterIP with iTP:Local",
            POD,
            "172.30.0.43:80",
            reach(SVC3_LOCAL),
        ),
        t(
            "pod to NodePort with iTP:Local",
            POD,
            "192.168.0.2:3003",
            reach_masqueraded(SVC3),
        ),
        t(
            "pod to LB with iTP:Local",
            POD,
            "9.10.11.12:80",
            reach_masqueraded(SVC3),
        ),
        t(
            "node to ClusterIP with iTP:Local",
            NODE_IP,
            "172.30.0.43:80",
            reach_masqueraded(SVC3_LOCAL),
        ),
        t(
            "node to NodePort with iTP:Local",
            NODE_IP,
            "192.168.0.2:3003",
            reach_masqueraded(SVC3),
        ),
        t(
            "node to LB with iTP:Local",
            NODE_IP,
            "9.10.11.12:80",
            reach_masqueraded(SVC3),
        ),
        t(
            "external to ClusterIP with iTP:Local",
            EXTERNAL_CLIENT,
            "172.30.0.43:80",
            reach_masqueraded(SVC3_LOCAL),
        ),
        t(
            "external to NodePort with iTP:Local",
            EXTERNAL_CLIENT,
            "192.168.0.2:3003",
            reach_masqueraded(SVC3),
        ),
        t(
            "external to LB with iTP:Local",
            EXTERNAL_CLIENT,
            "9.10.11.12:80",
            reach_masqueraded(SVC3),
        ),
    ]
}

/// How a variant changes one flow of `internal_external_flows`.
enum Override {
    /// Masqueraded (true) or not, where the base flow says the opposite.
    Masquerade(bool),
    /// These endpoints instead of the base flow's.
    Endpoints(&'static [&'static str]),
}

/// `flows` with `overrides` applied by flow name; each override must name a flow and change it.
fn overridden(mut flows: Vec<Flow>, overrides: &[(&str, Override)]) -> Vec<Flow> {
    for (name, o) in overrides {
        let flow = flows
            .iter_mut()
            .find(|f| f.name == *name)
            .unwrap_or_else(|| panic!("override of no flow: {name}"));
        let Expect::Reach {
            endpoints,
            masquerade,
        } = flow.expect
        else {
            panic!("{name}: only reachable flows are overridden");
        };
        flow.expect = match o {
            Override::Masquerade(m) => {
                assert_ne!(*m, masquerade, "{name}: override changes nothing");
                Expect::Reach {
                    endpoints,
                    masquerade: *m,
                }
            }
            Override::Endpoints(e) => {
                assert_ne!(*e, endpoints, "{name}: override changes nothing");
                Expect::Reach {
                    endpoints: e,
                    masquerade,
                }
            }
        };
    }
    flows
}

/// Masquerading and endpoint choice for pod, node and external traffic to ClusterIPs,
/// NodePorts and LB IPs of plain, eTP:Local and iTP:Local services; upstream's four variants:
/// as is, without a way to tell pod traffic apart, with `--masquerade-all`, and both.
#[test]
fn internal_external_masquerade() {
    use Override::{Endpoints, Masquerade};
    // Without a local detector, all ClusterIP traffic counts as from pods (not masqueraded),
    // and pods get no eTP:Local short-circuit.
    let no_detector = [
        ("node to ClusterIP", Masquerade(false)),
        ("node to ClusterIP with eTP:Local", Masquerade(false)),
        ("node to ClusterIP with iTP:Local", Masquerade(false)),
        ("external to ClusterIP", Masquerade(false)),
        ("external to ClusterIP with eTP:Local", Masquerade(false)),
        ("external to ClusterIP with iTP:Local", Masquerade(false)),
        (
            "pod to NodePort with eTP:Local",
            Endpoints(&["10.180.0.2:80"]),
        ),
        ("pod to LB with eTP:Local", Endpoints(&["10.180.0.2:80"])),
    ];
    // --masquerade-all masquerades all ClusterIP traffic.
    let masquerade_all = [
        ("pod to ClusterIP", Masquerade(true)),
        ("pod to ClusterIP with eTP:Local", Masquerade(true)),
        ("pod to ClusterIP with iTP:Local", Masquerade(true)),
    ];
    let both = [
        ("pod to ClusterIP", Masquerade(true)),
        ("pod to ClusterIP with eTP:Local", Masquerade(true)),
        ("pod to ClusterIP with iTP:Local", Masquerade(true)),
        (
            "pod to NodePort with eTP:Local",
            Endpoints(&["10.180.0.2:80"]),
        ),
        ("pod to LB with eTP:Local", Endpoints(&["10.180.0.2:80"])),
    ];
    let variant =
        |name: &str, masquerade_all: bool, no_local_detector: bool, o: &[(&str, Override)]| {
            FlowTable {
                name: format!("TestInternalExternalMasquerade/{name}"),
                manifests: INTERNAL_EXTERNAL_CLUSTER.into(),
                node: NodeSettings {
                    masquerade_all,
                    no_local_detector,
                    ..NodeSettings::default()
                },
                flows: overridden(internal_external_flows(), o),
            }
        };
    let tables = [
        variant("base", false, false, &[]),
        variant("no LocalTrafficDetector", false, true, &no_detector),
        variant("masqueradeAll", true, false, &masquerade_all),
        variant("masqueradeAll, no LocalTrafficDetector", true, true, &both),
    ];
    check("iem", Written::V4, &tables);
}

/// TestOverallNFTablesRules compares kube-proxy's complete ruleset for six services; the
/// flows here are what that ruleset does with traffic (restated from it, not from a flow
/// table of upstream's): a plain ClusterIP, an eTP:Local LB whose only endpoint is elsewhere,
/// a NodePort, external IPs off the node, an LB with source ranges and ClientIP affinity, and a
/// service without endpoints.
#[test]
fn overall_ruleset_as_flows() {
    let cluster = r#"
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  clusterIP: 172.30.0.41
  ports: [{name: p80, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: svc2, namespace: ns2}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  clusterIP: 172.30.0.42
  externalIPs: [192.168.99.22]
  healthCheckNodePort: 30000
  ports: [{name: p80, port: 80, nodePort: 3001, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 1.2.3.4}]}}
---
apiVersion: v1
kind: Service
metadata: {name: svc3, namespace: ns3}
spec:
  type: NodePort
  clusterIP: 172.30.0.43
  ports: [{name: p80, port: 80, nodePort: 3003, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: svc4, namespace: ns4}
spec:
  type: NodePort
  clusterIP: 172.30.0.44
  externalIPs: [192.168.99.33]
  ports: [{name: p80, port: 80, targetPort: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: svc5, namespace: ns5}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Cluster
  clusterIP: 172.30.0.45
  healthCheckNodePort: 30000
  loadBalancerSourceRanges: [" 203.0.113.0/25"]
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 10800}}
  ports: [{name: p80, port: 80, nodePort: 3002, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 5.6.7.8}]}}
---
apiVersion: v1
kind: Service
metadata: {name: svc6, namespace: ns6}
spec:
  type: ClusterIP
  clusterIP: 172.30.0.46
  ports: [{name: p80, port: 80, targetPort: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-1, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.1]}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc2-1, namespace: ns2, labels: {kubernetes.io/service-name: svc2}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.2]}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc3-1, namespace: ns3, labels: {kubernetes.io/service-name: svc3}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.3]}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc4-1, namespace: ns4, labels: {kubernetes.io/service-name: svc4}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.4]}, {addresses: [10.180.0.5], nodeName: test-node}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc5-1, namespace: ns5, labels: {kubernetes.io/service-name: svc5}}
addressType: IPv4
endpoints: [{addresses: [10.180.0.3]}]
ports: [{name: p80, port: 80, protocol: TCP}]
"#;
    const SVC4: &[&str] = &["10.180.0.4:80", "10.180.0.5:80"];
    const SVC5: &[&str] = &["10.180.0.3:80"];
    let t = Flow::tcp;
    let flows = vec![
        t(
            "pod to svc1",
            POD,
            "172.30.0.41:80",
            reach(&["10.180.0.1:80"]),
        ),
        t(
            "external to svc1's ClusterIP",
            EXTERNAL_CLIENT,
            "172.30.0.41:80",
            reach_masqueraded(&["10.180.0.1:80"]),
        ),
        t(
            "svc1's endpoint to itself",
            "10.180.0.1",
            "172.30.0.41:80",
            reach_masqueraded(&["10.180.0.1:80"]),
        ),
        t(
            "pod to svc2's ClusterIP",
            POD,
            "172.30.0.42:80",
            reach(&["10.180.0.2:80"]),
        ),
        t(
            "external to svc2's LB IP, no local endpoint",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            Expect::Drop,
        ),
        // Upstream's svc2 external chain short-circuits pods to its cluster endpoints.
        t(
            "pod to svc2's LB IP, no local endpoint",
            POD,
            "1.2.3.4:80",
            reach(&["10.180.0.2:80"]),
        ),
        t(
            "external to svc2's external IP, no local endpoint",
            EXTERNAL_CLIENT,
            "192.168.99.22:80",
            Expect::Drop,
        ),
        t(
            "external to svc2's NodePort, no local endpoint",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            Expect::Drop,
        ),
        t(
            "external to svc3's NodePort",
            EXTERNAL_CLIENT,
            "192.168.0.2:3003",
            reach_masqueraded(&["10.180.0.3:80"]),
        ),
        t(
            "pod to svc4's external IP",
            POD,
            "192.168.99.33:80",
            reach_masqueraded(SVC4),
        ),
        t(
            "external to svc4's external IP",
            EXTERNAL_CLIENT,
            "192.168.99.33:80",
            reach_masqueraded(SVC4),
        ),
        t(
            "allowed external to svc5's LB IP",
            EXTERNAL_CLIENT,
            "5.6.7.8:80",
            reach_masqueraded(SVC5),
        ),
        t(
            "blocked external to svc5's LB IP",
            BLOCKED_CLIENT,
            "5.6.7.8:80",
            Expect::Drop,
        ),
        t(
            "blocked external to svc5's NodePort",
            BLOCKED_CLIENT,
            "192.168.0.2:3002",
            reach_masqueraded(SVC5),
        ),
        t(
            "pod to svc6, no endpoints",
            POD,
            "172.30.0.46:80",
            Expect::Reject,
        ),
    ];
    check(
        "all",
        Written::V4,
        &[table("TestOverallNFTablesRules", cluster, flows)],
    );
}

/// A load-balancer IP whose `ipMode` is Proxy is the load balancer's to proxy: kube-proxy
/// leaves it alone; VIP, or no mode, is handled like any LB IP.
#[test]
fn load_balancer_ingress_route_type_proxy() {
    let cluster = |cluster_ip: &str, lb_ip: &str, mode: &str| {
        format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec:
  type: LoadBalancer
  clusterIP: {cluster_ip}
  ports: [{{name: p80, port: 80, nodePort: 3001, protocol: TCP}}]
status: {{loadBalancer: {{ingress: [{{ip: {lb_ip}{mode}}}]}}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc1-1, namespace: ns1, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: IPv4
endpoints: [{{addresses: [10.180.0.1]}}]
ports: [{{name: p80, port: 80, protocol: TCP}}]
"#
        )
    };
    const EP: &[&str] = &["10.180.0.1:80"];
    let tables = [
        table(
            "TestLoadBalancerIngressRouteTypeProxy/ipMode Proxy",
            &cluster("10.20.30.41", "1.2.3.4", ", ipMode: Proxy"),
            vec![Flow::tcp(
                "external to LB IP",
                EXTERNAL_CLIENT,
                "1.2.3.4:80",
                Expect::NotProxied,
            )],
        ),
        table(
            "TestLoadBalancerIngressRouteTypeProxy/ipMode VIP",
            &cluster("10.20.30.42", "1.2.3.5", ", ipMode: VIP"),
            vec![Flow::tcp(
                "external to LB IP",
                EXTERNAL_CLIENT,
                "1.2.3.5:80",
                reach_masqueraded(EP),
            )],
        ),
        table(
            "TestLoadBalancerIngressRouteTypeProxy/ipMode nil",
            &cluster("10.20.30.43", "1.2.3.6", ""),
            vec![Flow::tcp(
                "external to LB IP",
                EXTERNAL_CLIENT,
                "1.2.3.6:80",
                reach_masqueraded(EP),
            )],
        ),
    ];
    check("lbm", Written::V4, &tables);
}

/// Addresses with leading zeros in IPv4 octets, which older API servers accepted, are read as
/// decimal (kube-proxy's sloppy parsing), in every field that holds an address or a range.
/// IPv4 only: IPv6 has no such spelling.
#[test]
fn bad_ips() {
    let cluster = r#"
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.041
  externalIPs: [192.168.099.022]
  loadBalancerSourceRanges: [203.0.113.000/025]
  ports: [{name: p80, port: 80, nodePort: 3001, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 1.2.3.004}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-1, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints: [{addresses: [10.180.00.001]}]
ports: [{name: p80, port: 80, protocol: TCP}]
"#;
    const EP: &[&str] = &["10.180.0.1:80"];
    let flows = vec![
        Flow::tcp("pod to cluster IP", POD, "172.30.0.41:80", reach(EP)),
        Flow::tcp(
            "external to external IP",
            EXTERNAL_CLIENT,
            "192.168.99.22:80",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "accepted external to LB IP",
            EXTERNAL_CLIENT,
            "1.2.3.4:80",
            reach_masqueraded(EP),
        ),
        Flow::tcp(
            "blocked external to LB IP",
            BLOCKED_CLIENT,
            "1.2.3.4:80",
            Expect::Drop,
        ),
        Flow::tcp(
            "external to NodePort",
            EXTERNAL_CLIENT,
            "192.168.0.2:3001",
            reach_masqueraded(EP),
        ),
    ];
    check(
        "bad",
        Written::V4Only,
        &[table("TestBadIPs", cluster, flows)],
    );
}

/// Flow consequences of topology_test.go's TestCategorizeEndpoints cases on traffic policies
/// (the selection itself is unit-tested in src/proxier/endpoints.rs): which endpoints serve,
/// and drop (endpoints exist, none usable here) versus reject (none at all).
#[test]
fn traffic_policies_as_flows() {
    let cluster = |itp: &str, etp: &str| {
        format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.41
  internalTrafficPolicy: {itp}
  externalTrafficPolicy: {etp}
  ports: [{{name: p80, port: 80, nodePort: 3001, protocol: TCP}}]
status: {{loadBalancer: {{ingress: [{{ip: 1.2.3.4}}]}}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc1-1, namespace: ns1, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: IPv4
endpoints: [{{addresses: [10.0.1.1], nodeName: node1}}, {{addresses: [10.0.1.2], nodeName: node2}}]
ports: [{{name: p80, port: 80, protocol: TCP}}]
"#
        )
    };
    const REMOTE: &[&str] = &["10.0.1.1:80", "10.0.1.2:80"];
    let tables = [
        table(
            "TestCategorizeEndpoints/iTP: Local, eTP: Local, all endpoints remote",
            &cluster("Local", "Local"),
            vec![
                Flow::tcp("pod to ClusterIP", POD, "172.30.0.41:80", Expect::Drop),
                Flow::tcp(
                    "external to NodePort",
                    EXTERNAL_CLIENT,
                    "192.168.0.2:3001",
                    Expect::Drop,
                ),
                Flow::tcp(
                    "external to LB",
                    EXTERNAL_CLIENT,
                    "1.2.3.4:80",
                    Expect::Drop,
                ),
            ],
        ),
        table(
            "TestCategorizeEndpoints/iTP: Local, eTP: Cluster, all endpoints remote",
            &cluster("Local", "Cluster"),
            vec![
                Flow::tcp("pod to ClusterIP", POD, "172.30.0.41:80", Expect::Drop),
                Flow::tcp(
                    "external to NodePort",
                    EXTERNAL_CLIENT,
                    "192.168.0.2:3001",
                    reach_masqueraded(REMOTE),
                ),
                Flow::tcp(
                    "external to LB",
                    EXTERNAL_CLIENT,
                    "1.2.3.4:80",
                    reach_masqueraded(REMOTE),
                ),
            ],
        ),
        table(
            "TestCategorizeEndpoints/iTP: Cluster, eTP: Local, all endpoints remote",
            &cluster("Cluster", "Local"),
            vec![
                Flow::tcp("pod to ClusterIP", POD, "172.30.0.41:80", reach(REMOTE)),
                // Pods short-circuit to the cluster endpoints (upstream's external chain).
                Flow::tcp(
                    "pod to LB, no local endpoint",
                    POD,
                    "1.2.3.4:80",
                    reach(REMOTE),
                ),
                Flow::tcp(
                    "external to NodePort",
                    EXTERNAL_CLIENT,
                    "192.168.0.2:3001",
                    Expect::Drop,
                ),
            ],
        ),
    ];
    check("tpf", Written::V4, &tables);
}

/// `kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy}`: service ports with a
/// Local policy and no local endpoint, counted only when the service has endpoints at all
/// (without any it rejects, whatever its policies).
#[test]
fn no_endpoints_metric() {
    use kubenft::source::manifests::{Manifests, parse_file};
    /// Name, internalTrafficPolicy, externalTrafficPolicy ("" for unset), (address, node) of
    /// each ready endpoint, and the (internal, external) counts.
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a [(&'a str, &'a str)],
        (u64, u64),
    );
    let cases: [Case; 7] = [
        (
            "internalTrafficPolicy is set and there are local endpoints",
            "Local",
            "",
            &[
                ("10.0.1.1", "test-node"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            (0, 0),
        ),
        (
            "externalTrafficPolicy is set and there are local endpoints",
            "",
            "Local",
            &[
                ("10.0.1.1", "test-node"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            (0, 0),
        ),
        (
            "both policies are set and there are local endpoints",
            "Local",
            "Local",
            &[
                ("10.0.1.1", "test-node"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            (0, 0),
        ),
        (
            "internalTrafficPolicy is set and there are no local endpoints",
            "Local",
            "",
            &[
                ("10.0.1.1", "node0"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            (1, 0),
        ),
        (
            "externalTrafficPolicy is set and there are no local endpoints",
            "",
            "Local",
            &[
                ("10.0.1.1", "node0"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            (0, 1),
        ),
        (
            "both policies are set and there are no local endpoints",
            "Local",
            "Local",
            &[
                ("10.0.1.1", "node0"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            (1, 1),
        ),
        (
            "both policies are set and there are no endpoints at all",
            "Local",
            "Local",
            &[],
            (0, 0),
        ),
    ];
    for (name, itp, etp, endpoints, want) in cases {
        // eTP makes the service a NodePort one, as upstream does.
        let mut spec = String::from("clusterIP: 172.30.1.1\n  selector: {foo: bar}\n");
        if !itp.is_empty() {
            spec += &format!("  internalTrafficPolicy: {itp}\n");
        }
        if !etp.is_empty() {
            spec += &format!("  type: NodePort\n  externalTrafficPolicy: {etp}\n");
        }
        let eps: Vec<Endpoint> = endpoints
            .iter()
            .map(|(ip, node)| (*ip, *node, READY))
            .collect();
        let yaml = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: svc1, namespace: ns1}}\nspec:\n  {spec}  \
             ports: [{{name: \"\", port: 80, nodePort: 123, protocol: TCP}}]\n{}",
            if eps.is_empty() {
                String::new()
            } else {
                slice(&eps)
            }
        );
        let (mut m, mut warnings) = (Manifests::default(), Vec::new());
        parse_file(std::path::Path::new(name), &yaml, &mut m, &mut warnings);
        assert!(warnings.is_empty(), "{name}: {warnings:?}");
        let (state, rejected) =
            kubenft::cluster::ClusterState::from_objects(&m.services, &m.endpoint_slices, None);
        assert!(rejected.is_empty(), "{name}: {rejected:?}");
        // What the daemon reports after a sync, and the from-scratch derivation it is
        // checked against.
        let mut facts = kubenft::daemon::after_sync::AfterSyncFacts::new(flows::NODE_NAME);
        facts.update(&state);
        let (_, from_scratch) =
            kubenft::daemon::after_sync::local_endpoint_facts(&state, flows::NODE_NAME);
        for [v4, v6] in [facts.no_local_endpoints(), from_scratch] {
            assert_eq!(
                v4, want,
                "{name}: (internal, external) IPv4 service ports without local endpoints"
            );
            assert_eq!(
                v6,
                (0, 0),
                "{name}: an IPv4-only service counts for IPv4 only"
            );
        }
    }
}
