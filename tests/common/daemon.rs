//! End-to-end harness: the test API server living inside the node's namespace (so the daemon
//! reaches it on 127.0.0.1 there), the real `kubenft run` binary started in that namespace,
//! and small HTTP and polling helpers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::common::{Outcome, Topology, try_request};

use crate::explain_harness;
use kubenft::netns::{Netns, can_create};
use kubenft_testkit::TestApiServer;
use serde_json::{Value, json};

/// The test API server, started on a thread that joined `ns`: its listening socket belongs to
/// that namespace, so only processes inside it can reach it.
pub struct ApiServer {
    // Field order matters: the server must stop before its runtime goes away.
    pub server: TestApiServer,
    _runtime: tokio::runtime::Runtime,
    kubeconfig: tempfile::NamedTempFile,
}

impl ApiServer {
    pub fn start_in(ns: &Netns) -> ApiServer {
        let (runtime, server) = ns
            .run(|| TestApiServer::builder().start_with_runtime())
            .expect("thread joins the namespace")
            .expect("test API server starts");
        let kubeconfig = tempfile::NamedTempFile::new().expect("temp file");
        server
            .write_kubeconfig(kubeconfig.path())
            .expect("kubeconfig written");
        ApiServer {
            server,
            _runtime: runtime,
            kubeconfig,
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.kubeconfig.path().to_path_buf()
    }

    pub fn apply(&self, object: serde_json::Value) {
        self.server.apply(&object).expect("object stored");
    }
}

/// The real daemon binary running in a namespace; killed on drop.
pub struct Daemon {
    child: Option<Child>,
    log: tempfile::NamedTempFile,
}

impl Daemon {
    /// Starts `kubenft run ARGS` inside `ns`, logging to a temp file.
    pub fn start(ns: &Netns, args: &[&str]) -> Daemon {
        Self::start_wrapped(ns, &[], args)
    }

    /// Like `start`, with `kubenft` run through `wrapper` (e.g. `setpriv …`), which must exec it.
    pub fn start_wrapped(ns: &Netns, wrapper: &[&str], args: &[&str]) -> Daemon {
        let log = tempfile::NamedTempFile::new().expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name()])
            .args(wrapper)
            .arg(env!("CARGO_BIN_EXE_kubenft"))
            .arg("run")
            .args(args)
            .stdout(Stdio::null())
            .stderr(log.reopen().expect("log file reopens"))
            .spawn()
            .expect("kubenft starts");
        Daemon {
            child: Some(child),
            log,
        }
    }

    /// Everything the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// SIGTERM and wait: a graceful stop. Returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        // `ip netns exec` execs the program, so the child's pid is the daemon's.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        child.wait().map(|s| s.success()).unwrap_or(false)
    }

    /// SIGKILL and wait: a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The daemon's process id (`ip netns exec` and the wrappers exec, so it is the child's).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits up to `limit` for the daemon to exit by itself; its exit code, or None if it is
    /// still running (or was killed by a signal).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = child.try_wait().ok().flatten() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- daemon log ---\n{}", self.log());
        }
    }
}

/// Polls `check` every 20 ms until it returns `Some`, or panics with `what` after `limit`.
pub fn eventually<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if start.elapsed() > limit {
            panic!("{what}: not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A plain HTTP/1.0 GET from inside `ns`: (status code, body), or None if nothing answered.
pub fn http_get(ns: &Netns, addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let path = path.to_string();
    ns.run(move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    })
    .ok()
    .flatten()
}

/// The value of an unlabelled sample (or the first sample whose line starts with `name`) in a
/// Prometheus text page.
pub fn metric(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

pub const NODE: &str = "node-a";
pub const WEB: &str = "10.96.0.10:80";

pub fn lab(tag: &str) -> Option<(Topology, ApiServer)> {
    if !can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return None;
    }
    let topo = Topology::build(tag).expect("lab builds");
    let api = ApiServer::start_in(&topo.node);
    api.apply(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {"podCIDRs": ["10.244.0.0/16"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
    }));
    Some((topo, api))
}

pub fn start_daemon(topo: &Topology, api: &ApiServer, extra: &[&str]) -> Daemon {
    start_daemon_wrapped(topo, api, &[], extra)
}

pub fn start_daemon_wrapped(
    topo: &Topology,
    api: &ApiServer,
    wrapper: &[&str],
    extra: &[&str],
) -> Daemon {
    let kubeconfig = api.kubeconfig();
    let mut args = vec![
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--hostname-override",
        NODE,
        "--cluster-cidr",
        "10.244.0.0/16",
        "-v",
    ];
    // Short, so tests wait little for a change to be programmed, unless a test sets its own.
    if !extra.contains(&"--min-sync-period") {
        args.extend(["--min-sync-period", "50ms"]);
    }
    args.extend_from_slice(extra);
    Daemon::start_wrapped(&topo.node, wrapper, &args)
}

pub fn service(name: &str, ip: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"clusterIP": ip, "clusterIPs": [ip],
                 "ports": [{"name": "http", "port": port, "protocol": "TCP", "targetPort": 8080}]}
    })
}

/// The UDP Service `demo/dns` on 10.96.0.53:53 → 5353.
pub fn dns_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "dns", "namespace": "demo"},
        "spec": {"clusterIP": "10.96.0.53", "clusterIPs": ["10.96.0.53"],
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}]}
    })
}

