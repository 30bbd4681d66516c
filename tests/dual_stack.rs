//! Dual-stack as kube-proxy runs it, with the real binary: both families are programmed
//! whenever the kernel has them, also on a node whose status lists only an IPv4 address (its
//! IPv6 NodePorts then answer on every local IPv6 address, which is logged once); a namespace
//! with IPv6 off gets the `ip` table only; healthCheckNodePort servers answer IPv6 load
//! balancers and listen only inside `--nodeport-addresses` when it lists CIDRs.

use crate::common;
use crate::harness;

use std::process::Command;
use std::time::Duration;

use common::Topology;
use harness::{Daemon, addr, eventually, http_get, wait_for_backends};
use kubenft::netns::{Netns, can_create};
use kubenft::nft::kernel::Nftables;
use kubenft::nft::model::Family;

/// node-a lists only an IPv4 InternalIP; `web` is a dual-stack NodePort Service with one
/// endpoint of each family (both pod-1), `lb` a dual-stack LoadBalancer with
/// externalTrafficPolicy Local and a healthCheckNodePort, its endpoints on this node.
const MANIFESTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.0.0/16, 'fd00:244::/48']}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec:
  type: NodePort
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, 'fd00:96::a']
  ipFamilies: [IPv4, IPv6]
  ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-4, namespace: demo, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.2], nodeName: node-a, conditions: {ready: true}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-6, namespace: demo, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: ['fd00:244:1::2'], nodeName: node-a, conditions: {ready: true}}
---
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: demo}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  healthCheckNodePort: 32001
  clusterIP: 10.96.0.20
  clusterIPs: [10.96.0.20, 'fd00:96::14']
  ipFamilies: [IPv4, IPv6]
  ports: [{name: http, port: 80, nodePort: 30081, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 192.0.2.10}, {ip: 'fd00:96::10'}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: lb-4, namespace: demo, labels: {kubernetes.io/service-name: lb}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.2.2], nodeName: node-a, conditions: {ready: true}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: lb-6, namespace: demo, labels: {kubernetes.io/service-name: lb}}
addressType: IPv6
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: ['fd00:244:2::2'], nodeName: node-a, conditions: {ready: true}}
"#;

const FALLBACK_LOG: &str = "NodePorts of this family are accepted on every local address";

fn manifests_dir(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), text).unwrap();
    dir
}

/// The flags of node-a with a dual-stack cluster CIDR, reading `dir`.
fn node_a(dir: &tempfile::TempDir) -> Vec<String> {
    [
        "--manifests",
        dir.path().to_str().unwrap(),
        "--hostname-override",
        "node-a",
        "--cluster-cidr",
        "10.244.0.0/16,fd00:244::/48",
    ]
    .map(String::from)
    .to_vec()
}

/// Runs `kubenft ARGS` inside `ns`: (success, stderr).
fn kubenft_in(ns: &Netns, args: &[String]) -> (bool, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(), env!("CARGO_BIN_EXE_kubenft")])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sync_once(ns: &Netns, dir: &tempfile::TempDir) -> String {
    let mut args = vec!["sync".to_string(), "--once".to_string()];
    args.extend(node_a(dir));
    let (ok, log) = kubenft_in(ns, &args);
    assert!(ok, "sync --once failed: {log}");
    log
}

/// The families of our tables in `ns`'s kernel, read over netlink.
fn our_families(ns: &Netns) -> Vec<Family> {
    ns.run(|| {
        let mut nft = Nftables::open().unwrap();
        [Family::Ip, Family::Ip6]
            .into_iter()
            .filter(|f| nft.dump_table(*f, "kubenft").unwrap().is_some())
            .collect()
    })
    .unwrap()
}

#[test]
fn render_prints_both_families_for_a_node_with_only_an_ipv4_address() {
    let dir = manifests_dir(MANIFESTS);
    let out = Command::new(env!("CARGO_BIN_EXE_kubenft"))
        .arg("render")
        .args(node_a(&dir))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("table ip kubenft"), "{stdout}");
    let ip6 = stdout
        .split("table ip6 kubenft")
        .nth(1)
        .unwrap_or_else(|| panic!("no ip6 table:\n{stdout}"));
    assert!(ip6.contains("fd00:96::a"), "the IPv6 ClusterIP:\n{ip6}");
    assert!(ip6.contains("fd00:244:1::2"), "its IPv6 endpoint:\n{ip6}");
    // The dual-stack cluster CIDR makes it a warning, logged once.
    assert_eq!(stderr.matches(FALLBACK_LOG).count(), 1, "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("IPv6"),
        "{stderr}"
    );
}

