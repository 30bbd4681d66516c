//! The planner's decisions, asserted on the table values it builds for small clusters.

use super::*;
use crate::model::ClusterState;
use crate::nft::model::{CmpOp, Family, MapData, Rule, Selector, Set, Stmt, Table, Value, Verdict};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::{BTreeMap, BTreeSet};

const NODE: &str = "
metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-a}}
spec: {podCIDRs: [10.244.0.0/24, 'fd00:244::/64']}
status: {addresses: [{type: InternalIP, address: 10.0.0.10}, {type: InternalIP, address: 'fd00:10::10'}]}
";

fn service(yaml: &str) -> Service {
    serde_saphyr::from_str(yaml).unwrap()
}

fn slice(service: &str, family: &str, port: u16, endpoints: &str) -> EndpointSlice {
    serde_saphyr::from_str(&format!(
        "metadata: {{name: {service}-x, namespace: default, labels: {{kubernetes.io/service-name: {service}}}}}
addressType: {family}
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints: {endpoints}"
    ))
    .unwrap()
}

fn config() -> ProxyConfig {
    ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/48".parse().unwrap(),
        ],
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        ..ProxyConfig::default()
    }
}

fn plan(services: &[Service], slices: &[EndpointSlice], config: &ProxyConfig) -> Vec<Table> {
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let (state, rejected) = ClusterState::from_objects(services, slices, Some(&node));
    assert!(rejected.is_empty(), "{rejected:?}");
    build(&state, config)
}

fn v4(tables: &[Table]) -> &Table {
    tables.iter().find(|t| t.family == Family::Ip).unwrap()
}

fn verdict_for(set: &Set, key_prefix: &Value) -> Option<Verdict> {
    set.elements
        .iter()
        .find(|e| e.key.first() == Some(key_prefix))
        .and_then(|e| e.data.as_ref()?.verdict().cloned())
}

/// The chain traffic to `cluster_ip` goes to: its `service-ips` element's, or the shared pick
/// chain whose set holds it.
fn chain_for(t: &Table, cluster_ip: &Value) -> Option<String> {
    if let Some(Verdict::Jump(chain)) = verdict_for(&t.sets["service-ips"], cluster_ip) {
        return Some(chain);
    }
    let mut slots = 1;
    while slots <= MAX_SHARED_PICK_ENDPOINTS {
        let set = &t.sets[&names::pick_set(slots)];
        if set
            .elements
            .iter()
            .any(|e| e.key.first() == Some(cluster_ip))
        {
            return Some(names::pick_chain(slots));
        }
        slots *= 2;
    }
    None
}

/// The endpoint map's elements over all shards, in slot order.
fn slots(t: &Table) -> Vec<((u32, u32), String)> {
    let mut out: Vec<((u32, u32), String)> = t
        .sets
        .values()
        .filter(|s| names::is_endpoint_map(&s.name))
        .flat_map(|s| &s.elements)
        .map(|e| {
            let range = match e.key[..] {
                [Value::IntRange { first, last }] => (first, last),
                ref other => panic!("endpoint map key {other:?}"),
            };
            let target = match &e.data {
                Some(MapData::Values(v)) => format!("{}:{}", v[0], v[1]),
                other => panic!("endpoint map data {other:?}"),
            };
            (range, target)
        })
        .collect();
    out.sort();
    out
}

/// The `ip:port` endpoints the endpoint map holds, in slot order, then those of the shared
/// slot map (ordered by service address, protocol, port and slot).
fn slot_endpoints(t: &Table) -> Vec<String> {
    let mut shared: Vec<(Vec<Value>, String)> = t
        .sets
        .values()
        .filter(|s| names::is_pick_slots(&s.name))
        .flat_map(|s| &s.elements)
        .map(|e| match &e.data {
            Some(MapData::Values(v)) => (e.key.clone(), format!("{}:{}", v[0], v[1])),
            other => panic!("slot map data {other:?}"),
        })
        .collect();
    shared.sort();
    slots(t)
        .into_iter()
        .map(|(_, e)| e)
        .chain(shared.into_iter().map(|(_, e)| e))
        .collect()
}

/// The (first, last) slot ranges of the endpoint map, in order.
fn slot_ranges(t: &Table) -> Vec<(u32, u32)> {
    slots(t).into_iter().map(|(r, _)| r).collect()
}

const WEB: &str = "
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, protocol: TCP}]}
";

/// WEB reached from outside with externalTrafficPolicy Local: its endpoints are picked by
/// chains of its own.
const WEB_NODEPORT: &str = "
metadata: {name: web, namespace: default}
spec: {type: NodePort, externalTrafficPolicy: Local, clusterIP: 10.96.0.10, ports: [{name: http, port: 80, protocol: TCP, nodePort: 30080}]}
";

/// Two ready endpoints, neither on this node (so an externalTrafficPolicy Local service has
/// no local chain).
const TWO_ELSEWHERE: &str = "[{addresses: [10.244.0.11], nodeName: node-c, conditions: {ready: true}}, {addresses: [10.244.1.12], nodeName: node-b, conditions: {ready: true}}]";

const TWO_READY: &str = "[{addresses: [10.244.0.11], nodeName: node-a, conditions: {ready: true}}, {addresses: [10.244.1.12], nodeName: node-b, conditions: {ready: true}}]";

fn ip(s: &str) -> Value {
    Value::Ipv4(s.parse().unwrap())
}

#[test]
fn a_node_port_service_with_two_ready_endpoints_picks_one_by_a_random_slot_of_its_block() {
    let t = plan(
        &[service(WEB_NODEPORT)],
        &[slice("web", "IPv4", 8080, TWO_ELSEWHERE)],
        &config(),
    );
    let t = v4(&t);
    let Some(Verdict::Jump(chain)) = verdict_for(&t.sets["service-ips"], &ip("10.96.0.10")) else {
        panic!("no service-ips entry")
    };
    let rules = &t.chains[&chain].rules;
    assert_eq!(
        rules[rules.len() - 2].stmts[..],
        [
            Stmt::Match {
                left: Selector::L4Proto,
                mask: None,
                op: CmpOp::Eq,
                right: Value::Proto(6)
            },
            Stmt::DnatNumgenMap {
                modulus: SLOTS_PER_BLOCK,
                offset: 0,
                map: "service-endpoints-000".into()
            }
        ]
    );
    // A block dropped while a packet was on its way here: the first endpoint.
    assert_eq!(
        rules.last().unwrap().stmts,
        [Stmt::DnatMap {
            key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
            map: "pick-fallback".into()
        }]
    );
    // Half the block each; no endpoint chains.
    assert_eq!(slot_ranges(t), [(0, 32767), (32768, 65535)]);
    assert_eq!(slot_endpoints(t), ["10.244.0.11:8080", "10.244.1.12:8080"]);
    assert!(!t.chains.keys().any(|c| c.starts_with("endpoint-")));
    assert_eq!(
        t.sets["hairpin-endpoints"].elements.len(),
        2,
        "each endpoint is masqueraded when it reaches itself"
    );
    assert!(
        t.sets["cluster-ips"]
            .elements
            .iter()
            .any(|e| e.key == vec![ip("10.96.0.10")])
    );
}

