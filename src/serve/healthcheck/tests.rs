use super::super::testclient::get;
use super::*;
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime};

fn health(n: &str, local_endpoints: usize) -> ServiceHealth {
    ServiceHealth {
        name: n.to_owned(),
        local_endpoints,
    }
}

thread_local! {
    /// Set on the thread `in_netns` runs a test on: its loopback is the test's alone.
    static IN_OWN_NAMESPACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A port for a test to listen on, given to no other test of this process. In a namespace
/// of the test's own, any port below the ephemeral range is free. On the host, a port
/// that was free a moment ago: binding port 0 and letting go is racy there, as a process
/// forked meanwhile by another test holds the socket until it execs.
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    if IN_OWN_NAMESPACE.get() {
        let port = 20_000 + given.len() as u16;
        given.push(port);
        return port;
    }
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Waits (bounded) until nothing accepts on `addr`: closing is an abort that the runtime
/// carries out on its next turn.
async fn closed(addr: SocketAddr) -> bool {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

fn servers() -> (HealthCheckServers, HealthState) {
    let state = HealthState::new(Duration::from_secs(60));
    let loopback_only = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    (HealthCheckServers::new(loopback_only, state.clone()), state)
}

#[test]
fn a_service_with_local_endpoints_answers_200_with_kube_proxys_body() {
    own_loopback(async || {
        let (mut hc, _) = servers();
        let port = free_port();
        hc.sync(BTreeMap::from([(port, health("default/web", 2))]))
            .await
            .unwrap();
        let a = get(loopback(port), "/").await.unwrap();
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.header("content-type"), Some("application/json"));
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
        let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "service": {"namespace": "default", "name": "web"},
                "localEndpoints": 2,
                "serviceProxyHealthy": true
            })
        );
    });
}

#[test]
fn no_local_endpoints_or_an_unhealthy_proxy_answers_503() {
    own_loopback(async || {
        let (mut hc, state) = servers();
        let (empty, full) = (free_port(), free_port());
        hc.sync(BTreeMap::from([
            (empty, health("ns/empty", 0)),
            (full, health("ns/full", 1)),
        ]))
        .await
        .unwrap();
        let a = get(loopback(empty), "/healthz").await.unwrap();
        assert_eq!(a.status, 503);
        assert!(a.body.contains("\"localEndpoints\":0"), "{}", a.body);

        // A change queued long ago and never synced: the proxy is stale, so even a Service
        // with endpoints must not attract traffic.
        state.queued(SystemTime::now() - Duration::from_secs(3600));
        let b = get(loopback(full), "/").await.unwrap();
        assert_eq!(b.status, 503);
        let v: serde_json::Value = serde_json::from_str(&b.body).unwrap();
        assert_eq!(v["serviceProxyHealthy"], false);
        assert_eq!(v["localEndpoints"], 1);
    });
}

#[test]
fn sync_opens_updates_and_closes_ports_as_services_come_and_go() {
    own_loopback(async || {
        let (mut hc, _) = servers();
        let (a, b) = (free_port(), free_port());
        hc.sync(BTreeMap::from([
            (a, health("ns/a", 1)),
            (b, health("ns/b", 0)),
        ]))
        .await
        .unwrap();
        assert_eq!(hc.ports(), {
            let mut p = vec![a, b];
            p.sort();
            p
        });
        assert_eq!(get(loopback(b), "/").await.unwrap().status, 503);

        // b gains an endpoint and a goes away.
        hc.sync(BTreeMap::from([(b, health("ns/b", 3))]))
            .await
            .unwrap();
        assert_eq!(hc.ports(), vec![b]);
        let answer = get(loopback(b), "/").await.unwrap();
        assert_eq!(answer.status, 200);
        assert!(answer.body.contains("\"localEndpoints\":3"));
        assert!(closed(loopback(a)).await, "port {a} should be closed");

        // The port is handed to another Service: same listener, new answer.
        hc.sync(BTreeMap::from([(b, health("other/svc", 1))]))
            .await
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&get(loopback(b), "/").await.unwrap().body).unwrap();
        assert_eq!(v["service"]["namespace"], "other");
        assert_eq!(v["service"]["name"], "svc");

        hc.sync(BTreeMap::new()).await.unwrap();
        assert!(hc.ports().is_empty());
        assert!(closed(loopback(b)).await, "port {b} should be closed");
    });
}

