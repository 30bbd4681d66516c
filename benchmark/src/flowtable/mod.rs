//! Issue 44's fast path, measured before it is built (`--flowtable`): TCP throughput, the
//! machine's busy CPU per GB and 64-byte request round trips, pod → ClusterIP → pod and
//! external client → NodePort → pod, through three lab nodes side by side:
//!
//! - (a) *direct*: a node without any rules, the pod's address (the ceiling: no conntrack);
//! - (b) *kubenft slow path*: the real `kubenft sync --once` of one ClusterIP and one NodePort
//!   Service to the server pod; every packet walks conntrack and the nat and filter hooks;
//! - (c) *kubenft + flowtable prototype*: (b) plus a table this bench owns holding a flowtable
//!   on the node's pod- and client-facing veths and a forward rule `ct state established
//!   meta l4proto tcp flow add @ft`. This is a PROTOTYPE of issue 44's opt-in feature, written
//!   here to decide whether the feature is worth building; kubenft itself declares no
//!   flowtable.
//!
//! A kernel without flowtables (nf_flow_table) refuses (c): the stage says so, with the
//! kernel's errno, and measures (a) and (b). The variants run in turns, their order rotating,
//! so the machine's noise falls on all alike; medians of the turns are reported.

mod traffic;

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use kubenft::lab::{Topology, sh};
use kubenft::netns::{Netns, NetnsError};

use crate::dataplane::percentiles;
use crate::pod_server::{Answering, Server};
use traffic::{BULK_PORT, Bulk, ECHO_PORT};

const SERVER_POD: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 2);
const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const BULK_NODE_PORT: u16 = 30080;
const ECHO_NODE_PORT: u16 = 30081;
/// The many-stream measure's connections.
const STREAMS: usize = 8;
/// The bench-owned table of the prototype (never kubenft's own).
const FASTPATH_TABLE: &str = "kubenft-bench-ft";