#[test]
fn sync_once_serves_ipv6_on_a_node_with_only_an_ipv4_address() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = manifests_dir(MANIFESTS);
    let lab = Topology::build("dsSo").unwrap();
    sync_once(&lab.node, &dir);
    assert_eq!(our_families(&lab.node), [Family::Ip, Family::Ip6]);

    // Retried: the lab's first IPv6 connection to a pod is sometimes lost (`CONNECT_TIMEOUT`).
    let answered_by_pod_1 = |to: &str| {
        wait_for_backends(&lab, to, &["pod-1"], Duration::from_secs(5));
    };
    answered_by_pod_1("10.96.0.10:80");
    answered_by_pod_1("[fd00:96::a]:80");
    answered_by_pod_1("10.0.0.1:30080");
    // No IPv6 node IP: the node's IPv6 addresses all take IPv6 NodePorts, as with kube-proxy.
    answered_by_pod_1("[fd00::1]:30080");

    let log = sync_once(&lab.node, &dir);
    assert!(log.contains("ops=0"), "a rerun changes nothing: {log}");
}

#[test]
fn a_namespace_with_ipv6_off_gets_only_the_ip_table() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = manifests_dir(MANIFESTS);
    let node = Netns::create("dsNo6").unwrap();
    node.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        .unwrap();
    let log = sync_once(&node, &dir);
    assert_eq!(our_families(&node), [Family::Ip]);
    assert!(log.contains("IPv6 is off"), "{log}");
}

/// `kubenft run` on the manifests in `dir` with `extra` flags, in the lab's node namespace.
fn daemon(lab: &Topology, dir: &tempfile::TempDir, extra: &[&str]) -> Daemon {
    let mut args = node_a(dir);
    args.extend(
        [
            "--manifests-poll-period",
            "100ms",
            "--min-sync-period",
            "50ms",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start(&lab.node, &args)
}

/// Waits for the healthCheckNodePort at `to` to answer 200 for `lb`.
fn healthy(ns: &Netns, to: &str) {
    let (_, body) = eventually(
        Duration::from_secs(10),
        &format!("{to} answers 200"),
        || http_get(ns, addr(to), "/").filter(|(s, _)| *s == 200),
    );
    assert!(body.contains("\"name\":\"lb\""), "{to}: {body}");
}

#[test]
fn health_checks_answer_ipv6_load_balancers_on_a_node_with_only_an_ipv4_address() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = manifests_dir(MANIFESTS);
    let lab = Topology::build("dsHc").unwrap();
    let d = daemon(&lab, &dir, &[]);
    // `primary`: the IPv4 node IP, and every IPv6 address since the node lists none.
    healthy(&lab.client, "10.0.0.1:32001");
    healthy(&lab.client, "[fd00::1]:32001");
    assert_eq!(
        http_get(&lab.node, addr("127.0.0.1:32001"), "/"),
        None,
        "IPv4 listens on the node IP only"
    );
    let log = d.log();
    assert_eq!(log.matches(FALLBACK_LOG).count(), 1, "logged once: {log}");
}

#[test]
fn health_checks_listen_only_on_local_addresses_inside_nodeport_cidrs() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = manifests_dir(MANIFESTS);
    let lab = Topology::build("dsHcC").unwrap();
    let _d = daemon(
        &lab,
        &dir,
        &["--nodeport-addresses", "10.0.0.0/24,fd00::/64"],
    );
    healthy(&lab.client, "10.0.0.1:32001");
    healthy(&lab.client, "[fd00::1]:32001");
    // Local addresses outside the CIDRs do not answer.
    for outside in ["127.0.0.1:32001", "10.255.0.1:32001", "[fd00:ff::1]:32001"] {
        assert_eq!(http_get(&lab.node, addr(outside), "/"), None, "{outside}");
    }
    // And the IPv6 load balancer's traffic itself reaches the local endpoint (retried: the
    // lab's first IPv6 connection to a pod is sometimes lost, see `CONNECT_TIMEOUT`).
    wait_for_backends(&lab, "[fd00:96::10]:80", &["pod-2"], Duration::from_secs(5));
}
