//! The shipped manifests parse as the Kubernetes objects they claim to be, run with least
//! privilege, and grant exactly the API access the code uses.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kubenft::access::API_ACCESS;

use crate::manifests;
use manifests::{documents, one};

#[test]
fn kustomization_lists_every_manifest_and_each_parses_as_its_kind() {
    let kustomization = &documents("kustomization.yaml")[0];
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let on_disk: BTreeSet<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
            .collect();
    assert_eq!(listed, on_disk);
    let _: ServiceAccount = one("serviceaccount.yaml", "ServiceAccount");
    let _: ConfigMap = one("configmap.yaml", "ConfigMap");
    let _: ClusterRoleBinding = one("rbac.yaml", "ClusterRoleBinding");
}

#[test]
fn the_daemonset_runs_on_the_host_network_with_only_net_admin() {
    let ds: DaemonSet = one("daemonset.yaml", "DaemonSet");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("kubenft"));
    assert!(
        pod.tolerations
            .unwrap()
            .iter()
            .any(|t| t.operator.as_deref() == Some("Exists"))
    );
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    // uid 0 because Kubernetes cannot grant a non-root container an effective capability;
    // what keeps it small is the capability set below (see the manifest's comment).
    assert_eq!(sc.run_as_user, Some(0));
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(caps.add.as_deref(), Some(&["NET_ADMIN".to_string()][..]));
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(path(&c.liveness_probe), "/livez");
    assert_eq!(path(&c.readiness_probe), "/healthz");
}

#[test]
fn the_daemonset_runs_the_image_deploy_image_sh_builds_tagged_with_the_crate_version() {
    let ds: DaemonSet = one("daemonset.yaml", "DaemonSet");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some(format!("localhost/kubenft:{}", env!("CARGO_PKG_VERSION")).as_str())
    );
}

#[test]
fn the_cluster_role_grants_exactly_what_the_code_uses() {
    let role: ClusterRole = one("rbac.yaml", "ClusterRole");
    let mut granted = BTreeSet::new();
    for rule in role.rules.unwrap() {
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    let used: BTreeSet<_> = API_ACCESS
        .iter()
        .flat_map(|a| {
            a.verbs
                .iter()
                .map(move |v| (a.group.to_string(), a.resource.to_string(), v.to_string()))
        })
        .collect();
    assert_eq!(granted, used);
}

#[test]
fn the_daemonsets_command_line_and_the_configmaps_configuration_validate_without_warnings() {
    let cm: ConfigMap = one("configmap.yaml", "ConfigMap");
    let text = cm.data.unwrap()["config.yaml"].clone();
    let file = kubenft::config::file::parse(&text, "deploy/configmap.yaml").unwrap();
    assert_eq!(file.warning, None);

    // The container's arguments, with the mounted file at a temporary path and the
    // downward-API node name filled in.
    let ds: DaemonSet = one("daemonset.yaml", "DaemonSet");
    let c = &ds.spec.unwrap().template.spec.unwrap().containers[0];
    let mounted = tempfile::tempdir().unwrap();
    std::fs::write(mounted.path().join("config.yaml"), &text).unwrap();
    let mut argv = vec!["kubenft".to_string()];
    for a in c.args.clone().unwrap() {
        argv.push(
            a.replace("/etc/kubenft", mounted.path().to_str().unwrap())
                .replace("$(NODE_NAME)", "node-a"),
        );
    }
    // The shipped DaemonSet takes nodes over from kube-proxy (docs/migration.md).
    assert!(argv.iter().any(|a| a == "--replace-kube-proxy"), "{argv:?}");
    let cli = kubenft::config::Cli::parse_args(&argv).unwrap();
    let config = cli.validate().unwrap();
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    assert_eq!(config.proxy.hostname, "node-a");
    let kubenft::config::Task::Run(run) = config.task else {
        panic!("the DaemonSet runs the daemon")
    };
    assert_eq!(
        run.healthz_bind_address,
        Some("0.0.0.0:10256".parse().unwrap())
    );
    let probe_port = c.ports.as_ref().unwrap()[0].container_port;
    assert_eq!(run.healthz_bind_address.unwrap().port() as i32, probe_port);
}
