//! `kubenft-bench`: the control plane measured side by side in one run, on synthetic clusters
//! generated in memory and applied into fresh network namespaces (root):
//!
//! - cold full sync: kubenft over netlink (planner + diff + encode + commit) against `nft -f`
//!   of the same ruleset as text (kube-proxy's nftables mode) and `iptables-restore` of an
//!   iptables-mode ruleset for the same services (kube-proxy's iptables mode, iptables-nft);
//! - partial syncs in the loaded state: one endpoint added, one service added — time split
//!   into planning (the whole desired state is rebuilt and diffed) and the kernel commit, and
//!   the number of operations;
//! - the process's peak RSS after each scale.
//!
//! Medians of `--repeats` runs. Prints a table and writes BENCHMARKS.md (+ benchmarks.svg).
//! Usage: `cargo run --release --bin kubenft-bench -- [--scales 1000x10,10000x10] [--repeats 3]
//! [--out BENCHMARKS.md] [--no-iptables]`

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kubenft::model::{
    ClusterState, Endpoint, NodeInfo, Protocol, ServicePort, ServicePortName, TrafficPolicy,
};
use kubenft::netns::{Netns, can_create};
use kubenft::nft::netlink::Nftables;
use kubenft::nft::render::render_table;
use kubenft::proxier::{ProxyConfig, build};
use kubenft::sync::{SyncReport, Syncer};

const DEFAULT_SCALES: &str = "1000x10,10000x10,30000x10,5000x50,44000x1";

struct Args {
    scales: Vec<(usize, usize)>,
    repeats: usize,
    out: String,
    iptables: bool,
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    let scales = value("--scales")
        .unwrap_or_else(|| DEFAULT_SCALES.into())
        .split(',')
        .map(|s| {
            let (a, b) = s.split_once('x').expect("scales look like 1000x10");
            (a.parse().expect("services"), b.parse().expect("endpoints"))
        })
        .collect();
    Args {
        scales,
        repeats: value("--repeats").and_then(|r| r.parse().ok()).unwrap_or(3),
        out: value("--out").unwrap_or_else(|| "BENCHMARKS.md".into()),
        iptables: !argv.iter().any(|a| a == "--no-iptables"),
    }
}

fn service_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0a60_0000u32 + 1 + i as u32) // 10.96.0.0/12
}

fn endpoint_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0a80_0000u32 + 1 + i as u32) // 10.128.0.0/9
}

/// `services` ClusterIP services (one TCP port each) with `endpoints` ready endpoints each,
/// spread over 100 nodes.
fn cluster(services: usize, endpoints: usize) -> ClusterState {
    let mut state = ClusterState {
        node: Some(NodeInfo {
            name: "node-0".into(),
            internal_ips: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
            pod_cidrs: vec!["10.128.0.0/24".parse().unwrap()],
            zone: None,
        }),
        ..ClusterState::default()
    };
    for s in 0..services {
        add_service(&mut state, s, endpoints);
    }
    state
}

fn add_service(state: &mut ClusterState, s: usize, endpoints: usize) {
    let name = ServicePortName {
        namespace: format!("ns-{}", s % 50),
        name: format!("svc-{s}"),
        port: "http".into(),
        protocol: Protocol::Tcp,
    };
    state.services.insert(
        name.clone(),
        ServicePort {
            name: name.clone(),
            cluster_ips: vec![IpAddr::V4(service_ip(s))],
            port: 80,
            node_port: None,
            external_ips: vec![],
            load_balancer_ips: vec![],
            source_ranges: vec![],
            external_policy: TrafficPolicy::Cluster,
            internal_policy: TrafficPolicy::Cluster,
            affinity_timeout: None,
            health_check_node_port: None,
            traffic_distribution: None,
        },
    );
    let eps = (0..endpoints)
        .map(|e| Endpoint {
            ip: IpAddr::V4(endpoint_ip(s * endpoints + e)),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node_name: Some(format!("node-{}", (s + e) % 100)),
            zone: None,
            hint_zones: vec![],
            hint_nodes: vec![],
        })
        .collect();
    state.endpoints.insert(name, eps);
}

