//! The planner's decisions, asserted on the table values it builds for small clusters.

mod consistent;
mod families;
mod localhost;
mod picks;
mod policies;
mod services;

use super::layout::{MAX_SHARED_PICK_ENDPOINTS, SLOT_DRAWS, SLOTS_PER_BLOCK};
use super::*;
use crate::cluster::{ClusterState, Rejected};
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
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        ..super::fixtures::dual_stack_config()
    }
}

/// The cluster state of `services` and `slices` seen from the node `NODE`, and what it rejected.
fn cluster(services: &[Service], slices: &[EndpointSlice]) -> (ClusterState, Vec<Rejected>) {
    let node: Node = serde_saphyr::from_str(NODE).unwrap();
    ClusterState::from_objects(services, slices, Some(&node))
}

fn plan(services: &[Service], slices: &[EndpointSlice], config: &ProxyConfig) -> Vec<Table> {
    let (state, rejected) = cluster(services, slices);
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
