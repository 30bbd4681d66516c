//! Conversion of Kubernetes objects into the model: addresses, conditions, duplicates and
//! ServiceCIDRs, and what a bad object leaves behind.

use super::*;

/// kube-proxy reads "041" as 41 in an IPv4 address or a prefix length, anything else that
/// is not an address stays invalid.
#[test]
fn ipv4_octets_with_leading_zeros_read_as_decimal() {
    let ip = |s: &str| parse_ip(s).map(|ip| ip.to_string());
    assert_eq!(ip("172.30.0.041").as_deref(), Some("172.30.0.41"));
    assert_eq!(ip("010.180.00.001").as_deref(), Some("10.180.0.1"));
    assert_eq!(ip("fd00::0041").as_deref(), Some("fd00::41"));
    for bad in [
        "1.2.3.256",
        "1.2.3",
        "1.2.3.4.5",
        "1.2..4",
        "1.2.3.+4",
        " 1.2.3.4",
        "x",
    ] {
        assert_eq!(ip(bad), None, "{bad:?}");
    }
    let net = |s: &str| parse_net(s).map(|n| n.to_string());
    assert_eq!(net("203.0.113.000/025").as_deref(), Some("203.0.113.0/25"));
    assert_eq!(net("203.0.113.7").as_deref(), Some("203.0.113.7/32"));
    assert_eq!(net("10.1.2.3/8").as_deref(), Some("10.0.0.0/8"));
    for bad in ["203.0.113.0/33", "203.0.113.0/", "203.0.113.0/+8", "/8"] {
        assert_eq!(net(bad), None, "{bad:?}");
    }
}

fn web_slice(name: &str, endpoints: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "demo",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

fn web_endpoints(slices: &[EndpointSlice]) -> Vec<Endpoint> {
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.10",
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))
    .unwrap();
    let (state, rejected) = ClusterState::from_objects(&[service], slices, None);
    assert!(rejected.is_empty(), "{rejected:?}");
    state.endpoints.into_values().next().unwrap_or_default()
}

/// kube-proxy reads an unset `serving` as true whatever `ready` says, so a terminating
/// endpoint that does not say whether it serves is still a fallback.
#[test]
fn unset_conditions_read_as_kube_proxy_reads_them() {
    let eps = web_endpoints(&[web_slice(
        "web-1",
        serde_json::json!([
            {"addresses": ["10.244.0.1"]},
            {"addresses": ["10.244.0.2"], "conditions": {"ready": false, "terminating": true}},
        ]),
    )]);
    let flags: Vec<(bool, bool, bool)> = eps
        .iter()
        .map(|e| (e.ready, e.serving, e.terminating))
        .collect();
    assert_eq!(flags, [(true, true, false), (false, true, true)]);
}

/// An address in two slices, once terminating and once not (its pod moved, or the address
/// was reused): the endpoint that is not terminating is kept, whichever slice comes first.
#[test]
fn an_address_listed_twice_keeps_the_endpoint_that_is_not_terminating() {
    let old = web_slice(
        "web-old",
        serde_json::json!([{"addresses": ["10.244.0.1"],
                            "conditions": {"ready": false, "serving": true, "terminating": true}}]),
    );
    let new = web_slice(
        "web-new",
        serde_json::json!([{"addresses": ["10.244.0.1"], "conditions": {"ready": true}}]),
    );
    for slices in [[old.clone(), new.clone()], [new, old]] {
        let eps = web_endpoints(&slices);
        assert_eq!(eps.len(), 1);
        assert!(eps[0].ready && !eps[0].terminating, "{eps:?}");
    }
}

/// Every ServiceCIDR counts, one being deleted too (its ClusterIPs stay allocated until it
/// is gone); ranges are canonical, sorted and listed once; a bad CIDR costs only itself.
#[test]
fn service_cidrs_are_the_union_of_every_objects_valid_ranges() {
    let objects: Vec<ServiceCIDR> = serde_json::from_value(serde_json::json!([
        {"metadata": {"name": "kubernetes"},
         "spec": {"cidrs": ["10.96.0.0/16", "fd00:10:96::/112"]}},
        {"metadata": {"name": "leaving", "deletionTimestamp": "2026-11-25T10:00:00Z",
                      "finalizers": ["networking.k8s.io/service-cidr-finalizer"]},
         "spec": {"cidrs": ["10.100.0.1/16", "10.96.0.0/16"]}},
        {"metadata": {"name": "typo"}, "spec": {"cidrs": ["10.200.0.0/33", "10.201.0.0/16"]}},
        {"metadata": {"name": "empty"}, "spec": {}},
    ]))
    .unwrap();
    let mut state = ClusterState::default();
    let rejected = state.update_service_cidrs(&objects);
    let ranges: Vec<String> = state.service_cidrs.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        ranges,
        [
            "10.96.0.0/16",
            "10.100.0.0/16",
            "10.201.0.0/16",
            "fd00:10:96::/112"
        ]
    );
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(
        (rejected[0].kind, rejected[0].name.as_str()),
        ("ServiceCIDR", "typo")
    );
    assert!(rejected[0].reason.contains("10.200.0.0/33"), "{rejected:?}");

    assert!(state.update_service_cidrs(&[]).is_empty());
    assert!(state.service_cidrs.is_empty(), "replaced, not merged");
}

