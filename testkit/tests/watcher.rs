//! The real `kube::runtime::watcher` against the test server: initial list, live events,
//! selectors, paging, expiry and re-list, streaming lists and outages.

mod common;

use common::{bounded, client, next, node, service, take_events};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kubenft_testkit::{Kind, TestApiServer};
use std::time::Duration;

#[tokio::test]
async fn list_then_watch_sees_creates_updates_and_deletes_in_order() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        server.apply(&service("default", "a", 80, &[])).unwrap();
        let api: Api<Service> = Api::all(client(&server));
        let mut events = watcher(api, watcher::Config::default()).boxed();
        assert_eq!(
            take_events(&mut events, 3).await,
            ["Init", "InitApply a:80", "InitDone"]
        );

        server.apply(&service("default", "b", 90, &[])).unwrap();
        server.apply(&service("default", "a", 81, &[])).unwrap();
        server.delete(Kind::Service, Some("default"), "b").unwrap();
        server.apply(&service("other", "c", 70, &[])).unwrap();
        assert_eq!(
            take_events(&mut events, 4).await,
            ["Apply b:90", "Apply a:81", "Delete b:90", "Apply c:70"]
        );

        let requests = server.requests();
        let lists: Vec<_> = requests.iter().filter(|r| r.is_list()).collect();
        assert_eq!(lists.len(), 1, "one initial list: {requests:?}");
        assert_eq!(lists[0].param("limit").as_deref(), Some("500"));
    })
    .await;
}

#[tokio::test]
async fn kube_proxy_label_selector_hides_headless_and_foreign_proxy_services() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        server
            .apply(&service("default", "plain", 80, &[("app", "web")]))
            .unwrap();
        server
            .apply(&service(
                "default",
                "headless",
                80,
                &[("service.kubernetes.io/headless", "")],
            ))
            .unwrap();
        server
            .apply(&service(
                "default",
                "foreign",
                80,
                &[("service.kubernetes.io/service-proxy-name", "x")],
            ))
            .unwrap();
        let api: Api<Service> = Api::all(client(&server));
        let config = watcher::Config::default()
            .labels("!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless");
        let mut events = watcher(api, config).boxed();
        assert_eq!(
            take_events(&mut events, 3).await,
            ["Init", "InitApply plain:80", "InitDone"]
        );

        server
            .apply(&service(
                "default",
                "headless-2",
                80,
                &[("service.kubernetes.io/headless", "")],
            ))
            .unwrap();
        // Labelling a selected Service headless takes it out of the selection: a delete.
        server
            .apply(&service(
                "default",
                "plain",
                80,
                &[("service.kubernetes.io/headless", "")],
            ))
            .unwrap();
        // Removing the label brings it back: an add.
        server
            .apply(&service("default", "headless", 81, &[]))
            .unwrap();
        assert_eq!(
            take_events(&mut events, 2).await,
            ["Delete plain:80", "Apply headless:81"]
        );
    })
    .await;
}

#[tokio::test]
async fn field_selector_watches_only_the_named_node_through_a_written_kubeconfig() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        server.apply(&node("node-1", "192.0.2.1")).unwrap();
        server.apply(&node("node-2", "192.0.2.2")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        server.write_kubeconfig(&path).unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let api: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());

        let mut events = watcher(
            api.clone(),
            watcher::Config::default().fields("metadata.name=node-2"),
        )
        .boxed();
        let mut names = Vec::new();
        loop {
            match next(&mut events).await.unwrap() {
                watcher::Event::InitApply(n) => names.push(n.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(names, ["node-2"]);
        server.apply(&node("node-1", "192.0.2.11")).unwrap();
        server.apply(&node("node-2", "192.0.2.12")).unwrap();
        let watcher::Event::Apply(updated) = next(&mut events).await.unwrap() else {
            panic!("expected an apply")
        };
        let addresses = updated.status.unwrap().addresses.unwrap();
        assert_eq!(addresses[0].address, "192.0.2.12");

        assert_eq!(
            api.get("node-1").await.unwrap().metadata.name.as_deref(),
            Some("node-1")
        );
        match api.get("node-3").await {
            Err(kube::Error::Api(status)) => {
                assert!(status.code == 404 && status.reason == "NotFound")
            }
            other => panic!("expected a NotFound status, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn initial_list_pages_through_more_than_five_hundred_objects() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        for i in 0..1203 {
            server
                .apply(&service(
                    &format!("ns-{}", i % 7),
                    &format!("svc-{i:04}"),
                    80,
                    &[],
                ))
                .unwrap();
        }
        let api: Api<Service> = Api::all(client(&server));
        let mut events = watcher(api, watcher::Config::default()).boxed();
        let mut seen = std::collections::BTreeSet::new();
        loop {
            match next(&mut events).await.unwrap() {
                watcher::Event::InitApply(s) => {
                    assert!(seen.insert(s.metadata.name.unwrap()), "no duplicates")
                }
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(seen.len(), 1203);
        let lists: Vec<_> = server
            .requests()
            .into_iter()
            .filter(|r| r.is_list())
            .collect();
        assert_eq!(lists.len(), 3, "1203 objects in pages of 500: {lists:?}");
        assert!(lists[0].param("continue").is_none());
        assert!(lists[1..].iter().all(|r| r.param("continue").is_some()));
    })
    .await;
}

#[tokio::test]
async fn after_compaction_and_dropped_watches_the_watcher_relists_and_converges() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        server.apply(&service("default", "a", 80, &[])).unwrap();
        let api: Api<Service> = Api::all(client(&server));
        let (reader, writer) = reflector::store();
        let mut events = reflector(writer, watcher(api, watcher::Config::default())).boxed();
        loop {
            if matches!(next(&mut events).await, Ok(watcher::Event::InitDone)) {
                break;
            }
        }
        server.apply(&service("default", "b", 80, &[])).unwrap();
        assert!(matches!(
            next(&mut events).await,
            Ok(watcher::Event::Apply(_))
        ));

        server.compact();
        server.drop_watches();
        server.delete(Kind::Service, Some("default"), "a").unwrap();
        server.apply(&service("default", "c", 80, &[])).unwrap();

        // The resumed watch is told 410 Expired in-stream; the watcher reports it and re-lists.
        let mut saw_expired = false;
        loop {
            match next(&mut events).await {
                Err(watcher::Error::WatchError(status)) if status.code == 410 => saw_expired = true,
                Ok(watcher::Event::InitDone) => break,
                _ => {}
            }
        }
        assert!(saw_expired, "the watcher saw the in-stream 410");
        let mut names: Vec<String> = reader
            .state()
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["b", "c"]);

        let requests = server.requests();
        assert_eq!(
            requests.iter().filter(|r| r.is_list()).count(),
            2,
            "re-listed once: {requests:?}"
        );
        let expired_watch = requests
            .iter()
            .filter(|r| r.is_watch())
            .nth(1)
            .expect("a resumed watch");
        assert!(
            expired_watch
                .param("resourceVersion")
                .is_some_and(|rv| rv != "0")
        );
    })
    .await;
}

