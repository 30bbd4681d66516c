//! Every integration test, compiled into one test binary: each file beside this one is a
//! module of it. One binary links the library, the lab and the daemon harness once instead of
//! once per file, which is most of the test build's time. Run one file's tests by its module
//! path, e.g. `cargo test --release --test integration daemon_e2e::`.

// The lab and harnesses the test modules share (`use crate::harness;`).
mod common;
#[path = "common/explain.rs"]
#[allow(dead_code)]
mod explain_harness;
#[path = "common/flows.rs"]
mod flows;
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/manifests.rs"]
#[allow(dead_code)]
mod manifests;
#[path = "common/privilege.rs"]
#[allow(dead_code)]
mod privilege;

mod busy_node;
mod churn;
mod cli_exit_codes;
mod coexistence;
mod conntrack;
mod consistent;
mod daemon_e2e;
mod daemon_faults;
mod demo;
mod deploy;
mod dual_stack;
mod events;
mod explain;
mod external_ips;
mod image;
mod kernel_probe;
mod kube_proxy_config;
mod least_privilege;
mod localhost_nodeports;
mod metrics_parity;
mod nft_netlink;
mod nft_traffic;
mod no_shell_outs;
mod nodeport_conflicts;
mod parity;
mod parity_newest;
mod partial_sync;
mod planner_props;
mod render;
mod service_cidrs;
mod service_traffic;
mod streamed_batch;
mod sync_once;
mod takeover;
mod traffic_policy;

/// A test file that no `mod` line names would silently never run.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let declared = include_str!("integration.rs");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && stem != "integration" {
            assert!(
                declared.lines().any(|l| l == format!("mod {stem};")),
                "tests/{stem}.rs is not declared in tests/integration.rs"
            );
        }
    }
}
