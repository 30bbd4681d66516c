//! Internal and external traffic policies with real traffic, IPv4 and IPv6, as kube-proxy
//! treats them: ClusterIP traffic goes to the endpoints internalTrafficPolicy selects,
//! NodePort and load-balancer traffic to those externalTrafficPolicy selects. The lab's node
//! is node-a; pod-1 runs there, pod-2 is declared on node-b (or, for a service, pod-1 on
//! node-c, so that this node has no local endpoint of it).

use crate::common;
use crate::explain_harness;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use common::{Outcome, Topology, try_request};
use explain_harness::{assert_explained, pod_backend};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubenft::cluster::ClusterState;
use kubenft::netns::{Netns, can_create};
use kubenft::nft::kernel::Nftables;
use kubenft::proxier::ProxyConfig;
use serde_json::{Value, json};

fn node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "node-a"},
        "spec": {"podCIDRs": ["10.244.0.0/16", "fd00:244::/32"]},
        "status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "InternalIP", "address": "fd00::1"},
        ]},
    }))
    .unwrap()
}

/// A dual-stack LoadBalancer `name` at ClusterIPs 10.96.0.N / fd00:96::N, load-balancer IPs
/// 192.0.2.N / fd00:96::1:N and NodePort 300N, with the given policies.
fn service(name: &str, n: u8, internal: &str, external: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "t"},
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": format!("10.96.0.{n}"),
            "clusterIPs": [format!("10.96.0.{n}"), format!("fd00:96::{n}")],
            "ipFamilies": ["IPv4", "IPv6"],
            "ipFamilyPolicy": "RequireDualStack",
            "internalTrafficPolicy": internal,
            "externalTrafficPolicy": external,
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30000 + u16::from(n)}],
        },
        "status": {"loadBalancer": {"ingress": [
            {"ip": format!("192.0.2.{n}")},
            {"ip": format!("fd00:96::1:{n}")},
        ]}},
    }))
    .unwrap()
}

/// The EndpointSlices of `name`, one per family: pod-1 on `pod1_node`, pod-2 on node-b.
fn slices(name: &str, pod1_node: &str) -> Vec<EndpointSlice> {
    [
        ("IPv4", "10.244.1.2", "10.244.2.2"),
        ("IPv6", "fd00:244:1::2", "fd00:244:2::2"),
    ]
    .into_iter()
    .map(|(family, pod1, pod2)| {
        let endpoint = |ip: &str, node: &str| -> Value {
            json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true}})
        };
        serde_json::from_value(json!({
            "metadata": {
                "name": format!("{name}-{}", family.to_lowercase()),
                "namespace": "t",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": family,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [endpoint(pod1, pod1_node), endpoint(pod2, "node-b")],
        }))
        .unwrap()
    })
    .collect()
}

/// Plans the services for node-a and programs both families' tables into the lab's node.
fn program(lab: &Topology, services: &[Service], slices: &[EndpointSlice]) {
    let (state, rejected) = ClusterState::from_objects(services, slices, Some(&node()));
    assert!(rejected.is_empty(), "{rejected:?}");
    let config = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/32".parse().unwrap(),
        ],
        ..ProxyConfig::default()
    };
    let tables = kubenft::proxier::build(&state, &config);
    assert_eq!(tables.len(), 2, "an ip and an ip6 table");
    let tx = kubenft::sync::reconcile_transaction(&[], &tables, None);
    lab.node
        .run(move || Nftables::open().unwrap().apply(&tx).unwrap())
        .unwrap();
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The backends that answer `n` connections from `from` to `to`; every one must be answered.
fn backends(from: &Netns, to: &str, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|_| match try_request(from, addr(to)) {
            Outcome::Answered { backend, .. } => backend,
            other => panic!("{to}: {other:?}"),
        })
        .collect()
}

const BOTH: [&str; 2] = ["pod-1", "pod-2"];

#[test]
fn internal_traffic_follows_the_internal_policy_and_external_traffic_the_external_one() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let lab = Topology::build("tp").unwrap();
    let services = [
        service("split", 40, "Local", "Cluster"),
        service("split-remote", 41, "Local", "Cluster"),
        service("both-local", 42, "Local", "Local"),
    ];
    let mut all = slices("split", "node-a");
    all.extend(slices("split-remote", "node-c"));
    all.extend(slices("both-local", "node-a"));
    program(&lab, &services, &all);
    let remote_pod = &lab.pods[1];

    for (v6, cluster_ip, node_ip, lb) in [
        (false, "10.96.0.", "10.0.0.1", "192.0.2."),
        (true, "[fd00:96::", "[fd00::1]", "[fd00:96::1:"),
    ] {
        let close = if v6 { "]" } else { "" };
        let family = if v6 { "IPv6" } else { "IPv4" };
        let (pod_ip, client_ip) = if v6 {
            ("fd00:244:2::2", "fd00::2")
        } else {
            ("10.244.2.2", "10.0.0.2")
        };
        // `kubenft explain`, asked in the node, predicts each connection checked below.
        let explained = |ns: &Netns, from: &str, to: &str| {
            assert_explained(&lab.node, ns, from, to, 16, 0.25, &pod_backend);
        };
        // iTP Local: ClusterIP traffic, even from a pod on another node, reaches this node's
        // endpoint only ...
        let to = format!("{cluster_ip}40{close}:80");
        explained(remote_pod, pod_ip, &to);
        assert_eq!(
            backends(remote_pod, &to, 12),
            BTreeSet::from(["pod-1".to_string()]),
            "{family} {to}"
        );
        // ... while eTP Cluster sends NodePort and load-balancer traffic to every endpoint.
        for to in [format!("{node_ip}:30040"), format!("{lb}40{close}:80")] {
            explained(&lab.client, client_ip, &to);
            assert_eq!(
                backends(&lab.client, &to, 24),
                BTreeSet::from(BOTH.map(String::from)),
                "{family} {to}"
            );
        }
        // A node without a local endpoint drops ClusterIP traffic (endpoints exist
        // elsewhere), yet serves the NodePort and the load balancer with every endpoint.
        let to = format!("{cluster_ip}41{close}:80");
        explained(remote_pod, pod_ip, &to);
        assert_eq!(
            try_request(remote_pod, addr(&to)),
            Outcome::TimedOut,
            "{family} {to}"
        );
        for to in [format!("{node_ip}:30041"), format!("{lb}41{close}:80")] {
            explained(&lab.client, client_ip, &to);
            assert_eq!(
                backends(&lab.client, &to, 24),
                BTreeSet::from(BOTH.map(String::from)),
                "{family} {to}"
            );
        }
        // iTP and eTP Local: outside clients reach the local endpoint only, but a pod's
        // connection to the load balancer short-circuits to every endpoint, as if it had gone
        // out to the load balancer and come back in.
        let to = format!("{lb}42{close}:80");
        explained(&lab.client, client_ip, &to);
        explained(remote_pod, pod_ip, &to);
        assert_eq!(
            backends(&lab.client, &to, 12),
            BTreeSet::from(["pod-1".to_string()]),
            "{family} {to}"
        );
        assert_eq!(
            backends(remote_pod, &to, 24),
            BTreeSet::from(BOTH.map(String::from)),
            "{family} {to} from a pod"
        );
    }
    drop(lab);
}
