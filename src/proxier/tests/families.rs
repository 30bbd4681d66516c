//! Which families are planned, and where each family's NodePorts and healthCheckNodePorts are
//! accepted, for nodes with addresses of one family or both (kube-proxy's rules: both families
//! whenever the kernel has them; a family that `nodePortAddresses` names no address of takes
//! every local address of the family).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use crate::cluster::{ClusterState, NodeInfo};
use crate::nft::model::{Family, Table, Value};
use crate::proxier::fixtures::dual_stack_config;
use crate::proxier::*;

fn node(addresses: &[&str]) -> Node {
    let addresses: Vec<_> = addresses
        .iter()
        .map(|a| json!({"type": "InternalIP", "address": a}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "node-a"},
        "spec": {"podCIDRs": ["10.244.0.0/24", "fd00:244::/64"]},
        "status": {"addresses": addresses},
    }))
    .unwrap()
}

/// A dual-stack NodePort Service with one ready endpoint of each family on this node.
fn dual_stack_web() -> (Service, Vec<EndpointSlice>) {
    let svc = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "type": "NodePort",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10", "fd00:96::a"],
            "ipFamilies": ["IPv4", "IPv6"],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
        },
    }))
    .unwrap();
    let slice = |family: &str, ep: &str| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {
                "name": format!("web-{family}"),
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "addressType": family,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ep], "nodeName": "node-a", "conditions": {"ready": true}}],
        }))
        .unwrap()
    };
    (
        svc,
        vec![slice("IPv4", "10.244.0.11"), slice("IPv6", "fd00:244::11")],
    )
}

fn state(node_addresses: &[&str]) -> ClusterState {
    let (svc, slices) = dual_stack_web();
    let (state, rejected) =
        ClusterState::from_objects(&[svc], &slices, Some(&node(node_addresses)));
    assert!(rejected.is_empty(), "{rejected:?}");
    state
}

fn table(tables: &[Table], family: Family) -> Option<&Table> {
    tables.iter().find(|t| t.family == family)
}

/// Whether some set or map of `t` has an element whose key starts with `ip`.
fn keyed_by(t: &Table, ip: &str) -> bool {
    let ip: IpAddr = ip.parse().unwrap();
    let value = layout::ip_value(ip);
    t.sets
        .values()
        .any(|s| s.elements.iter().any(|e| e.key.first() == Some(&value)))
}

fn nodeport_ips(t: &Table) -> Vec<String> {
    t.sets["nodeport-ips"]
        .elements
        .iter()
        .map(|e| match &e.key[0] {
            Value::Ipv4(a) => a.to_string(),
            Value::Ipv6(a) => a.to_string(),
            other => panic!("not an address: {other:?}"),
        })
        .collect()
}

/// The addresses NodePorts are accepted on in the `ip` and in the `ip6` table, for a node with
/// `node_addresses`.
fn nodeport_ips_of_each_family(node_addresses: &[&str], config: &ProxyConfig) -> [Vec<String>; 2] {
    let tables = build(&state(node_addresses), config);
    [Family::Ip, Family::Ip6].map(|f| nodeport_ips(table(&tables, f).unwrap()))
}

