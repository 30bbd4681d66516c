//! An operator's kube-proxy configuration carries over: kubeadm's KubeProxyConfiguration
//! starts the real daemon unchanged against the test API server; `run --cleanup` removes our
//! tables; `--proxy-mode` other than nftables is refused; `--write-config-to` writes a file
//! that `--config` reads back to the same configuration.

use crate::harness;

use std::process::Command;
use std::time::Duration;

use harness::*;

const KUBEADM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kubeadm/config.conf");

#[test]
fn kubeadms_kube_proxy_configuration_starts_the_daemon_and_run_cleanup_removes_the_tables() {
    let Some((topo, api)) = lab("kpcfK") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    // The file names kubeadm's kubeconfig path; the harness's --kubeconfig flag wins over it.
    let mut daemon = start_daemon(&topo, &api, &["--config", KUBEADM]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    let log = daemon.log();
    assert!(!log.contains("accepted and not applied"), "{log}");
    assert!(!log.contains("feature gates"), "{log}");
    assert!(daemon.stop(), "the daemon stops cleanly");
    let tables = |ns: &kubenft::netns::Netns| {
        String::from_utf8(ns.exec(&["nft", "list", "tables"]).unwrap().stdout).unwrap()
    };
    assert!(tables(&topo.node).contains("table ip kubenft"));

    let out = topo
        .node
        .exec_unchecked(&[
            env!("CARGO_BIN_EXE_kubenft"),
            "run",
            "--config",
            KUBEADM,
            "--hostname-override",
            NODE,
            "--cleanup",
        ])
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let left = tables(&topo.node);
    assert!(!left.contains("kubenft"), "{left}");
}

fn kubenft(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubenft"))
        .args(args)
        .output()
        .expect("kubenft runs")
}

#[test]
fn a_proxy_mode_other_than_nftables_exits_64_saying_what_kubenft_is() {
    let out = kubenft(&["run", "--hostname-override", "n", "--proxy-mode", "ipvs"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "kubenft is a Kubernetes service proxy that implements kube-proxy's nftables mode only"
        ),
        "{err}"
    );
}

#[test]
fn write_config_to_writes_a_file_that_config_reads_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.yaml");
    let second = dir.path().join("second.yaml");
    let out = kubenft(&[
        "run",
        "--config",
        KUBEADM,
        "--hostname-override",
        "node-a",
        "--masquerade-bit=3",
        "--nodeport-addresses=10.0.0.0/8",
        "--feature-gates=PreferSameTrafficDistribution=false",
        "--conntrack-min=1000",
        "--write-config-to",
        first.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let out = kubenft(&[
        "run",
        "--config",
        first.to_str().unwrap(),
        "--write-config-to",
        second.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let (a, b) = (
        std::fs::read_to_string(&first).unwrap(),
        std::fs::read_to_string(&second).unwrap(),
    );
    assert_eq!(a, b);
    for line in [
        "masqueradeBit: 3",
        "- 10.0.0.0/8",
        "PreferSameTrafficDistribution: false",
        "min: 1000",
        "clusterCIDR: 10.244.0.0/16",
        "mode: nftables",
    ] {
        assert!(a.contains(line), "{line} in\n{a}");
    }
}