#[tokio::test]
async fn streaming_list_delivers_initial_objects_then_live_events_without_a_list_call() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        for (name, port) in [("a", 80), ("b", 81), ("c", 82)] {
            server.apply(&service("default", name, port, &[])).unwrap();
        }
        let api: Api<Service> = Api::namespaced(client(&server), "default");
        let mut events = watcher(api, watcher::Config::default().streaming_lists()).boxed();
        assert_eq!(
            take_events(&mut events, 5).await,
            [
                "Init",
                "InitApply a:80",
                "InitApply b:81",
                "InitApply c:82",
                "InitDone"
            ]
        );
        server.apply(&service("default", "b", 91, &[])).unwrap();
        server.apply(&service("elsewhere", "d", 80, &[])).unwrap();
        server.delete(Kind::Service, Some("default"), "c").unwrap();
        assert_eq!(
            take_events(&mut events, 2).await,
            ["Apply b:91", "Delete c:82"]
        );

        let requests = server.requests();
        assert!(
            !requests.iter().any(|r| r.is_list()),
            "no list call: {requests:?}"
        );
        assert_eq!(
            requests[0].param("sendInitialEvents").as_deref(),
            Some("true")
        );
        assert_eq!(requests[0].path, "/api/v1/namespaces/default/services");
    })
    .await;
}

#[tokio::test]
async fn watcher_rides_out_an_unavailable_server_and_catches_up() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        server.apply(&service("default", "a", 80, &[])).unwrap();
        let api: Api<Service> = Api::all(client(&server));
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        assert_eq!(
            take_events(&mut events, 3).await,
            ["Init", "InitApply a:80", "InitDone"]
        );

        server.set_unavailable(true);
        let before = server.requests().len();
        server.apply(&service("default", "a", 81, &[])).unwrap();
        // The watch ends; its resumption is refused with 503 and retried with backoff while we
        // keep polling the watcher (it only makes progress when polled).
        let outage_end = tokio::time::Instant::now() + Duration::from_millis(1500);
        while let Ok(item) = tokio::time::timeout_at(outage_end, events.next()).await {
            assert!(
                !matches!(item, Some(Ok(_))),
                "no event can arrive during the outage"
            );
        }
        let refused = server.requests().len() - before;
        assert!(
            refused >= 3,
            "the resumed watch was retried during the outage ({refused} requests)"
        );
        server.set_unavailable(false);

        // The missed update arrives from the resumed watch, with no re-list needed.
        loop {
            match tokio::time::timeout(Duration::from_secs(40), events.next())
                .await
                .unwrap()
                .unwrap()
            {
                Ok(watcher::Event::Apply(s)) => {
                    assert_eq!(s.spec.unwrap().ports.unwrap()[0].port, 81);
                    break;
                }
                Ok(other) => panic!("unexpected {:?}", common::describe(&other)),
                Err(_) => {} // retries still landing on the outage
            }
        }
        assert_eq!(server.requests().iter().filter(|r| r.is_list()).count(), 1);
    })
    .await;
}
