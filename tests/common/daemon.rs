//! End-to-end harness: the test API server living inside the node's namespace (so the daemon
//! reaches it on 127.0.0.1 there), the real `kubenft run` binary started in that namespace,
//! and small HTTP and polling helpers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kubenft::netns::Netns;
use kubenft_testkit::TestApiServer;

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
            .run(|| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("runtime");
                let server = runtime
                    .block_on(TestApiServer::builder().start())
                    .expect("test API server starts");
                (runtime, server)
            })
            .expect("thread joins the namespace");
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
        let log = tempfile::NamedTempFile::new().expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name(), env!("CARGO_BIN_EXE_kubenft")])
            .arg("run")
            .args(args)
            .env("NO_COLOR", "1")
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
