//! `kubenft sync --once` end to end: the real binary reads manifests, programs a node
//! namespace, and real connections from an external client follow the Services: spread over
//! endpoints and masqueraded, refused without endpoints, NodePorts answered; a second run on
//! the unchanged cluster changes nothing; `cleanup` removes only our tables.

use crate::common;

use std::process::Command;

use common::{Outcome, Topology, sh, try_request};
use kubenft::netns::{Netns, can_create};

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.0.0/16]}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: demo}
spec: {clusterIP: 10.96.0.14, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: demo}
spec: {type: NodePort, clusterIP: 10.96.0.11, ports: [{name: http, port: 8080, nodePort: 30080, protocol: TCP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: demo, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.2], nodeName: node-a, conditions: {ready: true}}
  - {addresses: [10.244.2.2], nodeName: node-a, conditions: {ready: true}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: api-1, namespace: demo, labels: {kubernetes.io/service-name: api}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.2], nodeName: node-a, conditions: {ready: true}}
"#;

fn kubenft(ns: &Netns, args: &[&str]) -> (bool, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(), env!("CARGO_BIN_EXE_kubenft")])
        .args(args)
        .output()
        .unwrap();
    // stderr is a pipe, so the logs carry no colour codes to strip.
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory holding `text` as its one manifests file.
fn manifests_dir(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), text).unwrap();
    dir
}

/// The flags of a sync or render of the manifests in `dir` for node-a (one IPv4 pod CIDR).
fn node_a(dir: &str) -> [&str; 6] {
    [
        "--manifests",
        dir,
        "--hostname-override",
        "node-a",
        "--cluster-cidr",
        "10.244.0.0/16",
    ]
}

/// What `kubenft render` prints with `flags`.
fn render(flags: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubenft"))
        .arg("render")
        .args(flags)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn sync_once_programs_services_that_real_traffic_follows_and_a_rerun_changes_nothing() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = manifests_dir(MANIFESTS);
    let manifests = dir.path().to_str().unwrap().to_string();

    let lab = Topology::build("so").unwrap();
    let (node, client) = (&lab.node, &lab.client);

    let flags = [
        "--manifests",
        &manifests,
        "--hostname-override",
        "node-a",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--service-cidr",
        "10.96.0.0/16",
    ];
    let mut args = vec!["sync", "--once"];
    args.extend(flags);
    let (ok, log) = kubenft(node, &args);
    assert!(ok, "sync --once failed: {log}");

    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        match try_request(client, "10.96.0.10:80".parse().unwrap()) {
            Outcome::Answered { backend, source } => {
                assert!(
                    source.starts_with("10.244."),
                    "traffic from outside the cluster CIDR is masqueraded, saw {source}"
                );
                seen.insert(backend);
            }
            other => panic!("web: {other:?}"),
        }
    }
    assert_eq!(seen.len(), 2, "both endpoints answer: {seen:?}");
    assert_eq!(
        try_request(client, "10.96.0.14:80".parse().unwrap()),
        Outcome::Refused,
        "no endpoints: rejected"
    );
    match try_request(client, "10.0.0.1:30080".parse().unwrap()) {
        Outcome::Answered { backend, .. } => assert_eq!(backend, "pod-1"),
        other => panic!("NodePort: {other:?}"),
    }
    assert_eq!(
        try_request(client, "10.96.0.11:9999".parse().unwrap()),
        Outcome::Refused,
        "unused port of an active ClusterIP"
    );

    let (ok, log) = kubenft(node, &args);
    assert!(ok, "second sync failed: {log}");
    assert!(
        log.contains("ops=0"),
        "an unchanged cluster needs no operations: {log}"
    );

    // Another program's table survives our cleanup; ours is gone.
    sh(node, "nft add table ip someone-else");
    let (ok, log) = kubenft(node, &["cleanup"]);
    assert!(ok, "cleanup failed: {log}");
    let listing = node.exec(&["nft", "list", "tables"]).unwrap();
    let tables = String::from_utf8_lossy(&listing.stdout);
    assert!(
        tables.contains("someone-else") && !tables.contains("kubenft"),
        "{tables}"
    );
}

#[test]
fn the_shipped_examples_sync_and_read_back_exactly_as_planned() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/basic");
    let node = Netns::create("soEx").unwrap();
    let flags = [
        "--manifests",
        examples,
        "--hostname-override",
        "node-a",
        "--cluster-cidr",
        "10.244.0.0/16,fd00:244::/48",
        "--service-cidr",
        "10.96.0.0/16,fd00:96::/112",
    ];
    let mut args = vec!["sync", "--once"];
    args.extend(flags);
    let (ok, log) = kubenft(&node, &args);
    assert!(ok, "{log}");
    // What the kernel holds is what `render` prints, as nft itself lists it.
    let reference = Netns::create("soRef").unwrap();
    kubenft_nft_testkit::inspect::apply_script(&reference, &render(&flags)).unwrap();
    for family in [
        kubenft::nft::model::Family::Ip,
        kubenft::nft::model::Family::Ip6,
    ] {
        let a = kubenft_nft_testkit::inspect::list_table_json(&node, family, "kubenft").unwrap();
        let b =
            kubenft_nft_testkit::inspect::list_table_json(&reference, family, "kubenft").unwrap();
        assert_eq!(a, b, "{family:?}: sync --once vs nft -f of render");
    }
    let (ok, log) = kubenft(&node, &args);
    assert!(
        ok && log.contains("ops=0"),
        "a second sync changes nothing: {log}"
    );
}

