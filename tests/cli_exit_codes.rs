//! The binary's contract with its caller: a bad configuration exits 64 (EX_USAGE) with the
//! reason on stderr before anything runs; help succeeds. A kernel that lacks what the ruleset
//! needs exits 69 (EX_UNAVAILABLE) from `sync --once` and `run`, changing nothing: that needs
//! a kernel, so it is tested in `kernel_probe.rs`; other failures exit 1.

use std::process::{Command, Output};

fn kubenft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubenft"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the kubenft binary runs")
}

#[test]
fn an_invalid_flag_value_exits_64_naming_the_flag() {
    let out = kubenft(&["cleanup", "--cluster-cidr", "10.0.0.0/8,10.1.0.0/16"]);
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--cluster-cidr: two IPv4 CIDRs given"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unknown_subcommand_or_flag_exits_64() {
    assert_eq!(kubenft(&["bogus"]).status.code(), Some(64));
    assert_eq!(
        kubenft(&["render", "--no-such-flag"]).status.code(),
        Some(64)
    );
    assert_eq!(kubenft(&[]).status.code(), Some(64));
}

#[test]
fn a_subcommand_missing_its_input_exits_64() {
    let out = kubenft(&["render"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--manifests PATH is required"));
}

#[test]
fn help_succeeds_and_lists_the_subcommands() {
    let out = kubenft(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "render",
        "sync",
        "cleanup",
        "--nodeport-addresses",
        "--detect-local-mode",
    ] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
}
