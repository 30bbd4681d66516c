//! The evaluator on tables the planner builds for small clusters, without a kernel. The tests
//! with real traffic (tests/explain.rs) check the same answers against what the kernel does.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use super::*;
use crate::cluster::ClusterState;
use crate::nft::model::{Family, Table, Value};
use crate::proxier::ProxyConfig;

const NODE_IP: &str = "10.0.0.1";

fn node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "node-a"},
        "spec": {"podCIDRs": ["10.244.1.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}
    }))
    .unwrap()
}

fn service(name: &str, spec: serde_json::Value, status: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "t"},
        "spec": spec,
        "status": status,
    }))
    .unwrap()
}

fn cluster_ip(name: &str, ip: &str) -> Service {
    service(
        name,
        json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
        json!({}),
    )
}

/// An EndpointSlice of `name` with ready endpoints (address, node) on port 8080.
fn slice(name: &str, endpoints: &[(&str, &str)]) -> EndpointSlice {
    let eps: Vec<_> = endpoints
        .iter()
        .map(|(ip, node)| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-x"), "namespace": "t",
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": eps,
    }))
    .unwrap()
}

fn table(services: &[Service], slices: &[EndpointSlice]) -> Table {
    let (state, rejected) = ClusterState::from_objects(services, slices, Some(&node()));
    assert!(rejected.is_empty(), "{rejected:?}");
    let config = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        ..ProxyConfig::default()
    };
    crate::proxier::build(&state, &config)
        .into_iter()
        .find(|t| t.family == Family::Ip)
        .unwrap()
}

