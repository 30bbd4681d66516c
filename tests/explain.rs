//! `kubenft explain` against the kernel: a node namespace is programmed by the planner and the
//! netlink engine, the binary explains a connection from the tables it dumps there, and real
//! connections must end as it said: the same endpoints, the client's address kept or
//! masqueraded per endpoint, refused when it predicts a reject, timed out when it predicts a
//! drop. Also when the table was damaged by hand, and as a user holding only CAP_NET_ADMIN.

use crate::common;
use crate::explain_harness;
use crate::privilege;

use std::path::Path;

use common::Topology;
use explain_harness::{assert_explained, explain, explain_command, explain_service, observe};
use kubenft::cluster::ClusterState;
use kubenft::netns::{Netns, can_create};
use kubenft::nft::kernel::Nftables;
use kubenft::nft::model::{Family, Value};
use kubenft::nft::transaction::{Op, Transaction};
use kubenft::proxier::ProxyConfig;
use privilege::unprivileged;
use serde_json::Value as Json;

const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: t}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: t}
spec: {clusterIP: 10.96.0.14, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: np, namespace: t}
spec: {type: NodePort, clusterIP: 10.96.0.11, ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: allowed, namespace: t}
spec: {type: LoadBalancer, clusterIP: 10.96.0.22, loadBalancerSourceRanges: [10.0.0.0/30], ports: [{name: http, port: 80, nodePort: 30022, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.22}]}}
---
apiVersion: v1
kind: Service
metadata: {name: denied, namespace: t}
spec: {type: LoadBalancer, clusterIP: 10.96.0.23, loadBalancerSourceRanges: [203.0.113.0/24], ports: [{name: http, port: 80, nodePort: 30023, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.23}]}}
---
apiVersion: v1
kind: Service
metadata: {name: local, namespace: t}
spec: {type: LoadBalancer, clusterIP: 10.96.0.20, externalTrafficPolicy: Local, ports: [{name: http, port: 80, nodePort: 30020, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.20}]}}
---
apiVersion: v1
kind: Service
metadata: {name: remote-only, namespace: t}
spec: {type: LoadBalancer, clusterIP: 10.96.0.21, externalTrafficPolicy: Local, ports: [{name: http, port: 80, nodePort: 30021, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.21}]}}
---
apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: t}
spec: {clusterIP: 10.96.0.30, sessionAffinity: ClientIP, ports: [{name: http, port: 80, protocol: TCP}]}
"#;

/// An EndpointSlice of `service` with ready endpoints on port 8080: pod-1 (on node-a, this
/// node) and/or pod-2 (declared on node-b, so remote).
fn slice(service: &str, pods: &[u8]) -> String {
    let eps: Vec<String> = pods
        .iter()
        .map(|n| {
            let node = if *n == 1 { "node-a" } else { "node-b" };
            format!(
                "  - {{addresses: [10.244.{n}.2], nodeName: {node}, conditions: {{ready: true}}}}"
            )
        })
        .collect();
    format!(
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {service}-1, namespace: t, labels: {{kubernetes.io/service-name: {service}}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n{}\n",
        eps.join("\n")
    )
}

/// Plans `yaml` for node-a and programs it into the lab's node in one transaction.
fn program(lab: &Topology, yaml: &str) {
    let mut docs = kubenft::source::manifests::Manifests::default();
    let mut warnings = Vec::new();
    kubenft::source::manifests::parse_file(
        Path::new("cluster.yaml"),
        yaml,
        &mut docs,
        &mut warnings,
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    let (state, rejected) =
        ClusterState::from_objects(&docs.services, &docs.endpoint_slices, docs.nodes.first());
    assert!(rejected.is_empty(), "{rejected:?}");
    let config = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        ..ProxyConfig::default()
    };
    let tables = kubenft::proxier::build(&state, &config);
    let tx = kubenft::sync::reconcile_transaction(&[], &tables, None);
    lab.node
        .run(move || Nftables::open().unwrap().apply(&tx).unwrap())
        .unwrap();
}

fn backend_of(ip: &str) -> Option<String> {
    match ip {
        "10.244.1.2" => Some("pod-1".into()),
        "10.244.2.2" => Some("pod-2".into()),
        _ => None,
    }
}

fn lab(tag: &str) -> Option<Topology> {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return None;
    }
    Some(Topology::build(tag).unwrap())
}