/// A table left by a version with 64 endpoint-map shards (`service-endpoints-NN`) is brought
/// to the current layout in one sync: the old maps are gone, nothing else of it is left, and
/// a second sync has nothing to do.
#[test]
fn a_table_with_the_old_two_digit_shards_is_replaced_in_one_sync() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    // An externalTrafficPolicy Local service keeps chains of its own, with endpoint-map blocks.
    let local_api = MANIFESTS.replace(
        "spec: {type: NodePort,",
        "spec: {type: NodePort, externalTrafficPolicy: Local,",
    );
    assert_ne!(local_api, MANIFESTS);
    let dir = manifests_dir(&local_api);
    let manifests = dir.path().to_str().unwrap().to_string();
    let flags = node_a(&manifests);
    let current = render(&flags);
    assert!(current.contains("service-endpoints-000"), "{current}");
    let old = current.replace("service-endpoints-0", "service-endpoints-");

    let node = Netns::create("soOld").unwrap();
    kubenft_nft_testkit::inspect::apply_script(&node, &old).unwrap();
    let mut args = vec!["sync", "--once"];
    args.extend(flags);
    let (ok, log) = kubenft(&node, &args);
    assert!(ok, "{log}");
    let listing = node.exec(&["nft", "list", "ruleset"]).unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("map service-endpoints-000 {"), "{listing}");
    assert!(!listing.contains("map service-endpoints-00 {"), "{listing}");
    let (ok, log) = kubenft(&node, &args);
    assert!(ok && log.contains("ops=0"), "{log}");
}

/// A ClusterIP service with a chain of its own — as every service had before the shared pick
/// chains, or as one that just stopped being an externalTrafficPolicy Local NodePort — moves
/// into a shared chain in one sync: its chains, block and endpoint-map slots go, its pick set
/// and slot elements come.
#[test]
fn a_service_with_its_own_chain_moves_to_a_shared_pick_chain_in_one_sync() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let own_chain = MANIFESTS.replace(
        "spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, protocol: TCP}]}",
        "spec: {type: NodePort, externalTrafficPolicy: Local, clusterIP: 10.96.0.10, ports: [{name: http, port: 80, nodePort: 30081, protocol: TCP}]}",
    );
    assert_ne!(own_chain, MANIFESTS);
    let dir = manifests_dir(&own_chain);
    let path = dir.path().join("cluster.yaml");
    let manifests = dir.path().to_str().unwrap().to_string();
    let mut args = vec!["sync", "--once"];
    args.extend(node_a(&manifests));
    let node = Netns::create("soMove").unwrap();
    let listing = || {
        let out = node
            .exec(&["nft", "list", "table", "ip", "kubenft"])
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (ok, log) = kubenft(&node, &args);
    assert!(ok, "{log}");
    assert!(listing().contains("chain service-"), "{}", listing());
    assert!(listing().contains("-demo/web/tcp/http {"), "{}", listing());

    std::fs::write(&path, MANIFESTS).unwrap();
    let (ok, log) = kubenft(&node, &args);
    assert!(ok, "{log}");
    let after = listing();
    assert!(!after.contains("-demo/web/tcp/http {"), "{after}");
    let pick_set = after
        .split("set pick-2-services {")
        .nth(1)
        .expect("a pick-2 set");
    let pick_set = &pick_set[..pick_set.find('}').unwrap()];
    assert!(pick_set.contains("10.96.0.10 . tcp . 80"), "{after}");
    let (ok, log) = kubenft(&node, &args);
    assert!(ok && log.contains("ops=0"), "{log}");
}

/// The rule counts the daemon compares with its plan between syncs (`Nftables::rule_count`,
/// one filtered dump per chain) are what nft lists, and fall to 0 when the table is flushed or
/// deleted.
#[test]
fn each_base_chain_s_rule_count_is_read_as_nft_lists_it_and_falls_to_zero_when_flushed() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    use kubenft::nft::model::Family;
    let node = Netns::create("soCount").unwrap();
    let dir = manifests_dir(MANIFESTS);
    let mut args = vec!["sync", "--once"];
    args.extend(node_a(dir.path().to_str().unwrap()));
    let (ok, log) = kubenft(&node, &args);
    assert!(ok, "{log}");

    let listed = node
        .exec(&["nft", "-j", "list", "table", "ip", "kubenft"])
        .unwrap();
    let listing: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let objects = listing["nftables"].as_array().unwrap();
    let base_chains: Vec<(String, usize)> = objects
        .iter()
        .filter_map(|o| o["chain"].get("hook").and(o["chain"]["name"].as_str()))
        .map(|chain| {
            let rules = objects
                .iter()
                .filter(|o| o["rule"]["chain"].as_str() == Some(chain))
                .count();
            (chain.to_string(), rules)
        })
        .collect();
    assert_eq!(base_chains.len(), 8, "{listing}");
    assert!(base_chains.iter().all(|(_, rules)| *rules > 0));

    let counts = move || {
        let mut nft = kubenft::nft::kernel::Nftables::open().unwrap();
        base_chains
            .iter()
            .map(|(chain, listed)| {
                let read = nft.rule_count(Family::Ip, "kubenft", chain).unwrap();
                (chain.clone(), *listed, read)
            })
            .collect::<Vec<_>>()
    };
    let read = node.run(counts.clone()).unwrap();
    assert!(
        read.iter().all(|(_, listed, read)| listed == read),
        "{read:?}"
    );

    node.exec(&["nft", "flush", "table", "ip", "kubenft"])
        .unwrap();
    let read = node.run(counts.clone()).unwrap();
    assert!(read.iter().all(|(_, _, read)| *read == 0), "{read:?}");
    node.exec(&["nft", "delete", "table", "ip", "kubenft"])
        .unwrap();
    let read = node.run(counts).unwrap();
    assert!(read.iter().all(|(_, _, read)| *read == 0), "{read:?}");
}
