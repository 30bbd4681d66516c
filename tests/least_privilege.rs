//! The daemon needs no root: as an unprivileged user holding only CAP_NET_ADMIN (what the
//! DaemonSet grants) it programs the node and serves traffic; without that capability the
//! kernel refuses its syncs, which it reports instead of crashing.

use crate::harness;
use crate::privilege;

use privilege::unprivileged;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use harness::*;

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn an_unprivileged_daemon_with_only_net_admin_serves_traffic() {
    let Some((topo, api)) = lab("privNA") else {
        return;
    };
    std::fs::set_permissions(api.kubeconfig(), std::fs::Permissions::from_mode(0o644)).unwrap();
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let wrapper = unprivileged("+net_admin");
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut daemon = start_daemon_wrapped(
        &topo,
        &api,
        &wrapper,
        &["--healthz-bind-address", "127.0.0.1:10256"],
    );
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    // Partial syncs work as that user too.
    api.apply(slice("web", &[1, 2]));
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));

    let pid = daemon.pid().unwrap();
    assert!(daemon.running());
    assert!(
        status_field(pid, "Uid").starts_with("65532"),
        "runs as 65532"
    );
    // CAP_NET_ADMIN is capability 12: bit 0x1000, and nothing else.
    assert_eq!(status_field(pid, "CapEff"), "0000000000001000");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert!(!daemon.log().contains("sync failed"), "{}", daemon.log());
}

#[test]
fn without_net_admin_the_daemon_reports_the_kernels_refusal_and_keeps_trying() {
    let Some((topo, api)) = lab("privNo") else {
        return;
    };
    std::fs::set_permissions(api.kubeconfig(), std::fs::Permissions::from_mode(0o644)).unwrap();
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let wrapper = unprivileged("");
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut daemon = start_daemon_wrapped(
        &topo,
        &api,
        &wrapper,
        &[
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "--sync-period",
            "1s",
        ],
    );
    eventually(Duration::from_secs(20), "a refused sync is logged", || {
        daemon
            .log()
            .contains("Operation not permitted")
            .then_some(())
    });
    assert!(daemon.running(), "a refused sync is not a crash");
    assert_eq!(backend(&topo, WEB), None);
}
