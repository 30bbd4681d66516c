//! Loopback NodePorts (KubeProxyNFTablesLocalhostNodePorts, kube-proxy 1.37) with real
//! traffic: a client in the node's own namespace connecting to `127.0.0.1:NodePort`. Without
//! the gate the kernel refuses it (nothing listens, nothing translates); with the gate and no
//! loopback range named, the ruleset rejects it; with both, the daemon's userspace proxy
//! relays it to an endpoint, follows endpoint changes, and serves again after a restart
//! (upstream's did not pick up a loopback range added across a restart, kubernetes#142183).

use crate::common;
use crate::harness;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::{Outcome, Topology, try_request};
use harness::*;
use serde_json::{Value, json};

const GATE: &str = "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true";
const LOOPBACK_NODEPORT: &str = "127.0.0.1:30080";

/// `demo/web` as a NodePort Service: ClusterIP 10.96.0.10:80, NodePort 30080 → 8080.
fn web_node_port() -> Value {
    let mut svc = service("web", "10.96.0.10", 80);
    svc["spec"]["type"] = json!("NodePort");
    svc["spec"]["ports"][0]["nodePort"] = json!(30080);
    svc
}

/// `demo/dns` as a NodePort Service: UDP NodePort 30053.
fn dns_node_port() -> Value {
    let mut svc = dns_service();
    svc["spec"]["type"] = json!("NodePort");
    svc["spec"]["ports"][0]["nodePort"] = json!(30053);
    svc
}

/// `demo/web6`: an IPv6 NodePort Service (NodePort 30086 → 8080) served by pod-1's IPv6
/// address, and its slice.
fn web6_node_port() -> [Value; 2] {
    [
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web6", "namespace": "demo"},
            "spec": {"type": "NodePort", "clusterIP": "fd00:96::6", "clusterIPs": ["fd00:96::6"],
                     "ipFamilies": ["IPv6"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP",
                                "targetPort": 8080, "nodePort": 30086}]}
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web6-1", "namespace": "demo",
                         "labels": {"kubernetes.io/service-name": "web6"}},
            "addressType": "IPv6",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["fd00:244:1::2"], "nodeName": NODE,
                           "conditions": {"ready": true}}]
        }),
    ]
}

/// What a connection from the node's namespace to `to` gets.
fn from_node(topo: &Topology, to: &str) -> Outcome {
    try_request(&topo.node, addr(to))
}

fn answered_by(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::Answered { backend, .. } => Some(backend),
        _ => None,
    }
}

/// Waits until `to`, seen from the node, is answered by `backend`.
fn wait_served_by(topo: &Topology, to: &str, backend: &str) -> Outcome {
    eventually(
        Duration::from_secs(20),
        &format!("{to} served by {backend}"),
        || {
            let outcome = from_node(topo, to);
            (answered_by(&outcome) == Some(backend)).then_some(outcome)
        },
    )
}

/// Waits until `to`, seen from the node, is refused.
fn wait_refused(topo: &Topology, to: &str) {
    eventually(Duration::from_secs(20), &format!("{to} refused"), || {
        matches!(from_node(topo, to), Outcome::Refused).then_some(())
    });
}

