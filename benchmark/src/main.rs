//! `kubenft-bench`: kubenft measured side by side with kube-proxy's approaches in one run
//! (root; everything happens in throw-away network namespaces):
//!
//! - control plane (`control`): cold full syncs of synthetic clusters — kubenft over netlink,
//!   `nft -f` of the same ruleset (kube-proxy's nftables mode), `iptables-restore` of
//!   kube-proxy's iptables-mode chains — then one endpoint and one service added as partial
//!   syncs split into the daemon's phases, and a restart's read-back;
//! - the real daemon (`daemon`): `kubenft run --kubeconfig` against the test API server holding
//!   the same clusters: time to its first sync, its resident memory, and one endpoint added
//!   through the API until the daemon has synced it;
//! - consistent endpoint choice (`--consistent`): the control plane's cold full sync over
//!   netlink of each cluster as it is and with every Service annotated
//!   `kubenft.io/consistent-endpoint: client`, side by side;
//! - sustained churn (`--churn 10000x10`, `churn`): the daemon on a lab node holding the
//!   cluster while 20 of its Services take continuous connections and the endpoints of the
//!   others change through the API at `--churn-rate` per second for `--churn-seconds`: each
//!   change's time from the API write to the kernel, failed connections, failed syncs, memory;
//! - data plane (`dataplane`): new-connection latency through kubenft, through iptables and to
//!   the pod directly, with 10 to 30,000 services in the table; numgen's endpoint spread;
//! - a busy node's conntrack table (`--conntrack 1000000`, `conntrack`): the daemon at
//!   `--conntrack-scale` (100 of its Services UDP) in a namespace whose conntrack table holds
//!   that many entries, made over ctnetlink: the reconciler's time, entries read and deleted
//!   per sync for syncs that change no UDP Service, a UDP endpoint added, 100 UDP endpoints
//!   removed and a restart, every stale entry counted, and the idle daemon's CPU;
//! - the soak (`--soak MINUTES`, `soak`): the churn stage's daemon and lab under continuous TCP
//!   and UDP traffic for MINUTES while faults are injected on a seeded, jittered schedule (API
//!   server restarts with compaction, daemon SIGKILLs, the table flushed, a foreign table,
//!   200,000 conntrack entries): failed connections, failed syncs, panics, API write → kernel
//!   latency, the daemon's RSS and open descriptors every 10 s; exits 3 when a target is
//!   missed;
//! - loopback NodePorts (`--localhost-nodeports`, `localhost`): the daemon with the
//!   KubeProxyNFTablesLocalhostNodePorts gate; new-connection latency, connections per second
//!   and round trips from the node to the pod directly, to the NodePort on the node IP and to
//!   it on 127.0.0.1 (the userspace proxy), interleaved;
//! - issue 44's flowtable fast path (`--flowtable`, `flowtable`): TCP throughput (1 and 8
//!   streams), CPU per GB and 64-byte round trips, pod → ClusterIP → pod and external →
//!   NodePort → pod, directly (no rules), through `kubenft sync --once`'s ruleset, and through
//!   it plus a bench-owned flowtable PROTOTYPE, in rotating turns; a kernel without
//!   flowtables is reported as such;
//! - taking over from kube-proxy (`--takeover`, `takeover`): the real `kubenft sync --once
//!   --manifests` of each cluster on a node holding nothing, and with `--replace-kube-proxy` on
//!   nodes holding kube-proxy's nftables-mode or iptables-mode rules for it (loaded first,
//!   untimed); afterwards nothing of kube-proxy's may remain.
//!
//! Medians of `--repeats` runs for the cold syncs. Prints the tables and writes them with the
//! method to `--out` (default `target/benchmark-run.md`, with benchmarks.svg beside it); the
//! committed BENCHMARKS.md keeps the latest run of each stage, merged from there by hand, so a
//! run of a few stages never erases the others. Usage (after `cargo build --release --workspace`, which builds it next to
//! the `kubenft` binary it runs):
//! `target/release/kubenft-bench [--scales 1000x10,10000x10] [--repeats 3] [--out FILE]
//! [--latency-scales 10,10000,30000] [--samples 2000] [--spread 10x10000]
//! [--nodeport-percent 0] [--consistent] [--churn 10000x10] [--churn-rate 500]
//! [--churn-seconds 60] [--churn-min-sync-period 1s] [--conntrack 1000000]
//! [--conntrack-scale 10000x10] [--conntrack-idle 300] [--soak 30] [--soak-scale 10000x10]
//! [--soak-seed N] [--soak-faults api,kill,flush,foreign,conntrack] [--localhost-nodeports]
//! [--takeover] [--flowtable] [--flowtable-turns 5] [--flowtable-seconds 2] [--no-iptables]
//! [--no-control] [--no-daemon] [--no-dataplane]`

