//! Service behaviours with real traffic, IPv4 and IPv6: a node namespace programmed by the
//! planner and the netlink engine, two pods (pod-2 declared on another node, so it counts as
//! remote), an external client, pod-originated and host-originated connections.

use crate::common;
use crate::explain_harness;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Outcome, Topology, try_request};
use explain_harness::{assert_explained, pod_backend};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubenft::cluster::ClusterState;
use kubenft::netns::{Netns, can_create};
use kubenft::nft::kernel::Nftables;
use kubenft::nft::model::Table;
use kubenft::proxier::ProxyConfig;
use kubenft::sync::{Observed, reconcile_transaction};

const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.0.0/16, "fd00:244::/32"]}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}, {type: InternalIP, address: "fd00::1"}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: t}
spec: {clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, "fd00:96::10"], ports: [{name: http, port: 80, protocol: TCP}]}
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
metadata: {name: sticky, namespace: t}
spec: {clusterIP: 10.96.0.30, sessionAffinity: ClientIP, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: empty6, namespace: t}
spec: {clusterIP: "fd00:96::31", clusterIPs: ["fd00:96::31"], ipFamilies: [IPv6], ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: local6, namespace: t}
spec: {type: LoadBalancer, clusterIP: "fd00:96::20", clusterIPs: ["fd00:96::20"], ipFamilies: [IPv6], externalTrafficPolicy: Local, ports: [{name: http, port: 80, nodePort: 30040, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: "fd00:96::1:20"}]}}
---
apiVersion: v1
kind: Service
metadata: {name: allowed6, namespace: t}
spec: {type: LoadBalancer, clusterIP: "fd00:96::22", clusterIPs: ["fd00:96::22"], ipFamilies: [IPv6], loadBalancerSourceRanges: ["fd00::/64"], ports: [{name: http, port: 80, nodePort: 30042, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: "fd00:96::1:22"}]}}
---
apiVersion: v1
kind: Service
metadata: {name: denied6, namespace: t}
spec: {type: LoadBalancer, clusterIP: "fd00:96::23", clusterIPs: ["fd00:96::23"], ipFamilies: [IPv6], loadBalancerSourceRanges: ["2001:db8::/32"], ports: [{name: http, port: 80, nodePort: 30043, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: "fd00:96::1:23"}]}}
"#;

fn slice(service: &str, family: &str, endpoints: &[(&str, &str)]) -> String {
    let eps: Vec<String> = endpoints
        .iter()
        .map(|(ip, node)| {
            format!("  - {{addresses: [\"{ip}\"], nodeName: {node}, conditions: {{ready: true}}}}")
        })
        .collect();
    format!(
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {service}-{}, namespace: t, labels: {{kubernetes.io/service-name: {service}}}}}\naddressType: {family}\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n{}\n",
        family.to_lowercase(),
        eps.join("\n")
    )
}

fn cluster() -> Topology {
    let lab = Topology::build("st").unwrap();
    let mut yaml = CLUSTER.to_string();
    yaml += &slice(
        "web",
        "IPv4",
        &[("10.244.1.2", "node-a"), ("10.244.2.2", "node-b")],
    );
    yaml += &slice(
        "web",
        "IPv6",
        &[("fd00:244:1::2", "node-a"), ("fd00:244:2::2", "node-b")],
    );
    yaml += &slice(
        "local",
        "IPv4",
        &[("10.244.1.2", "node-a"), ("10.244.2.2", "node-b")],
    );
    yaml += &slice("remote-only", "IPv4", &[("10.244.2.2", "node-b")]);
    yaml += &slice("allowed", "IPv4", &[("10.244.1.2", "node-a")]);
    yaml += &slice("denied", "IPv4", &[("10.244.1.2", "node-a")]);
    yaml += &slice(
        "sticky",
        "IPv4",
        &[("10.244.1.2", "node-a"), ("10.244.2.2", "node-b")],
    );
    for svc in ["local6", "allowed6", "denied6"] {
        yaml += &slice(
            svc,
            "IPv6",
            &[("fd00:244:1::2", "node-a"), ("fd00:244:2::2", "node-b")],
        );
    }
    let tables = program(&lab, &yaml);
    assert_eq!(tables, 2, "dual-stack node: an ip and an ip6 table");
    lab
}