fn config() -> ProxyConfig {
    ProxyConfig {
        hostname: "node-0".into(),
        cluster_cidrs: vec!["10.128.0.0/9".parse().unwrap()],
        ..ProxyConfig::default()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Times `f` inside a fresh namespace per repeat.
fn in_fresh_ns<T: Send + 'static>(
    tag: &str,
    f: impl Fn(&Netns) -> (Duration, T) + Send + Sync + Clone + 'static,
    repeats: usize,
) -> (Duration, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..repeats {
        let ns = Netns::create(tag).expect("namespace");
        let (t, v) = f(&ns);
        times.push(t);
        last = Some(v);
    }
    (median(times), last.expect("at least one repeat"))
}

fn run_with_stdin(ns: &Netns, program: &str, args: &[&str], input: &str) -> Duration {
    use std::io::Write;
    let start = Instant::now();
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), program])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{program} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// kube-proxy's iptables mode for the same services: KUBE-SERVICES → KUBE-SVC (random
/// probability cascade) → KUBE-SEP (DNAT), with the masquerade mark chain.
fn iptables_ruleset(state: &ClusterState) -> String {
    let mut chains = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
         :KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n",
    );
    let mut rules = String::from(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A POSTROUTING -j KUBE-POSTROUTING\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
         -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
         -A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n\
         -A KUBE-POSTROUTING -j MASQUERADE --random-fully\n",
    );
    for (i, (name, sp)) in state.services.iter().enumerate() {
        let svc = format!("KUBE-SVC-{i:016X}");
        let _ = writeln!(chains, ":{svc} - [0:0]");
        let ip = sp.cluster_ips[0];
        let _ = writeln!(
            rules,
            "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"{name}\" -m tcp --dport {} -j {svc}",
            sp.port
        );
        let _ = writeln!(
            rules,
            "-A {svc} ! -s 10.128.0.0/9 -d {ip}/32 -p tcp -m tcp --dport {} -j KUBE-MARK-MASQ",
            sp.port
        );
        let eps = &state.endpoints[name];
        for (j, ep) in eps.iter().enumerate() {
            let sep = format!("KUBE-SEP-{i:08X}{j:08X}");
            let _ = writeln!(chains, ":{sep} - [0:0]");
            let left = eps.len() - j;
            if left > 1 {
                let _ = writeln!(
                    rules,
                    "-A {svc} -m statistic --mode random --probability {:.11} -j {sep}",
                    1.0 / left as f64
                );
            } else {
                let _ = writeln!(rules, "-A {svc} -j {sep}");
            }
            let _ = writeln!(
                rules,
                "-A {sep} -s {}/32 -j KUBE-MARK-MASQ\n-A {sep} -p tcp -m tcp -j DNAT --to-destination {}:{}",
                ep.ip, ep.ip, ep.port
            );
        }
    }
    chains + &rules + "COMMIT\n"
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[derive(Default, Clone)]
struct Row {
    scale: String,
    chains: usize,
    elements: usize,
    build: Duration,
    netlink: Duration,
    nft_text: Duration,
    iptables: Option<Duration>,
    endpoint_plan: Duration,
    endpoint_commit: Duration,
    endpoint_ops: usize,
    service_plan: Duration,
    service_commit: Duration,
    service_ops: usize,
    rss_mib: f64,
}

