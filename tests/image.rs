//! The container image, run as `deploy/daemonset.yaml` runs it. podman starts the image the
//! DaemonSet names with the container's arguments, environment, volumes, memory limit and
//! security context, all read from the manifest and translated field by field (a field this
//! translation does not know fails the test rather than being left out). Two things stand in
//! for a cluster: a test network namespace for the host's (`hostNetwork: true`), and
//! `--kubeconfig` naming the test API server, which listens inside that namespace, for the
//! in-cluster service account. The daemon must program the table, pass its probes, serve
//! metrics, follow a Service change and, on SIGTERM, exit 0 leaving the rules in place.
//!
//! Ignored by a plain `cargo test`: it needs root, podman and the image `deploy/image.sh`
//! builds. `.ci/run` builds the image, then runs `cargo test --release --test image -- --ignored`.

use crate::harness;
use crate::manifests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::{ApiServer, NODE, eventually, http_get, metric, service, slice};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubenft::netns::{Netns, can_create};
use kubenft::nft::model::Family;
use kubenft_nft_testkit::inspect::list_table_json;
use serde_json::{Value, json};

/// Where the test's kubeconfig and its CA are mounted in the container.
const CREDENTIALS: &str = "/var/run/kubenft-test";

/// What podman needs on these machines whatever the manifest says: runc (crun, podman's first
/// choice where both are installed, refuses their hybrid cgroup hierarchy), cgroupfs (no
/// systemd manages cgroups here), and rlimits within the machine's hard limits (podman's
/// defaults exceed them and the runtime fails to set them).
const MACHINE: &[&str] = &[
    "--runtime",
    "/usr/sbin/runc",
    "--cgroup-manager",
    "cgroupfs",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
];

/// Capability numbers (linux/capability.h) of the names a manifest may add.
fn capability_bit(name: &str) -> u32 {
    match name.trim_start_matches("CAP_") {
        "NET_BIND_SERVICE" => 10,
        "NET_BROADCAST" => 11,
        "NET_ADMIN" => 12,
        "NET_RAW" => 13,
        "SYS_ADMIN" => 21,
        other => panic!("capability {other}: add its number to capability_bit"),
    }
}