mod churn;
mod conntrack;
mod control;
mod daemon;
mod dataplane;
mod flowtable;
mod localhost;
mod pod_server;
mod report;
mod soak;
mod synthetic;
mod takeover;

use std::fmt::Write as _;
use std::process::Command;

use kubenft::netns::can_create;

const DEFAULT_SCALES: &str = "1000x10,10000x10,30000x10,5000x50,44000x1";
const DEFAULT_LATENCY_SCALES: &str = "10,10000,30000";

struct Args {
    scales: Vec<(usize, usize)>,
    repeats: usize,
    out: String,
    iptables: bool,
    daemon: bool,
    latency_scales: Vec<usize>,
    samples: usize,
    spread: Option<(usize, usize)>,
    /// Off with --no-control: only the daemon and data plane runs.
    control: bool,
    /// With --consistent: each scale's cold full sync also with every Service annotated.
    consistent: bool,
    /// Share of NodePort services (externalTrafficPolicy Local) in the control-plane and
    /// daemon clusters.
    nodeport_percent: usize,
    /// With --churn: the sustained-churn run.
    churn: Option<churn::Config>,
    /// With --soak: the soak run.
    soak: Option<soak::Config>,
    /// With --takeover: each scale's first sync on nodes holding kube-proxy's rules.
    takeover: bool,
    /// With --localhost-nodeports: loopback NodePorts through the userspace proxy.
    localhost_nodeports: bool,
    /// With --conntrack: the busy conntrack table run.
    conntrack: Option<conntrack::Config>,
    /// With --flowtable: issue 44's fast path against kubenft's slow path.
    flowtable: Option<flowtable::Config>,
}

fn pair(s: &str) -> (usize, usize) {
    synthetic::parse_scale(s).unwrap_or_else(|e| panic!("{e}"))
}

const USAGE: &str = "usage: kubenft-bench [--scales 1000x10,10000x10] [--repeats 3] \
[--out FILE] [--latency-scales 10,10000,30000] [--samples 2000] [--spread 10x10000] \
[--nodeport-percent 0] [--consistent] [--churn 10000x10] [--churn-rate 500] \
[--churn-seconds 60] [--churn-min-sync-period 1s] [--conntrack 1000000] \
[--conntrack-scale 10000x10] [--conntrack-idle 300] [--soak MINUTES] [--soak-scale 10000x10] \
[--soak-seed N] [--soak-faults api,kill,flush,foreign,conntrack] \
[--localhost-nodeports] [--takeover] [--flowtable] [--flowtable-turns 5] \
[--flowtable-seconds 2] [--no-iptables] [--no-control] \
[--no-daemon] [--no-dataplane]";
const VALUE_OPTIONS: &[&str] = &[
    "--scales",
    "--repeats",
    "--out",
    "--latency-scales",
    "--samples",
    "--spread",
    "--nodeport-percent",
    "--churn",
    "--churn-rate",
    "--churn-seconds",
    "--churn-min-sync-period",
    "--conntrack",
    "--conntrack-scale",
    "--conntrack-idle",
    "--soak",
    "--soak-scale",
    "--soak-seed",
    "--soak-faults",
    "--flowtable-turns",
    "--flowtable-seconds",
];
const FLAGS: &[&str] = &[
    "--consistent",
    "--localhost-nodeports",
    "--takeover",
    "--flowtable",
    "--no-iptables",
    "--no-control",
    "--no-daemon",
    "--no-dataplane",
];

