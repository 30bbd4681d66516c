//! Helpers shared by the kube-rs integration tests: clients, objects, bounded waits.

#![allow(dead_code)] // each test binary uses its own subset

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use kubenft_testkit::TestApiServer;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// Upper bound for any single wait in these tests; generous for a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn client(server: &TestApiServer) -> kube::Client {
    let url = server.url().parse().expect("server URL parses");
    kube::Client::try_from(kube::Config::new(url)).expect("client builds for http:// URLs")
}

pub fn service(namespace: &str, name: &str, port: i32, labels: &[(&str, &str)]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn node(name: &str, address: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"addresses": [{"type": "InternalIP", "address": address}]}})
}

/// Runs a test body with an overall deadline so a protocol bug fails instead of hanging.
pub async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(Duration::from_secs(90), body)
        .await
        .expect("test finished within 90 s");
}

/// The next item of a stream, failing the test after [`WAIT`].
pub async fn next<S: Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("stream produced an item in time")
        .expect("stream did not end")
}

/// A watcher event reduced to comparable text: "Init", "InitApply web:80", "Apply web:81"...
pub fn describe(event: &watcher::Event<Service>) -> String {
    let show = |s: &Service| {
        let port = s
            .spec
            .as_ref()
            .and_then(|sp| sp.ports.as_ref())
            .map_or(0, |p| p[0].port);
        format!("{}:{port}", s.metadata.name.as_deref().unwrap_or("?"))
    };
    match event {
        watcher::Event::Init => "Init".into(),
        watcher::Event::InitApply(s) => format!("InitApply {}", show(s)),
        watcher::Event::InitDone => "InitDone".into(),
        watcher::Event::Apply(s) => format!("Apply {}", show(s)),
        watcher::Event::Delete(s) => format!("Delete {}", show(s)),
    }
}

/// The next `n` successful watcher events, described; errors fail the test.
pub async fn take_events<S>(stream: &mut S, n: usize) -> Vec<String>
where
    S: Stream<Item = Result<watcher::Event<Service>, watcher::Error>> + Unpin,
{
    let mut out = Vec::new();
    while out.len() < n {
        let event = next(stream).await.expect("watcher reported no error");
        out.push(describe(&event));
    }
    out
}
