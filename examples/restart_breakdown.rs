//! Where a restart's time goes on an unchanged kernel: the benchmark's synthetic cluster is
//! synced into a throw-away network namespace as the daemon's first sync does it, then a new
//! engine and planner restart on it as `kubenft run` does (read back, `Planner::reset_to`, plan
//! without elements, read the sets whose digests differ, `sync_filling`), each step timed.
//!
//! `cargo run --release --example restart_breakdown -- 30000x10 [restarts] [extra plans]`
//! (root; the extra plans, untimed, are for a profiler).

#[path = "../benchmark/src/synthetic.rs"]
#[allow(dead_code)]
mod synthetic;

use std::time::Instant;

use kubenft::daemon::full_sync::{plan_as_held, read_differing_sets};
use kubenft::netns::Netns;
use kubenft::nft::kernel::Nftables;
use kubenft::proxier::Planner;
use kubenft::sync::Syncer;

fn main() {
    let mut args = std::env::args().skip(1);
    let scale = args.next().unwrap_or_else(|| "30000x10".into());
    let (services, endpoints) = synthetic::parse_scale(&scale).unwrap_or_else(|e| panic!("{e}"));
    let restarts: usize = args.next().map_or(3, |n| n.parse().expect("restarts"));
    // Extra plans after each restart's read, untimed: for a profiler to see planning.
    let extra_plans: usize = args.next().map_or(0, |n| n.parse().expect("extra plans"));

    let state = synthetic::cluster(services, endpoints);
    let proxy = synthetic::config();
    let ns = Netns::create("brestart").unwrap();
    ns.run(move || {
        let mut planner = Planner::new();
        let mut syncer = Syncer::new(Nftables::open().unwrap(), &proxy.table_name);
        syncer.read_back().unwrap();
        let started = Instant::now();
        let tables = planner.plan_without_elements(&state, &proxy);
        let plan = started.elapsed();
        let started = Instant::now();
        syncer.sync_filling(tables, &planner, false).unwrap();
        let sync = started.elapsed();
        println!("first sync: plan {plan:.3?}, netlink sync {sync:.3?}");
        drop((planner, syncer));

        println!("restart  read back   plan       digests    sync       ops");
        for round in 0..restarts {
            let mut syncer = Syncer::new(Nftables::open().unwrap(), &proxy.table_name);
            let started = Instant::now();
            syncer.read_back().unwrap();
            let read = started.elapsed();
            for _ in 0..extra_plans {
                let mut planner = Planner::new();
                planner.reset_to(syncer.applied_tables().unwrap());
                planner.plan_without_elements(&state, &proxy);
            }
            let started = Instant::now();
            let mut planner = Planner::new();
            let tables = plan_as_held(&syncer, &mut planner, &state, &proxy);
            let plan = started.elapsed();
            let started = Instant::now();
            let mut tables = tables;
            read_differing_sets(&mut syncer, &mut planner, &mut tables, &state, &proxy).unwrap();
            let digests = started.elapsed();
            let started = Instant::now();
            let report = syncer.sync_filling(tables, &planner, false).unwrap();
            let sync = started.elapsed();
            println!(
                "{round:<8} {:<10.3?} {:<10.3?} {:<10.3?} {:<10.3?} {}",
                read, plan, digests, sync, report.ops
            );
        }
    })
    .unwrap();
}