/// Plans the Services, EndpointSlices and Node of `yaml` for node-a (dual-stack cluster and
/// service CIDRs) and programs them into the lab's node; returns the number of tables.
fn program(lab: &Topology, yaml: &str) -> usize {
    let tables = plan(yaml);
    let count = tables.len();
    let tx = kubenft::sync::reconcile_transaction(&[], &tables, None);
    lab.node
        .run(move || Nftables::open().unwrap().apply(&tx).unwrap())
        .unwrap();
    count
}

/// The tables of the Services, EndpointSlices and Node of `yaml` for node-a.
fn plan(yaml: &str) -> Vec<Table> {
    let (mut services, mut slices, mut nodes) = (
        Vec::<Service>::new(),
        Vec::<EndpointSlice>::new(),
        Vec::<Node>::new(),
    );
    for v in serde_saphyr::from_multiple::<serde_json::Value>(yaml).unwrap() {
        match v["kind"].as_str() {
            Some("Service") => services.push(serde_json::from_value(v).unwrap()),
            Some("EndpointSlice") => slices.push(serde_json::from_value(v).unwrap()),
            Some("Node") => nodes.push(serde_json::from_value(v).unwrap()),
            _ => {}
        }
    }
    let (state, rejected) = ClusterState::from_objects(&services, &slices, nodes.first());
    assert!(rejected.is_empty(), "{rejected:?}");
    let config = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/32".parse().unwrap(),
        ],
        service_cidrs: vec![
            "10.96.0.0/16".parse().unwrap(),
            "fd00:96::/112".parse().unwrap(),
        ],
        ..ProxyConfig::default()
    };
    kubenft::proxier::build(&state, &config)
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn answers(from: &Netns, to: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|_| match try_request(from, addr(to)) {
            Outcome::Answered { backend, source } => (backend, source),
            other => panic!("{to}: {other:?}"),
        })
        .collect()
}

