//! Churn under load: 20 Services receive continuous connections while their endpoints are
//! added, removed and moved between slices at 50 changes per second for 60 seconds. Every
//! Service always keeps a ready endpoint, so not one connection may fail: each sync is atomic
//! and never leaves a Service without its rules, even for an instant.

use crate::harness;

use std::time::{Duration, Instant};

use harness::*;
use serde_json::json;

const SERVICES: usize = 20;
const CHANGES_PER_SECOND: u64 = 50;
const CHURN: Duration = Duration::from_secs(60);

fn ip(i: usize) -> String {
    format!("10.96.1.{}", i + 1)
}

/// Service `i`'s endpoints in state `step`: always at least one ready pod, sometimes both,
/// sometimes split over two slices (an endpoint "moving" between slices).
fn slices_for(i: usize, step: usize) -> Vec<serde_json::Value> {
    let name = format!("svc-{i}");
    let one = |slice: &str, pods: &[u8]| {
        let mut s = slice_named(&name, slice, pods);
        s["metadata"]["labels"] = json!({"kubernetes.io/service-name": name});
        s
    };
    match step % 4 {
        0 => vec![one("a", &[1]), one("b", &[])],
        1 => vec![one("a", &[1, 2]), one("b", &[])],
        2 => vec![one("a", &[2]), one("b", &[1])],
        _ => vec![one("a", &[]), one("b", &[2])],
    }
}

#[test]
fn connections_never_fail_while_endpoints_churn_at_fifty_changes_per_second() {
    let Some((topo, api)) = lab("churn") else {
        return;
    };
    for i in 0..SERVICES {
        api.apply(service(&format!("svc-{i}"), &ip(i), 80));
        for s in slices_for(i, 0) {
            api.apply(s);
        }
    }
    let daemon = start_daemon(&topo, &api, &[]);
    for i in 0..SERVICES {
        wait_for_backends(
            &topo,
            &format!("{}:80", ip(i)),
            &["pod-1"],
            Duration::from_secs(20),
        );
    }

    let targets: Vec<String> = (0..SERVICES).map(|i| format!("{}:80", ip(i))).collect();
    let traffic: Vec<Traffic> = (0..4)
        .map(|t| Traffic::start_many(&topo, targets.iter().skip(t).step_by(4).cloned().collect()))
        .collect();

    let start = Instant::now();
    let mut changes = 0u64;
    let mut step = [0usize; SERVICES];
    while start.elapsed() < CHURN {
        let i = (changes as usize * 7) % SERVICES;
        step[i] += 1;
        for s in slices_for(i, step[i]) {
            api.apply(s);
        }
        changes += 1;
        let due = start + Duration::from_millis(changes * 1000 / CHANGES_PER_SECOND);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }

    let mut ok = 0;
    let mut failed = Vec::new();
    for t in traffic {
        let (o, f) = t.finish();
        ok += o;
        failed.extend(f);
    }
    let log = daemon.log();
    let syncs = log.matches("synced").count();
    eprintln!("{changes} changes, {syncs} syncs, {ok} connections");
    assert!(
        failed.is_empty(),
        "{} failed connections: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    assert!(ok > 1000, "traffic flowed: {ok}");
    assert!(syncs > 100, "the daemon kept syncing: {syncs}");
    assert!(!log.contains("sync failed"), "{log}");
}