#[test]
fn a_port_in_use_is_reported_and_retried_on_the_next_sync() {
    own_loopback(async || {
        let (mut hc, _) = servers();
        let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = squatter.local_addr().unwrap().port();
        let free = free_port();
        let desired = BTreeMap::from([(taken, health("ns/x", 1)), (free, health("ns/y", 1))]);
        let err = hc.sync(desired.clone()).await.unwrap_err();
        let HealthCheckError::Bind { addr, service, .. } = err;
        assert_eq!(addr, loopback(taken));
        assert_eq!(service, "ns/x");
        // The other port was opened regardless.
        assert_eq!(hc.ports(), vec![free]);
        assert_eq!(get(loopback(free), "/").await.unwrap().status, 200);

        drop(squatter);
        // Tests run in parallel and `free_port` binds port 0 and lets go, so another test can
        // hold the freed port for a moment: retry a few times, as the daemon's next sync would.
        let mut retried = hc.sync(desired.clone()).await;
        for _ in 0..20 {
            if retried.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            retried = hc.sync(desired.clone()).await;
        }
        retried.unwrap();
        assert_eq!(get(loopback(taken), "/").await.unwrap().status, 200);
    });
}

/// Runs `test` where no other process can take the ports `free_port` gave it: in a network
/// namespace of its own when one can be made (root), else on the host's loopback.
fn own_loopback(test: impl AsyncFnOnce() + Send + 'static) {
    if crate::netns::can_create() {
        in_netns("hcPorts", test);
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test());
    }
}

/// Runs `test` on a runtime of its own inside a fresh network namespace, so wildcard
/// listeners open nothing on the host. None when namespaces cannot be made (not root).
fn in_netns<T: Send + 'static>(
    tag: &str,
    test: impl AsyncFnOnce() -> T + Send + 'static,
) -> Option<T> {
    if !crate::netns::can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return None;
    }
    let ns = crate::netns::Netns::create(tag).unwrap();
    let result = ns
        .run(move || {
            IN_OWN_NAMESPACE.set(true);
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(test())
        })
        .unwrap();
    Some(result)
}

#[test]
fn kube_proxys_default_listens_on_ipv4_and_ipv6_with_one_port() {
    // Both families' unspecified addresses, as `health_check_addresses` gives them when
    // nodePortAddresses names no address: an IPv6 load balancer's probe is answered too.
    in_netns("hcBoth", async || {
        let state = HealthState::new(Duration::from_secs(60));
        let both = vec!["0.0.0.0".parse().unwrap(), "::".parse().unwrap()];
        let mut hc = HealthCheckServers::new(both, state);
        let port = free_port();
        hc.sync(BTreeMap::from([(port, health("default/lb", 1))]))
            .await
            .unwrap();
        for ip in ["127.0.0.1", "::1"] {
            let addr = SocketAddr::new(ip.parse().unwrap(), port);
            let a = get(addr, "/").await.unwrap();
            assert_eq!(a.status, 200, "{addr}: {a:?}");
        }
    });
}

#[test]
fn an_ipv6_wildcard_shares_its_port_with_ipv4_node_addresses() {
    // nodePortAddresses naming an IPv4 address but none of IPv6: the IPv6 listener is the
    // unspecified address, and must not take the port from the IPv4 one.
    in_netns("hcMixed", async || {
        let state = HealthState::new(Duration::from_secs(60));
        let addresses = vec!["127.0.0.1".parse().unwrap(), "::".parse().unwrap()];
        let mut hc = HealthCheckServers::new(addresses, state);
        let port = free_port();
        hc.sync(BTreeMap::from([(port, health("default/lb", 1))]))
            .await
            .unwrap();
        assert_eq!(get(loopback(port), "/").await.unwrap().status, 200);
        let v6 = SocketAddr::new("::1".parse().unwrap(), port);
        assert_eq!(get(v6, "/").await.unwrap().status, 200);
    });
}

#[test]
fn new_addresses_move_the_open_ports_to_them() {
    own_loopback(async || {
        let (mut hc, _) = servers();
        let port = free_port();
        let desired = BTreeMap::from([(port, health("ns/a", 1))]);
        hc.sync(desired.clone()).await.unwrap();
        assert_eq!(get(loopback(port), "/").await.unwrap().status, 200);

        let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        hc.set_addresses(vec![other]);
        assert!(hc.ports().is_empty(), "closed until the next sync");
        assert!(closed(loopback(port)).await);
        hc.sync(desired).await.unwrap();
        let a = get(SocketAddr::new(other, port), "/").await.unwrap();
        assert_eq!(a.status, 200);
        assert!(closed(loopback(port)).await, "not on the old address");
    });
}

#[test]
fn dropping_the_manager_closes_every_port() {
    own_loopback(async || {
        let (mut hc, _) = servers();
        let port = free_port();
        hc.sync(BTreeMap::from([(port, health("ns/a", 1))]))
            .await
            .unwrap();
        assert_eq!(get(loopback(port), "/").await.unwrap().status, 200);
        drop(hc);
        assert!(closed(loopback(port)).await);
    });
}
