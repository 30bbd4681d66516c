//! Where a churn sync's time goes: the benchmark's synthetic cluster is planned and synced
//! into a throw-away network namespace, then rounds of endpoint changes are applied as the
//! daemon's partial syncs apply them (each changed Service gets one endpoint replaced by a new
//! address, as `kubenft-bench --churn` changes them), each round timed step by step: the
//! planner's changes, the transaction made of them, its encoding, and the kernel's commit.
//!
//! `cargo run --release --example churn_breakdown -- 10000x10 500 [rounds]` (root).

#[path = "../benchmark/src/synthetic.rs"]
#[allow(dead_code)]
mod synthetic;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use kubenft::netns::Netns;
use kubenft::nft::kernel::Nftables;
use kubenft::nft::kernel::apply::encode_only;
use kubenft::proxier::{Planner, ServiceRef};
use kubenft::sync::{Syncer, changes_transaction};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let scale = args.next().unwrap_or_else(|| "10000x10".into());
    let (services, endpoints) = synthetic::parse_scale(&scale).unwrap_or_else(|e| panic!("{e}"));
    let per_round: usize = args
        .next()
        .map_or(500, |n| n.parse().expect("changes per round"));
    let rounds: usize = args.next().map_or(10, |n| n.parse().expect("rounds"));

    let mut state = synthetic::cluster(services, endpoints);
    let proxy = synthetic::config();
    let ns = Netns::create("bchurn").unwrap();
    let nft = ns.run(|| Nftables::open().unwrap()).unwrap();
    let mut planner = Planner::new();
    let mut syncer = Syncer::new(nft, &proxy.table_name);
    syncer.sync(planner.plan(&state, &proxy), true).unwrap();
    syncer.release_tables();

    let mut steps: [Vec<Duration>; 4] = Default::default();
    let (mut elements, mut bytes) = (Vec::new(), Vec::new());
    let mut next_ip = u32::from(Ipv4Addr::new(10, 200, 0, 0));
    let mut service = 0;
    for round in 0..rounds {
        let mut changed: BTreeSet<ServiceRef> = BTreeSet::new();
        for _ in 0..per_round {
            let name = synthetic::service_name(service % services);
            service += 1;
            let eps = state.endpoints.get_mut(&name).expect("synthetic endpoints");
            let e = (service / services + round) % eps.len();
            eps[e].ip = IpAddr::V4(Ipv4Addr::from(next_ip));
            next_ip += 1;
            // As the model orders them.
            eps.sort_by_key(|a| (a.ip, a.port, a.terminating));
            changed.insert((name.namespace.clone(), name.name.clone()));
        }
        let started = Instant::now();
        let changes = planner.changes(&state, &proxy, Some(&changed));
        let planned = started.elapsed();
        let copy = changes.clone();
        let started = Instant::now();
        let tx = changes_transaction(copy, Some(0));
        let diffed = started.elapsed();
        let started = Instant::now();
        let encoded = encode_only(&tx).unwrap();
        let encoding = started.elapsed();
        let started = Instant::now();
        let report = syncer.sync_changes(changes).unwrap().expect("still ours");
        let synced = started.elapsed();
        steps[0].push(planned);
        steps[1].push(diffed);
        steps[2].push(encoding);
        steps[3].push(report.kernel_time);
        elements.push(
            tx.ops
                .iter()
                .map(|op| match op {
                    kubenft::nft::transaction::Op::AddElements { elements, .. }
                    | kubenft::nft::transaction::Op::DeleteElements { elements, .. } => {
                        elements.len()
                    }
                    _ => 0,
                })
                .sum::<usize>(),
        );
        bytes.push(encoded.bytes);
        eprintln!(
            "round {round}: plan {planned:?}, transaction {diffed:?}, encode {encoding:?}, sync_changes {synced:?} (kernel {:?}), {} ops, {} element ops, {} bytes",
            report.kernel_time,
            tx.ops.len(),
            elements.last().unwrap(),
            encoded.bytes
        );
    }
    let [plan, tx, encode, kernel] = steps.map(median);
    println!(
        "{services} × {endpoints}, {per_round} changed Services per sync, median of {rounds}: \
         planner {plan:?}, transaction {tx:?}, encoding {encode:?}, kernel round trip \
         {kernel:?}; element operations {}, bytes {}",
        elements[elements.len() / 2],
        bytes[bytes.len() / 2]
    );
}
