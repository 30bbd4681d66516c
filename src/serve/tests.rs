use super::health::Clock;
use super::testclient::get;
use super::*;
use crate::metrics::{self, Metrics, SyncResult};
use crate::sync::SyncKind;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

#[derive(Debug)]
struct FixedClock(Mutex<SystemTime>);

impl Clock for FixedClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[test]
fn bind_addresses_are_parsed_like_kube_proxy_flags() {
    assert_eq!(
        parse_bind_address("0.0.0.0:10256").unwrap(),
        "0.0.0.0:10256".parse().unwrap()
    );
    assert_eq!(
        parse_bind_address("127.0.0.1:10249").unwrap(),
        "127.0.0.1:10249".parse().unwrap()
    );
    assert_eq!(
        parse_bind_address("[::]:10256").unwrap(),
        "[::]:10256".parse().unwrap()
    );
    assert_eq!(
        parse_bind_address(":10256").unwrap(),
        "0.0.0.0:10256".parse().unwrap()
    );
    for bad in [
        "0.0.0.0",
        "localhost:10256",
        ":",
        "::10256",
        "1.2.3.4:70000",
    ] {
        assert!(
            matches!(
                parse_bind_address(bad),
                Err(ServeError::ParseAddress { .. })
            ),
            "{bad} should be rejected"
        );
    }
}

#[tokio::test]
async fn healthz_answers_200_then_503_once_a_queued_change_is_late() {
    let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let clock = Arc::new(FixedClock(Mutex::new(t0)));
    let health = HealthState::with_clock(Duration::from_secs(60), clock.clone());
    let metrics = Metrics::new();
    let listener = bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_healthz_on(
        listener,
        health.clone(),
        metrics.clone(),
        async {
            let _ = stopped.await;
        },
    ));

    let ok = get(addr, "/healthz").await.unwrap();
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.header("content-type"), Some("application/json"));
    assert_eq!(ok.header("x-content-type-options"), Some("nosniff"));
    let v: serde_json::Value = serde_json::from_str(&ok.body).unwrap();
    assert_eq!(v["nodeEligible"], true);
    assert_eq!(v["currentTime"], "2023-11-14T22:13:20.000Z");

    health.queued(t0);
    *clock.0.lock().unwrap() = t0 + Duration::from_secs(61);
    let late = get(addr, "/healthz").await.unwrap();
    assert_eq!(late.status, 503, "{late:?}");
    assert_eq!(get(addr, "/livez").await.unwrap().status, 503);

    health.synced(t0 + Duration::from_secs(61));
    health.set_node_eligible(false);
    assert_eq!(get(addr, "/livez").await.unwrap().status, 200);
    let draining = get(addr, "/healthz").await.unwrap();
    assert_eq!(draining.status, 503);
    assert!(!draining.body.contains("nodeEligible\": true"));

    assert_eq!(get(addr, "/").await.unwrap().status, 404);
    assert_eq!(get(addr, "/metrics").await.unwrap().status, 404);
    // Each answer is counted by probe and code, as kube-proxy counts them.
    let counted = metrics.render();
    for series in [
        "kubeproxy_proxy_healthz_total{code=\"200\"} ",
        "kubeproxy_proxy_healthz_total{code=\"503\"} ",
        "kubeproxy_proxy_livez_total{code=\"200\"} ",
    ] {
        assert!(counted.contains(series), "{series} in\n{counted}");
    }

    stop.send(()).unwrap();
    // The server task ends on shutdown. (Probing the port afterwards would race with other
    // tests that bind ephemeral ports in parallel.)
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn metrics_are_served_as_prometheus_text_at_slash_metrics_only() {
    let metrics = Metrics::new();
    metrics.record_sync(SyncKind::Full, SyncResult::Success, 0.01, &["IPv4"]);
    let listener = bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_metrics_on(listener, metrics.clone(), async {
        let _ = stopped.await;
    }));

    let a = get(addr, "/metrics").await.unwrap();
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some(metrics::CONTENT_TYPE));
    assert!(
        a.body.contains(
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1\n"
        ),
        "{}",
        a.body
    );
    // The answer is rendered per request, not cached.
    metrics.record_sync(SyncKind::Full, SyncResult::Success, 0.01, &["IPv4"]);
    let b = get(addr, "/metrics").await.unwrap();
    assert!(b.body.contains(
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 2\n"
    ));

    assert_eq!(get(addr, "/healthz").await.unwrap().status, 404);
    assert_eq!(get(addr, "/metrics/x").await.unwrap().status, 404);

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[test]
fn an_unparsable_address_is_an_error_naming_it() {
    let err = parse_bind_address("nonsense").unwrap_err();
    assert!(matches!(err, ServeError::ParseAddress { .. }), "{err}");
    assert!(err.to_string().contains("\"nonsense\""), "{err}");
}

#[tokio::test]
async fn binding_a_port_in_use_reports_the_address() {
    let held = bind(loopback()).await.unwrap();
    let addr = held.local_addr().unwrap();
    let err = bind(addr).await.unwrap_err();
    match err {
        ServeError::Bind { addr: a, .. } => assert_eq!(a, addr),
        other => panic!("expected a bind error, got {other}"),
    }
}
