//! The real daemon holding a synthetic cluster: `kubenft run --kubeconfig` in a fresh namespace,
//! watching the test API server there (the real kube-rs client over real HTTP), timed to its
//! first sync, its memory read from /proc once that sync is done and settled, then one endpoint
//! added through the API and the daemon's partial sync of it read from its log.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use kubenft::netns::Netns;
use kubenft_testkit::{Kind, TestApiServer, parse_manifests};

use crate::synthetic::{self, manifests};

pub struct DaemonRun {
    /// From process start to the log line of the first full sync (listing everything from the
    /// API server, planning, committing).
    pub first_sync: Duration,
    /// Of `first_sync`: the sync itself as the daemon logs it (planning and committing
    /// everything); the rest is starting, listing and decoding.
    pub first_sync_itself: Option<Duration>,
    /// Of `first_sync_itself`: converting every stored object into the model, and the
    /// transaction's round trip to the kernel; planning and encoding are the rest.
    pub first_sync_model: Option<Duration>,
    pub first_sync_kernel: Option<Duration>,
    /// Resident memory two seconds after that sync (the state it holds), and the high-water
    /// mark until then (the sync's peak).
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    /// The same two moments as charged to the daemon's own memory cgroup, which is what a
    /// container's memory limit is enforced on: the process's memory plus the kernel memory
    /// it caused (the ruleset's sets and elements, the batch in the socket buffer). `None`
    /// where no memory cgroup could be made.
    pub cgroup_mib: Option<f64>,
    pub peak_cgroup_mib: Option<f64>,
    /// One endpoint added to one service's EndpointSlice, `ENDPOINT_CHANGES` times in turn, as
    /// the daemon logs each sync.
    pub endpoint_syncs: Vec<LoggedSync>,
    /// Then a new service with `endpoints` endpoints: its EndpointSlice is written first, then
    /// the Service, timed from the Service's write.
    pub service_sync: Option<LoggedSync>,
}

pub struct LoggedSync {
    /// From the API server storing the change to the daemon logging its sync done: the watch
    /// event's delivery, the store, the sync and the after-sync steps.
    pub end_to_end: Duration,
    /// Bringing the model up to date, planning and the commit.
    pub sync: Duration,
    /// Of `sync`: bringing the model up to date from the store.
    pub model: Duration,
    /// Of `sync`: the transaction's round trip to the kernel.
    pub kernel: Duration,
    /// What follows the commit: conntrack cleanup, healthCheckNodePorts, gauges.
    pub after_sync: Duration,
    pub ops: usize,
}

/// `key=value` of a log line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
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
            "{} is missing: build it first (cargo build --release --workspace)",
            bin.display()
        ))
    }
}

pub fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The deployment manifest whose memory limit the measured peaks are checked against.
const DAEMONSET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/daemonset.yaml");

/// The memory limit, in MiB, of the container in `deploy/daemonset.yaml`, as shipped.
pub fn shipped_memory_limit() -> Result<f64, String> {
    let text = std::fs::read_to_string(DAEMONSET).map_err(|e| format!("{DAEMONSET}: {e}"))?;
    memory_limit(&text).ok_or_else(|| format!("{DAEMONSET}: no resources.limits.memory"))
}

/// `resources.limits.memory` of the first container of a manifest, in MiB: the `memory:` line
/// inside the first `limits:` block (read line by line; the manifest is ours and plain).
fn memory_limit(manifest: &str) -> Option<f64> {
    let mut lines = manifest.lines();
    let limits = lines.find(|l| l.trim() == "limits:")?;
    let indent = |l: &str| l.len() - l.trim_start().len();
    let depth = indent(limits);
    let value = lines
        .take_while(|l| l.trim().is_empty() || indent(l) > depth)
        .find_map(|l| l.trim().strip_prefix("memory:"))?;
    mebibytes(value.trim().trim_matches('"'))
}

/// A Kubernetes memory quantity (`256Mi`, `1Gi`, `300M`, bytes) in MiB.
fn mebibytes(quantity: &str) -> Option<f64> {
    let split = quantity
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(quantity.len());
    let (number, unit) = quantity.split_at(split);
    let factor = match unit {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        _ => return None,
    };
    Some(number.parse::<f64>().ok()? * factor / (1024.0 * 1024.0))
}