#[test]
fn a_service_without_endpoints_is_rejected_not_dispatched() {
    let t = plan(&[service(WEB)], &[], &config());
    let t = v4(&t);
    assert_eq!(chain_for(t, &ip("10.96.0.10")), None);
    assert_eq!(
        verdict_for(&t.sets["no-endpoint-services"], &ip("10.96.0.10")),
        Some(Verdict::Goto("reject-chain".into()))
    );
}

#[test]
fn terminating_endpoints_serve_only_when_none_is_ready() {
    let eps = "[{addresses: [10.244.0.11], conditions: {ready: false, serving: true, terminating: true}}, {addresses: [10.244.0.12], conditions: {ready: false, serving: false, terminating: true}}]";
    let t = plan(
        &[service(WEB)],
        &[slice("web", "IPv4", 8080, eps)],
        &config(),
    );
    let t = v4(&t);
    let endpoints = slot_endpoints(t);
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    assert!(endpoints[0].contains("10.244.0.11"));
}

/// eTP Local on a node without a local endpoint, as upstream: the external chain still
/// short-circuits pods and the (masqueraded) host to the cluster endpoints, and only traffic
/// from outside, left untranslated, meets the no-endpoint drop.
#[test]
fn external_traffic_policy_local_without_local_endpoints_serves_only_pods_and_the_host() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {type: LoadBalancer, clusterIP: 10.96.0.10, externalTrafficPolicy: Local, ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 198.51.100.10}]}}
",
    );
    let remote_only = "[{addresses: [10.244.1.12], nodeName: node-b, conditions: {ready: true}}]";
    let t = plan(
        &[svc],
        &[slice("web", "IPv4", 8080, remote_only)],
        &config(),
    );
    let t = v4(&t);
    assert_eq!(
        verdict_for(&t.sets["no-endpoint-nodeports"], &Value::Proto(6)),
        Some(Verdict::Drop)
    );
    assert_eq!(
        verdict_for(&t.sets["no-endpoint-services"], &ip("198.51.100.10")),
        Some(Verdict::Drop)
    );
    let Some(Verdict::Jump(external)) = verdict_for(&t.sets["service-nodeports"], &Value::Proto(6))
    else {
        panic!("the NodePort has no external chain")
    };
    assert_eq!(
        verdict_for(&t.sets["service-ips"], &ip("198.51.100.10")),
        Some(Verdict::Jump(external.clone()))
    );
    // Cluster traffic reaches the remote endpoint, and so do the short-circuits.
    let cluster = chain_for(t, &ip("10.96.0.10")).expect("ClusterIP chain");
    let rules = &t.chains[&external].rules;
    let gotos: Vec<&Verdict> = rules
        .iter()
        .filter_map(|r| match r.stmts.last() {
            Some(Stmt::Verdict(v)) => Some(v),
            _ => None,
        })
        .collect();
    let pod_source = rules[0].stmts[0].clone();
    let host_source = Stmt::Match {
        left: Selector::FibSaddrType,
        mask: None,
        op: CmpOp::Eq,
        right: Value::AddrType(crate::nft::model::AddrType::Local),
    };
    assert_eq!(
        gotos,
        [
            &Verdict::Goto(cluster.clone()),
            &Verdict::Jump("mark-for-masquerade".into()),
            &Verdict::Goto(cluster.clone()),
        ],
        "pods, the host masqueraded, and nothing for traffic from outside"
    );
    assert!(
        matches!(
            pod_source,
            Stmt::Match {
                left: Selector::IpSaddr,
                ..
            }
        ),
        "{pod_source:?}"
    );
    assert_eq!(rules[1].stmts[0], host_source);
    assert_eq!(rules[2].stmts[0], host_source);
    assert!(!t.chains.keys().any(|c| c.starts_with("local-")));
    // Traffic from outside gets no endpoint from `pick-retry` either.
    assert_eq!(fallback_of(t, "198.51.100.10", 80), None);
    assert_eq!(fallback_of(t, "10.0.0.10", 30080), None);
    assert_eq!(
        fallback_of(t, "10.96.0.10", 80).as_deref(),
        Some("10.244.1.12:8080")
    );
    assert!(
        t.sets["nodeport-ips"]
            .elements
            .iter()
            .any(|e| e.key == vec![ip("10.0.0.10")])
    );
}

#[test]
fn internal_traffic_policy_local_without_local_endpoints_drops() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, internalTrafficPolicy: Local, ports: [{name: http, port: 80, protocol: TCP}]}
",
    );
    let remote_only = "[{addresses: [10.244.1.12], nodeName: node-b, conditions: {ready: true}}]";
    let t = plan(
        &[svc],
        &[slice("web", "IPv4", 8080, remote_only)],
        &config(),
    );
    assert_eq!(
        verdict_for(&v4(&t).sets["no-endpoint-services"], &ip("10.96.0.10")),
        Some(Verdict::Drop)
    );
}

#[test]
fn client_ip_affinity_keeps_a_dynamic_timeout_set_per_endpoint() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, sessionAffinity: ClientIP, ports: [{name: http, port: 80, protocol: TCP}]}
",
    );
    let t = plan(&[svc], &[slice("web", "IPv4", 8080, TWO_READY)], &config());
    let t = v4(&t);
    let affinity: Vec<&Set> = t
        .sets
        .values()
        .filter(|s| s.name.starts_with("affinity-"))
        .collect();
    assert_eq!(affinity.len(), 2);
    assert!(
        affinity
            .iter()
            .all(|s| s.dynamic && s.timeout == Some(10800))
    );
    let updates = t
        .chains
        .values()
        .flat_map(|c| &c.rules)
        .flat_map(|r| &r.stmts)
        .filter(|s| matches!(s, Stmt::Update { .. }))
        .count();
    assert_eq!(updates, 2);
}

#[test]
fn load_balancer_source_ranges_gate_the_lb_ip_before_dnat() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {type: LoadBalancer, clusterIP: 10.96.0.10, loadBalancerSourceRanges: [203.0.113.0/24], ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.10}]}}
",
    );
    let t = plan(&[svc], &[slice("web", "IPv4", 8080, TWO_READY)], &config());
    let t = v4(&t);
    let Some(Verdict::Goto(fw)) = verdict_for(&t.sets["firewall-ips"], &ip("192.0.2.10")) else {
        panic!("no firewall entry")
    };
    let last = t.chains[&fw].rules.last().unwrap();
    assert_eq!(last.stmts, vec![Stmt::Verdict(Verdict::Drop)]);
    assert!(
        verdict_for(&t.sets["firewall-ips"], &ip("10.96.0.10")).is_none(),
        "ClusterIPs are not subject to source ranges"
    );
}