#[test]
fn service_behaviours_hold_for_real_traffic() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let c = cluster();

    // A pod reaching a ClusterIP keeps its own source; reaching itself (hairpin) is masqueraded.
    for (backend, source) in answers(&c.pods[0], "10.96.0.10:80", 20) {
        match backend.as_str() {
            "pod-2" => assert_eq!(source, "10.244.1.2", "pod traffic is not masqueraded"),
            _ => assert_eq!(source, "10.244.1.1", "hairpin traffic is masqueraded"),
        }
    }
    // The node itself reaches the ClusterIP (nat output hook).
    let from_host: std::collections::BTreeSet<String> = answers(&c.node, "10.96.0.10:80", 20)
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(
        from_host.len(),
        2,
        "host traffic spreads too: {from_host:?}"
    );

    // IPv6 ClusterIP from the external client: both endpoints, masqueraded to the node.
    let v6: std::collections::BTreeSet<String> = answers(&c.client, "[fd00:96::10]:80", 20)
        .into_iter()
        .map(|(b, s)| {
            assert!(
                s.starts_with("fd00:244:"),
                "masqueraded to the node's pod-side address, saw {s}"
            );
            b
        })
        .collect();
    assert_eq!(v6.len(), 2, "{v6:?}");

    // externalTrafficPolicy Local: only the local endpoint, and the client's address survives.
    for (backend, source) in answers(&c.client, "192.0.2.20:80", 10) {
        assert_eq!((backend.as_str(), source.as_str()), ("pod-1", "10.0.0.2"));
    }
    // ... and without a local endpoint the traffic is dropped, not rejected.
    assert_eq!(
        try_request(&c.client, addr("192.0.2.21:80")),
        Outcome::TimedOut
    );
    // NodePort of the same eTP Local service on the node IP: local endpoint only.
    for (backend, _) in answers(&c.client, "10.0.0.1:30020", 5) {
        assert_eq!(backend, "pod-1");
    }

    // LoadBalancerSourceRanges: a listed client gets in, an unlisted one is dropped.
    assert!(matches!(
        try_request(&c.client, addr("192.0.2.22:80")),
        Outcome::Answered { .. }
    ));
    assert_eq!(
        try_request(&c.client, addr("192.0.2.23:80")),
        Outcome::TimedOut
    );
    // NodePorts are not subject to source ranges.
    assert!(matches!(
        try_request(&c.client, addr("10.0.0.1:30023")),
        Outcome::Answered { .. }
    ));

    // ClientIP affinity: once chosen, the same endpoint keeps answering this client.
    let sticky: std::collections::BTreeSet<String> = answers(&c.client, "10.96.0.30:80", 10)
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(sticky.len(), 1, "{sticky:?}");

    // IPv6: a pod keeps its source, the host reaches services, eTP Local keeps the client's
    // address and uses the local endpoint only, source ranges admit and drop.
    for (backend, source) in answers(&c.pods[0], "[fd00:96::10]:80", 10) {
        if backend == "pod-2" {
            assert_eq!(
                source, "fd00:244:1::2",
                "IPv6 pod traffic is not masqueraded"
            );
        }
    }
    assert_eq!(answers(&c.node, "[fd00:96::10]:80", 3).len(), 3);
    for (backend, source) in answers(&c.client, "[fd00:96::1:20]:80", 8) {
        assert_eq!((backend.as_str(), source.as_str()), ("pod-1", "fd00::2"));
    }
    assert!(matches!(
        try_request(&c.client, addr("[fd00:96::1:22]:80")),
        Outcome::Answered { .. }
    ));
    assert_eq!(
        try_request(&c.client, addr("[fd00:96::1:23]:80")),
        Outcome::TimedOut
    );

    // An address in the service CIDR that no Service holds is dropped; IPv6 rejects too.
    assert_eq!(
        try_request(&c.client, addr("10.96.0.99:80")),
        Outcome::TimedOut
    );
    assert_eq!(
        try_request(&c.client, addr("[fd00:96::31]:80")),
        Outcome::Refused
    );

    // `kubenft explain`, asked in the node, predicts each of these connections: endpoints,
    // masquerading, drop or reject. The node's own connections leave from the address of its
    // default route's interface. The sticky client is pinned by now, and explain must say so.
    let (pod, node, client) = (&c.pods[0], &c.node, &c.client);
    for (ns, from, to) in [
        (pod, "10.244.1.2", "10.96.0.10:80"),
        (node, "10.255.0.1", "10.96.0.10:80"),
        (client, "fd00::2", "[fd00:96::10]:80"),
        (client, "10.0.0.2", "192.0.2.20:80"),
        (client, "10.0.0.2", "192.0.2.21:80"),
        (client, "10.0.0.2", "10.0.0.1:30020"),
        (client, "10.0.0.2", "192.0.2.22:80"),
        (client, "10.0.0.2", "192.0.2.23:80"),
        (client, "10.0.0.2", "10.0.0.1:30023"),
        (client, "10.0.0.2", "10.96.0.30:80"),
        (pod, "fd00:244:1::2", "[fd00:96::10]:80"),
        (node, "fd00:ff::1", "[fd00:96::10]:80"),
        (client, "fd00::2", "[fd00:96::1:20]:80"),
        (client, "fd00::2", "[fd00:96::1:22]:80"),
        (client, "fd00::2", "[fd00:96::1:23]:80"),
        (client, "10.0.0.2", "10.96.0.99:80"),
        (client, "fd00::2", "[fd00:96::31]:80"),
    ] {
        assert_explained(node, ns, from, to, 16, 0.25, &pod_backend);
    }
    drop(c);
}

