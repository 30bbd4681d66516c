//! The start-up kernel probe, wired into the real binary: on a kernel that refuses the probe
//! (a refusal injected into the probe's batch, through the test builds' seam
//! `KUBENFT_TEST_PROBE_REFUSED`, and refused by the real kernel), `sync --once` exits 69
//! creating nothing, and `run` answers `/healthz` with 503 and the reason, records a Warning
//! Event on the Node, then exits 69. On this kernel the probe passes and changes nothing.

use std::process::Command;
use std::time::Duration;

use crate::harness::*;
use kubenft::netns::{Netns, can_create};
use kubenft_testkit::Kind;

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, protocol: TCP}]}
"#;

/// The injected refusal, as the message renders it.
const REFUSED: &str = "numgen random mod 0 0` → ERANGE";

/// `kubenft sync --once` in `ns` with `env` set: (exit code, stderr).
fn sync_once(ns: &Netns, env: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.yaml"), MANIFESTS).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(), "env"])
        .args(env)
        .arg(env!("CARGO_BIN_EXE_kubenft"))
        .args([
            "sync",
            "--once",
            "--hostname-override",
            "node-a",
            "--manifests",
        ])
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ruleset(ns: &Netns) -> String {
    String::from_utf8(ns.exec(&["nft", "list", "ruleset"]).unwrap().stdout).unwrap()
}

#[test]
fn sync_once_probes_the_kernel_first_and_then_programs_it() {
    if !can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = Netns::create("probeso").unwrap();
    let (code, stderr) = sync_once(&ns, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("the kernel accepts every construct of the ruleset"),
        "{stderr}"
    );
    let rules = ruleset(&ns);
    assert!(rules.contains("table ip kubenft"), "{rules}");
    assert!(
        !rules.contains("probe"),
        "no scratch table is left: {rules}"
    );
}

#[test]
fn sync_once_on_a_kernel_that_refuses_the_probe_exits_69_creating_nothing() {
    if !can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = Netns::create("probeno").unwrap();
    let (code, stderr) = sync_once(&ns, &["KUBENFT_TEST_PROBE_REFUSED=1"]);
    assert_eq!(code, Some(69), "{stderr}");
    assert!(stderr.contains("cannot run kubenft's ruleset"), "{stderr}");
    assert!(stderr.contains(REFUSED), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_eq!(ruleset(&ns).trim(), "", "nothing was created");
}

#[test]
fn a_daemon_on_a_kernel_that_refuses_the_probe_says_so_on_healthz_and_in_an_event_then_exits_69() {
    let Some((topo, api)) = lab("probeD") else {
        return;
    };
    // Writes wait 3 s, so the daemon is still waiting for its Event while /healthz is read.
    api.server.stall(Duration::from_secs(3));
    let mut daemon = start_daemon_wrapped(
        &topo,
        &api,
        &["env", "KUBENFT_TEST_PROBE_REFUSED=1"],
        &["--healthz-bind-address", "127.0.0.1:10256"],
    );
    // Healthy, as kube-proxy at start, until the probe's answer is in.
    let body = eventually(
        Duration::from_secs(3),
        "/healthz answers 503",
        || match http_get(&topo.node, addr("127.0.0.1:10256"), "/healthz") {
            Some((503, body)) => Some(body),
            _ => None,
        },
    );
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    let reason = body["kernelUnsupported"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains(REFUSED), "{body}");

    assert_eq!(
        daemon.wait_exit(Duration::from_secs(15)),
        Some(69),
        "{}",
        daemon.log()
    );
    let events: Vec<_> = api
        .server
        .objects(Kind::Event)
        .into_iter()
        .filter(|e| e["reason"] == "KernelUnsupported")
        .collect();
    assert_eq!(events.len(), 1, "written before the daemon exited");
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(events[0]["regarding"]["kind"], "Node");
    assert_eq!(events[0]["regarding"]["name"], NODE);
    assert_eq!(events[0]["note"], reason.as_str());
    assert!(
        api.server
            .objects(Kind::Event)
            .iter()
            .all(|e| e["reason"] != "Starting"),
        "a daemon that cannot run does not announce a start"
    );
    let rules = ruleset(&topo.node);
    assert!(
        !rules.contains("kubenft"),
        "nothing was programmed: {rules}"
    );
}

/// The module `.ci/kernels` keeps out of the guest it boots for the test below.
const MODULE_KEPT_OUT: &str = "nft_numgen";

/// A real kernel lacking a module the ruleset needs: `.ci/kernels` boots Debian 12's 6.1 with
/// `module_blacklist=nft_numgen`, so the kernel itself answers the probe's `numgen` with
/// ENOENT, and `sync --once` must name the module, exit 69 and create nothing.
#[test]
#[ignore = "needs a kernel booted with module_blacklist=nft_numgen (.ci/kernels boots one)"]
fn sync_once_on_a_kernel_without_nft_numgen_names_the_module_and_creates_nothing() {
    let loads = Command::new("modprobe")
        .arg(MODULE_KEPT_OUT)
        .output()
        .unwrap();
    assert!(
        !loads.status.success(),
        "{MODULE_KEPT_OUT} loads here: boot a kernel with module_blacklist={MODULE_KEPT_OUT}"
    );
    let ns = Netns::create("probemod").unwrap();
    let (code, stderr) = sync_once(&ns, &[]);
    assert_eq!(code, Some(69), "{stderr}");
    assert!(stderr.contains("cannot run kubenft's ruleset"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "module missing or not loadable: {MODULE_KEPT_OUT}"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_eq!(ruleset(&ns).trim(), "", "nothing was created");
}
