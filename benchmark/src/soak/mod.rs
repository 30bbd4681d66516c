//! The soak (`--soak MINUTES`): the churn stage's lab and daemon kept up for a long time under
//! traffic and faults, looking for what fails, leaks or drifts.
//!
//! The daemon holds the synthetic cluster on the lab's node, watching the test API server
//! there; 20 connected Services (TCP 80 and UDP 53, endpoints on the lab's two pods, never
//! changed) take continuous traffic from the client: new TCP connections (100/s) and one
//! long-lived TCP connection each (a byte echoed every 100 ms), new UDP requests (50/s, each
//! from a new socket, its answer checked) and one long-lived UDP flow each (one source port, a
//! datagram every 100 ms, each answer checked). The other Services' endpoints change through
//! the API at 100 changes/s, and each change is timed to the kernel's notification of it, as in
//! the churn stage. On a seeded, jittered schedule printed before the run: the API server
//! restarts (503 and watches ended, history compacted), the daemon is SIGKILLed and started
//! again, kubenft's table is flushed with `nft`, a foreign table comes and goes, and 200,000
//! UDP conntrack entries are created in the node and left to expire. Every 10 s the daemon's
//! VmRSS and open descriptors are sampled.
//!
//! Since the connected Services never lose their endpoints, every failed connection or
//! unanswered datagram is a failure, printed with its time, Service and cause. One window is
//! accounted apart, because nothing can prevent it: from the flush until the daemon's full
//! sync that repairs the table, new connections find no rules.

mod filler;
pub mod schedule;
mod udp;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kubenft::lab::Topology;
use kubenft::netns::Netns;

use crate::churn::{self, CONNECTED, LoggedSyncs, Seen, Spread, spread};
use crate::daemon::{self, ApiServer, FIRST_SYNC_WAIT, status_mib};
use crate::synthetic;
pub use schedule::{FaultKind, Planned, Sample, Trend};

/// Endpoint changes per second through the API.
pub const RATE: usize = 100;
/// New UDP requests per second, round-robin over the connected Services.
const UDP_PER_SECOND: u64 = 50;
/// The long-lived flows (TCP and UDP) exchange a message this often.
const LONG_LIVED_EVERY: Duration = Duration::from_millis(100);
/// The pods' UDP echo port, behind the Services' port 53.
const UDP_PORT: u16 = 9053;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Conntrack entries of one fill, and their timeout.
pub const FILL: usize = 200_000;
const FILL_TIMEOUT_S: u32 = 30;
/// Events the API server keeps for watches to resume from (about 200 s of changes); older
/// resumptions re-list, as against a compacted etcd.
const HISTORY: usize = 20_000;
const MIN_SYNC_PERIOD: &str = "1s";
/// How long the daemon may take to repair a flushed table before that counts as a failure.
pub const REPAIR_LIMIT: Duration = Duration::from_secs(30);
/// After the last write, how long changes not yet in the kernel are waited for.
const SETTLE: Duration = Duration::from_secs(30);

pub struct Config {
    pub minutes: f64,
    pub services: usize,
    pub endpoints: usize,
    pub seed: u64,
    /// The kinds of fault injected (`--soak-faults`; all of them by default).
    pub faults: Vec<schedule::FaultKind>,
}

impl Config {
    pub fn length(&self) -> Duration {
        Duration::from_secs_f64(self.minutes * 60.0)
    }

    fn churn(&self) -> churn::Config {
        churn::Config {
            services: self.services,
            endpoints: self.endpoints,
            rate: RATE,
            seconds: self.length().as_secs().max(1) + SETTLE.as_secs(),
            min_sync_period: MIN_SYNC_PERIOD.into(),
        }
    }

    /// Refuses what the soak cannot run honestly.
    pub fn check(&self) -> Result<(), String> {
        if !(self.minutes.is_finite() && self.minutes >= 1.0) {
            return Err("--soak MINUTES: at least 1".into());
        }
        self.churn()
            .check()
            .map(|_| ())
            .map_err(|e| e.replace("--churn", "--soak"))
    }
}