/// A bench run takes many minutes and touches the kernel: a typo or `--help` must not start one.
fn check_argv(argv: &[String]) {
    let mut rest = argv.iter().skip(1);
    while let Some(arg) = rest.next() {
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if VALUE_OPTIONS.contains(&arg.as_str()) {
            if rest.next().is_none() {
                eprintln!("{arg} needs a value\n{USAGE}");
                std::process::exit(2);
            }
        } else if !FLAGS.contains(&arg.as_str()) {
            eprintln!("unknown argument {arg:?}\n{USAGE}");
            std::process::exit(2);
        }
    }
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    check_argv(&argv);
    let value = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    let flag = |name: &str| argv.iter().any(|a| a == name);
    let dataplane = !flag("--no-dataplane");
    Args {
        scales: value("--scales")
            .unwrap_or_else(|| DEFAULT_SCALES.into())
            .split(',')
            .filter(|s| !s.is_empty())
            .map(pair)
            .collect(),
        repeats: value("--repeats").map_or(3, |r| r.parse().expect("--repeats N")),
        out: value("--out").unwrap_or_else(|| "target/benchmark-run.md".into()),
        iptables: !flag("--no-iptables"),
        daemon: !flag("--no-daemon"),
        control: !flag("--no-control"),
        consistent: flag("--consistent"),
        takeover: flag("--takeover"),
        localhost_nodeports: flag("--localhost-nodeports"),
        latency_scales: if dataplane {
            value("--latency-scales")
                .unwrap_or_else(|| DEFAULT_LATENCY_SCALES.into())
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|n| n.parse().expect("--latency-scales N,N"))
                .collect()
        } else {
            Vec::new()
        },
        samples: value("--samples").map_or(2000, |r| r.parse().expect("--samples N")),
        spread: dataplane.then(|| pair(&value("--spread").unwrap_or_else(|| "10x10000".into()))),
        nodeport_percent: value("--nodeport-percent")
            .map_or(0, |p| p.parse().expect("--nodeport-percent N")),
        soak: value("--soak").map(|m| {
            let (services, endpoints) =
                pair(&value("--soak-scale").unwrap_or_else(|| "10000x10".into()));
            soak::Config {
                minutes: m.parse().expect("--soak MINUTES"),
                services,
                endpoints,
                seed: value("--soak-seed").map_or_else(
                    || {
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(1, |d| d.as_secs())
                    },
                    |s| s.parse().expect("--soak-seed N"),
                ),
                faults: value("--soak-faults").map_or_else(
                    || soak::schedule::KINDS.to_vec(),
                    |list| {
                        soak::schedule::FaultKind::parse_list(&list).unwrap_or_else(|e| {
                            eprintln!("{e}");
                            std::process::exit(2);
                        })
                    },
                ),
            }
        }),
        churn: value("--churn").map(|c| {
            let (services, endpoints) = pair(&c);
            churn::Config {
                services,
                endpoints,
                rate: value("--churn-rate").map_or(500, |r| r.parse().expect("--churn-rate N")),
                seconds: value("--churn-seconds")
                    .map_or(60, |s| s.parse().expect("--churn-seconds N")),
                min_sync_period: value("--churn-min-sync-period").unwrap_or_else(|| "1s".into()),
            }
        }),
        flowtable: flag("--flowtable").then(|| flowtable::Config {
            turns: value("--flowtable-turns")
                .map_or(5, |n| n.parse().expect("--flowtable-turns N")),
            seconds: value("--flowtable-seconds")
                .map_or(2.0, |s| s.parse().expect("--flowtable-seconds S")),
            samples: value("--samples").map_or(400, |r| r.parse().expect("--samples N")),
        }),
        conntrack: value("--conntrack").map(|n| {
            let (services, endpoints) =
                pair(&value("--conntrack-scale").unwrap_or_else(|| "10000x10".into()));
            conntrack::Config {
                entries: n.parse().expect("--conntrack ENTRIES"),
                services,
                endpoints,
                idle: std::time::Duration::from_secs(
                    value("--conntrack-idle")
                        .map_or(300, |s| s.parse().expect("--conntrack-idle SECONDS")),
                ),
            }
        }),
    }
}