/// A bad endpoint or port costs only itself: the slice's good endpoints are still used, and
/// each skipped part is reported with its reason.
#[test]
fn a_slice_with_a_bad_endpoint_and_a_bad_port_keeps_its_good_endpoints() {
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))
    .unwrap();
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-1", "namespace": "demo",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                  {"name": "ping", "port": 7, "protocol": "ICMP"}],
        "endpoints": [
            {"addresses": ["10.244.0.1"]},
            {"addresses": ["not-an-address"]},
            {"addresses": ["fd00::1"]},
            {"addresses": []},
            {"addresses": ["10.244.0.2"]},
        ],
    }))
    .unwrap();
    let (state, rejected) = ClusterState::from_objects(&[service], &[slice], None);
    let http = ServicePortName {
        namespace: "demo".into(),
        name: "web".into(),
        port: "http".into(),
        protocol: Protocol::Tcp,
    };
    let ips: Vec<String> = state.endpoints[&http]
        .iter()
        .map(|e| e.ip.to_string())
        .collect();
    assert_eq!(ips, ["10.244.0.1", "10.244.0.2"]);
    let reasons: Vec<&str> = rejected.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("not-an-address")),
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r.contains("fd00::1")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("ICMP")), "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("no address")),
        "{reasons:?}"
    );
    assert!(
        rejected
            .iter()
            .all(|r| r.kind == "EndpointSlice" && r.name == "web-1")
    );
}

/// Walking the endpoints beside the ports finds what searching finds: for ports without
/// endpoints, between endpoints no port has, and where a port's endpoints are filed under an
/// equal name that is not the port's own.
#[test]
fn ports_with_endpoints_finds_each_ports_endpoints() {
    let service = |name: &str, ports: serde_json::Value| -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "a"},
            "spec": {"clusterIP": "10.96.0.10", "ports": ports},
        }))
        .unwrap()
    };
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "x-1", "namespace": "a",
                     "labels": {"kubernetes.io/service-name": "x"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.0.1"]}],
    }))
    .unwrap();
    let services = [
        service(
            "x",
            serde_json::json!([{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]),
        ),
        service("y", serde_json::json!([{"port": 80}])),
    ];
    let (mut state, _) = ClusterState::from_objects(&services, &[slice], None);
    let name = |service: &str, port: &str| {
        Arc::new(ServicePortName {
            namespace: "a".into(),
            name: service.into(),
            port: port.into(),
            protocol: Protocol::Tcp,
        })
    };
    let endpoint = |ip: &str| Endpoint::ready(ip.parse().unwrap(), 8080);
    for (service, port, ip) in [
        ("w", "", "10.244.0.9"),
        ("x", "other", "10.244.0.8"),
        ("y", "", "10.244.0.3"),
        ("z", "", "10.244.0.7"),
    ] {
        state
            .endpoints
            .insert(name(service, port), vec![endpoint(ip)]);
    }
    let walked: Vec<_> = state.ports_with_endpoints().collect();
    let names: Vec<_> = walked.iter().map(|(n, _, _)| n.to_string()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for (n, sp, eps) in &walked {
        assert!(Arc::ptr_eq(n, &sp.name));
        assert_eq!(*eps, state.endpoints_of(n), "{n}");
    }
    let ips = |eps: &[Endpoint]| -> Vec<String> { eps.iter().map(|e| e.ip.to_string()).collect() };
    let found: Vec<Vec<String>> = walked.iter().map(|(_, _, eps)| ips(eps)).collect();
    assert_eq!(
        found,
        [
            vec!["10.244.0.1".to_string()],
            vec![],
            vec!["10.244.0.3".into()]
        ]
    );
}

/// With the AllowServiceExternalIPs gate off, kube-proxy's service ports hold no external IPs:
/// only the named services lose theirs, on every port, and a ClusterIP Service reachable from
/// outside through them alone no longer is; NodePorts and load-balancer IPs stay.
#[test]
fn withheld_external_ips_leave_only_the_named_services_other_addresses() {
    let service = |name: &str, spec: serde_json::Value| -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "a"},
            "spec": spec,
        }))
        .unwrap()
    };
    let services = [
        service(
            "ext",
            serde_json::json!({"clusterIP": "10.96.0.10", "externalIPs": ["192.0.2.30"],
                "externalTrafficPolicy": "Local",
                "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}),
        ),
        service(
            "np",
            serde_json::json!({"type": "NodePort", "clusterIP": "10.96.0.11",
                "externalIPs": ["192.0.2.31"],
                "ports": [{"port": 80, "nodePort": 30080}]}),
        ),
        service(
            "kept",
            serde_json::json!({"clusterIP": "10.96.0.12", "externalIPs": ["192.0.2.32"],
                "ports": [{"port": 80}]}),
        ),
    ];
    let (mut state, rejected) = ClusterState::from_objects(&services, &[], None);
    assert!(rejected.is_empty(), "{rejected:?}");
    let withheld = [
        ("a".to_string(), "ext".to_string()),
        ("a".to_string(), "np".to_string()),
    ];
    state.withhold_external_ips(&withheld);
    let ports: Vec<_> = state.services.values().collect();
    assert_eq!(ports.len(), 4);
    for sp in &ports {
        let external: Vec<String> = sp.external_ips.iter().map(|ip| ip.to_string()).collect();
        match sp.name.name.as_str() {
            "ext" => {
                assert!(external.is_empty(), "{}", sp.name);
                assert!(!sp.has_external(), "its external IP was its only way in");
                assert_eq!(
                    sp.external_policy,
                    TrafficPolicy::Local,
                    "read from the spec"
                );
            }
            "np" => {
                assert!(external.is_empty());
                assert!(sp.has_external(), "the NodePort stays");
            }
            _ => assert_eq!(external, ["192.0.2.32"], "a service not named keeps them"),
        }
    }
}
