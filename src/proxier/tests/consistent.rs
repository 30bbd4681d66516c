//! Consistent endpoint choice in the planner: which chains hash, over which fields, with which
//! endpoints in their slots, and what an endpoint change sends.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::cluster::ClusterState;
use crate::nft::model::{Family, MapData, Selector, Stmt, Table, Value};
use crate::proxier::consistent::{SEED, table_size};
use crate::proxier::fixtures::dual_stack_config;
use crate::proxier::layout::SLOTS_PER_BLOCK;
use crate::proxier::*;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

const NODE: &str = "
metadata: {name: node-a}
spec: {podCIDRs: [10.244.0.0/24, 'fd00:244::/64']}
status: {addresses: [{type: InternalIP, address: 10.0.0.10}, {type: InternalIP, address: 'fd00:10::10'}]}
";

/// A Service `default/web` with `extra` spec fields and the consistent-endpoint annotation
/// `mode` (none if empty).
fn web(mode: &str, extra: &str) -> Service {
    let annotations = if mode.is_empty() {
        String::new()
    } else {
        format!(", annotations: {{kubenft.io/consistent-endpoint: {mode}}}")
    };
    serde_saphyr::from_str(&format!(
        "metadata: {{name: web, namespace: default{annotations}}}
spec: {{clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, 'fd00:96::10'], ipFamilies: [IPv4, IPv6], ports: [{{name: http, port: 80, protocol: TCP, nodePort: 30080}}]{extra}}}"
    ))
    .unwrap()
}

/// An EndpointSlice of `web` with `addresses`, each `(address, node, ready, terminating)`.
fn slice(family: &str, endpoints: &[(String, &str, bool, bool)]) -> EndpointSlice {
    let eps: Vec<String> = endpoints
        .iter()
        .map(|(a, node, ready, terminating)| {
            format!(
                "{{addresses: ['{a}'], nodeName: {node}, conditions: {{ready: {ready}, serving: true, terminating: {terminating}}}}}"
            )
        })
        .collect();
    serde_saphyr::from_str(&format!(
        "metadata: {{name: web-{}, namespace: default, labels: {{kubernetes.io/service-name: web}}}}
addressType: {family}
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints: [{}]",
        family.to_lowercase(),
        eps.join(", ")
    ))
    .unwrap()
}

fn ready(n: usize) -> Vec<(String, &'static str, bool, bool)> {
    (1..=n)
        .map(|i| (format!("10.244.1.{i}"), "node-b", true, false))
        .collect()
}

fn state(svc: &Service, slices: &[EndpointSlice]) -> ClusterState {
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let (state, rejected) =
        ClusterState::from_objects(std::slice::from_ref(svc), slices, Some(&node));
    assert!(rejected.is_empty(), "{rejected:?}");
    state
}

fn table(tables: &[Table], family: Family) -> &Table {
    tables.iter().find(|t| t.family == family).unwrap()
}