/// The keys set in `object` (serialised as Kubernetes spells them) that `known` does not list.
fn unknown_keys(object: &impl serde::Serialize, known: &[&str]) -> Vec<String> {
    let value = serde_json::to_value(object).unwrap();
    value
        .as_object()
        .map(|o| {
            o.keys()
                .filter(|k| !known.contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// A memory quantity (`256Mi`) in bytes.
fn bytes(quantity: &str) -> u64 {
    let (number, unit) = quantity
        .find(|c: char| !c.is_ascii_digit())
        .map_or((quantity, ""), |i| quantity.split_at(i));
    let scale = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => panic!("memory quantity {quantity}: unit {other} not translated"),
    };
    number.parse::<u64>().unwrap() * scale
}

/// Expands `$(NAME)` references to the container's environment, as the kubelet does in args.
fn expand(arg: &str, env: &BTreeMap<String, String>) -> String {
    env.iter().fold(arg.to_string(), |a, (name, value)| {
        a.replace(&format!("$({name})"), value)
    })
}

/// `podman run` arguments (after `run`) for the DaemonSet's container on node `node`: `ns`
/// stands for the host's network namespace, `volumes` receives the ConfigMap volumes' files,
/// `credentials` (a kubeconfig and its CA) replaces the in-cluster service account.
fn podman_run_args(
    pod: &PodSpec,
    c: &Container,
    ns: &Netns,
    volumes: &Path,
    node: &str,
    credentials: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = MACHINE.iter().map(|s| s.to_string()).collect();
    // Never a registry: the image is the one deploy/image.sh built here.
    args.extend(["--pull".into(), "never".into()]);

    assert_eq!(
        pod.host_network,
        Some(true),
        "the DaemonSet uses the host network"
    );
    args.push(format!("--network=ns:/run/netns/{}", ns.name()));
    assert!(
        pod.security_context.is_none(),
        "a pod-level securityContext: translate it here"
    );

    let known = [
        "name",
        "image",
        "imagePullPolicy",
        "args",
        "env",
        "securityContext",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "volumeMounts",
    ];
    let unknown = unknown_keys(c, &known);
    assert!(
        unknown.is_empty(),
        "container fields to translate: {unknown:?}"
    );

    args.extend(security_context_args(c));

    if let Some(resources) = &c.resources {
        // Requests only place the pod; limits are enforced.
        for (name, quantity) in resources.limits.iter().flatten() {
            match name.as_str() {
                "memory" => args.push(format!("--memory={}", bytes(&quantity.0))),
                other => panic!("resource limit {other}: translate it here"),
            }
        }
    }

    let env = environment(c, node);
    for (name, value) in &env {
        args.push(format!("--env={name}={value}"));
    }

    args.extend(config_map_volume_args(pod, c, volumes));
    args.push(format!(
        "--volume={}:{CREDENTIALS}:ro",
        credentials.display()
    ));

    args.push(c.image.clone().expect("the container names its image"));
    for arg in c.args.iter().flatten() {
        args.push(expand(arg, &env));
    }
    // The test API server instead of the in-cluster account.
    args.push(format!("--kubeconfig={CREDENTIALS}/kubeconfig"));
    args
}

/// podman's flags for the container's securityContext.
fn security_context_args(c: &Container) -> Vec<String> {
    let mut args = Vec::new();
    let sc = c.security_context.clone().unwrap_or_default();
    let unknown = unknown_keys(
        &sc,
        &[
            "privileged",
            "allowPrivilegeEscalation",
            "readOnlyRootFilesystem",
            "runAsUser",
            "runAsGroup",
            "capabilities",
            "seccompProfile",
        ],
    );
    assert!(
        unknown.is_empty(),
        "securityContext fields to translate: {unknown:?}"
    );
    if sc.privileged == Some(true) {
        args.push("--privileged".into());
    }
    if sc.allow_privilege_escalation == Some(false) {
        args.push("--security-opt=no-new-privileges".into());
    }
    if sc.read_only_root_filesystem == Some(true) {
        args.push("--read-only".into());
    }
    match (sc.run_as_user, sc.run_as_group) {
        (Some(u), Some(g)) => args.push(format!("--user={u}:{g}")),
        (Some(u), None) => args.push(format!("--user={u}")),
        (None, None) => {}
        (None, Some(_)) => panic!("runAsGroup without runAsUser: translate it here"),
    }
    if let Some(caps) = &sc.capabilities {
        for cap in caps.drop.iter().flatten() {
            args.push(format!("--cap-drop={cap}"));
        }
        for cap in caps.add.iter().flatten() {
            args.push(format!("--cap-add={cap}"));
        }
    }
    if let Some(profile) = &sc.seccomp_profile {
        match profile.type_.as_str() {
            // podman's default profile is the runtime's default.
            "RuntimeDefault" => {}
            "Unconfined" => args.push("--security-opt=seccomp=unconfined".into()),
            other => panic!("seccompProfile {other}: translate it here"),
        }
    }
    args
}

/// The container's environment on node `node`, as the kubelet fills it in.
fn environment(c: &Container, node: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in c.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), None) => v.clone(),
            (None, Some(from)) => {
                let path = from.field_ref.as_ref().map(|f| f.field_path.as_str());
                assert_eq!(
                    path,
                    Some("spec.nodeName"),
                    "env {}: translate it",
                    var.name
                );
                node.to_string()
            }
            _ => panic!("env {}: translate it here", var.name),
        };
        env.insert(var.name.clone(), value);
    }
    env
}

/// `--volume` flags for the container's ConfigMap volumes, their files written under `volumes`.
fn config_map_volume_args(pod: &PodSpec, c: &Container, volumes: &Path) -> Vec<String> {
    let mut args = Vec::new();
    let config_map: ConfigMap = manifests::one("configmap.yaml", "ConfigMap");
    for mount in c.volume_mounts.iter().flatten() {
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap_or_else(|| panic!("volume {} is declared", mount.name));
        let source = volume.config_map.as_ref().unwrap_or_else(|| {
            panic!(
                "volume {}: only configMap volumes are translated",
                mount.name
            )
        });
        assert_eq!(
            source.name,
            config_map.metadata.name.clone().unwrap(),
            "volume {} names the ConfigMap in deploy/configmap.yaml",
            mount.name
        );
        let dir = volumes.join(&mount.name);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in config_map.data.iter().flatten() {
            std::fs::write(dir.join(file), text).unwrap();
        }
        // The kubelet mounts ConfigMap volumes read-only whatever the mount says.
        args.push(format!(
            "--volume={}:{}:ro",
            dir.display(),
            mount.mount_path
        ));
    }
    args
}

/// The container, running in the foreground of a `podman run` child; removed on drop.
struct Running {
    name: String,
    child: Option<Child>,
    log: tempfile::NamedTempFile,
}

impl Running {
    fn start(name: &str, run_args: &[String]) -> Running {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new("podman")
            .args(["run", "--rm", "--name", name])
            .args(run_args)
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("podman starts");
        Running {
            name: name.to_string(),
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Panics, with the log, if the container has already exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
            self.child = None;
            panic!("the container exited ({status}):\n{}", self.log());
        }
    }