/// Which traffic a connection or datagram belonged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    TcpNew,
    TcpLong,
    UdpNew,
    UdpFlow,
}

impl Traffic {
    pub const ALL: [Traffic; 4] = [
        Traffic::TcpNew,
        Traffic::TcpLong,
        Traffic::UdpNew,
        Traffic::UdpFlow,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Traffic::TcpNew => "new TCP connections",
            Traffic::TcpLong => "long-lived TCP echoes",
            Traffic::UdpNew => "new UDP requests",
            Traffic::UdpFlow => "long-lived UDP flow datagrams",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Failure {
    /// When the attempt started, from the soak's start.
    pub at: Duration,
    pub flow: Traffic,
    pub service: SocketAddr,
    pub cause: String,
    /// Started while kubenft's table was flushed and not yet repaired.
    pub in_repair: bool,
}

/// Traffic counts and failures, shared by the client's threads.
struct Recorder {
    base: Instant,
    counts: [AtomicUsize; 4],
    failures: Mutex<Vec<Failure>>,
}

impl Recorder {
    fn record(&self, flow: Traffic, started: Instant, service: SocketAddr, r: Result<(), String>) {
        self.counts[flow as usize].fetch_add(1, Ordering::Relaxed);
        if let Err(cause) = r {
            let at = started.duration_since(self.base);
            eprintln!(
                "[{:7.1} s] FAILED {} {service}: {cause}",
                at.as_secs_f64(),
                flow.name()
            );
            self.failures.lock().unwrap().push(Failure {
                at,
                flow,
                service,
                cause,
                in_repair: false,
            });
        }
    }
}

/// What one fault did.
#[derive(Clone, Debug)]
pub struct Fault {
    pub planned: Planned,
    /// When it started and when it was over (the API server answering, the daemon started
    /// again, the table flushed, the foreign table removed, the entries created), from the
    /// soak's start.
    pub started: Duration,
    pub ended: Duration,
    /// For a flush: when the daemon's full sync that repaired it was logged.
    pub repaired: Option<Duration>,
    /// For changes: the latency of the first change written after the fault ended (how long
    /// programming took to catch up).
    pub caught_up: Option<Duration>,
    pub detail: String,
    /// What went wrong with the fault's own expectations (the foreign table removed by the
    /// daemon, the flush not repaired, the entries not created or not expired).
    pub problem: Option<String>,
}

pub struct SoakRun {
    pub services: usize,
    pub endpoints: usize,
    pub length: Duration,
    pub seed: u64,
    pub traffic: [usize; 4],
    pub failures: Vec<Failure>,
    pub faults: Vec<Fault>,
    pub samples: Vec<Sample>,
    pub rss: Trend,
    pub fds: Trend,
    pub syncs: LoggedSyncs,
    pub panics: usize,
    /// Daemon exits nobody asked for (it is restarted).
    pub crashes: Vec<String>,
    pub written: usize,
    pub unseen: usize,
    pub monitor_overruns: usize,
    /// API write → kernel over every change, and over the changes written outside the
    /// faults that stop programming (API server restart, daemon restart, flush) until
    /// programming caught up after them.
    pub programmed: Option<Spread>,
    pub programmed_outside: Option<Spread>,
    pub log: String,
}

impl SoakRun {
    pub fn real_failures(&self) -> usize {
        self.failures.iter().filter(|f| !f.in_repair).count()
    }

    /// Whether the RSS trend is a target: in runs of `LONG_RUN` or more. A shorter run's
    /// windows are a minute or less, each holding different faults (a 200,000-entry
    /// conntrack dump in one and not the other), so their peaks are not like with like.
    pub fn judges_rss(&self) -> bool {
        self.length >= schedule::LONG_RUN
    }

    /// The targets missed, in words; empty when the soak passes.
    pub fn missed(&self) -> Vec<String> {
        let mut out = Vec::new();
        let real = self.real_failures();
        if real > 0 {
            out.push(format!("{real} failed connections or datagrams"));
        }
        if self.syncs.failed > 0 {
            out.push(format!("{} failed syncs", self.syncs.failed));
        }
        if self.panics > 0 {
            out.push(format!("{} panics", self.panics));
        }
        if !self.crashes.is_empty() {
            out.push(format!("{} daemon exits", self.crashes.len()));
        }
        if self.unseen > 0 {
            out.push(format!("{} changes never seen in the kernel", self.unseen));
        }
        for (what, t) in [("RSS", self.rss), ("open fds", self.fds)] {
            if what == "RSS" && !self.judges_rss() {
                continue;
            }
            match t.passes() {
                Some(true) => {}
                Some(false) => out.push(format!(
                    "{what} grew: last window's max {:.1} > first window's {:.1} × 1.05",
                    t.last_max, t.first_max
                )),
                None => out.push(format!("{what}: no settled samples to compare")),
            }
        }
        for f in &self.faults {
            if let Some(p) = &f.problem {
                out.push(format!(
                    "{} at {:.0} s: {p}",
                    f.planned.kind.name(),
                    f.started.as_secs_f64()
                ));
            }
        }
        out
    }
}

/// The daemon, started again as often as the soak asks; the current process killed on drop.
struct Supervised {
    bin: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
    log_path: std::path::PathBuf,
    child: Option<std::process::Child>,
    /// incarnation << 32 | pid, 0 while down: what the sampler reads.
    current: Arc<AtomicU64>,
    incarnation: usize,
    started: Arc<Mutex<Instant>>,
}

impl Supervised {
    fn start(&mut self, node: &Netns) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| e.to_string())?;
        let child = churn::spawn_daemon(
            &self.bin,
            node,
            &self.kubeconfig,
            MIN_SYNC_PERIOD,
            &["-v"],
            log,
        )?;
        self.incarnation += 1;
        *self.started.lock().unwrap() = Instant::now();
        self.current.store(
            (self.incarnation as u64) << 32 | u64::from(child.id()),
            Ordering::SeqCst,
        );
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        self.current.store(0, Ordering::SeqCst);
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// An exit nobody asked for, if there was one.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        self.current.store(0, Ordering::SeqCst);
        Some(status)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn log_len(&self) -> usize {
        std::fs::metadata(&self.log_path).map_or(0, |m| m.len() as usize)
    }

    /// The first line after byte `from` of the log that satisfies `want`, waiting up to `limit`.
    fn wait_line(
        &self,
        from: usize,
        limit: Duration,
        want: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let start = Instant::now();
        while start.elapsed() < limit {
            let log = self.log();
            if let Some(l) = log.get(from..).and_then(|t| t.lines().find(|l| want(l))) {
                return Some(l.to_string());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A log line's own timestamp, from the soak's start.
fn logged_at(line: &str, base_wall: SystemTime) -> Option<Duration> {
    let t: jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
    SystemTime::from(t).duration_since(base_wall).ok()
}

fn nft(ns: &Netns, args: &[&str]) -> Result<(), String> {
    let mut cmd = vec!["nft"];
    cmd.extend_from_slice(args);
    ns.exec(&cmd).map(|_| ()).map_err(|e| e.to_string())
}

const FOREIGN: &str = "table ip soak-foreign {
  set addrs {
    type ipv4_addr
    elements = { 192.0.2.1, 192.0.2.2 }
  }
  chain forward {
    type filter hook forward priority 10; policy accept;
    ip daddr @addrs counter
  }
}
";

pub fn measure(config: &Config) -> Result<SoakRun, String> {
    config.check()?;
    let (services, endpoints) = (config.services, config.endpoints);
    let bin = daemon::binary()?;
    let (topo, tcp_backends) = churn::lab("soak", endpoints)?;
    let mut udp_backends = Vec::new();
    for (p, pod) in topo.pods.iter().enumerate() {
        let addresses = (0..CONNECTED)
            .flat_map(|j| (0..endpoints).map(move |e| churn::backend_ip(j, e, endpoints)))
            .filter(|ip| usize::from(ip.octets()[2]) == p + 1)
            .collect();
        udp_backends.push(udp::Servers::start(pod, addresses, UDP_PORT)?);
    }
    let api = ApiServer::start_in(&topo.node, HISTORY)?;
    api.load(services, endpoints)?;
    churn::connect_services(&api, services, endpoints, Some(UDP_PORT))?;
    let kubeconfig = std::env::temp_dir().join(format!(
        "kubenft-bench-{}-soak-{services}x{endpoints}.kubeconfig",
        std::process::id()
    ));
    api.server
        .write_kubeconfig(&kubeconfig)
        .map_err(|e| e.to_string())?;
    let log_path = kubeconfig.with_extension("log");
    let _ = std::fs::remove_file(&log_path);
    let mut daemon = Supervised {
        bin,
        kubeconfig: kubeconfig.clone(),
        log_path: log_path.clone(),
        child: None,
        current: Arc::new(AtomicU64::new(0)),
        incarnation: 0,
        started: Arc::new(Mutex::new(Instant::now())),
    };
    daemon.start(&topo.node)?;
    let result = soak(config, &topo, &api, &mut daemon);
    drop(daemon);
    drop(udp_backends);
    drop(tcp_backends);
    drop(api);
    drop(topo);
    let _ = std::fs::remove_file(&kubeconfig);
    eprintln!("the daemon's log: {}", log_path.display());
    result
}

fn soak(
    config: &Config,
    topo: &Topology,
    api: &ApiServer,
    daemon: &mut Supervised,
) -> Result<SoakRun, String> {
    let (services, endpoints) = (config.services, config.endpoints);
    let length = config.length();
    if daemon
        .wait_line(0, FIRST_SYNC_WAIT, |l| {
            l.contains(" synced ") && l.contains("kind=Full")
        })
        .is_none()
    {
        return Err(format!("no first sync:\n{}", daemon.log()));
    }
    let targets: Vec<usize> = churn::connected(services);
    let tcp: Vec<SocketAddr> = targets
        .iter()
        .map(|&s| SocketAddr::from((synthetic::service_ip(s), 80)))
        .collect();
    let udp_targets: Vec<SocketAddr> = targets
        .iter()
        .map(|&s| SocketAddr::from((synthetic::service_ip(s), 53)))
        .collect();
    churn::wait_answering(&topo.client, &tcp)?;

    let plan = schedule::plan(config.seed, length, &config.faults);
    eprintln!(
        "soak: {services} × {endpoints} for {:.0} s, seed {}; faults:",
        length.as_secs_f64(),
        config.seed
    );
    for p in &plan {
        eprintln!(
            "  at {:6.1} s  {} (hold {:.1} s)",
            p.at.as_secs_f64(),
            p.kind.name(),
            p.hold.as_secs_f64()
        );
    }

    let base = Instant::now();
    let base_wall = SystemTime::now();
    let log_start = daemon.log_len();
    let total = RATE * (length.as_secs() as usize + 1);
    let seen: Seen = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let rec = Arc::new(Recorder {
        base,
        counts: Default::default(),
        failures: Mutex::new(Vec::new()),
    });
    let monitor = {
        let (sock, seen, stop) = (
            churn::monitor_socket(&topo.node)?,
            seen.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || churn::monitor(sock, seen, base, stop))
    };
    type Client = fn(Vec<SocketAddr>, &Recorder, &AtomicBool);
    let clients: [(Client, &Vec<SocketAddr>); 4] = [
        (tcp_new, &tcp),
        (tcp_long, &tcp),
        (udp_new, &udp_targets),
        (udp_flows, &udp_targets),
    ];
    let mut traffic = Vec::new();
    for (f, targets) in clients {
        let (rec, stop, targets) = (rec.clone(), stop.clone(), targets.clone());
        traffic.push(
            topo.client
                .spawn(move || f(targets, &rec, &stop))
                .map_err(|e| e.to_string())?,
        );
    }
    let sampler = {
        let (current, started, stop) =
            (daemon.current.clone(), daemon.started.clone(), stop.clone());
        std::thread::spawn(move || sample(base, current, started, stop))
    };

    let result = std::thread::scope(|scope| {
        let writer = {
            let stop = stop.clone();
            scope.spawn(move || write_changes(api, services, endpoints, base, length, &stop))
        };
        let mut faults: Vec<Fault> = Vec::new();
        let mut crashes = Vec::new();
        let mut pending: Vec<(usize, Expiry)> = Vec::new();
        let mut last_check = Instant::now();
        let mut idle = |daemon: &mut Supervised,
                        faults: &mut Vec<Fault>,
                        pending: &mut Vec<(usize, Expiry)>,
                        crashes: &mut Vec<String>| {
            supervise(daemon, topo, base, crashes);
            if last_check.elapsed() >= Duration::from_secs(1) {
                check_expiries(topo, faults, pending);
                last_check = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        for p in &plan {
            while base.elapsed() < p.at {
                idle(daemon, &mut faults, &mut pending, &mut crashes);
            }
            supervise(daemon, topo, base, &mut crashes);
            let mut made = Vec::new();
            let fault = inject(*p, topo, api, daemon, base, base_wall, &mut made);
            pending.extend(made.into_iter().map(|e| (faults.len(), e)));
            eprintln!(
                "[{:7.1} s] {}: {}{}",
                fault.started.as_secs_f64(),
                p.kind.name(),
                fault.detail,
                fault
                    .problem
                    .as_deref()
                    .map(|p| format!(" — PROBLEM: {p}"))
                    .unwrap_or_default()
            );
            faults.push(fault);
        }
        while base.elapsed() < length
            || !pending.is_empty() && base.elapsed() < length + EXPIRY_LIMIT
        {
            idle(daemon, &mut faults, &mut pending, &mut crashes);
        }
        for (i, _) in &pending {
            faults[*i].problem = Some("the run ended before the entries expired".into());
        }
        let written = writer
            .join()
            .map_err(|_| "the writer panicked".to_string())??;
        Ok::<_, String>((written, faults, crashes))
    });
    let (written, mut faults, crashes) = match result {
        Ok(r) => r,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    let count = written.len();
    let unseen = |seen: &Seen| {
        seen[..count]
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) == 0)
            .count()
    };
    let settle = Instant::now();
    while unseen(&seen) > 0 && settle.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for t in traffic {
        t.join()
            .map_err(|_| "a client thread panicked".to_string())?
            .map_err(|e| e.to_string())?;
    }
    let monitor_overruns = monitor.join().unwrap_or(0);
    let samples = sampler.join().unwrap_or_default();
    // Latencies, and how long programming took to catch up after each fault.
    let latency = |k: usize| {
        let at = seen[k].load(Ordering::Relaxed);
        (at != 0).then(|| Duration::from_nanos(at.saturating_sub(written[k])))
    };
    let mut excluded: Vec<(u64, u64)> = Vec::new();
    for f in &mut faults {
        if matches!(
            f.planned.kind,
            FaultKind::ForeignTable | FaultKind::Conntrack
        ) {
            continue;
        }
        let ended = f.repaired.unwrap_or(f.ended).as_nanos() as u64;
        let first = written.partition_point(|&w| w < ended);
        f.caught_up = (first < count).then(|| latency(first)).flatten();
        let until = f
            .caught_up
            .map_or(u64::MAX, |l| written[first] + l.as_nanos() as u64);
        excluded.push((f.started.as_nanos() as u64, until));
    }
    let programmed = spread((0..count).filter_map(latency).collect());
    let programmed_outside = spread(
        (0..count)
            .filter(|&k| !excluded.iter().any(|&(a, b)| (a..=b).contains(&written[k])))
            .filter_map(latency)
            .collect(),
    );

    let mut failures = std::mem::take(&mut *rec.failures.lock().unwrap());
    failures.sort_by_key(|f| f.at);
    for f in &mut failures {
        f.in_repair = faults.iter().any(|x| {
            x.planned.kind == FaultKind::Flush
                && x.started <= f.at
                && x.repaired.is_some_and(|r| f.at <= r)
        });
    }
    let full_log = daemon.log();
    let log = full_log.get(log_start..).unwrap_or_default().to_string();
    Ok(SoakRun {
        services,
        endpoints,
        length,
        seed: config.seed,
        traffic: std::array::from_fn(|i| rec.counts[i].load(Ordering::Relaxed)),
        failures,
        rss: schedule::trend(&samples, length, |s| s.rss_mib),
        fds: schedule::trend(&samples, length, |s| s.fds as f64),
        samples,
        faults,
        syncs: churn::logged_syncs(&log, 0),
        panics: full_log.lines().filter(|l| l.contains("panicked")).count(),
        crashes,
        written: count,
        unseen: unseen(&seen),
        monitor_overruns,
        programmed,
        programmed_outside,
        log: daemon.log_path.display().to_string(),
    })
}

/// Restarts the daemon if it exited by itself, and records it.
fn supervise(daemon: &mut Supervised, topo: &Topology, base: Instant, crashes: &mut Vec<String>) {
    if let Some(status) = daemon.exited() {
        let what = format!(
            "at {:.1} s the daemon exited: {status}",
            base.elapsed().as_secs_f64()
        );
        eprintln!("[{:7.1} s] FAILED {what}", base.elapsed().as_secs_f64());
        crashes.push(what);
        if let Err(e) = daemon.start(&topo.node) {
            crashes.push(format!("restarting it: {e}"));
        }
    }
}

/// A conntrack fill waiting to expire, and when it was made.
struct Expiry {
    created: Instant,
}

/// How long a fill may take to expire: its timeout, and the kernel's garbage collector's
/// pace after it.
const EXPIRY_LIMIT: Duration = Duration::from_secs(FILL_TIMEOUT_S as u64 + 120);

/// Checks the fills not yet expired; fills in the fault's detail or problem when one is.
fn check_expiries(topo: &Topology, faults: &mut [Fault], pending: &mut Vec<(usize, Expiry)>) {
    pending.retain(|(i, e)| {
        let fault = &mut faults[*i];
        let left = filler::remaining(&topo.node, FILL);
        if let Err(err) = &left {
            fault.problem = Some(err.clone());
            false
        } else if left == Ok(0) {
            fault.detail += &format!(
                "; all expired within {:.0} s",
                e.created.elapsed().as_secs_f64()
            );
            false
        } else if e.created.elapsed() > EXPIRY_LIMIT {
            fault.problem = Some(format!(
                "entries not expired {EXPIRY_LIMIT:?} after creation"
            ));
            false
        } else {
            true
        }
    });
}

fn inject(
    p: Planned,
    topo: &Topology,
    api: &ApiServer,
    daemon: &mut Supervised,
    base: Instant,
    base_wall: SystemTime,
    expiries: &mut Vec<Expiry>,
) -> Fault {
    let started = base.elapsed();
    let mut fault = Fault {
        planned: p,
        started,
        ended: started,
        repaired: None,
        caught_up: None,
        detail: String::new(),
        problem: None,
    };
    let secs = |d: Duration| d.as_secs_f64();
    match p.kind {
        FaultKind::ApiRestart => {
            api.server.set_unavailable(true);
            std::thread::sleep(p.hold);
            api.server.compact();
            api.server.set_unavailable(false);
            fault.ended = base.elapsed();
            fault.detail = format!(
                "503 and watches ended for {:.1} s, history compacted",
                secs(fault.ended - started)
            );
        }
        FaultKind::DaemonKill => {
            daemon.kill();
            std::thread::sleep(p.hold);
            let from = daemon.log_len();
            match daemon.start(&topo.node) {
                Ok(()) => {
                    fault.ended = base.elapsed();
                    let line =
                        daemon.wait_line(from, Duration::from_secs(300), |l| l.contains("synced"));
                    fault.detail = match line.as_deref().and_then(|l| logged_at(l, base_wall)) {
                        Some(at) => format!(
                            "down {:.1} s; first sync {:.1} s after the restart ({})",
                            secs(fault.ended - started),
                            secs(at.saturating_sub(fault.ended)),
                            line.as_deref()
                                .and_then(|l| daemon::field(l, "ops"))
                                .map_or("nothing to change".into(), |o| format!("{o} ops"))
                        ),
                        None => {
                            fault.problem = Some("no sync within 300 s of the restart".into());
                            format!("down {:.1} s", secs(fault.ended - started))
                        }
                    };
                }
                Err(e) => fault.problem = Some(format!("restart: {e}")),
            }
        }
        FaultKind::Flush => {
            let from = daemon.log_len();
            if let Err(e) = nft(&topo.node, &["flush", "table", "ip", "kubenft"]) {
                fault.problem = Some(e);
                return fault;
            }
            fault.ended = base.elapsed();
            let line = daemon.wait_line(from, REPAIR_LIMIT, |l| {
                l.contains(" synced ") && l.contains("kind=Full")
            });
            fault.repaired = line.as_deref().and_then(|l| logged_at(l, base_wall));
            fault.detail = match fault.repaired {
                Some(r) => format!(
                    "repaired by a full sync logged {:.2} s after the flush ({} ops)",
                    secs(r.saturating_sub(started)),
                    line.as_deref()
                        .and_then(|l| daemon::field(l, "ops"))
                        .unwrap_or("?")
                ),
                None => {
                    fault.problem = Some(format!("not repaired within {REPAIR_LIMIT:?}"));
                    String::new()
                }
            };
        }
        FaultKind::ForeignTable => {
            if let Err(e) = topo
                .node
                .exec_with_stdin(&["nft", "-f", "-"], FOREIGN)
                .map_err(|e| e.to_string())
            {
                fault.problem = Some(format!("adding it: {e}"));
                return fault;
            }
            std::thread::sleep(p.hold);
            let kept = nft(&topo.node, &["list", "table", "ip", "soak-foreign"]).is_ok();
            let removed = nft(&topo.node, &["delete", "table", "ip", "soak-foreign"]);
            fault.ended = base.elapsed();
            fault.detail = format!(
                "there for {:.1} s, then removed",
                secs(fault.ended - started)
            );
            if !kept {
                fault.problem = Some("the foreign table was gone before we removed it".into());
            } else if let Err(e) = removed {
                fault.problem = Some(format!("removing it: {e}"));
            }
        }
        FaultKind::Conntrack => {
            let before = filler::count(&topo.node).unwrap_or(0);
            let t = Instant::now();
            match filler::fill(&topo.node, FILL, FILL_TIMEOUT_S) {
                Ok(filled) => {
                    let took = t.elapsed();
                    let after = filler::count(&topo.node).unwrap_or(0);
                    fault.ended = base.elapsed();
                    fault.detail = format!(
                        "{} UDP entries created in {:.1} s (expiring after {FILL_TIMEOUT_S} s): \
                         the node's count {before} → {after}",
                        filled.asked - filled.refused,
                        secs(took),
                    );
                    if filled.refused > 0 {
                        fault.problem = Some(format!(
                            "{} creations refused (errno {:?})",
                            filled.refused, filled.first_errno
                        ));
                    }
                    expiries.push(Expiry {
                        created: Instant::now(),
                    });
                }
                Err(e) => fault.problem = Some(e),
            }
        }
    }
    fault
}

/// Writes RATE changes per second until `length` from `base` (or `stop`); returns, per change,
/// nanoseconds after `base` just before its write.
fn write_changes(
    api: &ApiServer,
    services: usize,
    endpoints: usize,
    base: Instant,
    length: Duration,
    stop: &AtomicBool,
) -> Result<Vec<u64>, String> {
    let churned: Vec<usize> = {
        let keep = churn::connected(services);
        (0..services).filter(|s| !keep.contains(s)).collect()
    };
    let mut written = Vec::with_capacity(RATE * length.as_secs() as usize + RATE);
    for k in 0.. {
        let due = base + Duration::from_secs(k as u64) / RATE as u32;
        if due.duration_since(base) >= length || stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        written.push(base.elapsed().as_nanos() as u64);
        churn::change(api, &churned, endpoints, k).map_err(|e| format!("change {k}: {e}"))?;
    }
    Ok(written)
}

/// The daemon's VmRSS and open descriptors every SAMPLE_EVERY while it runs.
fn sample(
    base: Instant,
    current: Arc<AtomicU64>,
    started: Arc<Mutex<Instant>>,
    stop: Arc<AtomicBool>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut next = base;
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() < next {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        next += SAMPLE_EVERY;
        let c = current.load(Ordering::SeqCst);
        let pid = (c & 0xffff_ffff) as u32;
        if pid == 0 {
            continue;
        }
        // The fewest of three reads 50 ms apart: a descriptor held for one sync (its netlink
        // sockets, a conntrack dump) is not one the daemon keeps, and a leaked one stays.
        let fds = (0..3)
            .map(|i| {
                if i > 0 {
                    std::thread::sleep(Duration::from_millis(50));
                }
                std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count())
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.into_iter().min().unwrap_or(0));
        let rss_mib = status_mib(pid, "VmRSS:");
        // A process gone between the two reads (killed by the soak) is not sampled.
        if let (Ok(fds), true) = (fds, rss_mib > 0.0) {
            let s = Sample {
                at: base.elapsed(),
                incarnation: (c >> 32) as usize,
                since_start: started.lock().unwrap().elapsed(),
                rss_mib,
                fds,
            };
            eprintln!(
                "[{:7.1} s] sample: daemon process {} (up {:.0} s): VmRSS {:.1} MiB, {} open fds",
                s.at.as_secs_f64(),
                s.incarnation,
                s.since_start.as_secs_f64(),
                s.rss_mib,
                s.fds
            );
            out.push(s);
        }
    }
    out
}

/// Paced round-robin: calls `f` with each target in turn, `per_second` times a second.
fn paced(
    targets: &[SocketAddr],
    per_second: u64,
    stop: &AtomicBool,
    mut f: impl FnMut(SocketAddr, u64),
) {
    let start = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        f(targets[n as usize % targets.len()], n);
        n += 1;
        let due = start + Duration::from_secs(n) / per_second as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

fn tcp_new(targets: Vec<SocketAddr>, rec: &Recorder, stop: &AtomicBool) {
    paced(&targets, 100, stop, |to, n| {
        let t = Instant::now();
        rec.record(Traffic::TcpNew, t, to, churn::one_connection(to, n as u8));
    });
}

fn udp_new(targets: Vec<SocketAddr>, rec: &Recorder, stop: &AtomicBool) {
    paced(&targets, UDP_PER_SECOND, stop, |to, n| {
        let t = Instant::now();
        rec.record(Traffic::UdpNew, t, to, udp::request(to, n));
    });
}

/// One TCP connection per target, each echoing a byte every LONG_LIVED_EVERY; a failed one is
/// recorded and opened again.
fn tcp_long(targets: Vec<SocketAddr>, rec: &Recorder, stop: &AtomicBool) {
    let mut open: Vec<Option<std::net::TcpStream>> = targets.iter().map(|_| None).collect();
    let mut n = 0u8;
    while !stop.load(Ordering::Relaxed) {
        for (&to, conn) in targets.iter().zip(open.iter_mut()) {
            n = n.wrapping_add(1);
            let t = Instant::now();
            let result = match conn {
                Some(s) => churn::echo(s, n),
                None => std::net::TcpStream::connect_timeout(&to, churn::CONNECTION_TIMEOUT)
                    .map_err(|e| format!("connect: {e}"))
                    .and_then(|mut s| {
                        let r = churn::echo(&mut s, n);
                        *conn = Some(s);
                        r
                    }),
            };
            if result.is_err() {
                *conn = None;
            }
            rec.record(Traffic::TcpLong, t, to, result);
        }
        std::thread::sleep(LONG_LIVED_EVERY);
    }
}

/// One UDP flow per target (one socket, one source port for the whole soak), a datagram
/// every LONG_LIVED_EVERY, each answer checked.
fn udp_flows(targets: Vec<SocketAddr>, rec: &Recorder, stop: &AtomicBool) {
    let sockets: Vec<Result<std::net::UdpSocket, String>> =
        targets.iter().map(|&to| udp::flow_socket(to)).collect();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        for (&to, s) in targets.iter().zip(&sockets) {
            let t = Instant::now();
            let result = s
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|s| udp::exchange(s, n));
            rec.record(Traffic::UdpFlow, t, to, result);
        }
        std::thread::sleep(LONG_LIVED_EVERY);
    }
}