#[test]
fn a_dual_stack_service_gets_an_entry_in_each_family_table() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, 'fd00:96::10'], ports: [{name: http, port: 80, protocol: TCP}]}
",
    );
    let v6eps = "[{addresses: ['fd00:244::11'], nodeName: node-a, conditions: {ready: true}}]";
    let tables = plan(
        &[svc],
        &[
            slice("web", "IPv4", 8080, TWO_READY),
            slice("web6", "IPv6", 8080, v6eps),
        ],
        &config(),
    );
    assert_eq!(tables.len(), 2);
    let t6 = tables.iter().find(|t| t.family == Family::Ip6).unwrap();
    let v6ip = Value::Ipv6("fd00:96::10".parse().unwrap());
    assert!(
        verdict_for(&t6.sets["service-ips"], &v6ip).is_some()
            || verdict_for(&t6.sets["no-endpoint-services"], &v6ip).is_some()
    );
}

#[test]
fn a_malformed_service_is_rejected_and_the_others_still_planned() {
    let bad = service(
        "metadata: {name: bad, namespace: default}\nspec: {clusterIP: not-an-ip, ports: [{port: 80}]}",
    );
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let (state, rejected) = ClusterState::from_objects(
        &[bad, service(WEB)],
        &[slice("web", "IPv4", 8080, TWO_READY)],
        Some(&node),
    );
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].name, "bad");
    assert!(rejected[0].reason.contains("not-an-ip"));
    let t = build(&state, &config());
    assert!(chain_for(v4(&t), &ip("10.96.0.10")).is_some());
}

#[test]
fn two_services_with_one_name_are_both_rejected_whatever_their_order() {
    let other = service(&WEB.replace("10.96.0.10", "10.96.0.99"));
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    for services in [[service(WEB), other.clone()], [other.clone(), service(WEB)]] {
        let (state, rejected) = ClusterState::from_objects(&services, &[], Some(&node));
        assert!(state.services.is_empty(), "neither copy is proxied");
        assert_eq!(rejected.len(), 2);
        assert!(rejected[0].reason.contains("2 Services share this name"));
    }
}

#[test]
fn headless_services_are_not_proxied() {
    let headless = service(
        "metadata: {name: h, namespace: default}\nspec: {clusterIP: None, ports: [{port: 80}]}",
    );
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let (state, rejected) = ClusterState::from_objects(&[headless], &[], Some(&node));
    assert!(rejected.is_empty() && state.services.is_empty());
}

#[test]
fn nodeports_never_listen_on_loopback_even_inside_the_configured_cidrs() {
    let mut c = config();
    c.nodeport_addresses = NodePortAddresses::Cidrs(vec!["0.0.0.0/0".parse().unwrap()]);
    c.local_addresses = vec![
        "127.0.0.1".parse().unwrap(),
        "10.0.0.10".parse().unwrap(),
        "192.168.5.1".parse().unwrap(),
    ];
    let t = plan(&[service(WEB)], &[], &c);
    let ips: Vec<&Vec<Value>> = v4(&t).sets["nodeport-ips"]
        .elements
        .iter()
        .map(|e| &e.key)
        .collect();
    assert_eq!(ips, vec![&vec![ip("10.0.0.10")], &vec![ip("192.168.5.1")]]);
}

#[test]
fn masquerade_all_marks_every_cluster_ip_connection() {
    let mut c = config();
    c.masquerade_all = true;
    let t = plan(
        &[service(WEB)],
        &[slice("web", "IPv4", 8080, TWO_READY)],
        &c,
    );
    let t = v4(&t);
    let chain = chain_for(t, &ip("10.96.0.10")).unwrap();
    assert_eq!(
        chain, "pick-2",
        "a ClusterIP-only service uses the shared chain"
    );
    let first = &t.chains[&chain].rules[0].stmts;
    assert_eq!(
        first[..],
        [Stmt::Verdict(Verdict::Jump("mark-for-masquerade".into()))],
        "no source condition"
    );
}

#[test]
fn the_same_input_renders_byte_for_byte_the_same() {
    let a = plan(
        &[service(WEB)],
        &[slice("web", "IPv4", 8080, TWO_READY)],
        &config(),
    );
    let b = plan(
        &[service(WEB)],
        &[slice("web", "IPv4", 8080, TWO_READY)],
        &config(),
    );
    let text = |t: &[Table]| {
        t.iter()
            .map(crate::nft::render::render_table)
            .collect::<String>()
    };
    assert_eq!(text(&a), text(&b));
}

#[test]
fn zone_hints_keep_traffic_in_this_zone_only_when_every_endpoint_has_them() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, trafficDistribution: PreferClose, ports: [{name: http, port: 80, protocol: TCP}]}
",
    );
    let hinted = "[{addresses: [10.244.0.11], zone: zone-a, hints: {forZones: [{name: zone-a}]}, conditions: {ready: true}}, {addresses: [10.244.1.12], zone: zone-b, hints: {forZones: [{name: zone-b}]}, conditions: {ready: true}}]";
    let t = plan(
        std::slice::from_ref(&svc),
        &[slice("web", "IPv4", 8080, hinted)],
        &config(),
    );
    let endpoints = slot_endpoints(v4(&t));
    assert_eq!(endpoints.len(), 1, "only zone-a's endpoint: {endpoints:?}");
    assert!(endpoints[0].contains("10.244.0.11"));

    let partly = "[{addresses: [10.244.0.11], hints: {forZones: [{name: zone-a}]}, conditions: {ready: true}}, {addresses: [10.244.1.12], conditions: {ready: true}}]";
    let t = plan(&[svc], &[slice("web", "IPv4", 8080, partly)], &config());
    assert_eq!(
        slot_endpoints(v4(&t)).len(),
        2,
        "incomplete hints are ignored"
    );
}

#[test]
fn detect_local_modes_decide_which_sources_are_not_masqueraded() {
    let source_condition = |detect: DetectLocal| {
        let mut c = config();
        c.detect_local = detect;
        let t = plan(
            &[service(WEB)],
            &[slice("web", "IPv4", 8080, TWO_READY)],
            &c,
        );
        let t = v4(&t);
        let chain = chain_for(t, &ip("10.96.0.10")).unwrap();
        t.chains[&chain].rules[0]
            .stmts
            .iter()
            .find(|s| matches!(s, Stmt::Match { op: CmpOp::Ne, .. }))
            .expect("a source condition")
            .clone()
    };
    let cond = |left, right| Stmt::Match {
        left,
        mask: None,
        op: crate::nft::model::CmpOp::Ne,
        right,
    };
    use crate::nft::model::Selector;
    assert_eq!(
        source_condition(DetectLocal::ClusterCidr),
        cond(
            Selector::IpSaddr,
            Value::Ipv4Net("10.244.0.0/16".parse().unwrap())
        )
    );
    assert_eq!(
        source_condition(DetectLocal::NodeCidr),
        cond(
            Selector::IpSaddr,
            Value::Ipv4Net("10.244.0.0/24".parse().unwrap())
        )
    );
    assert_eq!(
        source_condition(DetectLocal::BridgeInterface("cbr0".into())),
        cond(Selector::IifName, Value::IfName("cbr0".into()))
    );
    assert_eq!(
        source_condition(DetectLocal::InterfaceNamePrefix("veth".into())),
        cond(Selector::IifName, Value::IfName("veth*".into()))
    );
}

