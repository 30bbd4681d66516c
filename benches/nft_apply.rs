//! Cold apply of a kube-proxy-sized table: kubenft's netlink batch versus `nft -f` of the same
//! ruleset rendered as text (what kube-proxy's nftables mode does), side by side in one run,
//! each in a fresh network namespace. Prints a table of medians.
//!
//! Run as root: `cargo bench --bench nft_apply` (optionally `-- --services N --elements M
//! --repeats R --anonymous-maps`).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use kubenft::netns::{Netns, can_create};
use kubenft::nft::kernel::Nftables;
use kubenft::nft::model::{Element, Table, Value, Verdict};
use kubenft::nft::render::render_table;
use kubenft_nft_testkit::corpus::{creation_transaction, kube_like};
use kubenft_nft_testkit::inspect::apply_script;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `services` services with one endpoint each, and `service-ips` grown to `elements` entries
/// (the extra ones stand for external and load-balancer IPs of the same services).
fn workload(services: usize, elements: usize) -> Table {
    let mut t = kube_like(services, 1);
    let map = t
        .sets
        .get_mut("service-ips")
        .expect("kube_like has service-ips");
    let targets: Vec<Verdict> = map
        .elements
        .iter()
        .filter_map(|e| e.data.as_ref()?.verdict().cloned())
        .collect();
    let extra = elements.saturating_sub(map.elements.len());
    for i in 0..extra {
        map.elements.push(Element {
            key: vec![
                Value::Ipv4(Ipv4Addr::from(0xc633_0000u32 + i as u32)),
                Value::Proto(6),
                Value::Port(443),
            ],
            data: Some(targets[i % targets.len()].clone().into()),
            comment: None,
        });
    }
    if !std::env::args().any(|a| a == "--anonymous-maps") {
        // What the planner emits: a single-endpoint service jumps straight to its endpoint
        // (`--anonymous-maps` keeps kube_like's one-entry numgen map per service instead).
        for c in t.chains.values_mut() {
            for r in &mut c.rules {
                for st in &mut r.stmts {
                    if let kubenft::nft::model::Stmt::NumgenVMap {
                        map: kubenft::nft::model::MapRef::Anonymous(m),
                        ..
                    } = st
                        && m.len() == 1
                    {
                        *st = kubenft::nft::model::Stmt::Verdict(m[0].1.clone());
                    }
                }
            }
        }
    }
    t.normalize();
    t
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if !can_create() {
        eprintln!("nft_apply: needs root (network namespaces); skipped");
        return;
    }
    let services = arg("--services", 10_000);
    let elements = arg("--elements", 100_000);
    let repeats = arg("--repeats", 3).max(1);
    let table = workload(services, elements);
    let tx = creation_transaction(&table);
    let script = render_table(&table);
    let chains = table.chains.len();
    let rules: usize = table.chains.values().map(|c| c.rules.len()).sum();
    let elems: usize = table.sets.values().map(|s| s.elements.len()).sum();

    let (mut by_netlink, mut by_nft, mut encoding) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..repeats {
        let start = Instant::now();
        let stats = kubenft::nft::kernel::apply::encode_only(&tx).expect("encode");
        encoding.push(start.elapsed());
        if round == 0 {
            eprintln!("batch: {} messages, {} bytes", stats.messages, stats.bytes);
        }
        let ns = Netns::create("bench").expect("namespace");
        let tx = tx.clone();
        let took = ns
            .run(move || {
                let mut nft = Nftables::open().expect("netlink socket");
                let start = Instant::now();
                nft.apply(&tx).expect("netlink apply");
                start.elapsed()
            })
            .expect("thread in namespace");
        by_netlink.push(took);
        drop(ns);

        let ns = Netns::create("bench").expect("namespace");
        let start = Instant::now();
        apply_script(&ns, &script).expect("nft -f");
        by_nft.push(start.elapsed());
        eprintln!(
            "round {}/{repeats}: netlink {:?}, nft -f {:?}",
            round + 1,
            by_netlink[round],
            by_nft[round]
        );
    }
    let (a, b, e) = (median(by_netlink), median(by_nft), median(encoding));
    println!(
        "cold apply of one table: {chains} chains, {rules} rules, {elems} map elements, {} ops; median of {repeats}",
        tx.ops.len()
    );
    println!();
    println!("| method                         | median time | relative |");
    println!("|--------------------------------|-------------|----------|");
    println!(
        "| kubenft netlink batch          | {:>9.3} s | {:>7.1}x |",
        a.as_secs_f64(),
        1.0
    );
    println!(
        "| nft -f (rendered text)         | {:>9.3} s | {:>7.1}x |",
        b.as_secs_f64(),
        b.as_secs_f64() / a.as_secs_f64()
    );
    println!(
        "| (kubenft encoding alone)       | {:>9.3} s | {:>7.2}x |",
        e.as_secs_f64(),
        e.as_secs_f64() / a.as_secs_f64()
    );
    println!();
    println!(
        "netlink is {:.1}x faster than nft -f (target: >= 5x); the rest of both is kernel time",
        b.as_secs_f64() / a.as_secs_f64()
    );
    if std::env::args().any(|a| a == "--anonymous-maps") {
        println!(
            "(layout: one anonymous numgen vmap per service: the kernel's loop check grows with the number of verdict maps)"
        );
    } else {
        println!(
            "(layout as the planner emits it: single-endpoint services goto their endpoint; --anonymous-maps for one numgen map per service)"
        );
    }
}