fn host() -> Host {
    Host {
        local: [NODE_IP, "10.244.1.1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect(),
        ..Host::default()
    }
}

fn ask(t: &Table, host: &Host, from: &str, to: &str) -> Explanation {
    let (daddr, dport, proto) = parse_target(to).unwrap();
    let saddr: IpAddr = from.parse().unwrap();
    let entry = if host.local.contains(&saddr) {
        Entry::Output
    } else {
        Entry::Prerouting
    };
    explain_table(t, host, &Packet::new(saddr, daddr, proto, dport), entry).unwrap()
}

/// (endpoint, probability) pairs.
fn shares(e: &Explanation) -> Vec<(String, f64)> {
    e.endpoints
        .iter()
        .map(|s| (format!("{}:{}", s.address, s.port), s.probability))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

const POD: &str = "10.244.1.2";
const REMOTE_POD: &str = "10.244.2.2";
const CLIENT: &str = "10.0.0.2";

fn web() -> (Vec<Service>, Vec<EndpointSlice>) {
    (
        vec![cluster_ip("web", "10.96.0.10")],
        vec![slice("web", &[(POD, "node-a"), (REMOTE_POD, "node-b")])],
    )
}

#[test]
fn targets_parse_with_an_optional_protocol() {
    assert_eq!(
        parse_target("10.96.0.10:80").unwrap(),
        ("10.96.0.10".parse().unwrap(), 80, 6)
    );
    assert_eq!(
        parse_target("[fd00::1]:53/udp").unwrap(),
        ("fd00::1".parse().unwrap(), 53, 17)
    );
    assert_eq!(parse_target("10.0.0.1:9/SCTP").unwrap().2, 132);
    for bad in ["10.96.0.10", "10.96.0.10:80/icmp", "web:80", ""] {
        assert!(parse_target(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_cluster_ip_from_a_pod_reaches_each_endpoint_half_the_time_unmasqueraded() {
    let (s, e) = web();
    let t = table(&s, &e);
    let got = ask(&t, &host(), POD, "10.96.0.10:80");
    assert_eq!(got.service.as_deref(), Some("t/web:http"));
    assert_eq!(got.frontend.as_ref().unwrap().kind, "cluster-ip");
    assert_eq!(got.verdict, "accept");
    let sh = shares(&got);
    assert_eq!(sh.len(), 2, "{sh:?}");
    assert!(sh.iter().all(|(_, p)| close(*p, 0.5)), "{sh:?}");
    assert_eq!(sh[0].0, "10.244.1.2:8080");
    // The pod itself is one of the endpoints: reaching itself is hairpin-masqueraded.
    let own = &got.endpoints[0];
    assert!(own.masquerade);
    assert_eq!(own.masquerade_reasons[0].kind, "hairpin");
    let other = &got.endpoints[1];
    assert!(!other.masquerade, "{other:?}");
    assert!(got.dropped.is_none() && got.rejected.is_none());
}

#[test]
fn a_cluster_ip_from_off_cluster_is_masqueraded_because_of_its_source() {
    let (s, e) = web();
    let t = table(&s, &e);
    let got = ask(&t, &host(), CLIENT, "10.96.0.10:80");
    assert_eq!(got.endpoints.len(), 2);
    for ep in &got.endpoints {
        assert!(ep.masquerade);
        let kinds: Vec<&str> = ep
            .masquerade_reasons
            .iter()
            .map(|r| r.kind.as_str())
            .collect();
        assert_eq!(kinds, ["off-cluster-source"], "{ep:?}");
    }
}

#[test]
fn three_endpoints_in_four_slots_share_as_the_draws_decide() {
    let s = vec![cluster_ip("web", "10.96.0.10")];
    let e = vec![slice(
        "web",
        &[
            (POD, "node-a"),
            (REMOTE_POD, "node-b"),
            ("10.244.3.2", "node-c"),
        ],
    )];
    let got = ask(&table(&s, &e), &host(), POD, "10.96.0.10:80");
    let sh = shares(&got);
    assert_eq!(sh.len(), 3);
    // Eleven draws among four slots (slot 3 empty: draw again), then one among slots 0-1: the
    // third endpoint misses its share of the last draw, 4^-11 of all connections.
    let last = 0.25f64.powi(11);
    let third = (1.0 - last) / 3.0;
    let expected = [third + last / 2.0, third + last / 2.0, third];
    for ((_, p), want) in sh.iter().zip(expected) {
        assert!((p - want).abs() < 1e-15, "{sh:?}");
    }
    assert!((sh.iter().map(|(_, p)| p).sum::<f64>() - 1.0).abs() < 1e-15);
}

#[test]
fn a_service_without_endpoints_is_rejected_and_says_so() {
    let s = vec![cluster_ip("web", "10.96.0.10")];
    let got = ask(&table(&s, &[]), &host(), POD, "10.96.0.10:80");
    assert_eq!(got.verdict, "reject");
    assert!(got.endpoints.is_empty());
    let r = got.rejected.unwrap();
    assert_eq!(r.kind, "no-endpoints");
    assert!(r.reason.contains("t/web:http"), "{r:?}");
    assert!(close(r.probability, 1.0));
    assert_eq!(got.service.as_deref(), Some("t/web:http"));
}

#[test]
fn an_unused_port_and_an_unallocated_cluster_ip_are_told_apart() {
    let (s, e) = web();
    let t = table(&s, &e);
    let port = ask(&t, &host(), POD, "10.96.0.10:81");
    assert_eq!(port.verdict, "reject");
    assert_eq!(port.rejected.unwrap().kind, "unused-cluster-ip-port");
    assert_eq!(port.service, None);
    let unallocated = ask(&t, &host(), POD, "10.96.9.9:80");
    assert_eq!(unallocated.verdict, "drop");
    assert_eq!(unallocated.dropped.unwrap().kind, "unallocated-cluster-ip");
}

#[test]
fn an_address_kubenft_does_not_serve_passes_untranslated() {
    let (s, e) = web();
    let got = ask(&table(&s, &e), &host(), POD, "198.51.100.7:443");
    assert_eq!(got.verdict, "accept");
    assert!(got.endpoints.is_empty());
    assert!(close(got.untranslated.unwrap().probability, 1.0));
    assert_eq!(got.service, None);
}

fn lb(name: &str, ip: &str, lb_ip: &str, node_port: u16, extra: serde_json::Value) -> Service {
    let mut spec = json!({"type": "LoadBalancer", "clusterIP": ip,
        "ports": [{"name": "http", "port": 80, "nodePort": node_port, "protocol": "TCP"}]});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    service(
        name,
        spec,
        json!({"loadBalancer": {"ingress": [{"ip": lb_ip}]}}),
    )
}

#[test]
fn a_node_port_with_policy_cluster_is_masqueraded_for_that_policy() {
    let s = vec![lb("np", "10.96.0.20", "192.0.2.20", 30020, json!({}))];
    let e = vec![slice("np", &[(POD, "node-a"), (REMOTE_POD, "node-b")])];
    let got = ask(&table(&s, &e), &host(), CLIENT, "10.0.0.1:30020");
    assert_eq!(got.frontend.as_ref().unwrap().kind, "node-port");
    assert_eq!(got.service.as_deref(), Some("t/np:http"));
    assert_eq!(got.endpoints.len(), 2);
    for ep in &got.endpoints {
        let kinds: Vec<&str> = ep
            .masquerade_reasons
            .iter()
            .map(|r| r.kind.as_str())
            .collect();
        assert!(kinds.contains(&"external-traffic-policy-cluster"), "{ep:?}");
    }
}

#[test]
fn source_ranges_admit_listed_sources_and_drop_the_rest() {
    let s = vec![lb(
        "fw",
        "10.96.0.22",
        "192.0.2.22",
        30022,
        json!({"loadBalancerSourceRanges": ["10.0.0.0/30"]}),
    )];
    let e = vec![slice("fw", &[(POD, "node-a")])];
    let t = table(&s, &e);
    let ok = ask(&t, &host(), CLIENT, "192.0.2.22:80");
    assert_eq!(ok.frontend.as_ref().unwrap().kind, "load-balancer-ip");
    assert!(ok.source_ranges.as_ref().unwrap().allowed);
    assert_eq!(shares(&ok), [("10.244.1.2:8080".to_string(), 1.0)]);
    let denied = ask(&t, &host(), "10.0.0.9", "192.0.2.22:80");
    assert!(!denied.source_ranges.as_ref().unwrap().allowed);
    assert_eq!(denied.verdict, "drop");
    assert_eq!(denied.dropped.unwrap().kind, "source-ranges");
}

#[test]
fn policy_local_reaches_only_local_endpoints_from_outside_and_drops_without_them() {
    let local = json!({"externalTrafficPolicy": "Local"});
    let s = vec![
        lb("loc", "10.96.0.20", "192.0.2.20", 30020, local.clone()),
        lb("far", "10.96.0.21", "192.0.2.21", 30021, local),
    ];
    let e = vec![
        slice("loc", &[(POD, "node-a"), (REMOTE_POD, "node-b")]),
        slice("far", &[(REMOTE_POD, "node-b")]),
    ];
    let t = table(&s, &e);
    let got = ask(&t, &host(), CLIENT, "192.0.2.20:80");
    assert_eq!(shares(&got), [("10.244.1.2:8080".to_string(), 1.0)]);
    assert!(
        !got.endpoints[0].masquerade,
        "policy Local keeps the client's address"
    );
    let none = ask(&t, &host(), CLIENT, "192.0.2.21:80");
    assert_eq!(none.verdict, "drop");
    assert_eq!(none.dropped.unwrap().kind, "no-local-endpoints");
    // From the node itself, every endpoint, masqueraded as host traffic.
    let host_got = ask(&t, &host(), NODE_IP, "10.0.0.1:30020");
    assert_eq!(host_got.endpoints.len(), 2);
    assert!(host_got.endpoints.iter().all(|e| {
        e.masquerade_reasons
            .iter()
            .any(|r| r.kind == "node-traffic")
    }));
}

#[test]
fn a_slot_removed_by_hand_falls_back_to_the_first_endpoint() {
    let (s, e) = web();
    let mut t = table(&s, &e);
    let slots = t
        .sets
        .values_mut()
        .find(|s| {
            s.elements
                .iter()
                .any(|e| e.key.last() == Some(&Value::Mark(1)))
        })
        .unwrap();
    slots
        .elements
        .retain(|e| e.key.last() != Some(&Value::Mark(1)));
    let got = ask(&t, &host(), CLIENT, "10.96.0.10:80");
    assert_eq!(shares(&got), [("10.244.1.2:8080".to_string(), 1.0)]);
    let via: Vec<(Option<&str>, f64)> = got.endpoints[0]
        .via
        .iter()
        .map(|v| (v.map.as_deref(), v.probability))
        .collect();
    assert_eq!(via.len(), 2, "{via:?}");
    assert!(
        via.iter()
            .any(|(m, p)| *m == Some("pick-fallback") && close(*p, 0.5)),
        "{via:?}"
    );
}

#[test]
fn a_client_with_an_affinity_entry_is_pinned_to_its_endpoint() {
    let s = vec![service(
        "sticky",
        json!({"clusterIP": "10.96.0.30", "sessionAffinity": "ClientIP",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
        json!({}),
    )];
    let e = vec![slice("sticky", &[(POD, "node-a"), (REMOTE_POD, "node-b")])];
    let t = table(&s, &e);
    let free = ask(&t, &host(), CLIENT, "10.96.0.30:80");
    assert_eq!(free.endpoints.len(), 2);
    let remote_set = t
        .sets
        .values()
        .find(|s| s.dynamic && s.name.contains("10.244.2.2"))
        .unwrap()
        .name
        .clone();
    let mut h = host();
    h.dynamic.insert(
        remote_set.clone(),
        vec![DynamicElement {
            key: vec![Value::Ipv4(CLIENT.parse().unwrap())],
            expires_in: Some(Duration::from_secs(10_000)),
        }],
    );
    let pinned = ask(&t, &h, CLIENT, "10.96.0.30:80");
    assert_eq!(shares(&pinned), [("10.244.2.2:8080".to_string(), 1.0)]);
    let pin = pinned.endpoints[0].pinned.as_ref().unwrap();
    assert_eq!(pin.set, remote_set);
    assert_eq!(pin.expires_in_seconds, Some(10_000));
    // Another source is not pinned.
    assert_eq!(ask(&t, &h, "10.0.0.3", "10.96.0.30:80").endpoints.len(), 2);
}

#[test]
fn a_packet_of_the_other_ip_version_is_an_error_not_a_guess() {
    let (s, e) = web();
    let t = table(&s, &e);
    let packet = Packet::new(
        "fd00::2".parse().unwrap(),
        "fd00::10".parse().unwrap(),
        6,
        80,
    );
    assert!(explain_table(&t, &host(), &packet, Entry::Prerouting).is_err());
}

#[test]
fn a_service_listing_finds_every_frontend_in_the_table() {
    let local = json!({"externalTrafficPolicy": "Local"});
    let s = vec![
        lb("loc", "10.96.0.20", "192.0.2.20", 30020, local),
        cluster_ip("locx", "10.96.0.40"),
    ];
    let e = vec![
        slice("loc", &[(POD, "node-a"), (REMOTE_POD, "node-b")]),
        slice("locx", &[(POD, "node-a")]),
    ];
    let t = table(&s, &e);
    let node = |_: bool| Some(NODE_IP.parse().unwrap());
    let got = service::list(&[t], &host(), "t/loc", &node, None).unwrap();
    let found: Vec<(String, u16)> = got
        .frontends
        .iter()
        .map(|f| (f.address.to_string(), f.port))
        .collect();
    assert_eq!(
        found,
        [
            ("10.0.0.1".to_string(), 30020),
            ("10.96.0.20".to_string(), 80),
            ("192.0.2.20".to_string(), 80)
        ]
    );
    let lb = &got.frontends[2];
    assert_eq!(
        lb.from_outside.frontend.as_ref().unwrap().kind,
        "external-ip"
    );
    assert_eq!(
        lb.from_outside.endpoints.len(),
        1,
        "policy Local from outside"
    );
    assert_eq!(
        lb.from_node.endpoints.len(),
        2,
        "the node may use every endpoint"
    );
    assert!(
        got.to_text().contains("external ip 192.0.2.20:80/tcp"),
        "{}",
        got.to_text()
    );
}