fn main() {
    let a = args();
    if !can_create() {
        eprintln!("kubenft-bench needs root (it creates network namespaces)");
        std::process::exit(1);
    }
    if let Some(Err(e)) = a.churn.as_ref().map(churn::Config::check) {
        eprintln!("{e}");
        std::process::exit(2);
    }
    if let Some(Err(e)) = a.flowtable.as_ref().map(flowtable::Config::check) {
        eprintln!("{e}");
        std::process::exit(2);
    }
    if let Some(Err(e)) = a.soak.as_ref().map(soak::Config::check) {
        eprintln!("{e}");
        std::process::exit(2);
    }
    if (a.daemon
        || a.churn.is_some()
        || a.soak.is_some()
        || a.conntrack.is_some()
        || a.takeover
        || a.localhost_nodeports
        || a.flowtable.is_some())
        && let Err(e) = daemon::binary()
    {
        eprintln!(
            "{e}; or pass --no-daemon (and no --churn, --soak, --conntrack, --takeover, \
             --localhost-nodeports or --flowtable)"
        );
        std::process::exit(1);
    }

    if a.nodeport_percent > 0 && (!a.latency_scales.is_empty() || a.spread.is_some()) {
        eprintln!(
            "--nodeport-percent shapes the control-plane and daemon clusters: pass --no-dataplane"
        );
        std::process::exit(2);
    }
    let largest = a.scales.iter().map(|&(s, _)| s).max().unwrap_or(0);
    if let Err(e) = synthetic::set_nodeport_percent(a.nodeport_percent, largest) {
        eprintln!("{e}");
        std::process::exit(2);
    }

    let limit = daemon::shipped_memory_limit();
    let mut control_rows = Vec::new();
    let mut daemon_rows = Vec::new();
    let mut consistent_rows = Vec::new();
    let mut takeover_rows = Vec::new();
    for &(services, endpoints) in &a.scales {
        if a.control {
            eprintln!("control plane: {services} × {endpoints} …");
            let row = control::measure(services, endpoints, a.repeats, a.iptables);
            eprint!(
                "{}{}{}{}",
                report::cold_table(std::slice::from_ref(&row)),
                report::change_table(std::slice::from_ref(&row)),
                report::restart_table(std::slice::from_ref(&row)),
                report::set_read_table(std::slice::from_ref(&row))
            );
            control_rows.push(row);
        }
        if a.consistent {
            eprintln!("consistent endpoint choice: {services} × {endpoints} …");
            let rows = control::consistent(services, endpoints, a.repeats);
            eprint!("{}", report::consistent_table(&rows));
            consistent_rows.extend(rows);
        }
        if a.takeover {
            eprintln!("taking over from kube-proxy: {services} × {endpoints} …");
            let rows = takeover::measure(services, endpoints, a.repeats);
            eprint!("{}", report::takeover_table(&rows));
            takeover_rows.extend(rows);
        }
        if a.daemon {
            eprintln!("daemon: {services} × {endpoints} …");
            let run = daemon::measure(services, endpoints);
            let row = (format!("{services} × {endpoints}"), run);
            eprint!(
                "{}",
                report::daemon_table(std::slice::from_ref(&row), &limit)
            );
            daemon_rows.push(row);
        }
    }
    let churn_runs: Vec<_> = a
        .churn
        .iter()
        .map(|c| {
            eprintln!(
                "churn: {} × {}, {} changes/s for {} s …",
                c.services, c.endpoints, c.rate, c.seconds
            );
            let run = churn::measure(c);
            eprint!("{}", report::churn_tables(std::slice::from_ref(&run)));
            run
        })
        .collect();
    let conntrack_run = a.conntrack.as_ref().map(|c| {
        eprintln!(
            "conntrack: {} entries, the daemon at {} × {} …",
            c.entries, c.services, c.endpoints
        );
        let run = conntrack::measure(c);
        eprint!("{}", report::conntrack_tables(&run));
        run
    });
    let soak_run = a.soak.as_ref().map(|c| {
        eprintln!(
            "soak: {} × {} for {} min, seed {} …",
            c.services, c.endpoints, c.minutes, c.seed
        );
        let run = soak::measure(c);
        eprint!("{}", report::soak_tables(&run));
        run
    });
    let localhost_run = a.localhost_nodeports.then(|| {
        eprintln!("loopback NodePorts: {} samples per path …", a.samples);
        let run = localhost::measure(a.samples).unwrap_or_else(|e| {
            eprintln!("loopback NodePorts: {e}");
            std::process::exit(1);
        });
        eprint!("{}", localhost::table(&run));
        run
    });
    let flowtable_run = a.flowtable.as_ref().map(|c| {
        eprintln!(
            "flowtable fast path (issue 44): {} turns of {} s transfers …",
            c.turns, c.seconds
        );
        let run = flowtable::measure(c).unwrap_or_else(|e| {
            eprintln!("flowtable: {e}");
            std::process::exit(1);
        });
        eprint!("{}", flowtable::table(&run));
        run
    });
    let mut latency_rows = Vec::new();
    if !a.latency_scales.is_empty() {
        eprintln!(
            "data plane: latency with {:?} services, interleaved …",
            a.latency_scales
        );
        latency_rows = dataplane::latency(&a.latency_scales, a.samples, a.iptables);
        eprint!("{}", report::latency_table(&latency_rows));
    }
    let spread = a.spread.map(|(endpoints, connections)| {
        eprintln!("data plane: {connections} connections over {endpoints} endpoints …");
        dataplane::spread(endpoints, connections)
    });

    let mut results = String::new();
    if a.nodeport_percent > 0 && !(control_rows.is_empty() && daemon_rows.is_empty()) {
        let _ = writeln!(
            results,
            "In these clusters {}% of the services are NodePort services with \
             externalTrafficPolicy Local (port 30000 + i, evenly spread): each keeps chains of \
             its own, the rest share the pick chains (the iptables-mode ruleset leaves their \
             NodePort rules out).\n",
            a.nodeport_percent
        );
    }
    if !control_rows.is_empty() {
        let _ = write!(
            results,
            "## Control plane\n\n### Cold full sync (from an empty kernel)\n\n{}\n\
             ### Changes in the loaded state\n\n{}\n\
             ### A restart on an unchanged kernel\n\n{}\n\
             ### The restart's slowest sets to read back\n\n{}\n",
            report::cold_table(&control_rows),
            report::change_table(&control_rows),
            report::restart_table(&control_rows),
            report::set_read_table(&control_rows)
        );
    }
    if !consistent_rows.is_empty() {
        let _ = write!(
            results,
            "### Consistent endpoint choice: cold full sync\n\n{}\n",
            report::consistent_table(&consistent_rows)
        );
    }
    if !takeover_rows.is_empty() {
        let _ = write!(
            results,
            "### Taking over from kube-proxy: the first sync\n\n{}\n",
            report::takeover_table(&takeover_rows)
        );
    }
    if !daemon_rows.is_empty() {
        let _ = write!(
            results,
            "### The daemon holding the cluster\n\n{}\n",
            report::daemon_table(&daemon_rows, &limit)
        );
    }
    if !churn_runs.is_empty() {
        let _ = write!(
            results,
            "### Sustained churn\n\n{}\n",
            report::churn_tables(&churn_runs)
        );
    }
    if let Some(run) = &conntrack_run {
        let _ = write!(
            results,
            "### A busy node's conntrack table\n\n{}\n",
            report::conntrack_tables(run)
        );
    }
    if let Some(run) = &soak_run {
        let _ = write!(results, "### Soak\n\n{}\n", report::soak_tables(run));
    }
    if let Some(run) = &localhost_run {
        let _ = write!(
            results,
            "### Loopback NodePorts\n\n{}\n",
            localhost::table(run)
        );
    }
    if let Some(run) = &flowtable_run {
        let _ = write!(
            results,
            "### Flowtable fast path (issue 44)\n\n{}\n",
            flowtable::table(run)
        );
    }
    if !latency_rows.is_empty() {
        let _ = write!(
            results,
            "## Data plane\n\n### New-connection latency (connect + 1-byte echo, {} samples per path)\n\n{}\n",
            a.samples,
            report::latency_table(&latency_rows)
        );
    }
    if let Some(s) = &spread {
        let _ = write!(
            results,
            "### Endpoint spread (numgen random)\n\n{}\n",
            report::spread_table(s)
        );
    }
    println!("{results}");

    let mut md = String::new();
    let _ = write!(
        md,
        "# Benchmarks\n\nWritten by `target/release/kubenft-bench {}` on {}.\n\n\
         Machine: {}.\n\n{METHOD}\n{results}",
        std::env::args().skip(1).collect::<Vec<_>>().join(" "),
        Command::new("date")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        report::machine(),
    );
    if !control_rows.is_empty() {
        md.push_str("![cold full sync](benchmarks.svg)\n");
    }
    if let Some(dir) = std::path::Path::new(&a.out).parent() {
        std::fs::create_dir_all(dir).expect("creating the report's directory");
    }
    std::fs::write(&a.out, md).expect("writing the report");
    if !control_rows.is_empty() {
        let svg_path = std::path::Path::new(&a.out).with_file_name("benchmarks.svg");
        std::fs::write(&svg_path, report::svg(&control_rows)).expect("writing the plot");
    }
    eprintln!("wrote {}", a.out);
    // The soak is a test too: a missed target fails the run once the report is written.
    match &soak_run {
        Some(Ok(run)) if run.missed().is_empty() => eprintln!("soak: every target met"),
        Some(Ok(run)) => {
            eprintln!("soak: targets missed: {}", run.missed().join("; "));
            std::process::exit(3);
        }
        Some(Err(e)) => {
            eprintln!("soak: not run to the end: {e}");
            std::process::exit(3);
        }
        None => {}
    }
}

