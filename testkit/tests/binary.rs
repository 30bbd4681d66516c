//! `kubenft-testkit serve` as a process: it loads manifests, writes a kubeconfig, and kube-rs
//! reads the loaded objects through that kubeconfig.

mod common;

use common::bounded;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Kills the server process when the test ends, passing or not.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const MANIFEST: &str = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec:
  clusterIP: 10.96.0.10
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: demo
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints: [{addresses: [10.0.0.5]}]
ports: [{port: 8080, protocol: TCP}]
---
";

#[tokio::test]
async fn serve_loads_manifests_and_writes_a_kubeconfig_kube_can_use() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("objects.yaml");
        std::fs::write(&manifest, MANIFEST).unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let _served = Served(
            Command::new(env!("CARGO_BIN_EXE_kubenft-testkit"))
                .args(["serve", "--kubeconfig-out"])
                .arg(&kubeconfig)
                .arg("--load")
                .arg(&manifest)
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        );
        while !kubeconfig.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();

        let services = Api::<Service>::namespaced(client.clone(), "demo")
            .list(&ListParams::default())
            .await
            .unwrap();
        assert_eq!(services.items.len(), 1);
        assert_eq!(
            services.items[0]
                .spec
                .as_ref()
                .unwrap()
                .cluster_ip
                .as_deref(),
            Some("10.96.0.10")
        );
        let slices = Api::<EndpointSlice>::all(client)
            .list(&ListParams::default())
            .await
            .unwrap();
        assert_eq!(slices.items[0].endpoints[0].addresses, ["10.0.0.5"]);
    })
    .await;
}

#[test]
fn serve_rejects_a_manifest_of_an_unserved_kind() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kubenft-testkit"))
        .args(["serve", "--kubeconfig-out"])
        .arg(dir.path().join("kubeconfig"))
        .arg("--load")
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("Pod") && stderr.contains("pod.yaml"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("kubeconfig").exists(),
        "no kubeconfig for a server that did not start"
    );
}