#[test]
fn tcp_udp_and_sctp_on_one_port_number_are_distinct_entries() {
    let svc = service(
        "
metadata: {name: multi, namespace: default}
spec: {clusterIP: 10.96.0.10, ports: [{name: t, port: 53, protocol: TCP}, {name: u, port: 53, protocol: UDP}, {name: s, port: 53, protocol: SCTP}]}
",
    );
    let t = plan(&[svc], &[], &config());
    let protos: Vec<&Value> = v4(&t).sets["no-endpoint-services"]
        .elements
        .iter()
        .map(|e| &e.key[1])
        .collect();
    assert_eq!(
        protos,
        vec![&Value::Proto(6), &Value::Proto(17), &Value::Proto(132)]
    );
}

#[test]
fn prefer_same_node_keeps_traffic_on_this_node_when_the_hints_allow() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, trafficDistribution: PreferSameNode, ports: [{name: http, port: 80, protocol: TCP}]}
",
    );
    let hinted = "[{addresses: [10.244.0.11], nodeName: node-a, hints: {forNodes: [{name: node-a}], forZones: [{name: zone-a}]}, conditions: {ready: true}}, {addresses: [10.244.1.12], nodeName: node-b, hints: {forNodes: [{name: node-b}], forZones: [{name: zone-a}]}, conditions: {ready: true}}]";
    let t = plan(
        std::slice::from_ref(&svc),
        &[slice("web", "IPv4", 8080, hinted)],
        &config(),
    );
    let endpoints = slot_endpoints(v4(&t));
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    assert!(endpoints[0].contains("10.244.0.11"));

    // With the PreferSameTrafficDistribution gate off, kube-proxy reads no node hints: both
    // endpoints share this zone's hint, so both serve.
    let gate_off = ProxyConfig {
        use_node_hints: false,
        ..config()
    };
    let t = plan(&[svc], &[slice("web", "IPv4", 8080, hinted)], &gate_off);
    assert_eq!(slot_endpoints(v4(&t)).len(), 2);
}

#[test]
fn external_name_services_are_not_proxied() {
    let svc = service(
        "metadata: {name: ext, namespace: default}\nspec: {type: ExternalName, externalName: example.invalid}",
    );
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let (state, rejected) = ClusterState::from_objects(&[svc], &[], Some(&node));
    assert!(rejected.is_empty() && state.services.is_empty());
}

