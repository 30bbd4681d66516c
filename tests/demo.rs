//! `kubenft demo`, the README's first command, works and leaves nothing behind.

use std::process::Command;

#[test]
fn the_demo_answers_from_both_pods_refuses_the_empty_service_and_cleans_up() {
    if !kubenft::netns::can_create() {
        eprintln!("skipped: the demo needs root");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kubenft"))
        .arg("demo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("answered by pod-1") && stdout.contains("answered by pod-2"),
        "{stdout}"
    );
    assert!(stdout.contains("refused"), "{stdout}");
    assert!(stdout.contains("[7/7]"), "{stdout}");
    // It ends with `explain` of demo/web: its two endpoints, read from the kernel.
    assert!(
        stdout.contains("demo/web:http") && stdout.contains("10.244.2.2:8080"),
        "{stdout}"
    );
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left
            .lines()
            .any(|l| l.contains("demoNode") || l.contains("demoCli")),
        "leftover namespaces: {left}"
    );
}
