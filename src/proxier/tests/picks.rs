//! How a connection picks an endpoint: blocks of the endpoint map, affinity cascades, the
//! shared pick chains, and the fallbacks for packets racing a commit.

use super::*;

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
    let one = "[{addresses: [10.244.0.11], conditions: {ready: true}}]";
    let (before, _) = cluster(
        &[service(WEB_NODEPORT), api("10.96.0.11")],
        &[
            slice("web", "IPv4", 8080, one),
            slice("api", "IPv4", 8080, one),
        ],
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
    let (after, _) = cluster(
        &[service(WEB_NODEPORT), late],
        &[
            slice("web", "IPv4", 8080, TWO_ELSEWHERE),
            slice("aaa", "IPv4", 8080, one),
        ],
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
    use crate::proxier::layout::CASCADE_MAX_ENDPOINTS;
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
    let api = service(
        &WEB.replace("web", "api")
            .replace("10.96.0.10", "10.96.0.20"),
    );
    let state = |web_endpoints: &str| {
        let slices = [
            slice("web", "IPv4", 8080, web_endpoints),
            slice("api", "IPv4", 8080, TWO_READY),
        ];
        cluster(&[service(WEB), api.clone()], &slices).0
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
/// `pick-fallback` with the endpoint of its slot 0 (and in the plain set of its keys), every
/// pick chain ends with that fallback, and a key that matched no pick set is dispatched once
/// more by `pick-retry`.
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
    let fallback_frontends: BTreeSet<Vec<Value>> = t.sets["pick-fallback-frontends"]
        .elements
        .iter()
        .map(|e| e.key.clone())
        .collect();
    assert_eq!(fallback_frontends, picked, "the map's keys as a plain set");

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
                set: "pick-fallback-frontends".into(),
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
