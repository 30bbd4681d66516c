//! Where the daemon's memory and time go: heap bytes held after each step of its first sync and
//! the peak within it (counted by a global allocator), and each step's CPU time in user space
//! and in the kernel, for the benchmark's synthetic cluster.
//!
//! `cargo run --release --example memory_breakdown -- 10000x10` (root: the sync goes to a
//! throw-away network namespace).

#[path = "../benchmark/src/synthetic.rs"]
#[allow(dead_code)]
mod synthetic;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kubenft::cluster::LiveState;
use kubenft::netns::Netns;
use kubenft::nft::kernel::Nftables;
use kubenft::node_inputs::load_inputs;
use kubenft::proxier::{Planner, ProxyConfig};
use kubenft::source::store::ClusterStore;
use kubenft::sync::Syncer;

struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HELD.fetch_sub(layout.size(), Ordering::Relaxed);
            let now = HELD.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn signed_mib(bytes: i64) -> String {
    format!("{:+.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// CPU seconds this thread spent in user space and in the kernel so far.
fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// Runs a step and prints the heap it left held, its peak, and its CPU time in user space and
/// in the kernel (netlink transactions are processed in the sending thread's system time).
fn step<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let start = HELD.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let (user, kernel) = cpu_times();
    let out = f();
    let (user_after, kernel_after) = cpu_times();
    let held = HELD.load(Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed);
    println!(
        "| {name} | {} | {} | {} | {:.3} s | {:.3} s |",
        mib(held),
        signed_mib(held as i64 - start as i64),
        mib(peak),
        user_after - user,
        kernel_after - kernel,
    );
    out
}

fn main() {
    let scale = std::env::args().nth(1).unwrap_or_else(|| "10000x10".into());
    let (services, endpoints) = synthetic::parse_scale(&scale).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("kubenft-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in synthetic::manifests(services, endpoints) {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let proxy = ProxyConfig {
        hostname: synthetic::NODE.into(),
        cluster_cidrs: vec![synthetic::CLUSTER_CIDR.parse().unwrap()],
        ..ProxyConfig::default()
    };
    let ns = Netns::create("bmem").unwrap();
    let nft = ns.run(|| Nftables::open().unwrap()).unwrap();
    // The rest runs on this thread; the socket stays in the namespace it was opened in.

    println!("{services} × {endpoints}\n");
    println!(
        "| step | heap held after | change by the step | peak within | user CPU | kernel CPU |\n\
         |---|---|---|---|---|---|"
    );
    let inputs = step("manifests parsed", || {
        load_inputs(&dir, synthetic::NODE).unwrap()
    });
    let mut store = ClusterStore::default();
    step("objects in the store", || store.replace_all(inputs));
    let mut live = LiveState::default();
    step("model (services, endpoints)", || {
        store.update_model(&mut live, synthetic::NODE);
    });
    let mut planner = Planner::new();
    let tables = step("planned: the planner's parts + the tables' chains", || {
        planner.plan_without_elements(&live.state, &proxy)
    });
    let mut syncer = Syncer::new(nft, &proxy.table_name);
    // As the daemon's first sync: the kernel is read (it holds none of our tables), then each
    // set's elements are unpacked from the planner while the batch is encoded.
    syncer.read_back().unwrap();
    step(
        "synced: transaction, a set's elements at a time, batch",
        || {
            syncer.sync_filling(tables, &planner, false).unwrap();
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
}