fn addrs(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

#[test]
fn a_node_with_only_an_ipv4_address_programs_the_ipv6_side_of_a_dual_stack_service() {
    let tables = build(&state(&["10.0.0.10"]), &dual_stack_config());
    let t6 = table(&tables, Family::Ip6).expect("an ip6 table although the node has no IPv6");
    assert!(
        keyed_by(t6, "fd00:96::a"),
        "the IPv6 ClusterIP is dispatched"
    );
    let v6 = layout::ip_value(addrs(&["fd00:96::a"])[0]);
    let no_endpoints = &t6.sets["no-endpoint-services"].elements;
    assert!(
        !no_endpoints.iter().any(|e| e.key.first() == Some(&v6)),
        "it has a ready IPv6 endpoint"
    );
    let t4 = table(&tables, Family::Ip).unwrap();
    assert!(keyed_by(t4, "10.96.0.10"));
}

#[test]
fn a_cluster_without_any_node_address_or_cidr_still_gets_both_families() {
    let tables = build(&ClusterState::default(), &ProxyConfig::default());
    let got: Vec<Family> = tables.iter().map(|t| t.family).collect();
    assert_eq!(got, [Family::Ip, Family::Ip6]);
}

#[test]
fn ipv6_nodeports_of_a_node_without_an_ipv6_address_take_every_local_ipv6_address() {
    let c = ProxyConfig {
        local_addresses: addrs(&["10.0.0.10", "192.168.7.1", "fd00::1", "fe80::1", "::1"]),
        ..dual_stack_config()
    };
    // IPv4 keeps `primary`'s node IP; IPv6 has none, so every local IPv6 address but loopback
    // and link-local ones (each pod's veth has one).
    assert_eq!(
        nodeport_ips_of_each_family(&["10.0.0.10"], &c),
        [["10.0.0.10"], ["fd00::1"]]
    );
}

#[test]
fn a_node_ip_of_each_family_keeps_nodeports_on_the_node_ips() {
    let c = ProxyConfig {
        local_addresses: addrs(&["10.0.0.10", "fd00::1", "fd00:10::10"]),
        ..dual_stack_config()
    };
    assert_eq!(
        nodeport_ips_of_each_family(&["10.0.0.10", "fd00:10::10"], &c),
        [["10.0.0.10"], ["fd00:10::10"]]
    );
}

#[test]
fn nodeport_cidrs_of_one_family_leave_the_other_family_on_every_local_address() {
    let c = ProxyConfig {
        nodeport_addresses: NodePortAddresses::cidrs(vec!["10.0.0.0/24".parse().unwrap()]),
        local_addresses: addrs(&["10.0.0.10", "192.168.7.1", "fd00::1"]),
        ..dual_stack_config()
    };
    assert_eq!(
        nodeport_ips_of_each_family(&["10.0.0.10", "fd00:10::10"], &c),
        [["10.0.0.10"], ["fd00::1"]]
    );
}

#[test]
fn a_kernel_without_ipv6_gets_only_the_ip_table() {
    let c = ProxyConfig {
        supported_families: vec![IpFamily::V4],
        ..dual_stack_config()
    };
    let tables = build(&state(&["10.0.0.10"]), &c);
    let got: Vec<Family> = tables.iter().map(|t| t.family).collect();
    assert_eq!(got, [Family::Ip]);
}

#[test]
fn the_nodes_own_family_is_planned_even_when_the_kernel_probe_missed_it() {
    let c = ProxyConfig {
        supported_families: vec![IpFamily::V4],
        ..dual_stack_config()
    };
    let got: Vec<IpFamily> = families(&state(&["fd00:10::10"]), &c);
    assert_eq!(got, [IpFamily::V4, IpFamily::V6]);
}

#[test]
fn health_checks_listen_where_kube_proxy_listens() {
    let both = [IpFamily::V4, IpFamily::V6];
    let v4_only = NodeInfo {
        internal_ips: addrs(&["10.0.0.10"]),
        ..NodeInfo::default()
    };
    let dual = NodeInfo {
        internal_ips: addrs(&["10.0.0.10", "fd00:10::10"]),
        ..NodeInfo::default()
    };
    let primary = dual_stack_config();
    // `primary`: the node IP of each family; a family without one listens on all its addresses.
    assert_eq!(
        primary.health_check_addresses(&both, Some(&dual)),
        addrs(&["10.0.0.10", "fd00:10::10"])
    );
    assert_eq!(
        primary.health_check_addresses(&both, Some(&v4_only)),
        addrs(&["10.0.0.10", "::"])
    );
    assert_eq!(
        primary.health_check_addresses(&both, None),
        addrs(&["0.0.0.0", "::"])
    );
    assert_eq!(
        primary.health_check_addresses(&[IpFamily::V4], None),
        addrs(&["0.0.0.0"])
    );
    // CIDRs: the local addresses inside them, per family.
    let cidrs = ProxyConfig {
        nodeport_addresses: NodePortAddresses::cidrs(vec![
            "10.0.0.0/24".parse().unwrap(),
            "fd00::/64".parse().unwrap(),
        ]),
        local_addresses: addrs(&["10.0.0.10", "192.168.7.1", "fd00::1", "fd00:10::10"]),
        ..dual_stack_config()
    };
    assert_eq!(
        cidrs.health_check_addresses(&both, Some(&dual)),
        addrs(&["10.0.0.10", "fd00::1"])
    );
}

#[test]
fn only_a_family_that_nodeport_addresses_names_nothing_of_falls_back() {
    let v4_only = NodeInfo {
        internal_ips: addrs(&["10.0.0.10"]),
        ..NodeInfo::default()
    };
    let c = dual_stack_config();
    assert_eq!(c.nodeport_fallback(IpFamily::V4, Some(&v4_only)), None);
    assert!(c.nodeport_fallback(IpFamily::V6, Some(&v4_only)).is_some());
    assert!(c.needs_local_addresses(Some(&v4_only)));
    let with_flag = ProxyConfig {
        node_ips: addrs(&["fd00::5"]),
        ..dual_stack_config()
    };
    // --node-ip gives IPv6 its address; IPv4 still comes from the Node.
    assert_eq!(
        with_flag.nodeport_fallback(IpFamily::V6, Some(&v4_only)),
        None
    );
    assert_eq!(
        with_flag.nodeport_fallback(IpFamily::V4, Some(&v4_only)),
        None
    );
    assert!(!with_flag.needs_local_addresses(Some(&v4_only)));
}