/// How many connections to `service` (an address without port) the node's conntrack table
/// shows going to each endpoint address (the reply's source).
fn connections_by_endpoint(
    node: &Netns,
    family: &str,
    service: &str,
) -> std::collections::BTreeMap<String, usize> {
    let out = node
        .exec(&["conntrack", "-L", "-f", family, "-p", "tcp", "-d", service])
        .unwrap();
    let mut counts = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // Original direction first, then the reply: its source is the endpoint.
        let endpoint = line
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("src="))
            .nth(1)
            .unwrap_or_else(|| panic!("no reply source in {line}"));
        *counts.entry(endpoint.to_string()).or_default() += 1;
    }
    counts
}

/// Pearson's chi-square of `counts` against an even spread.
fn chi_square(counts: &[usize]) -> f64 {
    let total: usize = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// ClusterIP-only services draw a slot of the next power of two at or above their endpoint
/// count in a shared chain; empty slots draw again. Real connections must all be answered
/// (a miss never leaks through untranslated) and spread evenly (the last, fallback draw is
/// rare), for 5 endpoints over 8 slots and 3 over 4, IPv4 and IPv6.
#[test]
fn endpoints_in_part_of_a_shared_chains_slots_share_connections_evenly() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let lab = Topology::build("sl").unwrap();
    // More endpoint addresses on the two pods (their backends listen on every address).
    for (pod, n) in [(&lab.pods[0], 1), (&lab.pods[1], 2)] {
        for host in [3, 4] {
            common::sh(pod, &format!("ip addr add 10.244.{n}.{host}/24 dev eth0"));
            common::sh(
                pod,
                &format!("ip -6 addr add fd00:244:{n}::{host}/64 dev eth0 nodad"),
            );
        }
    }
    let v4 = [
        "10.244.1.2",
        "10.244.1.3",
        "10.244.1.4",
        "10.244.2.2",
        "10.244.2.3",
    ];
    let v6 = ["fd00:244:1::3", "fd00:244:2::2", "fd00:244:2::4"];
    let mut yaml = String::from(
        r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.0.0/16, "fd00:244::/32"]}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}, {type: InternalIP, address: "fd00::1"}]}
---
apiVersion: v1
kind: Service
metadata: {name: five, namespace: t}
spec: {clusterIP: 10.96.0.50, clusterIPs: [10.96.0.50], ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: three, namespace: t}
spec: {clusterIP: "fd00:96::50", clusterIPs: ["fd00:96::50"], ipFamilies: [IPv6], ports: [{name: http, port: 80, protocol: TCP}]}
"#,
    );
    let on_node = |ips: &[&'static str]| ips.iter().map(|ip| (*ip, "node-a")).collect::<Vec<_>>();
    yaml += &slice("five", "IPv4", &on_node(&v4));
    yaml += &slice("three", "IPv6", &on_node(&v6));
    program(&lab, &yaml);

    for (family, service, to, endpoints, connections) in [
        ("ipv4", "10.96.0.50", "10.96.0.50:80", &v4[..], 500),
        ("ipv6", "fd00:96::50", "[fd00:96::50]:80", &v6[..], 300),
    ] {
        // Every connection is answered: a drawn empty slot never leaves a packet untranslated.
        answers(&lab.client, to, connections);
        let counts = connections_by_endpoint(&lab.node, family, service);
        let mut seen: Vec<&str> = counts.keys().map(String::as_str).collect();
        seen.sort();
        let mut want = endpoints.to_vec();
        want.sort();
        assert_eq!(seen, want, "{service}: {counts:?}");
        let n: Vec<usize> = counts.values().copied().collect();
        // Conntrack forgets a few: a client port reused for a new connection replaces the old
        // entry. Most must be there for the spread to mean anything.
        let tracked: usize = n.iter().sum();
        assert!(
            tracked >= connections * 9 / 10 && tracked <= connections,
            "{tracked} of {connections} connections tracked: {counts:?}"
        );
        // 4 or 2 degrees of freedom: an even spread exceeds 25 with probability below 1e-4.
        let chi2 = chi_square(&n);
        assert!(
            chi2 < 25.0,
            "{service}: chi-square {chi2:.1} for {counts:?}"
        );
    }
    drop(lab);
}