    /// The container's main process, as the host sees it.
    fn pid(&self) -> u32 {
        eventually(Duration::from_secs(30), "the container runs", || {
            let out = Command::new("podman")
                .args(["inspect", "--format", "{{.State.Pid}}", &self.name])
                .output()
                .ok()?;
            let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
            (pid != 0).then_some(pid)
        })
    }

    /// SIGTERM, as the kubelet stops a container; the container's exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = Command::new("podman")
            .args(["kill", "--signal", "TERM", &self.name])
            .output()
            .unwrap();
        assert!(sent.status.success(), "podman kill: {sent:?}");
        let child = self.child.as_mut().unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "still running 30 s after SIGTERM:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("podman")
                .args(["rm", "--force", "--time", "0", &self.name])
                .output();
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- container log ---\n{}", self.log());
        }
    }
}

/// Whether `needle` occurs anywhere in `value`.
fn holds(value: &Value, needle: &Value) -> bool {
    value == needle
        || match value {
            Value::Array(items) => items.iter().any(|v| holds(v, needle)),
            Value::Object(map) => map.values().any(|v| holds(v, needle)),
            _ => false,
        }
}

/// The kernel's `ip kubenft` table in `ns` (None while there is none).
fn table(ns: &Netns) -> Option<Value> {
    list_table_json(ns, Family::Ip, "kubenft").ok()
}

/// The key of a service port in the dispatch sets and maps: address . protocol . port.
fn service_key(ip: &str, port: u16) -> Value {
    json!({"concat": [ip, "tcp", port]})
}

/// Where the kubelet sends `probe`: the container's named or numbered port on the probe's host
/// (the pod's address, which on the host network is the node's; 127.0.0.1 here).
fn probe_target(c: &Container, probe: &Option<Probe>) -> (SocketAddr, String) {
    let get = probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .expect("an HTTP probe");
    let port = match &get.port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .unwrap_or_else(|| panic!("port {name} is declared"))
                .container_port
        }
    };
    let host = get.host.clone().unwrap_or_else(|| "127.0.0.1".into());
    (
        format!("{host}:{port}").parse().unwrap(),
        get.path.clone().unwrap_or_else(|| "/".into()),
    )
}

/// The metrics address the DaemonSet's arguments and ConfigMap give the daemon on `node`.
fn metrics_address(c: &Container, node: &str) -> SocketAddr {
    let config_map: ConfigMap = manifests::one("configmap.yaml", "ConfigMap");
    let dir = tempfile::tempdir().unwrap();
    let mount = &c.volume_mounts.as_ref().unwrap()[0].mount_path;
    for (file, text) in config_map.data.iter().flatten() {
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    let env = environment(c, node);
    let mut argv = vec!["kubenft".to_string()];
    for a in c.args.iter().flatten() {
        argv.push(expand(a, &env).replace(mount.as_str(), dir.path().to_str().unwrap()));
    }
    let config = kubenft::config::Cli::parse_args(&argv)
        .unwrap()
        .validate()
        .unwrap();
    let kubenft::config::Task::Run(run) = config.task else {
        panic!("the DaemonSet runs the daemon")
    };
    run.metrics_bind_address
        .expect("the DaemonSet serves metrics")
}

/// The test API server's kubeconfig, with a CA as the in-cluster account always has one
/// (`ca.crt`). Without a CA, kube-rs builds its TLS setup from the system's trust store, which
/// a scratch image does not have, and fails before connecting; the server speaks plain HTTP,
/// so this throw-away CA never verifies anything.
fn credentials(api: &ApiServer) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=kubenft-image-test"])
        .args(["-keyout", "/dev/null", "-out"])
        .arg(&ca)
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "openssl: {made:?}");
    let url = api.server.url();
    let kubeconfig = api.server.kubeconfig().replace(
        &format!("server: {url}\n"),
        &format!("server: {url}\n    certificate-authority: {CREDENTIALS}/ca.crt\n"),
    );
    assert!(kubeconfig.contains("certificate-authority"), "{kubeconfig}");
    std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
    dir
}