const METHOD: &str = "\
## Method

- **Clusters** are synthetic: ClusterIP services with one TCP port (80 → 8080) and N ready
  endpoints each, generated in memory (and served by the test API server for the daemon runs).
- **Cold full sync**, each in a fresh network namespace, median of the repeats, all three in the
  same run: *kubenft netlink* is the daemon's first sync without the planner (read our tables
  back, diff, encode, one batch); *nft -f* applies the same ruleset rendered as text, which is
  what kube-proxy's nftables mode does; *iptables-restore* applies kube-proxy's iptables-mode
  chains (KUBE-SERVICES → KUBE-SVC → KUBE-SEP) for the same services through iptables-nft.
  *planner only* is building the desired tables from the cluster state.
- **Consistent endpoint choice** (`--consistent`): the same cold full sync over netlink and
  the planner, of each cluster as it is and again with every Service annotated
  `kubenft.io/consistent-endpoint: client` (a chain of its own per service port, whose slot
  map holds 64 slots per power of two of endpoints instead of one per endpoint).
- **Changes in the loaded state** are partial syncs through the incremental planner, phase by
  phase, each the median of 11 (the change is made and undone in turn): *plan* replans the
  changed service when told which one changed, *diff* turns its parts before and after into
  operations, *commit* is encoding and the kernel's transaction; *plan, comparing all* is the
  same plan found by comparing every service's inputs with its last plan (the fallback when
  the changed services are not known; the daemon knows them). *restart* is a new engine's full sync on the unchanged kernel (what a restarted
  daemon does): read our table back over netlink (the large sets' elements only where their
  planned digests differ from the kernel's records of them), plan, diff, send nothing; *A
  restart on an unchanged kernel* splits it into phases, next to the same restart reading
  every element back (what the daemon's periodic full sync does). Then, in the same
  namespace, each set's elements are read back alone (one element dump each) and the two
  slowest are shown, with the time to read the same elements split round-robin into 16 sets
  of a scratch table (what sharding a set would give the restart).
- **Taking over from kube-proxy** (`--takeover`): the real `kubenft sync --once --manifests`
  of the cluster (its manifests written to a directory), each run in a fresh network
  namespace, median of the repeats, the cases interleaved: on a node holding *nothing*
  (plain, and with `--replace-kube-proxy`), and with `--replace-kube-proxy` on a node holding
  kube-proxy's rules for the same services, loaded first with kube-proxy's tool (*loading
  it*, not part of kubenft's time): its *nftables mode* (`nft -f`: tables `ip kube-proxy` and
  `ip6 kube-proxy`, a service chain per service picking one of its endpoint chains, one per
  endpoint, through `numgen`, and the `service-ips` verdict map) or its *iptables mode*
  (`iptables-restore` through iptables-nft: the chains of the cold-sync column, KUBE-SERVICES
  → KUBE-SVC → KUBE-SEP in nat, the filter table's fixed chains, the canary chains and the
  built-in chains' jumps into them). *kubenft sync --once* is the command's wall time, from
  process start to exit (reading the manifests, planning, reading the kernel, one
  transaction); *over the empty node* is its difference from the plain run on the empty
  node, i.e. what the takeover adds (listing kube-proxy's chains, and the kernel removing
  them in the same transaction). *operations* is the transaction's size as kubenft logs it;
  *kube-proxy's objects before* is counted in the kernel with `nft list tables`, `nft list
  chains` and `nft list chain` of the built-in chains (`iptables-save` 1.8.9 overflows its
  stack on 100,000 chains); *removed* is kubenft's `kube-proxy's rules removed` log line.
  After each run the same counts must be zero and kubenft's table present, or the stage fails.
- **The daemon** is the real `kubenft run --kubeconfig` in a fresh namespace, watching the
  project's test API server there (the real kube-rs client over real HTTP, list then watch, as
  against a real API server) which holds the same cluster: wall time from process start to its
  first full sync (listing everything included), its resident memory (VmRSS) two seconds after
  it (the state it holds) and its high-water mark (VmHWM, the peak of listing and the first
  sync), the same two moments as charged to a memory cgroup made for the daemon alone (what a
  container's limit is enforced on: its memory plus the kernel memory it causes, the ruleset's
  sets and elements and the batch in the socket buffer), and whether the memory limit of
  `deploy/daemonset.yaml`, read from the file, holds at that cgroup peak. Of the first sync, the
  log line gives the model update (every stored object converted) and the kernel round trip;
  then one endpoint is added to one service's EndpointSlice through the API server, five
  times for five services in turn, 1.2 s apart (beyond the default 1 s minimum sync period, so
  no change waits for it). Shown, median and slowest: *API write → synced*, from the server
  storing the change to the timestamp of the daemon's log line of that sync (the watch event's
  delivery, updating the store, the sync, and the after-sync steps), then the daemon's own
  logged durations: *its sync* (re-converting the changed service from the store, planning
  it, commit) and the *after-sync steps* (stale UDP conntrack entries, healthCheckNodePort
  servers and gauges, for the changed service). Last, one service is added through the API
  with as many endpoints as the others: its EndpointSlice, then 1.2 s later its Service, timed
  from the Service's write to the daemon's log line of that sync, with its operations.
- **Sustained churn** (`--churn SxE`): the real daemon runs on the node of the standard test
  lab (client → node → pod namespaces), watching the test API server there, which holds the
  cluster. 20 of its Services, spread over it, have their endpoints on the lab's two pods
  (echo servers); from the first write to the end a client connects to them round-robin (100
  new connections/s, each echoing a byte) and holds one long-lived connection to each (a byte
  echoed every 100 ms). The other Services' endpoints change through the API server at
  `--churn-rate` per second for `--churn-seconds`, round-robin over the Services (each
  change replaces one endpoint's address by a new one, so each Service keeps its endpoint
  count), paced by the clock: a writer that falls behind writes at once, and the rate it
  achieved is shown. A change counts as programmed when the kernel notifies (nf_tables'
  netlink multicast group, read in the node's namespace; nothing is polled) an element
  carrying its new address: *API write → in the kernel* is from just before the write to
  that notification, over every change; changes not seen 30 s after the last write are
  counted. (With a listener the kernel builds a notification per changed element, which
  lengthens the daemon's commits a little.) The bar is p99 within `--min-sync-period` (changes wait for it) plus 100 ms.
  Failed syncs are the daemon's `sync failed` log lines, the syncs' durations and operation
  counts its log lines of the partial syncs during the churn; RSS is read from /proc at the
  first write, after half of them, and once the last change is in the kernel.
- **Soak** (`--soak MINUTES`, `--soak-scale SxE`, default 10000x10, `--soak-seed N`): the
  churn stage's lab and daemon (`--min-sync-period 1s`, `-v`) for MINUTES. 20 Services have
  TCP 80 and UDP 53 with their endpoints on the lab's pods and never change; the client keeps
  100 new TCP connections/s (a byte echoed each), a long-lived TCP connection to each (a byte
  echoed every 100 ms), 50 new UDP requests/s (each from a new socket, its answer checked) and
  a long-lived UDP flow to each (one source port, a datagram every 100 ms, each answer
  checked); each failure is printed with its time, Service and cause. The other Services'
  endpoints change at 100/s through the API, each timed to the kernel's notification as in the
  churn stage (the API server keeps 20,000 events of history). Faults, on a schedule drawn
  from the seed and printed first (runs of 10 minutes or more: each kind every 2–5 minutes;
  shorter runs: each kind once): the API server answers 503 and ends its watches for 2–8 s,
  then its history is compacted (resumed watches get 410 Expired and re-list); the daemon is
  SIGKILLed and started again 1–5 s later; `nft flush table ip kubenft` in the node; a
  foreign table with a forward hook and a set added and removed 5–15 s later; 200,000 UDP
  conntrack entries created in the node over ctnetlink (addresses no packet uses, 30 s
  timeout), checked expired by looking 32 of them up. While the table is flushed, new
  connections find no rules, and in this lab established flows fail too (the flush removes
  the namespace's last rules using conntrack, so the kernel stops tracking until the repair):
  failures that start between the flush and the daemon's full sync that repairs it are
  counted apart, every other failure counts. Every 10 s the daemon's VmRSS and open
  descriptors are read from /proc; the trend compares the largest value of the first 10
  minutes (a third of shorter runs) with that of the last, leaving out each process's first
  minute (an eighth of short runs) after it starts; the RSS trend is a target only for runs
  of 10 minutes or more. Failed syncs are the daemon's `sync failed` lines, panics its
  `panicked` lines, over every process's log. *API write → in the kernel* is shown over every
  change and without the changes written from an API server restart, a daemon restart or a
  flush until the first change written after it ended was in the kernel. A missed target
  makes the bench exit 3 after writing the report.
- **Latency**: the standard test lab (client → node → pod namespaces, every packet through the
  node's hooks) with N one-endpoint services programmed on the node; the measured service is
  the last in iteration order, i.e. the last rule of iptables' KUBE-SERVICES (its worst case).
  Each sample is a new TCP connection timed from `connect` to the echoed byte; *direct* goes to
  the pod's address on a node without any ruleset (so without conntrack); *pod via kubenft
  node* goes to the pod's address through the node holding kubenft's table (conntrack on, no
  translation), so the service's cost over it is the translation alone. All labs of all table
  sizes are built first (one *direct* lab serves every row), then every path of every size
  runs in interleaved batches of 100, so the paths and the sizes share the machine's noise.
- **Flowtable fast path** (`--flowtable`, issue 44): three copies of the standard test lab,
  side by side: (a) a node without rules, reached at the pod's address (the ceiling); (b) the
  node programmed by the real `kubenft sync --once --manifests` with a ClusterIP and a
  NodePort Service (two ports each: a bulk sink and a 64-byte echo) whose endpoint is the
  first pod; (c) the same plus a PROTOTYPE of issue 44's opt-in fast path in a table the bench
  owns (a flowtable on the node's client- and pod-facing veths, `ct state established meta
  l4proto tcp flow add @ft` in a forward chain), not a kubenft feature. Paths: the second pod
  to the ClusterIP, the external client to the NodePort on the node's address. Per turn, path
  and node, the nodes' order rotating each turn: one TCP stream and 8 writing as fast as they
  can for `--flowtable-seconds` (each receiver confirms the bytes it read; throughput is
  those bytes over the time to the last confirmation), then `--samples` 64-byte requests on a
  long-lived connection opened and warmed before the first turn (checked `[OFFLOAD]` in the
  node's conntrack). CPU per GB is the whole machine's busy time (user + system + irq +
  softirq of /proc/stat) during the transfer over the bytes: all namespaces share one kernel,
  so the node's forwarding is not separable from the endpoints' work. Medians of the turns. A
  kernel refusing the flowtable gets (c) reported as not supported, with the errno.
- **Spread**: one service whose endpoints are addresses of one pod; each connection is answered
  with the address it reached. χ² against the uniform distribution; a p-value far below 0.01
  would mean numgen is biased.
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_and_flag_is_in_the_usage() {
        for o in VALUE_OPTIONS.iter().chain(FLAGS) {
            assert!(
                USAGE.contains(&format!("[{o} ")) || USAGE.contains(&format!("[{o}]")),
                "{o}"
            );
        }
    }
}