fn measure(services: usize, endpoints: usize, a: &Args) -> Row {
    let state = cluster(services, endpoints);
    let started = Instant::now();
    let tables = build(&state, &config());
    let build_time = started.elapsed();
    let chains = tables.iter().map(|t| t.chains.len()).sum();
    let elements = tables
        .iter()
        .flat_map(|t| t.sets.values())
        .map(|s| s.elements.len())
        .sum();

    // kubenft: what the daemon's first sync does (read back, plan, one batch).
    let t = tables.clone();
    let (netlink, _) = in_fresh_ns(
        "bnl",
        move |ns| {
            let t = t.clone();
            ns.run(move || {
                let mut s = Syncer::new(Nftables::open().unwrap(), "kubenft");
                let start = Instant::now();
                s.sync(&t, true).expect("cold sync");
                (start.elapsed(), ())
            })
            .unwrap()
        },
        a.repeats,
    );

    let text: String = tables.iter().map(render_table).collect();
    let (nft_text, _) = in_fresh_ns(
        "bnft",
        move |ns| (run_with_stdin(ns, "nft", &["-f", "-"], &text), ()),
        a.repeats,
    );

    let iptables = a.iptables.then(|| {
        let rules = iptables_ruleset(&state);
        in_fresh_ns(
            "bipt",
            move |ns| (run_with_stdin(ns, "iptables-restore", &[], &rules), ()),
            a.repeats,
        )
        .0
    });

    // Partial syncs in the loaded state, as the daemon does them: rebuild, diff against the
    // last commit, one batch.
    let ns = Netns::create("bpart").unwrap();
    let base = state.clone();
    let (endpoint, service) = ns
        .run(move || {
            let mut s = Syncer::new(Nftables::open().unwrap(), "kubenft");
            s.sync(&build(&base, &config()), true).unwrap();
            let change = |s: &mut Syncer<Nftables>,
                          state: &ClusterState|
             -> (Duration, Duration, SyncReport) {
                let start = Instant::now();
                let tables = build(state, &config());
                let planned = start.elapsed();
                let start = Instant::now();
                let r = s.sync(&tables, false).unwrap();
                (planned, start.elapsed(), r)
            };
            let mut more = base.clone();
            let first = more.services.keys().next().unwrap().clone();
            let eps = more.endpoints.get_mut(&first).unwrap();
            let mut extra = eps[0].clone();
            extra.ip = IpAddr::V4(Ipv4Addr::new(10, 255, 255, 254));
            eps.push(extra);
            let endpoint = change(&mut s, &more);
            add_service(&mut more, 999_999, endpoints.max(1));
            let service = change(&mut s, &more);
            (endpoint, service)
        })
        .unwrap();
    drop(ns);

    Row {
        scale: format!("{services} × {endpoints}"),
        chains,
        elements,
        build: build_time,
        netlink,
        nft_text,
        iptables,
        endpoint_plan: endpoint.0,
        endpoint_commit: endpoint.1,
        endpoint_ops: endpoint.2.ops,
        service_plan: service.0,
        service_commit: service.1,
        service_ops: service.2.ops,
        rss_mib: peak_rss_mib(),
    }
}

fn secs(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str("| services × endpoints | chains | map elements | kubenft netlink (cold) | nft -f (cold) | iptables-restore (cold) | nft -f ÷ netlink | planner only |\n|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.1}× | {} |",
            r.scale,
            r.chains,
            r.elements,
            secs(r.netlink),
            secs(r.nft_text),
            r.iptables.map_or("—".into(), secs),
            r.nft_text.as_secs_f64() / r.netlink.as_secs_f64(),
            secs(r.build),
        );
    }
    out.push_str("\n| services × endpoints | +1 endpoint: plan | +1 endpoint: commit | ops | +1 service: plan | +1 service: commit | ops | peak RSS so far |\n|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} MiB |",
            r.scale,
            secs(r.endpoint_plan),
            secs(r.endpoint_commit),
            r.endpoint_ops,
            secs(r.service_plan),
            secs(r.service_commit),
            r.service_ops,
            r.rss_mib
        );
    }
    out
}