/// The image's configuration is the Containerfile's final stage: its user and entrypoint, and
/// one layer (the binary).
fn assert_image_is_the_containerfiles_final_stage(image: &str) {
    let containerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Containerfile"))
            .unwrap();
    let final_stage = containerfile.rsplit_once("\nFROM ").expect("stages").1;
    let directive = |name: &str| {
        final_stage
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in the final stage"))
            .trim()
            .to_string()
    };
    let user = directive("USER ");
    let entrypoint: Value = serde_json::from_str(&directive("ENTRYPOINT ")).unwrap();

    let out = Command::new("podman")
        .args(["image", "inspect", image])
        .output()
        .unwrap();
    let inspected: Value = serde_json::from_slice(&out.stdout).unwrap();
    let inspected = &inspected[0];
    assert_eq!(inspected["Config"]["User"], json!(user), "{inspected}");
    assert_eq!(inspected["Config"]["Entrypoint"], entrypoint, "{inspected}");
    assert_eq!(
        inspected["RootFS"]["Layers"].as_array().map(Vec::len),
        Some(1),
        "{inspected}"
    );
}

#[test]
#[ignore = "needs root, podman and the image deploy/image.sh builds; .ci/run runs it"]
fn the_image_runs_as_the_daemonset_specifies_and_programs_serves_follows_and_stops() {
    assert!(can_create(), "the image test needs root");
    let ds: DaemonSet = manifests::one("daemonset.yaml", "DaemonSet");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let c = &pod.containers[0];
    let image = c.image.clone().unwrap();
    let present = Command::new("podman")
        .args(["image", "exists", &image])
        .status()
        .unwrap_or_else(|e| panic!("podman: {e} (bash .ci/setup-image installs it)"));
    assert!(
        present.success(),
        "no image {image} in podman's storage: build it with `bash deploy/image.sh`"
    );
    assert_image_is_the_containerfiles_final_stage(&image);

    let ns = Netns::create("image").unwrap();
    let api = ApiServer::start_in(&ns);
    api.apply(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE},
        "spec": {"podCIDRs": ["10.244.0.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
    }));
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));

    let volumes = tempfile::tempdir().unwrap();
    let credentials = credentials(&api);
    let run_args = podman_run_args(&pod, c, &ns, volumes.path(), NODE, credentials.path());
    let name = format!("kubenft-image-test-{}", std::process::id());
    let mut container = Running::start(&name, &run_args);

    // Programmed: the service's key and its endpoint are in the kernel's table.
    let web = service_key("10.96.0.10", 80);
    let endpoint = json!("10.244.1.2");
    eventually(Duration::from_secs(60), "the table programmed", || {
        container.assert_running();
        let t = table(&ns)?;
        (holds(&t, &web) && holds(&t, &endpoint)).then_some(())
    });

    // As the manifest says: uid 0, only the added capabilities in effect, no privilege
    // escalation, a read-only root filesystem.
    let pid = container.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
            .to_string()
    };
    let sc = c.security_context.as_ref().unwrap();
    let uid = sc.run_as_user.unwrap().to_string();
    assert!(
        field("Uid:").split_whitespace().all(|u| u == uid),
        "{status}"
    );
    let wanted = sc
        .capabilities
        .as_ref()
        .and_then(|caps| caps.add.clone())
        .unwrap_or_default()
        .iter()
        .fold(0u64, |mask, name| mask | 1 << capability_bit(name));
    assert_eq!(
        u64::from_str_radix(&field("CapEff:"), 16).unwrap(),
        wanted,
        "{status}"
    );
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f[4] == "/")
        .expect("a root mount");
    assert!(
        root[5].split(',').any(|o| o == "ro"),
        "root filesystem mounted {}",
        root[5]
    );

    // The kubelet's probes pass.
    for probe in [&c.liveness_probe, &c.readiness_probe] {
        let (addr, path) = probe_target(c, probe);
        eventually(
            Duration::from_secs(30),
            &format!("{path} answers 200"),
            || {
                container.assert_running();
                let (code, _) = http_get(&ns, addr, &path)?;
                (code == 200).then_some(())
            },
        );
    }

    // Metrics, with the sync that programmed the table counted.
    let metrics = metrics_address(c, NODE);
    let (code, page) = http_get(&ns, metrics, "/metrics").expect("metrics answer");
    assert_eq!(code, 200, "{page}");
    assert!(
        metric(&page, "kubeproxy_sync_proxy_rules_last_timestamp_seconds").unwrap_or(0.0) > 0.0,
        "{page}"
    );

    // A Service change made through the API reaches the kernel.
    api.apply(service("web", "10.96.0.10", 8080));
    let moved = service_key("10.96.0.10", 8080);
    eventually(Duration::from_secs(30), "the service moved to 8080", || {
        container.assert_running();
        let t = table(&ns)?;
        (holds(&t, &moved) && !holds(&t, &web)).then_some(())
    });

    // SIGTERM: a clean exit, the rules left in place.
    let status = container.terminate();
    assert!(status.success(), "exit {status}:\n{}", container.log());
    let t = table(&ns).expect("the table stays");
    assert!(holds(&t, &moved) && holds(&t, &endpoint), "{t}");
}
