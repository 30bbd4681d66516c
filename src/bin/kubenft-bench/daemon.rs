//! The real daemon holding a synthetic cluster: `kubenft run --manifests` in a fresh namespace,
//! timed to its first sync, its memory read from /proc once that sync is done and settled.

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
            break Ok(DaemonRun {
                first_sync,
                rss_mib: status_mib(pid, "VmRSS:"),
                peak_rss_mib: status_mib(pid, "VmHWM:"),
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