/// Grouped horizontal bars of the cold syncs, one group per scale, linear in seconds.
fn svg(rows: &[Row]) -> String {
    let series: [(&str, &str); 3] = [
        ("kubenft (netlink)", "#2b7bb9"),
        ("nft -f", "#e08a1e"),
        ("iptables-restore", "#999999"),
    ];
    let value = |r: &Row, i: usize| match i {
        0 => Some(r.netlink),
        1 => Some(r.nft_text),
        _ => r.iptables,
    };
    let max = rows
        .iter()
        .flat_map(|r| (0..3).filter_map(move |i| value(r, i)))
        .max()
        .unwrap_or(Duration::from_secs(1))
        .as_secs_f64()
        .max(1e-3);
    let (left, width, bar, gap) = (150.0, 560.0, 14.0, 16.0);
    let height = 60.0 + rows.len() as f64 * (3.0 * bar + gap);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"10\" y=\"18\" font-size=\"13\">Cold full sync (median seconds, lower is better)</text>\n",
        left + width + 90.0
    );
    for (i, (name, color)) in series.iter().enumerate() {
        let x = 10.0 + i as f64 * 170.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"28\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"37\">{name}</text>",
            x + 14.0
        );
    }
    let mut y = 50.0;
    for r in rows {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{}\">{}</text>",
            y + 1.5 * bar + 4.0,
            r.scale
        );
        for (i, (_, color)) in series.iter().enumerate() {
            if let Some(v) = value(r, i) {
                let w = (v.as_secs_f64() / max * width).max(1.0);
                let _ = writeln!(
                    s,
                    "<rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{}\">{}</text>",
                    bar - 2.0,
                    left + w + 4.0,
                    y + bar - 4.0,
                    secs(v)
                );
            }
            y += bar;
        }
        y += gap;
    }
    s.push_str("</svg>\n");
    s
}

fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let version = |cmd: &str| {
        Command::new(cmd)
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_else(|_| "not installed".into())
    };
    format!(
        "kernel {kernel}; {cores} × {cpu}; {}; {}",
        version("nft"),
        version("iptables-restore")
    )
}

fn main() {
    if !can_create() {
        eprintln!("kubenft-bench needs root (it creates network namespaces)");
        std::process::exit(1);
    }
    let a = args();
    let mut rows = Vec::new();
    for &(services, endpoints) in &a.scales {
        eprintln!("measuring {services} × {endpoints} …");
        let row = measure(services, endpoints, &a);
        eprintln!("{}", table(std::slice::from_ref(&row)));
        rows.push(row);
    }
    let tables = table(&rows);
    println!("{tables}");
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Benchmarks\n\nWritten by `cargo run --release --bin kubenft-bench -- {}` on {}.\n\n\
         Machine: {}.\n\n\
         Method: synthetic clusters generated in memory (ClusterIP services, one TCP port, N ready \
         endpoints each); every cold sync goes into a fresh network namespace, medians of {} \
         runs, all three methods in the same process run. *kubenft netlink* is the daemon's first \
         sync: read our tables back, plan the difference, encode, one batch. *nft -f* applies the \
         same ruleset rendered as text (kube-proxy's nftables mode); *iptables-restore* applies \
         kube-proxy's iptables-mode chains for the same services (iptables-nft). Partial syncs \
         run in the loaded state: *plan* rebuilds the whole desired ruleset and diffs it, \
         *commit* is the kernel transaction. Peak RSS is the benchmark process's high-water mark \
         after each scale (it holds every state built so far).\n",
        std::env::args().skip(1).collect::<Vec<_>>().join(" "),
        Command::new("date")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        machine(),
        a.repeats
    );
    md.push_str(&tables);
    md.push_str("\n![cold sync](benchmarks.svg)\n");
    let svg_path = std::path::Path::new(&a.out).with_file_name("benchmarks.svg");
    std::fs::write(&a.out, md).expect("writing the report");
    std::fs::write(&svg_path, svg(&rows)).expect("writing the plot");
    eprintln!("wrote {} and {}", a.out, svg_path.display());
}