/// `dns`'s slice with ready endpoints `pods`, as `slice` numbers them.
pub fn dns_slice(pods: &[u8]) -> Value {
    let mut s = slice("dns", pods);
    s["ports"] = json!([{"name": "dns", "port": 5353, "protocol": "UDP"}]);
    s
}

/// A slice for `service` with ready endpoints `pods` (1 → 10.244.1.2, 2 → 10.244.2.2), stamped
/// with the change trigger time the endpoint controller would write.
pub fn slice(service: &str, pods: &[u8]) -> Value {
    slice_named(service, "1", pods)
}

/// Like `slice`, naming the slice `SERVICE-SUFFIX`.
pub fn slice_named(service: &str, suffix: &str, pods: &[u8]) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|n| {
            json!({"addresses": [format!("10.244.{n}.2")], "nodeName": NODE,
                        "conditions": {"ready": true}})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-{suffix}"), "namespace": "demo",
                     "labels": {"kubernetes.io/service-name": service},
                     "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": now}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints
    })
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn backend(topo: &Topology, to: &str) -> Option<String> {
    match try_request(&topo.client, addr(to)) {
        Outcome::Answered { backend, .. } => Some(backend),
        _ => None,
    }
}

/// Like `backend`, but gives up after 150 ms (the lab's links are virtual: an answer takes
/// well under a millisecond), so polling for a change measures the daemon, not our timeouts.
pub fn quick_backend(topo: &Topology, to: &str) -> Option<String> {
    let to = addr(to);
    topo.client
        .run(move || {
            let s = std::net::TcpStream::connect_timeout(&to, Duration::from_millis(150)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(s), &mut line).ok()?;
            line.split_whitespace().next().map(str::to_string)
        })
        .unwrap()
}

/// Waits until connections to `to` reach exactly the backends in `expected` (each seen at least
/// once, no other); returns how long that took.
pub fn wait_for_backends(
    topo: &Topology,
    to: &str,
    expected: &[&str],
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    eventually(limit, &format!("{to} served by {expected:?}"), || {
        let seen: std::collections::BTreeSet<String> =
            (0..8).filter_map(|_| quick_backend(topo, to)).collect();
        let want: std::collections::BTreeSet<String> =
            expected.iter().map(|s| s.to_string()).collect();
        (seen == want).then_some(())
    });
    let took = start.elapsed();
    explained(topo, to);
    took
}

/// Asserts that `kubenft explain`, asked in the node, predicts what connections from the lab's
/// client to `to` come to (the state must have settled: call it after waiting for it).
pub fn explained(topo: &Topology, to: &str) -> Value {
    let from = if addr(to).is_ipv4() {
        "10.0.0.2"
    } else {
        "fd00::2"
    };
    explain_harness::assert_explained(
        &topo.node,
        &topo.client,
        from,
        to,
        8,
        0.25,
        &explain_harness::pod_backend,
    )
}

pub fn wait_for_outcome(
    topo: &Topology,
    to: &str,
    limit: Duration,
    what: &str,
    f: fn(&Outcome) -> bool,
) {
    eventually(limit, what, || {
        f(&try_request(&topo.client, addr(to))).then_some(())
    });
    explained(topo, to);
}

/// Runs connections to `to` back to back from the client until stopped; counts successes and
/// failures (anything but an answer).
pub struct Traffic {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<std::sync::Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Traffic {
    pub fn start(topo: &Topology, to: &str) -> Traffic {
        Self::start_many(topo, vec![to.to_string()])
    }

    /// Cycles over `targets`, one connection after the other.
    pub fn start_many(topo: &Topology, targets: Vec<String>) -> Traffic {
        Self::start_in(&topo.client, targets, None)
    }

    /// Like `start_many`, from `ns`; with `answer`, a connection answered by any other
    /// backend (the first word of its answer) counts as failed too.
    pub fn start_in(ns: &Netns, targets: Vec<String>, answer: Option<&'static str>) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, o, f) = (stop.clone(), ok.clone(), failed.clone());
        let targets: Vec<SocketAddr> = targets.iter().map(|t| addr(t)).collect();
        let thread = ns
            .spawn(move || {
                for to in targets.iter().cycle() {
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    match kubenft::lab::connect_once(*to) {
                        Ok(line)
                            if answer
                                .is_some_and(|a| line.split_whitespace().next() != Some(a)) =>
                        {
                            f.lock().unwrap().push(format!("{to}: answered {line:?}"))
                        }
                        Ok(_) => {
                            o.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => f.lock().unwrap().push(format!("{to}: {e}")),
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
            .unwrap();
        Traffic {
            stop,
            ok,
            failed,
            thread: Some(std::thread::spawn(move || {
                let _ = thread.join();
            })),
        }
    }

    /// Waits for `n` more successful connections (the traffic runs while the caller acts).
    pub fn wait_for(&self, n: usize) {
        let target = self.ok.load(Ordering::Relaxed) + n;
        for _ in 0..500 {
            if self.ok.load(Ordering::Relaxed) >= target {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no progress: {:?}", self.failed.lock().unwrap());
    }

    /// Stops and returns (successful connections, failures).
    pub fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.lock().unwrap().clone(),
        )
    }
}
