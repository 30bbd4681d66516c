//! Which endpoints traffic goes to: readiness and termination, topology hints, and the
//! internal and external traffic policies.

use super::*;

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