/// Whether a datagram from the node to `to` is answered by an ICMP error (a reject), read as
/// "connection refused" on a connected UDP socket.
fn udp_rejected(topo: &Topology, to: SocketAddr) -> bool {
    topo.node
        .run(move || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.connect(to).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            s.send(b"q").unwrap();
            let mut buf = [0u8; 64];
            matches!(s.recv(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
        })
        .unwrap()
}

/// The `nft` listing of the reject set, from inside the node's namespace.
fn reject_set(topo: &Topology) -> String {
    let out = topo
        .node
        .exec_unchecked(&[
            "nft",
            "list",
            "set",
            "ip",
            "kubenft",
            "localhost-nodeport-rejects",
        ])
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn loopback_node_ports_are_refused_rejected_or_proxied_as_kube_proxy_1_37_does() {
    let Some((topo, api)) = lab("lnp") else {
        return;
    };
    let _pod1_dns = kubenft::lab::serve_udp(&topo.pods[0], "pod-1");
    api.apply(web_node_port());
    api.apply(slice("web", &[1]));
    api.apply(dns_node_port());
    api.apply(dns_slice(&[1]));
    for object in web6_node_port() {
        api.apply(object);
    }

    // Without the gate: the node IP's NodePort works, loopback is refused by the kernel (the
    // daemon warns that naming loopback changes nothing without the gate).
    let mut daemon = start_daemon(&topo, &api, &["--nodeport-addresses", "primary,localhost"]);
    wait_served_by(&topo, "10.0.0.1:30080", "pod-1");
    assert!(matches!(
        from_node(&topo, LOOPBACK_NODEPORT),
        Outcome::Refused
    ));
    assert!(daemon.log().contains("KubeProxyNFTablesLocalhostNodePorts"));
    assert!(daemon.stop());

    // The gate without a loopback range: every loopback NodePort is rejected by the ruleset.
    let mut daemon = start_daemon(&topo, &api, &[GATE]);
    eventually(
        Duration::from_secs(20),
        "TCP and UDP NodePorts in the reject set",
        || {
            let set = reject_set(&topo);
            (set.contains("tcp . 30080") && set.contains("udp . 30053")).then_some(())
        },
    );
    wait_refused(&topo, LOOPBACK_NODEPORT);
    assert!(udp_rejected(&topo, addr("127.0.0.1:30053")));
    assert!(daemon.stop());

    // The gate and `localhost`, across a restart: the proxy serves TCP; UDP stays rejected.
    let args = [GATE, "--nodeport-addresses", "primary,localhost"];
    let daemon = start_daemon(&topo, &api, &args);
    let outcome = wait_served_by(&topo, LOOPBACK_NODEPORT, "pod-1");
    let Outcome::Answered { source, .. } = outcome else {
        unreachable!()
    };
    assert_eq!(
        source, "10.244.1.1",
        "the endpoint sees the node's own address toward it, as upstream's proxy dials"
    );
    assert!(!reject_set(&topo).contains("tcp . 30080"));
    assert!(udp_rejected(&topo, addr("127.0.0.1:30053")));
    // `localhost` names IPv6 loopback too: [::1] reaches the IPv6 Service's endpoint.
    let outcome = wait_served_by(&topo, "[::1]:30086", "pod-1");
    assert!(
        matches!(&outcome, Outcome::Answered { source, .. } if source == "fd00:244:1::1"),
        "{outcome:?}"
    );
    wait_served_by(&topo, "10.0.0.1:30080", "pod-1");
    let metrics = eventually(Duration::from_secs(10), "listener gauge", || {
        let (_, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics")?;
        let n = metric(
            &page,
            "kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv4\"}",
        )?;
        (n == 1.0).then_some(page)
    });
    assert!(metrics.contains("kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{ip_family=\"IPv4\"} 0"));

    // An endpoint change is followed; the sync that programs it also reads the reject rules'
    // counters: the UDP datagrams rejected above are in the metric, and so are the TCP
    // connections rejected under the previous daemon (the rules, and their counters, stayed).
    api.apply(slice("web", &[2]));
    wait_served_by(&topo, LOOPBACK_NODEPORT, "pod-2");
    eventually(Duration::from_secs(10), "rejected UDP counted", || {
        let (_, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics")?;
        let name = "kubeproxy_nftables_localhost_nodeport_rejected_packets_total";
        let udp = metric(
            &page,
            &format!("{name}{{ip_family=\"IPv4\",protocol=\"UDP\"}}"),
        )?;
        let tcp = metric(
            &page,
            &format!("{name}{{ip_family=\"IPv4\",protocol=\"TCP\"}}"),
        )?;
        (udp >= 1.0 && tcp >= 1.0).then_some(())
    });

    // A restart serves again (the listener is the process's; the rules stay in the kernel).
    let mut daemon = daemon;
    assert!(daemon.stop());
    wait_refused(&topo, LOOPBACK_NODEPORT);
    let _daemon = start_daemon(&topo, &api, &args);
    wait_served_by(&topo, LOOPBACK_NODEPORT, "pod-2");

    // No endpoints: no listener, so the kernel refuses.
    api.apply(slice("web", &[]));
    wait_refused(&topo, LOOPBACK_NODEPORT);
}