/// A service whose endpoint count crosses powers of two moves between shared pick chains: its
/// key leaves one `pick-M-services` set and slot map and enters another; changing its
/// externalTrafficPolicy moves it between a pick chain and chains of its own. The kernel reads
/// its generation anew at each set lookup, so a packet can see a move half done (the old set
/// and the new slots, neither set, a new chain still empty to it). Thousands of such moves,
/// each one transaction, must not fail a single connection, for ClusterIP and NodePort
/// traffic alike.
#[test]
fn connections_never_fail_while_a_service_moves_between_pick_chains() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let lab = Topology::build("pm").unwrap();
    common::sh(&lab.pods[0], "ip addr add 10.244.1.3/24 dev eth0");
    let service = |policy: &str| {
        format!(
            r#"
apiVersion: v1
kind: Node
metadata: {{name: node-a}}
spec: {{podCIDRs: [10.244.0.0/16]}}
status: {{addresses: [{{type: InternalIP, address: 10.0.0.1}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: moving, namespace: t}}
spec: {{type: NodePort, externalTrafficPolicy: {policy}, clusterIP: 10.96.0.60, clusterIPs: [10.96.0.60], ports: [{{name: http, port: 80, nodePort: 30060, protocol: TCP}}]}}
"#
        )
    };
    let endpoints = ["10.244.1.2", "10.244.2.2", "10.244.1.3"];
    // 1, 2 and 3 endpoints: pick-1, pick-2 and pick-4; with policy Local, chains of its own.
    let state = |policy: &str, n: usize| {
        let on_node: Vec<_> = endpoints[..n].iter().map(|ip| (*ip, "node-a")).collect();
        plan(&format!(
            "{}{}",
            service(policy),
            slice("moving", "IPv4", &on_node)
        ))
    };
    let states: Vec<Vec<Table>> = vec![
        state("Cluster", 1),
        state("Cluster", 2),
        state("Cluster", 3),
        state("Local", 3),
    ];
    // Moves to larger and to smaller pick chains, and between a pick chain and chains of its
    // own.
    let walk = [0, 1, 2, 3, 2, 1];
    let moves: Vec<_> = (0..walk.len())
        .map(|i| {
            let from: Vec<_> = states[walk[i]]
                .iter()
                .map(|t| (t.table_ref(), Observed::Read(t.clone())))
                .collect();
            reconcile_transaction(&from, &states[walk[(i + 1) % walk.len()]], None)
        })
        .collect();
    let first = reconcile_transaction(&[], &states[0], None);
    lab.node
        .run(move || Nftables::open().unwrap().apply(&first).unwrap())
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let mover = {
        let stop = stop.clone();
        lab.node
            .spawn(move || {
                let mut nft = Nftables::open().unwrap();
                let mut applied = 0usize;
                for tx in moves.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    nft.apply(tx).unwrap();
                    applied += 1;
                }
                applied
            })
            .unwrap()
    };
    let clients: Vec<_> = ["10.96.0.60:80", "10.0.0.1:30060"]
        .into_iter()
        .flat_map(|to| [to, to])
        .map(|to| {
            let stop = stop.clone();
            lab.client
                .spawn(move || {
                    let (mut ok, mut failed) = (0usize, Vec::new());
                    while !stop.load(Ordering::Relaxed) {
                        match kubenft::lab::connect_once(addr(to)) {
                            Ok(_) => ok += 1,
                            Err(e) => failed.push(format!("{to}: {e}")),
                        }
                    }
                    (ok, failed)
                })
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(10));
    stop.store(true, Ordering::Relaxed);
    let applied = mover.join().unwrap().unwrap();
    let (mut ok, mut failed) = (0, Vec::new());
    for c in clients {
        let (o, f) = c.join().unwrap().unwrap();
        ok += o;
        failed.extend(f);
    }
    eprintln!("{applied} moves, {ok} connections");
    assert!(
        failed.is_empty(),
        "{} of {} connections failed: {:?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(10)]
    );
    assert!(applied > 1000, "the service moved often: {applied}");
    assert!(ok > 1000, "traffic flowed: {ok}");
    drop(lab);
}
