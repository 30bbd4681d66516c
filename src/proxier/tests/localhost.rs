//! Loopback NodePorts under the KubeProxyNFTablesLocalhostNodePorts gate: which listeners the
//! userspace proxy gets, and which NodePorts the ruleset rejects on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use super::*;

const WEB: &str = "
metadata: {name: web, namespace: default}
spec: {type: NodePort, clusterIP: 10.96.0.10, ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]}
";

const DNS: &str = "
metadata: {name: dns, namespace: default}
spec: {type: NodePort, clusterIP: 10.96.0.53, ports: [{name: http, port: 53, nodePort: 30053, protocol: UDP}]}
";

const TWO_ENDPOINTS: &str = "[{addresses: [10.244.0.11], nodeName: node-a, conditions: {ready: true}}, {addresses: [10.244.1.12], nodeName: node-b, conditions: {ready: true}}]";

fn udp_slice(service: &str, port: u16, endpoints: &str) -> EndpointSlice {
    serde_saphyr::from_str(&format!(
        "metadata: {{name: {service}-x, namespace: default, labels: {{kubernetes.io/service-name: {service}}}}}
addressType: IPv4
ports: [{{name: http, port: {port}, protocol: UDP}}]
endpoints: {endpoints}"
    ))
    .unwrap()
}

/// The gate on, with `nodePortAddresses` of `primary` and/or CIDRs (keywords other than
/// `primary` are the config's to expand).
fn gated(nodeport_addresses: &str) -> ProxyConfig {
    let entries: Vec<&str> = nodeport_addresses.split(',').collect();
    ProxyConfig {
        localhost_nodeports: true,
        nodeport_addresses: NodePortAddresses {
            primary: entries.contains(&"primary"),
            cidrs: entries
                .iter()
                .filter(|e| **e != "primary")
                .map(|c| c.parse().unwrap())
                .collect(),
        },
        ..config()
    }
}

/// `localhost` as the config expands it.
const LOOPBACK: &str = "127.0.0.0/8,::1/128";

fn listeners(
    services: &[Service],
    slices: &[EndpointSlice],
    config: &ProxyConfig,
) -> Vec<LocalhostListener> {
    let (state, rejected) = cluster(services, slices);
    assert!(rejected.is_empty(), "{rejected:?}");
    localhost_listeners(&state, config)
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The `protocol . port` keys of `localhost-nodeport-rejects`, or None without the set.
fn rejected(t: &Table) -> Option<Vec<(u8, u16)>> {
    let set = t.sets.get("localhost-nodeport-rejects")?;
    Some(
        set.elements
            .iter()
            .map(|e| match e.key.as_slice() {
                [Value::Proto(p), Value::Port(n)] => (*p, *n),
                other => panic!("unexpected key {other:?}"),
            })
            .collect(),
    )
}

#[test]
fn a_tcp_node_port_with_endpoints_gets_a_loopback_listener_per_named_family() {
    let web_slice = [slice("web", "IPv4", 8080, TWO_ENDPOINTS)];
    let got = listeners(
        &[service(WEB)],
        &web_slice,
        &gated(&format!("primary,{LOOPBACK}")),
    );
    assert_eq!(
        got,
        vec![LocalhostListener {
            address: addr("127.0.0.1:30080"),
            service: "default/web:http".into(),
            endpoints: vec![addr("10.244.0.11:8080"), addr("10.244.1.12:8080")],
            affinity: None,
        }],
        "an IPv4-only service has no [::1] listener"
    );
    // Without the gate, or without a loopback range, nothing listens.
    let off = ProxyConfig {
        localhost_nodeports: false,
        ..gated(&format!("primary,{LOOPBACK}"))
    };
    assert!(listeners(&[service(WEB)], &web_slice, &off).is_empty());
    assert!(listeners(&[service(WEB)], &web_slice, &gated("primary")).is_empty());
    // IPv6 loopback alone serves IPv6 services only.
    assert!(listeners(&[service(WEB)], &web_slice, &gated("primary,::1/128")).is_empty());
}

#[test]
fn no_listener_without_endpoints_or_for_other_protocols() {
    let config = gated(LOOPBACK);
    assert!(listeners(&[service(WEB)], &[], &config).is_empty());
    let dns_slice = udp_slice("dns", 5353, TWO_ENDPOINTS);
    assert!(listeners(&[service(DNS)], &[dns_slice], &config).is_empty());
}

#[test]
fn external_traffic_policy_local_proxies_to_local_endpoints_only() {
    let local = WEB.replace(
        "type: NodePort,",
        "type: NodePort, externalTrafficPolicy: Local,",
    );
    let config = gated(&format!("primary,{LOOPBACK}"));
    let got = listeners(
        &[service(&local)],
        &[slice("web", "IPv4", 8080, TWO_ENDPOINTS)],
        &config,
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].endpoints, vec![addr("10.244.0.11:8080")]);
    let remote_only = "[{addresses: [10.244.1.12], nodeName: node-b, conditions: {ready: true}}]";
    let got = listeners(
        &[service(&local)],
        &[slice("web", "IPv4", 8080, remote_only)],
        &config,
    );
    assert!(got.is_empty(), "no local endpoint, no listener: {got:?}");
}

#[test]
fn client_ip_affinity_is_carried_to_the_listener() {
    let sticky = WEB.replace(
        "type: NodePort,",
        "type: NodePort, sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}},",
    );
    let got = listeners(
        &[service(&sticky)],
        &[slice("web", "IPv4", 8080, TWO_ENDPOINTS)],
        &gated(LOOPBACK),
    );
    assert_eq!(got[0].affinity, Some(Duration::from_secs(60)));
}

/// As kube-proxy 1.37: with the gate, loopback NodePorts that no proxy serves are rejected
/// (every protocol where no loopback range of the family is named, all but TCP where one is);
/// without it the ruleset has no such set.
#[test]
fn loopback_node_ports_no_proxy_serves_are_rejected() {
    let services = [service(WEB), service(DNS)];
    let slices = [
        slice("web", "IPv4", 8080, TWO_ENDPOINTS),
        udp_slice("dns", 5353, TWO_ENDPOINTS),
    ];
    let table = |config: &ProxyConfig| v4(&plan(&services, &slices, config)).clone();

    assert_eq!(rejected(&table(&config())), None, "no gate, no set");
    assert_eq!(
        rejected(&table(&gated(&format!("primary,{LOOPBACK}")))),
        Some(vec![(17, 30053)])
    );
    let mut without_loopback = rejected(&table(&gated("primary"))).unwrap();
    without_loopback.sort();
    assert_eq!(without_loopback, vec![(6, 30080), (17, 30053)]);

    let t = table(&gated("primary"));
    let input = &t.chains["filter-input"];
    assert!(
        input
            .rules
            .iter()
            .any(|r| r.stmts.contains(&Stmt::jump("localhost-nodeports-check"))),
        "{input:?}"
    );
    assert!(t.chains.contains_key("localhost-nodeports-check"));
}