#[test]
fn endpoints_share_their_block_evenly_and_blocks_do_not_overlap() {
    let endpoints = |n: usize| {
        (0..n)
            .map(|i| {
                format!(
                    "{{addresses: [10.244.3.{}], conditions: {{ready: true}}}}",
                    i + 1
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let api = service(
        "metadata: {name: api, namespace: default}\nspec: {type: NodePort, externalTrafficPolicy: Local, clusterIP: 10.96.0.11, ports: [{name: http, port: 80, protocol: TCP, nodePort: 30081}]}",
    );
    let t = plan(
        &[service(WEB_NODEPORT), api],
        &[
            slice("web", "IPv4", 8080, &format!("[{}]", endpoints(7))),
            slice("api", "IPv4", 8080, &format!("[{}]", endpoints(3))),
        ],
        &config(),
    );
    let ranges = slot_ranges(v4(&t));
    assert_eq!(ranges.len(), 10);
    // Contiguous from 0 over two whole blocks: every slot drawn finds exactly one endpoint.
    for w in ranges.windows(2) {
        assert_eq!(w[0].1 + 1, w[1].0, "{ranges:?}");
    }
    assert_eq!(ranges[0].0, 0);
    assert_eq!(ranges[9].1, 2 * SLOTS_PER_BLOCK - 1);
    // Within a block, shares differ by at most one slot.
    for block in [&ranges[..3], &ranges[3..]] {
        let sizes: Vec<u32> = block.iter().map(|(a, b)| b - a + 1).collect();
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(max - min <= 1, "{sizes:?}");
    }
}

#[test]
fn a_service_keeps_its_block_when_endpoints_change_and_new_services_take_free_blocks() {
    let api = |ip: &str| {
        service(&format!(
            "metadata: {{name: api, namespace: default}}\nspec: {{type: NodePort, externalTrafficPolicy: Local, clusterIP: {ip}, ports: [{{name: http, port: 80, protocol: TCP, nodePort: 30081}}]}}"
        ))
    };
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let one = "[{addresses: [10.244.0.11], conditions: {ready: true}}]";
    let (before, _) = ClusterState::from_objects(
        &[service(WEB_NODEPORT), api("10.96.0.11")],
        &[
            slice("web", "IPv4", 8080, one),
            slice("api", "IPv4", 8080, one),
        ],
        Some(&node),
    );
    let first = build(&before, &config());
    let blocks = EndpointBlocks::of_tables(&first);
    let web = crate::proxier::names::service_chain(&before.services.values().nth(1).unwrap().name);
    assert!(web.contains("default/web"), "{web}");
    assert_eq!(
        blocks.block(Family::Ip, &web),
        Some(1),
        "services in name order"
    );

    // web gains an endpoint and api goes away; a new service arrives.
    let late = service(
        "metadata: {name: aaa, namespace: default}\nspec: {type: NodePort, externalTrafficPolicy: Local, clusterIP: 10.96.0.12, ports: [{name: http, port: 80, protocol: TCP, nodePort: 30082}]}",
    );
    let (after, _) = ClusterState::from_objects(
        &[service(WEB_NODEPORT), late],
        &[
            slice("web", "IPv4", 8080, TWO_ELSEWHERE),
            slice("aaa", "IPv4", 8080, one),
        ],
        Some(&node),
    );
    let second = build_after(&after, &config(), &blocks);
    let kept = EndpointBlocks::of_tables(&second);
    assert_eq!(kept.block(Family::Ip, &web), Some(1), "web keeps its rule");
    let aaa = crate::proxier::names::service_chain(&after.services.values().next().unwrap().name);
    assert_eq!(
        kept.block(Family::Ip, &aaa),
        Some(2),
        "api's block 0 is not reused while its elements may still be in the kernel"
    );
    assert_eq!(
        v4(&first).chains[&web].rules,
        v4(&second).chains[&web].rules
    );
}

#[test]
fn affinity_services_pick_endpoint_chains_by_a_cascade_or_one_numgen_map() {
    use crate::proxier::CASCADE_MAX_ENDPOINTS;
    let endpoints = |n: usize| {
        (0..n)
            .map(|i| {
                format!(
                    "{{addresses: [10.244.{}.{}], conditions: {{ready: true}}}}",
                    i / 250,
                    i % 250 + 1
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sticky = service(
        "metadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.10, sessionAffinity: ClientIP, ports: [{name: http, port: 80, protocol: TCP}]}",
    );
    for (n, map) in [
        (3, false),
        (CASCADE_MAX_ENDPOINTS, false),
        (CASCADE_MAX_ENDPOINTS + 1, true),
    ] {
        let t = plan(
            std::slice::from_ref(&sticky),
            &[slice("web", "IPv4", 8080, &format!("[{}]", endpoints(n)))],
            &config(),
        );
        let t = v4(&t);
        let Some(Verdict::Jump(chain)) = verdict_for(&t.sets["service-ips"], &ip("10.96.0.10"))
        else {
            panic!("no service-ips entry")
        };
        let stmts: Vec<&Stmt> = t.chains[&chain]
            .rules
            .iter()
            .flat_map(|r| &r.stmts)
            .collect();
        let maps = stmts
            .iter()
            .filter(|s| matches!(s, Stmt::NumgenVMap { .. }))
            .count();
        let draws: Vec<u32> = stmts
            .iter()
            .filter_map(|s| match s {
                Stmt::NumgenIs { modulus, value: 0 } => Some(*modulus),
                _ => None,
            })
            .collect();
        if map {
            assert_eq!((maps, draws.len()), (1, 0), "{n} endpoints");
        } else {
            // n, n-1, …, 2: the i-th endpoint is taken with probability 1/(n-i).
            assert_eq!(maps, 0);
            assert_eq!(
                draws,
                (2..=n as u32).rev().collect::<Vec<_>>(),
                "{n} endpoints"
            );
        }
    }
}

#[test]
fn the_incremental_planner_sends_a_new_endpoint_as_map_elements_of_its_service_only() {
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let api = service(
        &WEB.replace("web", "api")
            .replace("10.96.0.10", "10.96.0.20"),
    );
    let state = |web_endpoints: &str| {
        let slices = [
            slice("web", "IPv4", 8080, web_endpoints),
            slice("api", "IPv4", 8080, TWO_READY),
        ];
        ClusterState::from_objects(&[service(WEB), api.clone()], &slices, Some(&node)).0
    };
    let more = |n: usize| {
        let extra: String = (3..=n)
            .map(|i| format!(", {{addresses: [10.244.2.{i}], conditions: {{ready: true}}}}"))
            .collect();
        format!("{}{extra}]", TWO_READY.strip_suffix(']').unwrap())
    };
    let ops = |before: &Table, after: &Table| -> Vec<String> {
        crate::nft::diff::plan(Some(before), after)
            .iter()
            .map(|op| match op {
                crate::nft::transaction::Op::AddElements { set, elements, .. } => {
                    format!("add {set} x{}", elements.len())
                }
                crate::nft::transaction::Op::DeleteElements { set, elements, .. } => {
                    format!("delete {set} x{}", elements.len())
                }
                other => format!("{other:?}"),
            })
            .collect()
    };
    let web = BTreeSet::from([("default".to_string(), "web".to_string())]);
    let mut planner = Planner::new();
    planner.plan(&state(&more(3)), &config());

    // 3 -> 4 endpoints: the same four slots, one more filled.
    let changes = planner.changes(&state(&more(4)), &config(), Some(&web));
    assert_eq!(changes.len(), 1, "one family");
    let (before, after) = (
        changes[0].before.as_ref().unwrap(),
        changes[0].after.as_ref().unwrap(),
    );
    assert!(after.chains.is_empty(), "{:?}", after.chains.keys());
    assert_eq!(
        ops(before, after),
        ["add hairpin-endpoints x1", "add pick-4-slots x1"]
    );
    assert_eq!(planner.tables(), build(&state(&more(4)), &config()));

    // 4 -> 5: past a power of two, the service moves to the next shared chain's set (elements
    // of plain sets: no verdict changes, so the kernel does not re-validate the table).
    let changes = planner.changes(&state(&more(5)), &config(), Some(&web));
    let (before, after) = (
        changes[0].before.as_ref().unwrap(),
        changes[0].after.as_ref().unwrap(),
    );
    assert_eq!(
        ops(before, after),
        [
            "delete pick-4-services x1",
            "delete pick-4-slots x4",
            "add hairpin-endpoints x1",
            "add pick-8-services x1",
            "add pick-8-slots x5"
        ]
    );
    assert_eq!(
        after.sets["pick-8-services"].elements[0].key[0],
        ip("10.96.0.10")
    );
    assert_eq!(planner.tables(), build(&state(&more(5)), &config()));
    // Nothing changed: nothing to send, even when every service is compared.
    assert!(
        planner
            .changes(&state(&more(5)), &config(), None)
            .is_empty()
    );
}

#[test]
fn a_cluster_ip_only_service_draws_a_slot_in_the_shared_chain_of_its_slot_count() {
    let three = "[{addresses: [10.244.0.11], conditions: {ready: true}}, {addresses: [10.244.0.12], conditions: {ready: true}}, {addresses: [10.244.0.13], conditions: {ready: true}}]";
    let t = plan(
        &[service(WEB)],
        &[slice("web", "IPv4", 8080, three)],
        &config(),
    );
    let t = v4(&t);
    assert_eq!(verdict_for(&t.sets["service-ips"], &ip("10.96.0.10")), None);
    assert_eq!(chain_for(t, &ip("10.96.0.10")).as_deref(), Some("pick-4"));
    assert!(
        !t.chains.keys().any(|c| c.contains("default/web")),
        "no chain of its own: {:?}",
        t.chains.keys()
    );
    // Endpoint i in slot i, keyed by ClusterIP, protocol and port.
    let slots: Vec<(Vec<Value>, String)> = t.sets["pick-4-slots"]
        .elements
        .iter()
        .map(|e| match &e.data {
            Some(MapData::Values(v)) => (e.key.clone(), format!("{}:{}", v[0], v[1])),
            other => panic!("{other:?}"),
        })
        .collect();
    let key = |slot| {
        vec![
            ip("10.96.0.10"),
            Value::Proto(6),
            Value::Port(80),
            Value::Mark(slot),
        ]
    };
    assert_eq!(
        slots,
        [
            (key(0), "10.244.0.11:8080".to_string()),
            (key(1), "10.244.0.12:8080".to_string()),
            (key(2), "10.244.0.13:8080".to_string()),
        ]
    );
    assert_eq!(t.sets["hairpin-endpoints"].elements.len(), 3);
    // pick-4: masquerade off-cluster sources, SLOT_DRAWS - 1 draws of 4 slots, then one of the
    // first two, which are always full.
    let draws: Vec<u32> = t.chains["pick-4"]
        .rules
        .iter()
        .filter_map(|r| match &r.stmts[..] {
            [Stmt::DnatSlotMap { key, modulus, map }] => {
                assert_eq!(
                    key[..],
                    [Selector::IpDaddr, Selector::L4Proto, Selector::ThDport]
                );
                assert_eq!(map, "pick-4-slots");
                Some(*modulus)
            }
            _ => None,
        })
        .collect();
    let mut expected = vec![4; SLOT_DRAWS - 1];
    expected.push(2);
    assert_eq!(draws, expected);
    let rules = &t.chains["pick-4"].rules;
    assert_eq!(
        rules.len(),
        SLOT_DRAWS + 2,
        "and the masquerade rule, and the fallback"
    );
    assert_eq!(
        rules.last().unwrap().stmts,
        [Stmt::DnatMap {
            key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
            map: "pick-fallback".into(),
        }]
    );
    // The shared chains exist for every power of two up to the limit, whatever the cluster.
    let empty = plan(&[], &[], &config());
    let mut n = 1;
    while n <= MAX_SHARED_PICK_ENDPOINTS {
        assert!(
            v4(&empty).chains.contains_key(&format!("pick-{n}")),
            "pick-{n}"
        );
        n *= 2;
    }
}

#[test]
fn services_with_external_traffic_policy_local_or_affinity_keep_chains_of_their_own() {
    let sticky = service(
        "metadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.10, sessionAffinity: ClientIP, ports: [{name: http, port: 80, protocol: TCP}]}",
    );
    for svc in [service(WEB_NODEPORT), sticky] {
        let t = plan(
            std::slice::from_ref(&svc),
            &[slice("web", "IPv4", 8080, TWO_READY)],
            &config(),
        );
        let t = v4(&t);
        let Some(Verdict::Jump(chain)) = verdict_for(&t.sets["service-ips"], &ip("10.96.0.10"))
        else {
            panic!("no service-ips entry")
        };
        assert!(chain.starts_with("service-"), "{chain}");
        assert!(
            t.sets
                .values()
                .filter(|s| names::is_pick_slots(&s.name))
                .all(|s| s.elements.is_empty())
        );
    }
}

#[test]
fn external_traffic_of_policy_cluster_services_is_drawn_by_the_shared_external_chains() {
    let svc = service(
        "metadata: {name: web, namespace: default}\nspec: {type: LoadBalancer, clusterIP: 10.96.0.10, externalIPs: [192.0.2.10], ports: [{name: http, port: 80, protocol: TCP, nodePort: 30080}]}\nstatus: {loadBalancer: {ingress: [{ip: 198.51.100.10}]}}",
    );
    let t = plan(&[svc], &[slice("web", "IPv4", 8080, TWO_READY)], &config());
    let t = v4(&t);
    assert!(
        !t.chains.keys().any(|c| c.contains("default/web")),
        "no chain of its own: {:?}",
        t.chains.keys()
    );
    assert!(t.sets["service-ips"].elements.is_empty());
    assert!(t.sets["service-nodeports"].elements.is_empty());
    let mut frontends: Vec<Vec<Value>> = t.sets["external-pick-2-services"]
        .elements
        .iter()
        .map(|e| e.key.clone())
        .collect();
    frontends.sort();
    let key = |a: &str, port| vec![ip(a), Value::Proto(6), Value::Port(port)];
    assert_eq!(
        frontends,
        [
            key("10.0.0.10", 30080),
            key("192.0.2.10", 80),
            key("198.51.100.10", 80)
        ],
        "the node IP with the NodePort, the external and the load-balancer IP"
    );
    // Each frontend and the ClusterIP hold both endpoints in slots 0 and 1.
    assert_eq!(t.sets["pick-2-slots"].elements.len(), 4 * 2);
    assert_eq!(
        t.chains["external-pick-2"].rules[0].stmts,
        [Stmt::Verdict(Verdict::Jump("mark-for-masquerade".into()))],
        "external traffic is always masqueraded under policy Cluster"
    );
}

/// What a packet racing a commit needs: every key of a pick set (ClusterIP or external) is in
/// `pick-fallback` with the endpoint of its slot 0, every pick chain ends with that fallback, and
/// a key that matched no pick set is dispatched once more by `pick-retry`.
#[test]
fn every_pick_key_has_a_fallback_endpoint_and_a_second_dispatch() {
    let svc = service(
        "metadata: {name: web, namespace: default}\nspec: {type: LoadBalancer, clusterIP: 10.96.0.10, externalIPs: [192.0.2.10], ports: [{name: http, port: 80, protocol: TCP, nodePort: 30080}]}\nstatus: {loadBalancer: {ingress: [{ip: 198.51.100.10}]}}",
    );
    let api = service(
        "metadata: {name: api, namespace: default}\nspec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 443, protocol: TCP}]}",
    );
    let three =
        "[{addresses: [10.244.0.21]}, {addresses: [10.244.0.22]}, {addresses: [10.244.0.23]}]";
    let t = plan(
        &[svc, api],
        &[
            slice("web", "IPv4", 8080, TWO_READY),
            slice("api", "IPv4", 8443, three),
        ],
        &config(),
    );
    let t = v4(&t);
    let slot0: BTreeMap<Vec<Value>, Option<MapData>> = t
        .sets
        .values()
        .filter(|s| names::is_pick_slots(&s.name))
        .flat_map(|s| &s.elements)
        .filter(|e| e.key[3] == Value::Mark(0))
        .map(|e| (e.key[..3].to_vec(), e.data.clone()))
        .collect();
    let fallback: BTreeMap<Vec<Value>, Option<MapData>> = t.sets["pick-fallback"]
        .elements
        .iter()
        .map(|e| (e.key.clone(), e.data.clone()))
        .collect();
    let picked: BTreeSet<Vec<Value>> = t
        .sets
        .values()
        .filter(|s| s.name.ends_with("-services") && s.name.contains("pick-"))
        .flat_map(|s| s.elements.iter().map(|e| e.key.clone()))
        .collect();
    assert_eq!(
        picked.len(),
        5,
        "web: ClusterIP, external, LB and node IP; api"
    );
    assert_eq!(fallback, slot0);
    assert_eq!(fallback.keys().cloned().collect::<BTreeSet<_>>(), picked);

    let fallback_rule = Stmt::DnatMap {
        key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
        map: "pick-fallback".into(),
    };
    let pick_chains: Vec<&String> = t
        .chains
        .keys()
        .filter(|c| c.starts_with("pick-") || c.starts_with("external-pick-"))
        .collect();
    assert_eq!(pick_chains.len(), 2 * 13 + 1, "{pick_chains:?}");
    for c in pick_chains {
        assert_eq!(
            t.chains[c].rules.last().unwrap().stmts,
            std::slice::from_ref(&fallback_rule),
            "{c}"
        );
    }
    // pick-retry repeats the pick rules of `services`, in the same order.
    let goes_to_pick = |r: &&Rule| {
        r.stmts.iter().any(|s| {
            matches!(s, Stmt::Verdict(Verdict::Goto(c)) if c.starts_with("pick-") || c.starts_with("external-pick-"))
        })
    };
    let services = &t.chains["services"].rules;
    let first_pass: Vec<&Rule> = services
        .iter()
        .filter(goes_to_pick)
        .filter(|r| {
            !r.stmts
                .contains(&Stmt::Verdict(Verdict::Goto("pick-retry".into())))
        })
        .collect();
    let retry = &t.chains["pick-retry"].rules;
    assert_eq!(first_pass.len(), 26);
    assert_eq!(
        retry.iter().filter(goes_to_pick).collect::<Vec<_>>(),
        first_pass
    );
    assert_eq!(retry.last().unwrap().stmts, [fallback_rule]);
    assert_eq!(
        services.last().unwrap().stmts,
        [
            Stmt::Lookup {
                key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
                set: "pick-fallback".into(),
                negate: false,
            },
            Stmt::Verdict(Verdict::Goto("pick-retry".into())),
        ]
    );
}

/// A service with chains of its own has fallback entries too, for a packet sent to a pick
/// chain or the retry just before it moved there: its ClusterIP with the first of its
/// endpoints, its node IP . NodePort with the first local one (policy Local).
#[test]
fn services_with_chains_of_their_own_have_fallback_endpoints_of_their_policies() {
    let local_second = "[{addresses: [10.244.0.11], nodeName: node-b, conditions: {ready: true}}, {addresses: [10.244.1.12], nodeName: node-a, conditions: {ready: true}}]";
    let t = plan(
        &[service(WEB_NODEPORT)],
        &[slice("web", "IPv4", 8080, local_second)],
        &config(),
    );
    let t = v4(&t);
    let fallback: Vec<(Vec<Value>, Option<MapData>)> = t.sets["pick-fallback"]
        .elements
        .iter()
        .map(|e| (e.key.clone(), e.data.clone()))
        .collect();
    let to = |a: &str| Some(MapData::Values(vec![ip(a), Value::Port(8080)]));
    assert_eq!(
        fallback,
        [
            (
                vec![ip("10.0.0.10"), Value::Proto(6), Value::Port(30080)],
                to("10.244.1.12")
            ),
            (
                vec![ip("10.96.0.10"), Value::Proto(6), Value::Port(80)],
                to("10.244.0.11")
            ),
        ]
    );
    // Both of its drawing chains end with the fallback.
    let mut drawing = 0;
    for c in t.chains.keys().filter(|c| c.contains("default/web")) {
        let rules = &t.chains[c].rules;
        let draws = rules.iter().any(|r| {
            r.stmts
                .iter()
                .any(|s| matches!(s, Stmt::DnatNumgenMap { .. }))
        });
        if draws {
            drawing += 1;
            assert!(
                matches!(&rules.last().unwrap().stmts[..], [Stmt::DnatMap { map, .. }] if map == "pick-fallback"),
                "{c}"
            );
        }
    }
    assert_eq!(drawing, 2, "service- and local- chains");
    assert_eq!(
        verdict_for(&t.sets["service-ips"], &ip("10.96.0.10"))
            .map(|v| matches!(v, Verdict::Jump(_))),
        Some(true),
        "dispatch jumps, so a chain still empty to the packet returns to the retry"
    );
}

/// An address that is both an external IP and the load balancer's yields each key once in
/// the service's fragment (the planner relies on keys being unique within a fragment).
#[test]
fn an_address_a_service_is_reached_at_twice_yields_its_elements_once() {
    let svc = service(
        "metadata: {name: web, namespace: default}\nspec: {type: LoadBalancer, clusterIP: 10.96.0.10, externalIPs: [192.0.2.10], ports: [{name: http, port: 80, protocol: TCP, nodePort: 30080}]}\nstatus: {loadBalancer: {ingress: [{ip: 192.0.2.10}]}}",
    );
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let (state, _) = ClusterState::from_objects(
        &[svc],
        &[slice("web", "IPv4", 8080, TWO_READY)],
        Some(&node),
    );
    let config = config();
    let sp = state.services.values().next().unwrap();
    let fragment = build::FragmentBuilder::new(&config, &state, build::IpFamily::V4)
        .service(sp, &mut build::BlockAllocator::new(Default::default()));
    for (set, elements) in &fragment.elements {
        let keys: BTreeSet<&Vec<Value>> = elements.iter().map(|e| &e.key).collect();
        assert_eq!(keys.len(), elements.len(), "{set}: {elements:?}");
    }
    // ClusterIP, the shared address and the node IP with the NodePort.
    assert_eq!(fragment.elements_of("pick-fallback").len(), 3);
    assert_eq!(fragment.elements_of("pick-2-slots").len(), 3 * 2);
}

/// A LoadBalancer with externalIPs, internalTrafficPolicy Local and externalTrafficPolicy
/// Cluster, plus the fields `extra` adds to its spec.
fn itp_local_etp_cluster(extra: &str) -> Service {
    service(&format!(
        "metadata: {{name: web, namespace: default}}\nspec: {{type: LoadBalancer, internalTrafficPolicy: Local, externalTrafficPolicy: Cluster, clusterIP: 10.96.0.10, externalIPs: [192.0.2.10], {extra} ports: [{{name: http, port: 80, protocol: TCP, nodePort: 30080}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 198.51.100.10}}]}}}}"
    ))
}

/// Two ready endpoints, the local one second (so "the first endpoint" differs by policy).
const LOCAL_SECOND: &str = "[{addresses: [10.244.0.11], nodeName: node-b, conditions: {ready: true}}, {addresses: [10.244.1.12], nodeName: node-a, conditions: {ready: true}}]";

/// The `ip:port` endpoints of every shared slot-map element of `address . tcp . port`, in slot
/// order, with the slot map's name.
fn slot_targets(t: &Table, address: &str, port: u16) -> Vec<(String, String)> {
    let mut out: Vec<(u32, String, String)> = t
        .sets
        .values()
        .filter(|s| names::is_pick_slots(&s.name))
        .flat_map(|s| s.elements.iter().map(move |e| (s, e)))
        .filter(|(_, e)| e.key[..3] == [ip(address), Value::Proto(6), Value::Port(port)])
        .map(|(s, e)| match (&e.key[3], &e.data) {
            (Value::Mark(slot), Some(MapData::Values(v))) => {
                (*slot, s.name.clone(), format!("{}:{}", v[0], v[1]))
            }
            other => panic!("slot element {other:?}"),
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, s, e)| (s, e)).collect()
}

fn fallback_of(t: &Table, address: &str, port: u16) -> Option<String> {
    t.sets["pick-fallback"]
        .elements
        .iter()
        .find(|e| e.key == [ip(address), Value::Proto(6), Value::Port(port)])
        .map(|e| match &e.data {
            Some(MapData::Values(v)) => format!("{}:{}", v[0], v[1]),
            other => panic!("fallback data {other:?}"),
        })
}

/// Upstream's iTP Local + eTP Cluster: the ClusterIP reaches this node's endpoint only, while
/// the NodePort, the external IP and the load-balancer IP reach every endpoint, each key with
/// slots, a slot count and a fallback endpoint of its own policy; every reachable endpoint
/// is masqueraded when it reaches itself.
#[test]
fn internal_and_external_traffic_of_one_service_follow_their_own_policies_in_pick_chains() {
    let t = plan(
        &[itp_local_etp_cluster("")],
        &[slice("web", "IPv4", 8080, LOCAL_SECOND)],
        &config(),
    );
    let t = v4(&t);
    let local = ("pick-1-slots".to_string(), "10.244.1.12:8080".to_string());
    assert_eq!(slot_targets(t, "10.96.0.10", 80), [local]);
    assert_eq!(chain_for(t, &ip("10.96.0.10")).as_deref(), Some("pick-1"));
    assert_eq!(
        fallback_of(t, "10.96.0.10", 80).as_deref(),
        Some("10.244.1.12:8080")
    );
    let both = [
        ("pick-2-slots".to_string(), "10.244.0.11:8080".to_string()),
        ("pick-2-slots".to_string(), "10.244.1.12:8080".to_string()),
    ];
    for (address, port) in [
        ("10.0.0.10", 30080),
        ("192.0.2.10", 80),
        ("198.51.100.10", 80),
    ] {
        assert_eq!(slot_targets(t, address, port), both, "{address}");
        assert_eq!(
            fallback_of(t, address, port).as_deref(),
            Some("10.244.0.11:8080"),
            "{address}"
        );
        assert!(
            t.sets["external-pick-2-services"]
                .elements
                .iter()
                .any(|e| e.key == [ip(address), Value::Proto(6), Value::Port(port)]),
            "{address}"
        );
    }
    let hairpin: BTreeSet<&Vec<Value>> = t.sets["hairpin-endpoints"]
        .elements
        .iter()
        .map(|e| &e.key)
        .collect();
    assert_eq!(hairpin.len(), 2, "{hairpin:?}");
    assert!(t.sets["no-endpoint-services"].elements.is_empty());
}

/// On a node without a local endpoint, the ClusterIP of an iTP Local service drops (endpoints
/// exist elsewhere) while its external addresses, under eTP Cluster, still serve every
/// endpoint.
#[test]
fn a_node_without_local_endpoints_drops_internal_traffic_but_serves_external_traffic() {
    let t = plan(
        &[itp_local_etp_cluster("")],
        &[slice("web", "IPv4", 8080, TWO_ELSEWHERE)],
        &config(),
    );
    let t = v4(&t);
    assert_eq!(
        verdict_for(&t.sets["no-endpoint-services"], &ip("10.96.0.10")),
        Some(Verdict::Drop)
    );
    assert_eq!(chain_for(t, &ip("10.96.0.10")), None);
    assert_eq!(fallback_of(t, "10.96.0.10", 80), None);
    assert!(t.sets["no-endpoint-nodeports"].elements.is_empty());
    assert_eq!(
        verdict_for(&t.sets["no-endpoint-services"], &ip("192.0.2.10")),
        None
    );
    for (address, port) in [("10.0.0.10", 30080), ("198.51.100.10", 80)] {
        let targets: Vec<String> = slot_targets(t, address, port)
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        assert_eq!(
            targets,
            ["10.244.0.11:8080", "10.244.1.12:8080"],
            "{address}"
        );
    }
}

/// The endpoint-chain targets a chain's cascade picks among, by endpoint address.
fn cascade_targets(t: &Table, chain: &str) -> Vec<String> {
    let mut out: Vec<String> = t.chains[chain]
        .rules
        .iter()
        .flat_map(|r| &r.stmts)
        .filter_map(|s| match s {
            Stmt::Verdict(Verdict::Goto(c)) if c.starts_with("endpoint-") => {
                Some(c.rsplit("__").next().unwrap().to_string())
            }
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// With chains of its own (ClientIP affinity), kube-proxy's layout: ClusterIPs go to the
/// `local-` chain of internalTrafficPolicy Local, external traffic to the `service-` chain of
/// the cluster endpoints; under eTP Local, pods and the host short-circuit to that `service-`
/// chain too, while other external traffic takes the local one.
#[test]
fn chains_of_their_own_pick_among_the_endpoints_of_each_traffic_policy() {
    for etp in ["Cluster", "Local"] {
        let svc = itp_local_etp_cluster("sessionAffinity: ClientIP,")
            .spec
            .map(|mut s| {
                s.external_traffic_policy = Some(etp.into());
                s
            });
        let svc = Service {
            spec: svc,
            ..itp_local_etp_cluster("")
        };
        let t = plan(
            &[svc],
            &[slice("web", "IPv4", 8080, LOCAL_SECOND)],
            &config(),
        );
        let t = v4(&t);
        let internal = match verdict_for(&t.sets["service-ips"], &ip("10.96.0.10")) {
            Some(Verdict::Jump(c)) => c,
            other => panic!("{etp}: ClusterIP dispatch {other:?}"),
        };
        assert!(internal.starts_with("local-"), "{etp}: {internal}");
        assert_eq!(cascade_targets(t, &internal), ["10.244.1.12/8080"], "{etp}");
        let external = match verdict_for(&t.sets["service-ips"], &ip("192.0.2.10")) {
            Some(Verdict::Jump(c)) => c,
            other => panic!("{etp}: external IP dispatch {other:?}"),
        };
        let gotos: Vec<&str> = t.chains[&external]
            .rules
            .iter()
            .flat_map(|r| &r.stmts)
            .filter_map(|s| match s {
                Stmt::Verdict(Verdict::Goto(c)) => Some(c.as_str()),
                _ => None,
            })
            .collect();
        let cluster = gotos
            .iter()
            .find(|c| c.starts_with("service-"))
            .unwrap_or_else(|| panic!("{etp}: {gotos:?}"));
        assert_eq!(
            cascade_targets(t, cluster),
            ["10.244.0.11/8080", "10.244.1.12/8080"],
            "{etp}"
        );
        if etp == "Local" {
            // pod, host, then everything else to the local endpoints
            assert_eq!(gotos.len(), 3, "{gotos:?}");
            assert_eq!(gotos[2], internal);
        } else {
            assert_eq!(gotos, [*cluster]);
        }
        assert_eq!(
            fallback_of(t, "192.0.2.10", 80).as_deref(),
            Some(if etp == "Local" {
                "10.244.1.12:8080"
            } else {
                "10.244.0.11:8080"
            })
        );
        assert_eq!(
            fallback_of(t, "10.96.0.10", 80).as_deref(),
            Some("10.244.1.12:8080")
        );
    }
}

/// Upstream rejects when no endpoint anywhere could serve and drops only when some could:
/// iTP Local with nothing ready or serving elsewhere is rejected, not dropped.
#[test]
fn internal_traffic_policy_local_with_no_usable_endpoint_anywhere_rejects() {
    let svc = service(
        "metadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.10, internalTrafficPolicy: Local, ports: [{name: http, port: 80, protocol: TCP}]}",
    );
    let unready = "[{addresses: [10.244.1.12], nodeName: node-b, conditions: {ready: false, serving: false}}]";
    let t = plan(&[svc], &[slice("web", "IPv4", 8080, unready)], &config());
    assert_eq!(
        verdict_for(&v4(&t).sets["no-endpoint-services"], &ip("10.96.0.10")),
        Some(Verdict::Goto("reject-chain".into()))
    );
}

/// When no endpoint is ready, the serving terminating ones all serve: hints, which describe
/// ready endpoints, are not applied to that fallback.
#[test]
fn the_terminating_fallback_ignores_zone_hints() {
    let hinted_terminating = "[{addresses: [10.244.0.11], zone: zone-a, hints: {forZones: [{name: zone-a}]}, conditions: {ready: false, serving: true, terminating: true}}, {addresses: [10.244.1.12], zone: zone-b, hints: {forZones: [{name: zone-b}]}, conditions: {ready: false, serving: true, terminating: true}}]";
    let t = plan(
        &[service(WEB)],
        &[slice("web", "IPv4", 8080, hinted_terminating)],
        &config(),
    );
    assert_eq!(
        slot_endpoints(v4(&t)),
        ["10.244.0.11:8080", "10.244.1.12:8080"]
    );
}
