//! The soak in small form, so a regression fails CI rather than the next measurement: two
//! minutes of `kubenft-bench --soak` at 1,000 × 10 with every fault injected once (API server
//! restart with compaction, daemon SIGKILL and restart, kubenft's table flushed, a foreign
//! table, 200,000 conntrack entries) under continuous TCP and UDP traffic. The bench exits 3
//! when a target is missed: a failed connection or datagram outside the flushed table's
//! repair, a failed sync, a panic, a daemon exit, a change never programmed, open descriptors
//! growing, or a fault whose own check failed (the flush not repaired, the foreign table
//! removed by the daemon, the conntrack entries not expiring).

use std::process::Command;

#[test]
fn a_two_minute_soak_with_every_fault_meets_its_targets() {
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let bench = std::path::Path::new(env!("CARGO_BIN_EXE_kubenft-bench"));
    // The daemon it runs is the workspace's `kubenft`, built beside it by
    // `cargo test --release --workspace`.
    let daemon = bench.with_file_name("kubenft");
    assert!(
        daemon.exists(),
        "{} is missing: run the workspace's tests (cargo test --release --workspace)",
        daemon.display()
    );
    let out = std::env::temp_dir().join(format!("kubenft-soak-test-{}.md", std::process::id()));
    let run = Command::new(bench)
        .args([
            "--soak",
            "2",
            "--soak-scale",
            "1000x10",
            "--soak-seed",
            "41",
        ])
        .args(["--no-control", "--no-daemon", "--no-dataplane", "--out"])
        .arg(&out)
        .output()
        .expect("kubenft-bench runs");
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the soak missed a target ({}):\n{stderr}\n{report}",
        run.status
    );
    assert!(report.contains("**Soak: every target met**"), "{report}");
    eprintln!("{}", String::from_utf8_lossy(&run.stdout));
}