pub struct Config {
    pub turns: usize,
    /// Each transfer's sending time.
    pub seconds: f64,
    /// Round trips per path and variant in each turn.
    pub samples: usize,
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if self.turns == 0 || !self.seconds.is_finite() || self.seconds <= 0.0 || self.samples == 0
        {
            return Err("--flowtable-turns, --flowtable-seconds and --samples must be > 0".into());
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Variant {
    Direct,
    SlowPath,
    FastPath,
}

impl Variant {
    pub fn label(self) -> &'static str {
        match self {
            Variant::Direct => "(a) direct to the pod, no rules",
            Variant::SlowPath => "(b) kubenft, slow path",
            Variant::FastPath => "(c) kubenft + flowtable PROTOTYPE",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Variant::Direct => "ftdir",
            Variant::SlowPath => "ftslow",
            Variant::FastPath => "ftfast",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Path {
    PodToClusterIp,
    ExternalToNodePort,
}

const PATHS: [Path; 2] = [Path::PodToClusterIp, Path::ExternalToNodePort];

impl Path {
    pub fn label(self) -> &'static str {
        match self {
            Path::PodToClusterIp => "pod → ClusterIP → pod",
            Path::ExternalToNodePort => "external → NodePort → pod",
        }
    }

    /// The sending namespace: the lab's second pod, or its external client.
    fn from(self, topo: &Topology) -> &Netns {
        match self {
            Path::PodToClusterIp => &topo.pods[1],
            Path::ExternalToNodePort => &topo.client,
        }
    }

    /// (bulk, echo) addresses: the pod's own without rules, the Service's with them.
    fn targets(self, variant: Variant) -> (SocketAddr, SocketAddr) {
        match (variant, self) {
            (Variant::Direct, _) => (
                SocketAddr::from((SERVER_POD, BULK_PORT)),
                SocketAddr::from((SERVER_POD, ECHO_PORT)),
            ),
            (_, Path::PodToClusterIp) => (
                SocketAddr::from((CLUSTER_IP, 80)),
                SocketAddr::from((CLUSTER_IP, 81)),
            ),
            (_, Path::ExternalToNodePort) => (
                SocketAddr::from((NODE_IP, BULK_NODE_PORT)),
                SocketAddr::from((NODE_IP, ECHO_NODE_PORT)),
            ),
        }
    }
}

/// One path through one variant's node, over every turn.
pub struct Row {
    pub path: Path,
    pub variant: Variant,
    pub single: Vec<Bulk>,
    pub multi: Vec<Bulk>,
    pub round_trips: Vec<Duration>,
    /// Whether conntrack showed the long-lived request connection `[OFFLOAD]`ed (None: the
    /// node has no conntrack, or the `conntrack` tool is missing).
    pub offloaded: Option<bool>,
}

pub struct FlowtableRun {
    pub kernel: String,
    pub turns: usize,
    pub seconds: f64,
    pub samples: usize,
    /// The machine's busy cores over one second before the labs were built (other work).
    pub background_cores: f64,
    pub rows: Vec<Row>,
    /// Err: why this kernel has no (c).
    pub fastpath: Result<FastPathCount, String>,
}

/// What the prototype's `flow add` rule counted over the run: established TCP packets (GSO
/// super-packets) that still took the forward hook, against all bytes moved through (c).
pub struct FastPathCount {
    pub packets: u64,
    pub bytes: u64,
    pub moved: u64,
}

/// A node of the lab, with the server pod's sink and echo listening.
struct Lab {
    variant: Variant,
    topo: Topology,
    _servers: [Server; 2],
}

fn manifests() -> String {
    let slice = |service: &str| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: {service}-1, namespace: bench, labels: {{kubernetes.io/service-name: {service}}}}}\n\
             addressType: IPv4\n\
             ports: [{{name: bulk, port: {BULK_PORT}, protocol: TCP}}, {{name: echo, port: {ECHO_PORT}, protocol: TCP}}]\n\
             endpoints:\n  - {{addresses: [{SERVER_POD}], nodeName: node-a, conditions: {{ready: true}}}}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: node-a}}\n\
         spec: {{podCIDRs: [10.244.1.0/24]}}\n\
         status: {{addresses: [{{type: InternalIP, address: {NODE_IP}}}]}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: bulk, namespace: bench}}\n\
         spec: {{clusterIP: {CLUSTER_IP}, ports: [{{name: bulk, port: 80, targetPort: {BULK_PORT}, protocol: TCP}}, \
         {{name: echo, port: 81, targetPort: {ECHO_PORT}, protocol: TCP}}]}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: bulk-np, namespace: bench}}\n\
         spec: {{type: NodePort, clusterIP: 10.96.0.11, ports: [{{name: bulk, port: 80, targetPort: {BULK_PORT}, nodePort: {BULK_NODE_PORT}, protocol: TCP}}, \
         {{name: echo, port: 81, targetPort: {ECHO_PORT}, nodePort: {ECHO_NODE_PORT}, protocol: TCP}}]}}\n---\n{}---\n{}",
        slice("bulk"),
        slice("bulk-np")
    )
}

/// The prototype: a flowtable on the node's client- and pod-facing veths, and established TCP
/// connections added to it from the forward hook. Offloaded packets are matched at ingress
/// and sent on with their NAT applied, skipping conntrack's per-packet work, kubenft's hooks
/// and the forward path.
fn fastpath_ruleset() -> String {
    format!(
        "table ip {FASTPATH_TABLE} {{\n\
         \tflowtable ft {{\n\
         \t\thook ingress priority 0\n\
         \t\tdevices = {{ to-client, to-pod1, to-pod2 }}\n\
         \t}}\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority 0; policy accept;\n\
         \t\tct state established meta l4proto tcp counter flow add @ft comment \"kubenft-bench: PROTOTYPE of issue 44's opt-in fast path, not a product feature\"\n\
         \t}}\n\
         }}\n"
    )
}

/// The kernel's refusal in `nft`'s error output, as "ERRNO: text", or None when `nft` failed
/// for another reason (a mistake of this bench's, which must not pass for a kernel limit).
fn kernel_refusal(stderr: &str) -> Option<String> {
    let text = stderr
        .lines()
        .find_map(|l| l.split_once("Could not process rule:"))?
        .1
        .trim();
    let errno = match text {
        "No such file or directory" => "ENOENT",
        "Operation not supported" => "EOPNOTSUPP",
        "Address family not supported by protocol" => "EAFNOSUPPORT",
        "Invalid argument" => "EINVAL",
        _ => return Some(text.to_string()),
    };
    Some(format!("{errno}: {text}"))
}