fn full_cluster(lab: &Topology) {
    let mut yaml = CLUSTER.to_string();
    for (svc, pods) in [
        ("web", &[1u8, 2][..]),
        ("np", &[1, 2]),
        ("allowed", &[1]),
        ("denied", &[1]),
        ("local", &[1, 2]),
        ("remote-only", &[2]),
        ("sticky", &[1, 2]),
    ] {
        yaml += &slice(svc, pods);
    }
    program(lab, &yaml);
}

fn kinds(reasons: &Json) -> Vec<String> {
    reasons
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect()
}

const CLIENT: &str = "10.0.0.2";
const POD1: &str = "10.244.1.2";

#[test]
fn explain_predicts_what_real_connections_do() {
    let Some(lab) = lab("expl") else {
        return;
    };
    full_cluster(&lab);
    let node = &lab.node;
    let check = |client: &Netns, from: &str, to: &str, tries: usize| {
        assert_explained(node, client, from, to, tries, 0.25, &backend_of)
    };

    // ClusterIP from a pod: both endpoints; the pod reaching itself is masqueraded (hairpin),
    // the other endpoint sees the pod's own address.
    let got = check(&lab.pods[0], POD1, "10.96.0.10:80", 16);
    assert_eq!(got["service"], "t/web:http");
    assert_eq!(got["frontend"]["kind"], "cluster-ip");
    let eps = got["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 2);
    assert_eq!(kinds(&eps[0]["masquerade_reasons"]), ["hairpin"]);
    assert_eq!(eps[1]["masquerade"], false);

    // ClusterIP from off the cluster: masqueraded because of the source.
    let got = check(&lab.client, CLIENT, "10.96.0.10:80", 16);
    for e in got["endpoints"].as_array().unwrap() {
        assert_eq!(kinds(&e["masquerade_reasons"]), ["off-cluster-source"]);
        assert!((e["probability"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    }

    // NodePort, externalTrafficPolicy Cluster.
    let got = check(&lab.client, CLIENT, "10.0.0.1:30080", 16);
    assert_eq!(got["frontend"]["kind"], "node-port");
    assert_eq!(got["service"], "t/np:http");
    for e in got["endpoints"].as_array().unwrap() {
        assert!(
            kinds(&e["masquerade_reasons"]).contains(&"external-traffic-policy-cluster".into())
        );
    }

    // Load balancers with source ranges: the client is in one's ranges, not in the other's.
    let got = check(&lab.client, CLIENT, "192.0.2.22:80", 6);
    assert_eq!(got["frontend"]["kind"], "load-balancer-ip");
    assert_eq!(got["source_ranges"]["allowed"], true);
    let got = check(&lab.client, CLIENT, "192.0.2.23:80", 1);
    assert_eq!(got["source_ranges"]["allowed"], false);
    assert_eq!(got["dropped"]["kind"], "source-ranges");

    // externalTrafficPolicy Local: only the local endpoint, the client's address kept; a
    // service whose endpoints are all remote drops.
    let got = check(&lab.client, CLIENT, "192.0.2.20:80", 8);
    assert_eq!(got["endpoints"].as_array().unwrap().len(), 1);
    assert_eq!(got["endpoints"][0]["masquerade"], false);
    let got = check(&lab.client, CLIENT, "192.0.2.21:80", 1);
    assert_eq!(got["dropped"]["kind"], "no-local-endpoints");
    // The node itself reaches every endpoint of that NodePort, masqueraded.
    let got = check(&lab.node, "10.0.0.1", "10.0.0.1:30020", 16);
    assert_eq!(got["connection"]["hook"], "output");
    for e in got["endpoints"].as_array().unwrap() {
        assert!(kinds(&e["masquerade_reasons"]).contains(&"node-traffic".into()));
    }

    // No endpoints: rejected; an unused port of an active ClusterIP: rejected; an address of
    // the service range no service has: dropped.
    let got = check(&lab.client, CLIENT, "10.96.0.14:80", 2);
    assert_eq!(got["rejected"]["kind"], "no-endpoints");
    assert_eq!(got["service"], "t/empty:http");
    let got = check(&lab.client, CLIENT, "10.96.0.10:81", 2);
    assert_eq!(got["rejected"]["kind"], "unused-cluster-ip-port");
    let got = check(&lab.client, CLIENT, "10.96.9.9:80", 1);
    assert_eq!(got["dropped"]["kind"], "unallocated-cluster-ip");
}

#[test]
fn a_client_pinned_by_affinity_is_explained_as_pinned() {
    let Some(lab) = lab("exaff") else {
        return;
    };
    full_cluster(&lab);
    let to = "10.96.0.30:80";
    let before = explain(&lab.node, to, Some(CLIENT), &[]);
    assert_eq!(before["endpoints"].as_array().unwrap().len(), 2);
    // One connection makes the kernel remember the client in that endpoint's affinity set.
    let first = observe(&lab.client, to, 1);
    let (backend, _) = first.answered.iter().next().expect("answered");
    let after = explain(&lab.node, to, Some(CLIENT), &[]);
    let eps = after["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 1, "{after:#}");
    assert_eq!(
        &backend_of(eps[0]["address"].as_str().unwrap()).unwrap(),
        backend
    );
    let left = eps[0]["pinned"]["expires_in_seconds"].as_u64().unwrap();
    assert!(left > 10_000 && left <= 10_800, "{left}");
    // And it holds: every later connection goes there.
    let later = observe(&lab.client, to, 6);
    assert_eq!(later.answered.keys().collect::<Vec<_>>(), [backend]);
    // Another source is not pinned.
    let other = explain(&lab.node, to, Some("10.0.0.3"), &[]);
    assert_eq!(other["endpoints"].as_array().unwrap().len(), 2);
}

#[test]
fn a_slot_deleted_by_hand_is_explained_as_falling_back() {
    let Some(lab) = lab("exdmg") else {
        return;
    };
    program(&lab, &(CLUSTER.to_string() + &slice("web", &[1, 2])));
    // Delete the slot of 10.96.0.10:80 that holds pod-2, with the project's netlink engine.
    lab.node
        .run(|| {
            let mut nft = Nftables::open().unwrap();
            let table = nft.dump_table(Family::Ip, "kubenft").unwrap().unwrap();
            let (set, element) = table
                .sets
                .values()
                .find_map(|s| {
                    let e = s.elements.iter().find(|e| {
                        e.key.first() == Some(&Value::Ipv4("10.96.0.10".parse().unwrap()))
                            && e.key.len() == 4
                            && matches!(&e.data, Some(kubenft::nft::model::MapData::Values(v))
                                if v.first() == Some(&Value::Ipv4("10.244.2.2".parse().unwrap())))
                    })?;
                    Some((s.name.clone(), e.clone()))
                })
                .expect("a slot element for pod-2");
            let tx = Transaction {
                ops: vec![Op::DeleteElements {
                    table: table.table_ref(),
                    set,
                    elements: vec![element],
                }],
                expected_generation: None,
            };
            nft.apply(&tx).unwrap();
        })
        .unwrap();
    let got = assert_explained(
        &lab.node,
        &lab.client,
        CLIENT,
        "10.96.0.10:80",
        12,
        0.25,
        &backend_of,
    );
    let eps = got["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 1, "{got:#}");
    assert_eq!(eps[0]["address"], POD1);
    let via: Vec<(String, f64)> = eps[0]["via"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["map"].as_str().unwrap().to_string(),
                v["probability"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(
        via.iter()
            .any(|(m, p)| m == "pick-fallback" && (p - 0.5).abs() < 1e-9),
        "{via:?}"
    );
    // The Service's listing shows the same: its ClusterIP reaches only pod-1 now, whatever the
    // EndpointSlice says.
    let listing = explain_service(&lab.node, "t/web");
    let frontends = listing["frontends"].as_array().unwrap();
    assert_eq!(frontends.len(), 1, "{listing:#}");
    assert_eq!(frontends[0]["address"], "10.96.0.10");
    let eps = frontends[0]["from_outside"]["endpoints"]
        .as_array()
        .unwrap();
    assert_eq!(eps.len(), 1, "{listing:#}");
    assert_eq!(eps[0]["address"], POD1);
}

#[test]
fn explain_needs_only_net_admin_and_says_what_is_missing() {
    let Some(lab) = lab("expriv") else {
        return;
    };
    program(&lab, &(CLUSTER.to_string() + &slice("web", &[1, 2])));
    let run = |caps: &str| {
        let wrapper = unprivileged(caps);
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        explain_command(&lab.node, &wrapper, "10.96.0.10:80", Some(CLIENT), &[])
    };
    let out = run("+net_admin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["service"], "t/web:http");
    assert_eq!(got["endpoints"].as_array().unwrap().len(), 2);

    let out = run("");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CAP_NET_ADMIN"), "{err}");

    // A namespace kubenft never programmed: a clear message, not an empty answer.
    let bare = Netns::create("exbare").unwrap();
    let out = explain_command(&bare, &[], "10.96.0.10:80", Some(CLIENT), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("there is no table ip kubenft"), "{err}");
}

#[test]
fn the_text_answer_names_the_service_endpoints_and_masquerading() {
    let Some(lab) = lab("extext") else {
        return;
    };
    program(&lab, &(CLUSTER.to_string() + &slice("web", &[1, 2])));
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", lab.node.name()])
        .arg(env!("CARGO_BIN_EXE_kubenft"))
        .args(["explain", "10.96.0.10:80/tcp", "--from", CLIENT])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "t/web:http, cluster ip",
        "10.244.1.2:8080",
        "10.244.2.2:8080",
        "50%",
        "masqueraded: off cluster source",
    ] {
        assert!(text.contains(want), "{want:?} missing in:\n{text}");
    }
}

/// A namespace holding a table named like ours that explain cannot read as kubenft's (one in
/// another layout, written by hand with `nft` as an older kubenft or another program might
/// have left it; one with a rule reading what explain cannot know), or no table at all:
/// explain fails with a message that says what is wrong and what to do, never panics.
#[test]
fn a_foreign_or_unreadable_table_or_none_gets_a_clear_message() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let node = Netns::create("exold").unwrap();
    let fails = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", node.name()])
            .arg(env!("CARGO_BIN_EXE_kubenft"))
            .arg("explain")
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} succeeded: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed an answer");
        err
    };
    let nft = |script: &str| {
        node.exec_with_stdin(&["nft", "-f", "-"], script).unwrap();
    };

    // No table at all, in either family, and for a Service listing.
    let err = fails(&["10.96.0.10:80", "--from", CLIENT]);
    assert!(err.contains("there is no table ip kubenft"), "{err}");
    let err = fails(&["[fd00:96::10]:80", "--from", "fd00::2"]);
    assert!(err.contains("there is no table ip6 kubenft"), "{err}");
    let err = fails(&["--service", "t/web"]);
    assert!(
        err.contains("there is no table ip kubenft or ip6 kubenft"),
        "{err}"
    );

    // Another layout: services dispatched through a map of another name.
    nft(r#"
table ip kubenft {
    map services {
        type ipv4_addr . inet_proto . inet_service : verdict
        elements = { 10.96.0.10 . tcp . 80 : goto svc-web }
    }
    chain svc-web {
        meta l4proto tcp dnat to 10.244.1.2:8080
    }
    chain nat-prerouting {
        type nat hook prerouting priority -100; policy accept;
        ip daddr . meta l4proto . th dport vmap @services
    }
}
"#);
    for args in [
        &["10.96.0.10:80", "--from", CLIENT][..],
        &["--service", "t/web"][..],
    ] {
        let err = fails(args);
        for want in [
            "table ip kubenft is not laid out as this kubenft writes it",
            "no map service-ips",
            "kubenft sync --once",
        ] {
            assert!(err.contains(want), "{args:?}: {want:?} missing in {err}");
        }
    }

    // Our map, but a rule that reads what a new connection's destination does not tell.
    nft(r#"
delete table ip kubenft
table ip kubenft {
    map service-ips {
        type ipv4_addr . inet_proto . inet_service : verdict
    }
    chain nat-prerouting {
        type nat hook prerouting priority -100; policy accept;
        th sport 53 accept
        ip daddr . meta l4proto . th dport vmap @service-ips
    }
}
"#);
    let err = fails(&["10.96.0.10:80", "--from", CLIENT]);
    for want in [
        "evaluating table ip kubenft",
        "nat-prerouting",
        "which explain cannot know",
    ] {
        assert!(err.contains(want), "{want:?} missing in {err}");
    }
}
