//! ServiceCIDRs (networking.k8s.io/v1, cluster-scoped) as kube-rs sees them: the same list,
//! paging, get, watch, streaming-list and re-list behaviour as the other kinds, at their own
//! paths.

mod common;

use common::{bounded, client, next};
use futures_util::StreamExt;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kubenft_testkit::{Kind, TestApiServer};
use serde_json::{Value, json};

fn service_cidr(name: &str, cidrs: &[&str]) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
           "metadata": {"name": name}, "spec": {"cidrs": cidrs}})
}

fn cidrs(object: &ServiceCIDR) -> Vec<String> {
    object
        .spec
        .as_ref()
        .and_then(|s| s.cidrs.clone())
        .unwrap_or_default()
}

/// "name=cidr,cidr" for each watcher event that carries an object; markers for the others.
fn describe(event: &watcher::Event<ServiceCIDR>) -> String {
    let show = |c: &ServiceCIDR| {
        format!(
            "{}={}",
            c.metadata.name.as_deref().unwrap_or("?"),
            cidrs(c).join(",")
        )
    };
    match event {
        watcher::Event::Init => "Init".into(),
        watcher::Event::InitApply(c) => format!("InitApply {}", show(c)),
        watcher::Event::InitDone => "InitDone".into(),
        watcher::Event::Apply(c) => format!("Apply {}", show(c)),
        watcher::Event::Delete(c) => format!("Delete {}", show(c)),
    }
}

#[tokio::test]
async fn service_cidrs_are_cluster_scoped_listed_in_pages_fetched_and_watched() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        server
            .apply(&service_cidr(
                "kubernetes",
                &["10.96.0.0/16", "fd00:10:96::/112"],
            ))
            .unwrap();
        // A namespace written on a cluster-scoped object is dropped, as the real server does.
        let mut extra = service_cidr("extra", &["10.97.0.0/16"]);
        extra["metadata"]["namespace"] = json!("kube-system");
        let stored = server.apply(&extra).unwrap();
        assert!(stored["metadata"].get("namespace").is_none());
        assert!(stored["metadata"]["uid"].is_string());

        let api: Api<ServiceCIDR> = Api::all(client(&server));
        let first = api.list(&ListParams::default().limit(1)).await.unwrap();
        assert_eq!(first.metadata.remaining_item_count, Some(1));
        let token = first.metadata.continue_.clone().expect("a continue token");
        let second = api
            .list(&ListParams::default().limit(1).continue_token(&token))
            .await
            .unwrap();
        assert_eq!(
            second.metadata.resource_version,
            first.metadata.resource_version
        );
        let listed: Vec<(String, Vec<String>)> = first
            .items
            .iter()
            .chain(&second.items)
            .map(|c| (c.metadata.name.clone().unwrap(), cidrs(c)))
            .collect();
        assert_eq!(
            listed,
            [
                ("extra".to_string(), vec!["10.97.0.0/16".to_string()]),
                (
                    "kubernetes".to_string(),
                    vec!["10.96.0.0/16".to_string(), "fd00:10:96::/112".to_string()]
                ),
            ]
        );
        assert!(
            first
                .items
                .iter()
                .chain(&second.items)
                .all(|c| c.metadata.namespace.is_none())
        );

        let got = api.get("kubernetes").await.unwrap();
        assert_eq!(cidrs(&got), ["10.96.0.0/16", "fd00:10:96::/112"]);
        match api.get("missing").await {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"))
            }
            other => panic!("expected 404, got {other:?}"),
        }

        let from = first.metadata.resource_version.clone().unwrap();
        let mut stream = api
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        server
            .apply(&service_cidr("extra", &["10.98.0.0/16"]))
            .unwrap();
        server
            .delete(Kind::ServiceCIDR, None, "kubernetes")
            .unwrap();
        match next(&mut stream).await.unwrap() {
            WatchEvent::Modified(c) => {
                assert_eq!(c.metadata.name.as_deref(), Some("extra"));
                assert_eq!(cidrs(&c), ["10.98.0.0/16"]);
            }
            other => panic!("expected MODIFIED, got {other:?}"),
        }
        match next(&mut stream).await.unwrap() {
            WatchEvent::Deleted(c) => assert_eq!(c.metadata.name.as_deref(), Some("kubernetes")),
            other => panic!("expected DELETED, got {other:?}"),
        }

        let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
        assert!(
            paths
                .iter()
                .all(|p| p.starts_with("/apis/networking.k8s.io/v1/servicecidrs")),
            "{paths:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn the_watcher_streams_service_cidrs_then_relists_after_an_expired_resume() {
    bounded(async {
        let server = TestApiServer::start().await.unwrap();
        server
            .apply(&service_cidr("kubernetes", &["10.96.0.0/16"]))
            .unwrap();
        let api: Api<ServiceCIDR> = Api::all(client(&server));
        let mut events = watcher(api, watcher::Config::default().streaming_lists()).boxed();
        let mut take = async |n: usize| {
            let mut out = Vec::new();
            while out.len() < n {
                match next(&mut events).await {
                    Ok(event) => out.push(describe(&event)),
                    // The resumed watch's in-stream 410, reported before the re-list.
                    Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                        out.push("Expired".into())
                    }
                    Err(e) => panic!("watcher error: {e}"),
                }
            }
            out
        };
        assert_eq!(
            take(3).await,
            ["Init", "InitApply kubernetes=10.96.0.0/16", "InitDone"]
        );
        server
            .apply(&service_cidr("extra", &["10.97.0.0/16"]))
            .unwrap();
        assert_eq!(take(1).await, ["Apply extra=10.97.0.0/16"]);

        server.compact();
        server.drop_watches();
        server.delete(Kind::ServiceCIDR, None, "extra").unwrap();
        assert_eq!(
            take(4).await,
            [
                "Expired",
                "Init",
                "InitApply kubernetes=10.96.0.0/16",
                "InitDone"
            ]
        );
        let requests = server.requests();
        assert!(!requests.iter().any(|r| r.is_list()), "{requests:?}");
        assert_eq!(
            requests[0].param("sendInitialEvents").as_deref(),
            Some("true")
        );
    })
    .await;
}