/// A node of `variant`: kubenft's sync of the manifests in `dir` unless direct, then the
/// prototype for (c).
fn lab(variant: Variant, bin: &std::path::Path, dir: &std::path::Path) -> Result<Lab, LabError> {
    let topo = Topology::build(variant.tag()).map_err(|e| LabError::Other(e.to_string()))?;
    let sink = Server::start(
        &topo.pods[0],
        BULK_PORT,
        Answering::ThreadEach,
        traffic::sink,
    )
    .map_err(LabError::Other)?;
    let echo = Server::start(
        &topo.pods[0],
        ECHO_PORT,
        Answering::ThreadEach,
        traffic::echo_requests,
    )
    .map_err(LabError::Other)?;
    if variant == Variant::Direct {
        // The external client reaches the pod's address through the node.
        sh(&topo.client, "ip route add 10.244.0.0/16 via 10.0.0.1");
    } else {
        let dir = dir.to_str().expect("a UTF-8 path");
        topo.node
            .exec(&[
                bin.to_str().expect("a UTF-8 path"),
                "sync",
                "--once",
                "--manifests",
                dir,
                "--hostname-override",
                "node-a",
                "--cluster-cidr",
                "10.244.0.0/16",
                "--service-cidr",
                "10.96.0.0/16",
            ])
            .map_err(|e| LabError::Other(format!("kubenft sync --once: {e}")))?;
    }
    if variant == Variant::FastPath {
        match topo
            .node
            .exec_with_stdin(&["nft", "-f", "-"], &fastpath_ruleset())
        {
            Ok(_) => {}
            Err(NetnsError::Failed { stderr, .. }) => {
                return Err(match kernel_refusal(&stderr) {
                    Some(reason) => LabError::Unsupported(reason),
                    None => LabError::Other(format!("loading the prototype: {stderr}")),
                });
            }
            Err(e) => return Err(LabError::Other(format!("loading the prototype: {e}"))),
        }
    }
    Ok(Lab {
        variant,
        topo,
        _servers: [sink, echo],
    })
}

enum LabError {
    /// The kernel refused the flowtable: no (c) on this kernel.
    Unsupported(String),
    Other(String),
}

/// The manifests in a directory of their own, removed on drop.
struct ManifestDir(PathBuf);