/// Every hash draw of `t`: (chain, fields, offset, map).
fn hash_draws(t: &Table) -> Vec<(String, Vec<Selector>, u32, String)> {
    t.chains
        .values()
        .flat_map(|c| c.rules.iter().flat_map(|r| &r.stmts).map(move |s| (c, s)))
        .filter_map(|(c, s)| match s {
            Stmt::DnatHashMap {
                fields,
                seed,
                modulus,
                offset,
                map,
            } => {
                assert_eq!((*seed, *modulus), (SEED, SLOTS_PER_BLOCK));
                Some((c.name.clone(), fields.clone(), *offset, map.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The endpoint addresses of the slots of the block at `offset` of `map`, in slot order.
fn slot_owners(t: &Table, map: &str, offset: u32) -> Vec<IpAddr> {
    let mut slots: Vec<(u32, IpAddr)> = t.sets[map]
        .elements
        .iter()
        .filter_map(|e| match (&e.key[..], &e.data) {
            ([Value::IntRange { first, .. }], Some(MapData::Values(v)))
                if (offset..offset + SLOTS_PER_BLOCK).contains(first) =>
            {
                match v[0] {
                    Value::Ipv4(a) => Some((*first, IpAddr::V4(a))),
                    Value::Ipv6(a) => Some((*first, IpAddr::V6(a))),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    slots.sort();
    slots.into_iter().map(|(_, a)| a).collect()
}

#[test]
fn a_client_mode_service_hashes_the_source_address_in_each_family() {
    let v6: Vec<_> = (1..=3)
        .map(|i| (format!("fd00:244:1::{i}"), "node-b", true, false))
        .collect();
    let tables = build(
        &state(
            &web("client", ""),
            &[slice("IPv4", &ready(10)), slice("IPv6", &v6)],
        ),
        &dual_stack_config(),
    );
    let t4 = table(&tables, Family::Ip);
    let draws = hash_draws(t4);
    assert_eq!(draws.len(), 1, "{draws:?}");
    let (chain, fields, offset, map) = &draws[0];
    assert!(chain.starts_with("service-"), "{chain}");
    assert_eq!(fields, &[Selector::IpSaddr]);
    let owners = slot_owners(t4, map, *offset);
    assert_eq!(owners.len(), table_size(10) as usize);
    assert_eq!(owners.iter().collect::<BTreeSet<_>>().len(), 10);
    // Not in any shared pick chain: the random draw there would not be consistent.
    assert!(t4.sets.iter().all(|(name, s)| !name.starts_with("pick-")
        || s.elements.is_empty()
        || name.starts_with("pick-fallback")));

    let t6 = table(&tables, Family::Ip6);
    let draws = hash_draws(t6);
    assert_eq!(draws.len(), 1);
    assert_eq!(draws[0].1, [Selector::Ip6Saddr]);
    assert_eq!(
        slot_owners(t6, &draws[0].3, draws[0].2).len(),
        table_size(3) as usize
    );
    let text = crate::nft::render::render_table(t6);
    assert!(
        text.contains("dnat ip6 to jhash ip6 saddr mod 65536 seed 0x6b756265"),
        "{text}"
    );
}

#[test]
fn connection_mode_hashes_the_five_tuple() {
    let tables = build(
        &state(&web("connection", ""), &[slice("IPv4", &ready(4))]),
        &dual_stack_config(),
    );
    let draws = hash_draws(table(&tables, Family::Ip));
    assert_eq!(
        draws[0].1,
        [
            Selector::IpSaddr,
            Selector::ThSport,
            Selector::IpDaddr,
            Selector::ThDport,
            Selector::L4Proto
        ]
    );
}

#[test]
fn without_the_annotation_or_with_a_bad_value_endpoints_are_drawn_at_random() {
    let plain = build(
        &state(&web("", ""), &[slice("IPv4", &ready(10))]),
        &dual_stack_config(),
    );
    assert!(hash_draws(table(&plain, Family::Ip)).is_empty());

    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    let (s, rejected) = ClusterState::from_objects(
        &[web("sticky", "")],
        &[slice("IPv4", &ready(10))],
        Some(&node),
    );
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(rejected[0].reason.contains("\"sticky\""), "{rejected:?}");
    // The Service is still proxied, as without the annotation.
    assert_eq!(build(&s, &dual_stack_config()), plain);
}

#[test]
fn local_policies_hash_among_local_endpoints_only() {
    let mut eps = ready(6);
    for e in eps.iter_mut().take(2) {
        e.1 = "node-a";
    }
    let tables = build(
        &state(
            &web(
                "client",
                ", type: NodePort, externalTrafficPolicy: Local, internalTrafficPolicy: Local",
            ),
            &[slice("IPv4", &eps)],
        ),
        &dual_stack_config(),
    );
    let t = table(&tables, Family::Ip);
    // `local-…` serves ClusterIPs (iTP) and traffic from outside (eTP); `service-…` only the
    // pods and the host that eTP Local short-circuits to every endpoint.
    let draws = hash_draws(t);
    let owners = |prefix: &str| -> BTreeSet<IpAddr> {
        let (_, _, offset, map) = draws.iter().find(|d| d.0.starts_with(prefix)).unwrap();
        slot_owners(t, map, *offset).into_iter().collect()
    };
    let local: BTreeSet<IpAddr> = ["10.244.1.1", "10.244.1.2"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(owners("local-"), local);
    assert_eq!(owners("service-").len(), 6);
}

#[test]
fn terminating_endpoints_fill_the_table_only_when_none_is_ready() {
    let eps = vec![
        ("10.244.1.1".to_string(), "node-b", false, true),
        ("10.244.1.2".to_string(), "node-b", false, true),
    ];
    let tables = build(
        &state(&web("client", ""), &[slice("IPv4", &eps)]),
        &dual_stack_config(),
    );
    let t = table(&tables, Family::Ip);
    let (_, _, offset, map) = &hash_draws(t)[0];
    assert_eq!(
        slot_owners(t, map, *offset)
            .into_iter()
            .collect::<BTreeSet<_>>()
            .len(),
        2
    );
}

#[test]
fn an_endpoint_change_sends_only_the_slots_that_move() {
    let svc = web("client", "");
    let scope = BTreeSet::from([("default".to_string(), "web".to_string())]);
    let mut planner = Planner::new();
    planner.plan(
        &state(&svc, &[slice("IPv4", &ready(10))]),
        &dual_stack_config(),
    );
    let before = planner.tables();
    let t = table(&before, Family::Ip);
    let (_, _, offset, map) = hash_draws(t)[0].clone();
    let owners_before = slot_owners(t, &map, offset);

    let changes = planner.changes(
        &state(&svc, &[slice("IPv4", &ready(11))]),
        &dual_stack_config(),
        Some(&scope),
    );
    let change = changes
        .iter()
        .find(|c| c.after.as_ref().is_some_and(|t| t.family == Family::Ip))
        .unwrap();
    let (b, a) = (
        change.before.as_ref().unwrap(),
        change.after.as_ref().unwrap(),
    );
    let after = planner.tables();
    let owners_after = slot_owners(table(&after, Family::Ip), &map, offset);
    let moved = owners_before
        .iter()
        .zip(&owners_after)
        .filter(|(x, y)| x != y)
        .count();
    assert!(moved > 0);
    let mut ops = Vec::new();
    for op in crate::nft::diff::plan(Some(b), a) {
        match op {
            crate::nft::transaction::Op::AddElements { set, elements, .. } => {
                ops.push(format!("add {set} x{}", elements.len()))
            }
            crate::nft::transaction::Op::DeleteElements { set, elements, .. } => {
                ops.push(format!("delete {set} x{}", elements.len()))
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        ops,
        [
            format!("delete {map} x{moved}"),
            "add hairpin-endpoints x1".to_string(),
            format!("add {map} x{moved}"),
        ]
    );
}
