use std::collections::BTreeSet;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A TCP server on an ephemeral loopback port that answers each connection with `name` and
/// then echoes what it reads.
async fn backend(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                s.write_all(name.as_bytes()).await.unwrap();
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A free loopback port (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn listener(port: u16, endpoints: Vec<SocketAddr>) -> LocalhostListener {
    LocalhostListener {
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        service: "default/web:http".into(),
        endpoints,
        affinity: None,
    }
}

/// Connects to `port` and returns the name of the backend that answered.
async fn who_answers(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buf = [0u8; 1];
    s.read_exact(&mut buf).await.unwrap();
    String::from_utf8(buf.to_vec()).unwrap()
}

#[tokio::test]
async fn listeners_open_follow_endpoints_and_close() {
    let (a, b) = (backend("a").await, backend("b").await);
    let metrics = Metrics::new();
    let mut proxy = LocalhostProxy::new(metrics.clone());
    let port = free_port();

    proxy.sync(vec![listener(port, vec![a])]);
    assert_eq!(who_answers(port).await, "a");
    assert!(
        metrics
            .render()
            .contains("kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv4\"} 1")
    );

    // A connection made before the endpoints change keeps its endpoint and keeps working.
    let mut before = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut greeting = [0u8; 1];
    before.read_exact(&mut greeting).await.unwrap();
    proxy.sync(vec![listener(port, vec![b])]);
    assert_eq!(who_answers(port).await, "b");
    before.write_all(b"still here").await.unwrap();
    let mut echo = [0u8; 10];
    before.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"still here");

    // Closing the listener closes its connections too.
    proxy.sync(Vec::new());
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), before.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(_)) | Ok(Err(_))),
        "still open after close"
    );
    assert!(TcpStream::connect(("127.0.0.1", port)).await.is_err());
    assert!(
        metrics
            .render()
            .contains("kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv4\"} 0")
    );
}

#[tokio::test]
async fn a_port_taken_by_another_process_is_counted_and_retried() {
    let a = backend("a").await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let metrics = Metrics::new();
    let mut proxy = LocalhostProxy::new(metrics.clone());
    proxy.sync(vec![listener(port, vec![a])]);
    assert!(metrics.render().contains(
        "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{ip_family=\"IPv4\"} 1"
    ));
    drop(taken);
    proxy.sync(vec![listener(port, vec![a])]);
    assert_eq!(who_answers(port).await, "a");
}

#[tokio::test]
async fn connections_spread_over_endpoints_unless_client_ip_affinity_pins_them() {
    let endpoints = vec![backend("a").await, backend("b").await, backend("c").await];
    let mut proxy = LocalhostProxy::new(Metrics::new());
    let port = free_port();
    proxy.sync(vec![listener(port, endpoints.clone())]);
    let mut seen = BTreeSet::new();
    for _ in 0..60 {
        seen.insert(who_answers(port).await);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");

    let mut sticky = listener(port, endpoints);
    sticky.affinity = Some(Duration::from_secs(60));
    proxy.sync(vec![sticky]);
    let mut seen = BTreeSet::new();
    for _ in 0..20 {
        seen.insert(who_answers(port).await);
    }
    assert_eq!(seen.len(), 1, "{seen:?}");
}

#[test]
fn a_pin_lapses_after_the_timeout_or_when_its_endpoint_goes() {
    let (a, b) = (
        SocketAddr::from(([10, 0, 0, 1], 80)),
        SocketAddr::from(([10, 0, 0, 2], 80)),
    );
    let mut targets = Targets {
        endpoints: vec![a],
        affinity: Some(Duration::from_secs(10)),
        pinned: None,
    };
    let t0 = Instant::now();
    assert_eq!(targets.pick(t0), Some(a));
    targets.update(vec![a, b], Some(Duration::from_secs(10)));
    // Each use renews the pin (a sliding window).
    for s in [5, 10, 15] {
        assert_eq!(targets.pick(t0 + Duration::from_secs(s)), Some(a));
    }
    targets.update(vec![b], Some(Duration::from_secs(10)));
    assert_eq!(targets.pick(t0 + Duration::from_secs(16)), Some(b));
    targets.update(vec![a, b], Some(Duration::from_secs(10)));
    assert_eq!(targets.pick(t0 + Duration::from_secs(20)), Some(b));
    targets.update(Vec::new(), None);
    assert_eq!(targets.pick(t0 + Duration::from_secs(21)), None);
}
