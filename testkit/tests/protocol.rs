//! Wire-level behaviour checked through kube-rs' `Api` (not the watcher): what the responses
//! mean to the client, including the corner cases the watcher's recovery depends on.

mod common;

use common::{bounded, client, next, node, service};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kubenft_testkit::TestApiServer;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_watch_from_an_expired_version_is_http_200_with_one_in_stream_410() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        let stored = server.apply(&service("default", "a", 80, &[])).unwrap();
        let old = stored.metadata.resource_version.unwrap();
        server.compact();
        let api: Api<Service> = Api::all(client(&server));
        // Ok(stream) proves the HTTP status was 200: kube turns a non-2xx into Err here.
        let mut stream = api
            .watch(&WatchParams::default(), &old)
            .await
            .expect("HTTP 200")
            .boxed();
        match next(&mut stream).await.unwrap() {
            WatchEvent::Error(status) => {
                assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            }
            other => panic!("expected an in-stream error, got {other:?}"),
        }
        assert!(
            tokio::time::timeout(common::WAIT, stream.next())
                .await
                .unwrap()
                .is_none(),
            "then it ends"
        );
    })
    .await;
}

#[tokio::test]
async fn pages_of_a_list_come_from_one_snapshot_even_while_objects_change() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        for i in 0..12 {
            server
                .apply(&service("default", &format!("s{i:02}"), 80, &[]))
                .unwrap();
        }
        let api: Api<Service> = Api::all(client(&server));
        let first = api.list(&ListParams::default().limit(5)).await.unwrap();
        assert_eq!(first.metadata.remaining_item_count, Some(7));
        server
            .delete(kubenft_testkit::Kind::Service, Some("default"), "s09")
            .unwrap();
        server.apply(&service("default", "s99", 80, &[])).unwrap();
        server.apply(&service("default", "s10", 81, &[])).unwrap();

        let mut names: Vec<String> = first
            .items
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        let mut token = first.metadata.continue_.clone();
        while let Some(t) = token.filter(|t| !t.is_empty()) {
            let page = api
                .list(&ListParams::default().limit(5).continue_token(&t))
                .await
                .unwrap();
            assert_eq!(
                page.metadata.resource_version,
                first.metadata.resource_version
            );
            assert!(
                page.items
                    .iter()
                    .all(|s| s.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port == 80)
            );
            names.extend(page.items.iter().map(|s| s.metadata.name.clone().unwrap()));
            token = page.metadata.continue_;
        }
        let expected: Vec<String> = (0..12).map(|i| format!("s{i:02}")).collect();
        assert_eq!(names, expected);
    })
    .await;
}

#[tokio::test]
async fn a_continue_token_older_than_the_history_is_an_http_410() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        for i in 0..3 {
            server.apply(&node(&format!("n{i}"), "192.0.2.1")).unwrap();
        }
        let api: Api<Node> = Api::all(client(&server));
        let first = api.list(&ListParams::default().limit(1)).await.unwrap();
        server.compact();
        let token = first.metadata.continue_.unwrap();
        match api
            .list(&ListParams::default().limit(1).continue_token(&token))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
            }
            other => panic!("expected 410 Expired, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn bookmarks_arrive_periodically_and_never_go_behind_delivered_events() {
    bounded(async {
        let server = TestApiServer::builder().bookmark_interval(Duration::from_millis(100)).start().await.unwrap();
        let api: Api<EndpointSlice> = Api::namespaced(client(&server), "default");
        let start = server.resource_version().to_string();
        let mut stream = api.watch(&WatchParams::default().timeout(30), &start).await.unwrap().boxed();
        let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                           "metadata": {"name": "web-abc", "namespace": "default",
                                        "labels": {"kubernetes.io/service-name": "web"}},
                           "endpoints": [{"addresses": ["10.0.0.5"]}]});
        server.apply(&slice).unwrap();
        let mut last_event_rv = 0u64;
        let mut bookmarks = 0;
        while bookmarks < 2 {
            match next(&mut stream).await.unwrap() {
                WatchEvent::Added(s) => {
                    last_event_rv = s.metadata.resource_version.unwrap().parse().unwrap();
                    assert_eq!(s.metadata.labels.unwrap()["kubernetes.io/service-name"], "web");
                }
                WatchEvent::Bookmark(b) => {
                    let rv: u64 = b.metadata.resource_version.parse().unwrap();
                    assert!(rv >= last_event_rv, "bookmark {rv} behind event {last_event_rv}");
                    bookmarks += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(last_event_rv > 0, "the ADDED event came before the bookmarks");
    })
    .await;
}

#[tokio::test]
async fn a_stalled_server_holds_requests_until_the_stall_ends() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        let api: Api<Node> = Api::all(client(&server));
        server.stall(Duration::from_millis(700));
        let started = Instant::now();
        let list = api.list(&ListParams::default()).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(600),
            "held for {:?}",
            started.elapsed()
        );
        assert!(list.items.is_empty());
        let started = Instant::now();
        api.list(&ListParams::default()).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(600),
            "served at once after the stall"
        );
    })
    .await;
}

#[tokio::test]
async fn malformed_selectors_and_unserved_resources_get_kubernetes_status_errors() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        let client = client(&server);
        let services: Api<Service> = Api::all(client.clone());
        match services
            .list(&ListParams::default().labels("app in web"))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"))
            }
            other => panic!("expected 400, got {other:?}"),
        }
        match services
            .list(&ListParams::default().fields("spec.clusterIP=10.0.0.1"))
            .await
        {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 400),
            other => panic!("expected 400, got {other:?}"),
        }
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(client);
        match pods.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"))
            }
            other => panic!("expected 404, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn an_unavailable_server_answers_503_and_kube_retries_until_it_is_back() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        let mut config = kube::Config::new(server.url().parse().unwrap());
        config.default_retry = false;
        let no_retry: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
        server.set_unavailable(true);
        match no_retry.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(
                    (status.code, status.reason.as_str()),
                    (503, "ServiceUnavailable")
                )
            }
            other => panic!("expected 503, got {other:?}"),
        }

        // kube's default client retries 503s with backoff: the list succeeds once we are back.
        let api: Api<Node> = Api::all(client(&server));
        let pending = tokio::spawn(async move { api.list(&ListParams::default()).await });
        tokio::time::sleep(Duration::from_millis(400)).await;
        server.set_unavailable(false);
        pending.await.unwrap().expect("served after the outage");
        let logged: Vec<String> = server
            .requests()
            .iter()
            .map(|r| r.path_and_query())
            .collect();
        assert!(
            logged.len() >= 3,
            "one refused, at least one retried, one served: {logged:?}"
        );
        assert!(
            logged.iter().all(|p| p.starts_with("/api/v1/nodes")),
            "{logged:?}"
        );
    })
    .await;
}