impl Drop for ManifestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn measure(config: &Config) -> Result<FlowtableRun, String> {
    let bin = crate::daemon::binary()?;
    let background_cores = {
        let before = traffic::busy()?;
        std::thread::sleep(Duration::from_secs(1));
        (traffic::busy()? - before).as_secs_f64()
    };
    let dir = ManifestDir(
        std::env::temp_dir().join(format!("kubenft-bench-{}-flowtable", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).map_err(|e| e.to_string())?;
    std::fs::write(dir.0.join("cluster.yaml"), manifests()).map_err(|e| e.to_string())?;

    let mut labs = Vec::new();
    let mut fastpath = Ok(());
    for variant in [Variant::Direct, Variant::SlowPath, Variant::FastPath] {
        match lab(variant, &bin, &dir.0) {
            Ok(lab) => labs.push(lab),
            Err(LabError::Unsupported(reason)) => fastpath = Err(reason),
            Err(LabError::Other(e)) => return Err(e),
        }
    }
    let fastpath_lab = labs.iter().find(|l| l.variant == Variant::FastPath);
    let counted_before = fastpath_lab.map_or(Ok((0, 0)), |l| forward_counter(&l.topo.node))?;

    // One long-lived request connection per path and node, warmed up (the fast path takes a
    // connection once it is established), then checked in conntrack.
    let mut rows = Vec::new();
    let mut connections: Vec<TcpStream> = Vec::new();
    for path in PATHS {
        for lab in &labs {
            let (bulk, echo) = path.targets(lab.variant);
            let from = path.from(&lab.topo);
            traffic::bulk(from, bulk, 1, Duration::from_millis(300))
                .map_err(|e| format!("{} {}: warm-up: {e}", path.label(), lab.variant.label()))?;
            let mut s = traffic::open(from, echo)?;
            traffic::round_trips(&mut s, 100)?;
            let offloaded = (lab.variant != Variant::Direct)
                .then(|| offloaded(&lab.topo.node, echo))
                .flatten();
            connections.push(s);
            rows.push(Row {
                path,
                variant: lab.variant,
                single: Vec::new(),
                multi: Vec::new(),
                round_trips: Vec::new(),
                offloaded,
            });
        }
    }

    let seconds = Duration::from_secs_f64(config.seconds);
    for turn in 0..config.turns {
        eprintln!("  flowtable: turn {} of {} …", turn + 1, config.turns);
        for path in PATHS {
            // The variants' order rotates from turn to turn.
            let mut order: Vec<usize> = (0..labs.len()).collect();
            order.rotate_left(turn % labs.len());
            for i in order {
                let lab = &labs[i];
                let row = rows
                    .iter()
                    .position(|r| r.path == path && r.variant == lab.variant)
                    .expect("a row per path and node");
                let (bulk, _) = path.targets(lab.variant);
                let from = path.from(&lab.topo);
                let context = |e: String| format!("{} {}: {e}", path.label(), lab.variant.label());
                let one = traffic::bulk(from, bulk, 1, seconds).map_err(context)?;
                let many = traffic::bulk(from, bulk, STREAMS, seconds).map_err(context)?;
                let times =
                    traffic::round_trips(&mut connections[row], config.samples).map_err(context)?;
                let r = &mut rows[row];
                r.single.push(one);
                r.multi.push(many);
                r.round_trips.extend(times);
            }
        }
    }
    drop(connections);
    let fastpath = match (fastpath, fastpath_lab) {
        (Ok(_), Some(l)) => {
            let (packets, bytes) = forward_counter(&l.topo.node)?;
            let counted = (packets - counted_before.0, bytes - counted_before.1);
            let moved = rows
                .iter()
                .filter(|r| r.variant == Variant::FastPath)
                .flat_map(|r| r.single.iter().chain(&r.multi))
                .map(|b| b.bytes)
                .sum();
            Ok(FastPathCount {
                packets: counted.0,
                bytes: counted.1,
                moved,
            })
        }
        (Err(e), _) => Err(e),
        (Ok(_), None) => unreachable!("(c) is either measured or refused"),
    };
    Ok(FlowtableRun {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        turns: config.turns,
        seconds: config.seconds,
        samples: config.samples,
        background_cores,
        rows,
        fastpath,
    })
}

/// Whether the node's conntrack shows the connection to `to` (original direction) offloaded;
/// None when the `conntrack` tool cannot say. The entry is logged, as evidence.
fn offloaded(node: &Netns, to: SocketAddr) -> Option<bool> {
    let out = node.exec(&["conntrack", "-L", "-p", "tcp"]).ok()?;
    let table = String::from_utf8_lossy(&out.stdout);
    let wanted = format!("dst={} sport=", to.ip());
    let port = format!(" dport={} ", to.port());
    let line = table
        .lines()
        .find(|l| l.contains(&wanted) && l.contains(&port));
    eprintln!("  conntrack entry of {to}: {}", line.unwrap_or("none"));
    Some(line?.contains("[OFFLOAD]"))
}

/// (packets, bytes) counted so far by the prototype's `flow add` rule.
fn forward_counter(node: &Netns) -> Result<(u64, u64), String> {
    let out = node
        .exec(&["nft", "list", "chain", "ip", FASTPATH_TABLE, "forward"])
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    counter_of(&text).ok_or_else(|| format!("no counter in the prototype's forward chain:\n{text}"))
}

fn counter_of(text: &str) -> Option<(u64, u64)> {
    let (_, rest) = text.split_once("counter packets ")?;
    let (packets, rest) = rest.split_once(" bytes ")?;
    Some((
        packets.trim().parse().ok()?,
        rest.split_whitespace().next()?.parse().ok()?,
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn rate(runs: &[Bulk]) -> (f64, f64, f64) {
    let r: Vec<f64> = runs.iter().map(Bulk::gbit_per_s).collect();
    let min = r.iter().copied().fold(f64::INFINITY, f64::min);
    let max = r.iter().copied().fold(0.0, f64::max);
    (median(r), min, max)
}

fn cpu(runs: &[Bulk]) -> f64 {
    median(runs.iter().map(Bulk::cpu_s_per_gb).collect())
}

/// The (c) ÷ (b) ratios of one path: throughput 1 and 8 streams, CPU/GB 1 and 8 streams.
fn gains(run: &FlowtableRun, path: Path) -> Option<[f64; 4]> {
    let find = |v| run.rows.iter().find(|r| r.path == path && r.variant == v);
    let (b, c) = (find(Variant::SlowPath)?, find(Variant::FastPath)?);
    Some([
        rate(&c.single).0 / rate(&b.single).0,
        rate(&c.multi).0 / rate(&b.multi).0,
        cpu(&c.single) / cpu(&b.single),
        cpu(&c.multi) / cpu(&b.multi),
    ])
}

pub fn table(run: &FlowtableRun) -> String {
    let us = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e6);
    let mut out = format!(
        "Kernel {}; {} turns, each transfer {:.1} s, {} round trips per path and node per turn; \
         machine busy before the run (other work): {:.2} cores.\n\n\
         | path | node | 1 stream Gbit/s, median (min–max) | {STREAMS} streams Gbit/s | CPU s/GB, 1 stream | CPU s/GB, {STREAMS} streams | 64-byte round trip p50 / p99 (µs) | request connection offloaded |\n\
         |---|---|---|---|---|---|---|---|\n",
        run.kernel, run.turns, run.seconds, run.samples, run.background_cores
    );
    for path in PATHS {
        for r in run.rows.iter().filter(|r| r.path == path) {
            let (one, one_min, one_max) = rate(&r.single);
            let (many, many_min, many_max) = rate(&r.multi);
            let lat = percentiles(r.round_trips.clone());
            let _ = writeln!(
                out,
                "| {} | {} | {one:.2} ({one_min:.2}–{one_max:.2}) | {many:.2} ({many_min:.2}–{many_max:.2}) | {:.3} | {:.3} | {} / {} | {} |",
                path.label(),
                r.variant.label(),
                cpu(&r.single),
                cpu(&r.multi),
                us(lat.p50),
                us(lat.p99),
                match r.offloaded {
                    None => "—",
                    Some(true) => "yes",
                    Some(false) => "no",
                }
            );
        }
        if let Err(reason) = &run.fastpath {
            let _ = writeln!(
                out,
                "| {} | {} | not supported by this kernel ({reason}) | | | | | |",
                path.label(),
                Variant::FastPath.label()
            );
        }
    }
    let _ = writeln!(
        out,
        "\nCPU s/GB is the whole machine's busy time (user + system + irq + softirq from \
         /proc/stat, nice'd processes left out) during the transfer per 10⁹ bytes the \
         receivers confirmed: the pods, the node and the external client are namespaces of one \
         kernel, so the node's forwarding cannot be told apart from the endpoints' socket work; \
         differences between the nodes are the forwarding's. (c) is a PROTOTYPE of issue 44's \
         opt-in fast path in a table the bench owns (`{FASTPATH_TABLE}`), not a kubenft feature."
    );
    match &run.fastpath {
        Ok(count) => {
            let _ = writeln!(
                out,
                "\n(c)'s `flow add` rule saw {} packets, {:.1} kB, of established TCP traffic in \
                 its forward hook over the run, of {:.2} GB moved through (c): the rest took the \
                 fast path.",
                count.packets,
                count.bytes as f64 / 1e3,
                count.moved as f64 / 1e9
            );
        }
        Err(reason) => {
            let _ = writeln!(
                out,
                "\n(c) not measured: this kernel refused the flowtable ({reason}); a kernel \
                 built with CONFIG_NF_FLOW_TABLE (and nft_flow_offload) is needed."
            );
        }
    }
    out.push('\n');
    out.push_str(&verdict(run));
    out
}

/// Issue 44's target: ≥ 1.3× throughput or ≤ 0.75× CPU/GB against kubenft's slow path; its
/// stop rule: below 10 % on every measure.
pub fn verdict(run: &FlowtableRun) -> String {
    let mut out = String::new();
    for path in PATHS {
        let find = |v| run.rows.iter().find(|r| r.path == path && r.variant == v);
        if let (Some(a), Some(b)) = (find(Variant::Direct), find(Variant::SlowPath)) {
            let _ = writeln!(
                out,
                "- {}: slow path ÷ direct: throughput {:.2}× (1 stream), {:.2}× ({STREAMS}); CPU/GB {:.2}×, {:.2}×",
                path.label(),
                rate(&b.single).0 / rate(&a.single).0,
                rate(&b.multi).0 / rate(&a.multi).0,
                cpu(&b.single) / cpu(&a.single),
                cpu(&b.multi) / cpu(&a.multi),
            );
        }
        if let Some([t1, t8, c1, c8]) = gains(run, path) {
            let _ = writeln!(
                out,
                "- {}: fast path ÷ slow path: throughput {t1:.2}× (1 stream), {t8:.2}× ({STREAMS}); CPU/GB {c1:.2}×, {c8:.2}×",
                path.label()
            );
        }
    }
    let all: Vec<[f64; 4]> = PATHS.iter().filter_map(|&p| gains(run, p)).collect();
    let line = if let Err(reason) = &run.fastpath {
        format!(
            "**Verdict: not measurable on this kernel** (no flowtables: {reason}); only the \
             ceiling and kubenft's slow path were measured."
        )
    } else if all
        .iter()
        .any(|g| g[0] >= 1.3 || g[1] >= 1.3 || g[2] <= 0.75 || g[3] <= 0.75)
    {
        "**Verdict: issue 44's target is met** (≥ 1.3× throughput or ≤ 0.75× CPU per GB on at \
         least one measure)."
            .to_string()
    } else if all
        .iter()
        .all(|g| g[0] < 1.1 && g[1] < 1.1 && g[2] > 0.9 && g[3] > 0.9)
    {
        "**Verdict: gain below 10 % on every measure: stop** (issue 44's rule); the target \
         was ≥ 1.3× throughput or ≤ 0.75× CPU per GB."
            .to_string()
    } else {
        "**Verdict: a gain of 10 % or more on some measure, short of issue 44's target** \
         (≥ 1.3× throughput or ≤ 0.75× CPU per GB)."
            .to_string()
    };
    let _ = writeln!(out, "\n{line}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_errors_name_the_kernels_errno_and_nothing_else_passes_for_one() {
        let enoent = "/dev/stdin:2:12-13: Error: Could not process rule: No such file or directory\n\tflowtable ft {\n";
        assert_eq!(
            kernel_refusal(enoent).as_deref(),
            Some("ENOENT: No such file or directory")
        );
        assert_eq!(
            kernel_refusal("Error: Could not process rule: Operation not supported").as_deref(),
            Some("EOPNOTSUPP: Operation not supported")
        );
        assert_eq!(
            kernel_refusal("/dev/stdin:3:1-4: Error: syntax error, unexpected junk"),
            None
        );
    }

    #[test]
    fn the_prototype_is_labelled_as_such_in_the_ruleset() {
        let text = fastpath_ruleset();
        assert!(text.contains("flow add @ft"));
        assert!(text.contains("PROTOTYPE of issue 44"));
        assert!(text.contains(&format!("table ip {FASTPATH_TABLE}")));
    }

    #[test]
    fn the_rules_counter_is_read_from_nfts_listing() {
        let listing = "table ip kubenft-bench-ft {\n\tchain forward {\n\t\tct state established meta l4proto tcp counter packets 12 bytes 3456 flow add @ft comment \"x\"\n\t}\n}\n";
        assert_eq!(counter_of(listing), Some((12, 3456)));
        assert_eq!(counter_of("chain forward {\n}"), None);
    }

    #[test]
    fn medians_of_odd_and_even_turns() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