/// A memory cgroup of its own for the daemon, removed on drop: cgroup v1's memory hierarchy or
/// cgroup v2, whichever this machine mounts.
struct MemoryCgroup {
    dir: PathBuf,
    /// File names of the current and the peak usage, in bytes.
    current: &'static str,
    peak: &'static str,
}

impl MemoryCgroup {
    fn create(name: &str) -> Option<MemoryCgroup> {
        let (root, current, peak) = [
            (
                "/sys/fs/cgroup/memory",
                "memory.usage_in_bytes",
                "memory.max_usage_in_bytes",
            ),
            ("/sys/fs/cgroup", "memory.current", "memory.peak"),
        ]
        .into_iter()
        .find(|(root, current, _)| {
            std::path::Path::new(root).join(current).exists() || {
                // The v2 root has no memory.current; a child has it when the controller is on.
                std::fs::read_to_string(format!("{root}/cgroup.subtree_control"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
            }
        })?;
        let dir = std::path::Path::new(root).join(name);
        std::fs::create_dir(&dir).ok()?;
        let cgroup = MemoryCgroup { dir, current, peak };
        cgroup.read(current)?;
        Some(cgroup)
    }

    fn read(&self, file: &str) -> Option<f64> {
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        Some(text.trim().parse::<f64>().ok()? / (1024.0 * 1024.0))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Only once no process is left in it; kernel memory still charged moves to the parent.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// How long the first sync may take: listing and programming 100,000 × 5 on a loaded 2-core
/// machine takes many minutes.
pub const FIRST_SYNC_WAIT: Duration = Duration::from_secs(1800);

/// How many one-endpoint changes are made, one after another, for the median.
pub const ENDPOINT_CHANGES: usize = 5;

/// Longer than the daemon's default minimum sync period (1 s), so no change waits for it: what
/// is measured is the path from a watch event to the kernel, not the rate limit.
const BETWEEN_CHANGES: Duration = Duration::from_millis(1_200);

/// The test API server, started on a thread that joined the daemon's namespace so the daemon
/// reaches it on 127.0.0.1 there, as it reaches a real API server through its kubeconfig.
pub struct ApiServer {
    // Field order matters: the server stops before its runtime goes away.
    pub server: TestApiServer,
    _runtime: tokio::runtime::Runtime,
}

impl ApiServer {
    /// `history` events are kept for watches to resume from: only the bench's own writes need
    /// replaying, the loaded cluster is listed, as a real server's compacted history would
    /// have it.
    pub fn start_in(ns: &Netns, history: usize) -> Result<ApiServer, String> {
        let (runtime, server) = ns
            .run(move || {
                TestApiServer::builder()
                    .history_limit(history)
                    .start_with_runtime()
            })
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(ApiServer {
            server,
            _runtime: runtime,
        })
    }

    /// Stores every object of the synthetic cluster's manifests.
    pub fn load(&self, services: usize, endpoints: usize) -> Result<(), String> {
        for (name, text) in manifests(services, endpoints) {
            for object in parse_manifests(&text).map_err(|e| format!("{name}: {e}"))? {
                self.server
                    .apply(&object)
                    .map_err(|e| format!("{name}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Adds one ready endpoint to service `index`'s EndpointSlice (a MODIFIED event, as the
    /// EndpointSlice controller makes when a pod becomes ready); returns when it was written.
    pub fn add_endpoint(&self, index: usize) -> Result<SystemTime, String> {
        let n = synthetic::service_name(index);
        let name = format!("{}-x", n.name);
        let mut slice = self
            .server
            .get(Kind::EndpointSlice, Some(&n.namespace), &name)
            .ok_or_else(|| format!("EndpointSlice {}/{name} is not stored", n.namespace))?;
        let endpoint = serde_json::json!({
            "addresses": [format!("10.255.255.{}", 254 - index)],
            "nodeName": "node-1",
            "conditions": {"ready": true},
        });
        match slice.get_mut("endpoints").and_then(|e| e.as_array_mut()) {
            Some(list) => list.push(endpoint),
            None => slice["endpoints"] = serde_json::json!([endpoint]),
        }
        self.server.apply(&slice).map_err(|e| e.to_string())?;
        Ok(SystemTime::now())
    }
}

impl ApiServer {
    /// Writes the EndpointSlice of a new service `index` (beyond the loaded ones) with
    /// `endpoints` ready endpoints.
    fn add_slice_of_new_service(&self, index: usize, endpoints: usize) -> Result<(), String> {
        let n = synthetic::service_name(index);
        let slice = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{}-x", n.name), "namespace": n.namespace,
                         "labels": {"kubernetes.io/service-name": n.name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": (0..endpoints).map(|e| serde_json::json!({
                "addresses": [format!("10.254.{}.{}", e / 250, e % 250 + 1)],
                "nodeName": "node-1", "conditions": {"ready": true},
            })).collect::<Vec<_>>(),
        });
        self.server
            .apply(&slice)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Writes the Service `index`; returns when it was stored.
    fn add_service(&self, index: usize) -> Result<SystemTime, String> {
        let n = synthetic::service_name(index);
        let ip = synthetic::service_ip(index).to_string();
        let service = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": n.name, "namespace": n.namespace},
            "spec": {"clusterIP": ip, "clusterIPs": [ip],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
        });
        self.server.apply(&service).map_err(|e| e.to_string())?;
        Ok(SystemTime::now())
    }
}

/// Adds one service to the loaded `services`: its slice first (a service without a Service
/// object is not programmed), then the Service, and waits for the daemon's sync of it.
fn service_sync(
    api: &ApiServer,
    log_path: &std::path::Path,
    services: usize,
    endpoints: usize,
) -> Option<LoggedSync> {
    std::thread::sleep(BETWEEN_CHANGES);
    api.add_slice_of_new_service(services, endpoints).ok()?;
    std::thread::sleep(BETWEEN_CHANGES);
    let seen = partial_syncs_logged(log_path);
    let written = api.add_service(services).ok()?;
    partial_sync(log_path, seen, written)
}

fn partial_syncs_logged(log_path: &std::path::Path) -> usize {
    std::fs::read_to_string(log_path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" synced ") && l.contains("kind=Partial"))
        .count()
}

/// Adds one endpoint to each of the first services in turn and waits for the daemon's partial
/// sync of each; returns the syncs in order.
fn endpoint_syncs(api: &ApiServer, log_path: &std::path::Path) -> Vec<LoggedSync> {
    let mut syncs = Vec::new();
    for i in 0..ENDPOINT_CHANGES {
        std::thread::sleep(BETWEEN_CHANGES);
        let seen = partial_syncs_logged(log_path);
        let Ok(written) = api.add_endpoint(i) else {
            break;
        };
        match partial_sync(log_path, seen, written) {
            Some(sync) => syncs.push(sync),
            None => break,
        }
    }
    syncs
}

/// The daemon's partial sync after the first `index` ones, as it logs it, once it is there;
/// `written` is when the change reached the API server.
fn partial_sync(
    log_path: &std::path::Path,
    index: usize,
    written: SystemTime,
) -> Option<LoggedSync> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(300) {
        let text = std::fs::read_to_string(log_path).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .filter(|l| l.contains(" synced ") && l.contains("kind=Partial"))
            .nth(index)
        {
            let seconds = |key| field(line, key)?.parse().ok().map(Duration::from_secs_f64);
            // The log line's own timestamp: written once the sync and its after-sync steps
            // are done.
            let logged: jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
            let logged = SystemTime::from(logged);
            return Some(LoggedSync {
                end_to_end: logged.duration_since(written).ok()?,
                sync: seconds("seconds")?,
                model: seconds("model_seconds")?,
                kernel: seconds("kernel_seconds")?,
                after_sync: seconds("after_sync_seconds")?,
                ops: field(line, "ops")?.parse().ok()?,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

pub fn measure(services: usize, endpoints: usize) -> Result<DaemonRun, String> {
    let bin = binary()?;
    let ns = Netns::create("bdmn").map_err(|e| e.to_string())?;
    let api = ApiServer::start_in(&ns, 64)?;
    api.load(services, endpoints)?;
    let kubeconfig = std::env::temp_dir().join(format!(
        "kubenft-bench-{}-{services}x{endpoints}.kubeconfig",
        std::process::id()
    ));
    api.server
        .write_kubeconfig(&kubeconfig)
        .map_err(|e| e.to_string())?;
    let log_path = kubeconfig.with_extension("log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let cgroup = MemoryCgroup::create(&format!(
        "kubenft-bench-{}-{services}x{endpoints}",
        std::process::id()
    ));
    let start = Instant::now();
    // Through a shell that first joins the cgroup, so everything the daemon allocates from its
    // first instruction is charged there; `exec` keeps one pid from the shell to the daemon.
    let mut command = match &cgroup {
        Some(cg) => {
            let mut c = Command::new("sh");
            c.args(["-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\""])
                .arg(&cg.dir)
                .arg("ip");
            c
        }
        None => Command::new("ip"),
    };
    let mut child = command
        .args(["netns", "exec", ns.name()])
        .arg(&bin)
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
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
        if let Some(line) = text
            .lines()
            .find(|l| l.contains(" synced ") && l.contains("kind=Full"))
        {
            let first_sync = start.elapsed();
            let seconds = |key| {
                field(line, key)
                    .and_then(|v| v.parse().ok())
                    .map(Duration::from_secs_f64)
            };
            // Holding the state, not finishing the sync: let the daemon settle first.
            std::thread::sleep(Duration::from_secs(2));
            let (rss_mib, peak_rss_mib) = (status_mib(pid, "VmRSS:"), status_mib(pid, "VmHWM:"));
            let cgroup_mib = cgroup.as_ref().and_then(|c| c.read(c.current));
            let peak_cgroup_mib = cgroup.as_ref().and_then(|c| c.read(c.peak));
            break Ok(DaemonRun {
                first_sync,
                first_sync_itself: seconds("seconds"),
                first_sync_model: seconds("model_seconds"),
                first_sync_kernel: seconds("kernel_seconds"),
                rss_mib,
                peak_rss_mib,
                cgroup_mib,
                peak_cgroup_mib,
                endpoint_syncs: endpoint_syncs(&api, &log_path),
                service_sync: service_sync(&api, &log_path, services, endpoints),
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            break Err(format!("the daemon exited ({status}):\n{text}"));
        }
        if start.elapsed() > FIRST_SYNC_WAIT {
            break Err(format!(
                "no first sync within {} minutes:\n{text}",
                FIRST_SYNC_WAIT.as_secs() / 60
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    // The namespace's ruleset is charged to the cgroup: free it (no thread left in the
    // namespace) before removing the cgroup.
    drop(api);
    drop(ns);
    drop(cgroup);
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(&log_path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_limit_is_read_from_the_limits_block_not_the_requests() {
        let manifest =
            "resources:\n  requests:\n    cpu: 50m\n    memory: 64Mi\n  limits:\n    memory: 1Gi\n";
        assert_eq!(memory_limit(manifest), Some(1024.0));
        assert_eq!(mebibytes("300M").map(|m| m.round()), Some(286.0));
        assert_eq!(mebibytes("lots"), None);
        assert_eq!(memory_limit("requests:\n  memory: 64Mi\n"), None);
    }

    #[test]
    fn every_document_of_a_large_manifest_is_loaded() {
        for (name, text) in manifests(2_000, 2) {
            let parsed = parse_manifests(&text).unwrap();
            let expected = if name == "node.yaml" { 1 } else { 2_000 };
            assert_eq!(parsed.len(), expected, "{name}");
            assert!(parsed.iter().all(|v| v["kind"].is_string()), "{name}");
        }
    }

    #[test]
    fn the_shipped_daemonset_has_a_memory_limit() {
        assert!(shipped_memory_limit().unwrap() > 0.0);
    }
}
