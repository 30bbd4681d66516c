//! The real daemon holding a synthetic cluster: `kubenft run --manifests` in a fresh namespace,
//! timed to its first sync, its memory read from /proc once that sync is done and settled, then
//! one endpoint added and the daemon's partial sync of it read from its log.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kubenft::netns::Netns;

use crate::synthetic::{self, manifests};

pub struct DaemonRun {
    /// From process start to the log line of the first full sync (reading and parsing the
    /// manifests, planning, committing).
    pub first_sync: Duration,
    /// Resident memory two seconds after that sync (the state it holds), and the high-water
    /// mark until then (the sync's peak).
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    /// One endpoint added to one service (a new EndpointSlice), `ENDPOINT_CHANGES` times in
    /// turn, as the daemon logs each sync.
    pub endpoint_syncs: Vec<LoggedSync>,
}

pub struct LoggedSync {
    /// Bringing the model up to date, planning and the commit.
    pub sync: Duration,
    /// What follows the commit: conntrack cleanup, healthCheckNodePorts, gauges.
    pub after_sync: Duration,
    pub ops: usize,
}

/// `key=value` of a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The `kubenft` binary built next to this benchmark.
pub fn binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("kubenft");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is missing: build it first (cargo build --release)",
            bin.display()
        ))
    }
}

fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// How many one-endpoint changes are made, one after another, for the median.
pub const ENDPOINT_CHANGES: usize = 5;

/// Adds one endpoint to each of the first services in turn (in a second EndpointSlice) and
/// waits for the daemon's partial sync of each; returns the syncs in order.
fn endpoint_syncs(dir: &std::path::Path, log_path: &std::path::Path) -> Vec<LoggedSync> {
    let mut syncs = Vec::new();
    for i in 0..ENDPOINT_CHANGES {
        let n = synthetic::service_name(i);
        let slice = format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {}-extra, \
             namespace: {}, labels: {{kubernetes.io/service-name: {}}}}}\naddressType: IPv4\n\
             ports: [{{name: http, port: 8080, protocol: TCP}}]\n\
             endpoints: [{{addresses: [10.255.255.{}], nodeName: node-1, conditions: {{ready: true}}}}]\n",
            n.name,
            n.namespace,
            n.name,
            254 - i
        );
        if std::fs::write(dir.join(format!("extra-endpoint-{i}.yaml")), slice).is_err() {
            break;
        }
        match partial_sync(log_path, i) {
            Some(sync) => syncs.push(sync),
            None => break,
        }
    }
    syncs
}

/// The daemon's `index`-th partial sync as it logs it, once it is there.
fn partial_sync(log_path: &std::path::Path, index: usize) -> Option<LoggedSync> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(300) {
        let text = std::fs::read_to_string(log_path).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .filter(|l| l.contains(" synced ") && l.contains("kind=Partial"))
            .nth(index)
        {
            let seconds = |key| field(line, key)?.parse().ok().map(Duration::from_secs_f64);
            return Some(LoggedSync {
                sync: seconds("seconds")?,
                after_sync: seconds("after_sync_seconds")?,
                ops: field(line, "ops")?.parse().ok()?,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

pub fn measure(services: usize, endpoints: usize) -> Result<DaemonRun, String> {
    let bin = binary()?;
    let dir = std::env::temp_dir().join(format!(
        "kubenft-bench-{}-{services}x{endpoints}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for (name, text) in manifests(services, endpoints) {
        std::fs::write(dir.join(name), text).map_err(|e| e.to_string())?;
    }
    let log_path = dir.with_extension("log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let ns = Netns::create("bdmn").map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(&bin)
        .args(["run", "--manifests"])
        .arg(&dir)
        .args(["--hostname-override", synthetic::NODE])
        .args(["--cluster-cidr", synthetic::CLUSTER_CIDR])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    // `ip netns exec` execs the daemon in place, so the child's pid is the daemon's.
    let pid = child.id();
    let result = loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text
            .lines()
            .any(|l| l.contains(" synced ") && l.contains("kind=Full"))
        {
            let first_sync = start.elapsed();
            // Holding the state, not finishing the sync: let the daemon settle first.
            std::thread::sleep(Duration::from_secs(2));
            let (rss_mib, peak_rss_mib) = (status_mib(pid, "VmRSS:"), status_mib(pid, "VmHWM:"));
            break Ok(DaemonRun {
                first_sync,
                rss_mib,
                peak_rss_mib,
                endpoint_syncs: endpoint_syncs(&dir, &log_path),
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            break Err(format!("the daemon exited ({status}):\n{text}"));
        }
        if start.elapsed() > Duration::from_secs(900) {
            break Err(format!("no first sync within 15 minutes:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&log_path);
    result
}
