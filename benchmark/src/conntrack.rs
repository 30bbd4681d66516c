//! A busy node's conntrack table (`--conntrack ENTRIES`): the real daemon holds a synthetic
//! cluster of which 100 Services are UDP (port 53 → 5353), in a namespace whose conntrack
//! table is filled over ctnetlink, after the daemon's first sync, with `ENTRIES` entries:
//! 10,000 UDP flows to the UDP Services' ClusterIPs DNATed to their endpoints (10 clients per
//! endpoint), a tenth of the table UDP to elsewhere, the rest established TCP connections (some
//! to the TCP Services' endpoints). Then, each read from the daemon's log line of that sync:
//! syncs that change no UDP Service (an endpoint added to a TCP Service), one that adds a UDP
//! endpoint (the table is read, nothing is stale), one endpoint removed from each UDP Service
//! (100 removals written back to back, whatever syncs they take), the idle daemon's CPU, and a
//! restart's first sync (which reads the table whatever changed). The table's limit
//! (`nf_conntrack_max`, global) and hash size are raised for the run and restored after it.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kubenft::netns::Netns;
use kubenft_nft_testkit::conntrack::{Entry, create, timed_dump};
use kubenft_testkit::Kind;

use crate::daemon::{self, ApiServer, FIRST_SYNC_WAIT, field};
use crate::synthetic;

/// Services made UDP, each with the cluster's endpoint count.
pub const UDP_SERVICES: usize = 100;
/// UDP flows per endpoint of each UDP Service.
const CLIENTS: usize = 10;
/// Syncs that change no UDP Service, in turn.
const TCP_CHANGES: usize = 5;
/// Every synthetic entry outlives the run.
const TIMEOUT: u32 = 4 * 3600;
/// Dumps timed to measure the kernel's walk of the table alone.
const WALKS: usize = 3;
/// No sync for this long after a change's first one: the change is all programmed (the
/// daemon's `--min-sync-period` is 1 s, a reading at 1,000,000 entries under one).
const QUIET: Duration = Duration::from_millis(2_500);
/// How long one sync's log line is waited for.
const SYNC_WAIT: Duration = Duration::from_secs(120);

pub struct Config {
    pub entries: usize,
    pub services: usize,
    pub endpoints: usize,
    pub idle: Duration,
}

/// One sync, as the daemon logged it.
#[derive(Debug, Clone)]
pub struct SyncRow {
    pub what: String,
    pub ops: usize,
    /// The sync up to its commit.
    pub sync: Duration,
    pub conntrack_read: bool,
    /// The reconciler's time after the sync (both families).
    pub conntrack: Duration,
    pub examined: usize,
    pub deleted: usize,
    /// The daemon's CPU time from the API write to its log line of the sync.
    pub cpu: Duration,
}

pub struct ConntrackRun {
    pub entries: usize,
    pub services: usize,
    pub endpoints: usize,
    /// Entries the kernel took, and how long making them took.
    pub created: usize,
    pub fill: Duration,
    /// Dumps that no entry matched (the kernel walked the whole table and copied nothing),
    /// each timed: the least any reading of the table costs.
    pub walks: Vec<Duration>,
    pub rows: Vec<SyncRow>,
    /// UDP flows DNATed to the removed endpoints, and how many of them are left afterwards.
    pub stale_made: usize,
    pub stale_left: usize,
    /// UDP flows to the UDP Services' endpoints that still serve: all must be kept.
    pub kept_made: usize,
    pub kept_left: usize,
    pub idle: Duration,
    pub idle_cpu: Duration,
}

impl ConntrackRun {
    pub fn idle_percent(&self) -> f64 {
        100.0 * self.idle_cpu.as_secs_f64() / self.idle.as_secs_f64()
    }

    /// The targets: ≤ 5 ms of conntrack work in a sync that changed no UDP endpoint,
    /// ≤ 250 ms for the syncs of the 100 removals with every stale entry gone, < 1 % idle.
    pub fn verdicts(&self) -> [(String, bool); 3] {
        let no_udp = self.rows.iter().filter(|r| r.what.starts_with("TCP"));
        let worst_no_udp = no_udp.map(|r| r.conntrack).max().unwrap_or_default();
        let removals: Duration = self
            .rows
            .iter()
            .filter(|r| r.what.starts_with("100 UDP"))
            .map(|r| r.conntrack)
            .sum();
        [
            (
                format!(
                    "sync changing no UDP endpoint: {} of conntrack work (≤ 5 ms)",
                    ms(worst_no_udp)
                ),
                worst_no_udp <= Duration::from_millis(5),
            ),
            (
                format!(
                    "100 UDP endpoint removals: {} of conntrack work (≤ 250 ms), {} of {} stale entries left",
                    ms(removals),
                    self.stale_left,
                    self.stale_made
                ),
                removals <= Duration::from_millis(250) && self.stale_left == 0,
            ),
            (
                format!(
                    "idle daemon: {:.2} % of one core (< 1 %)",
                    self.idle_percent()
                ),
                self.idle_percent() < 1.0,
            ),
        ]
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The table's global limits, raised for the run and put back when dropped.
struct RaisedLimits {
    saved: Vec<(PathBuf, String)>,
}

impl RaisedLimits {
    fn raise(entries: usize) -> Result<RaisedLimits, String> {
        let mut limits = RaisedLimits { saved: Vec::new() };
        // Room for the run's own traffic beside the entries; a quarter as many hash buckets,
        // the ratio kube-proxy sets.
        let max = entries + entries / 4;
        for (name, want) in [("nf_conntrack_max", max), ("nf_conntrack_buckets", max / 4)] {
            let path = Path::new("/proc/sys/net/netfilter").join(name);
            let now = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
            if now.trim().parse::<usize>().is_ok_and(|n| n >= want) {
                continue;
            }
            std::fs::write(&path, want.to_string())
                .map_err(|e| format!("raising {name} to {want}: {e}"))?;
            eprintln!(
                "conntrack: raised {name} from {} to {want} for the run",
                now.trim()
            );
            limits.saved.push((path, now));
        }
        Ok(limits)
    }
}

impl Drop for RaisedLimits {
    fn drop(&mut self) {
        for (path, value) in self.saved.iter().rev() {
            match std::fs::write(path, value.trim()) {
                Ok(()) => eprintln!("conntrack: {} restored to {}", path.display(), value.trim()),
                Err(e) => eprintln!(
                    "conntrack: {} NOT restored to {}: {e}",
                    path.display(),
                    value.trim()
                ),
            }
        }
    }
}

/// The daemon's process, killed when dropped (also when the bench panics).
struct Daemon {
    child: std::process::Child,
    log: PathBuf,
}

impl Daemon {
    fn start(ns: &Netns, kubeconfig: &Path, log: PathBuf) -> Result<Daemon, String> {
        let bin = daemon::binary()?;
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        // -v: syncs that send nothing (the periodic ones, and the first after a restart on an
        // unchanged kernel) are logged at debug level.
        let child = crate::churn::spawn_daemon(&bin, ns, kubeconfig, "1s", &["-v"], file)?;
        Ok(Daemon { child, log })
    }

    /// `ip netns exec` execs the daemon in place, so the child's pid is the daemon's.
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log lines of the syncs (those that say what conntrack did).
    fn synced(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(" synced") && l.contains("conntrack_read="))
            .map(str::to_owned)
            .collect()
    }

    /// Waits until more than `seen` syncs are logged; fails if the daemon exited.
    fn wait_synced(&mut self, seen: usize, limit: Duration) -> Result<Vec<String>, String> {
        let start = Instant::now();
        loop {
            let lines = self.synced();
            if lines.len() > seen {
                return Ok(lines);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("the daemon exited ({status}):\n{}", self.log()));
            }
            if start.elapsed() > limit {
                return Err(format!("no sync within {limit:?}:\n{}", tail(&self.log())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The process's CPU time (user + system), from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) end with ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / per_second)
}

fn row(what: &str, line: &str, cpu: Duration) -> SyncRow {
    let seconds = |key| {
        field(line, key)
            .and_then(|v| v.parse::<f64>().ok())
            .map(Duration::from_secs_f64)
            .unwrap_or_default()
    };
    let count = |key| field(line, key).and_then(|v| v.parse().ok()).unwrap_or(0);
    SyncRow {
        what: what.to_string(),
        ops: count("ops"),
        sync: seconds("seconds"),
        conntrack_read: field(line, "conntrack_read") == Some("true"),
        conntrack: seconds("conntrack_seconds"),
        examined: count("conntrack_examined"),
        deleted: count("conntrack_deleted"),
        cpu,
    }
}

/// Makes service `s` a UDP service (port 53 → 5353) and returns its endpoints' addresses.
fn make_udp(api: &ApiServer, s: usize) -> Result<Vec<IpAddr>, String> {
    let n = synthetic::service_name(s);
    let mut service = api
        .server
        .get(Kind::Service, Some(&n.namespace), &n.name)
        .ok_or_else(|| format!("Service {}/{} is not stored", n.namespace, n.name))?;
    service["spec"]["ports"] = serde_json::json!([
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}
    ]);
    api.server.apply(&service).map_err(|e| e.to_string())?;
    let mut slice = slice_of(api, s)?;
    slice["ports"] = serde_json::json!([{"name": "dns", "port": 5353, "protocol": "UDP"}]);
    api.server.apply(&slice).map_err(|e| e.to_string())?;
    Ok(addresses(&slice))
}

fn slice_of(api: &ApiServer, s: usize) -> Result<serde_json::Value, String> {
    let n = synthetic::service_name(s);
    let name = format!("{}-x", n.name);
    api.server
        .get(Kind::EndpointSlice, Some(&n.namespace), &name)
        .ok_or_else(|| format!("EndpointSlice {}/{name} is not stored", n.namespace))
}

fn addresses(slice: &serde_json::Value) -> Vec<IpAddr> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["addresses"][0].as_str()?.parse().ok())
        .collect()
}

/// Removes UDP service `s`'s first endpoint; returns its address.
fn remove_first_endpoint(api: &ApiServer, s: usize) -> Result<IpAddr, String> {
    let mut slice = slice_of(api, s)?;
    let list = slice["endpoints"]
        .as_array_mut()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| format!("service {s} has no endpoint left"))?;
    let removed = list.remove(0);
    api.server.apply(&slice).map_err(|e| e.to_string())?;
    removed["addresses"][0]
        .as_str()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("service {s}'s endpoint has no address"))
}

/// Adds an endpoint to UDP service `s` (a change after which nothing is stale).
fn add_udp_endpoint(api: &ApiServer, s: usize) -> Result<(), String> {
    let mut slice = slice_of(api, s)?;
    let endpoint = serde_json::json!({
        "addresses": ["10.255.254.1"], "nodeName": "node-1", "conditions": {"ready": true},
    });
    slice["endpoints"]
        .as_array_mut()
        .ok_or("a slice without endpoints")?
        .push(endpoint);
    api.server
        .apply(&slice)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn client(n: usize) -> SocketAddr {
    let ip = Ipv4Addr::from(0x0a02_0000 + (n / 60_000) as u32);
    SocketAddr::new(ip.into(), 1024 + (n % 60_000) as u16)
}

/// The synthetic table: see the module's comment.
fn table(entries: usize, udp: &[(SocketAddr, Vec<IpAddr>)]) -> Vec<Entry> {
    let mut out = Vec::with_capacity(entries);
    let mut n = 0;
    let mut next_client = || {
        n += 1;
        client(n)
    };
    for (frontend, endpoints) in udp {
        for ip in endpoints {
            for _ in 0..CLIENTS {
                let c = next_client();
                out.push(Entry::udp(
                    c,
                    *frontend,
                    SocketAddr::new(*ip, 5353),
                    TIMEOUT,
                ));
            }
        }
    }
    let elsewhere = (entries / 10).saturating_sub(out.len());
    for i in 0..elsewhere {
        let to = SocketAddr::new(Ipv4Addr::from(0x0808_0000 + (i % 60_000) as u32).into(), 53);
        let c = next_client();
        out.push(Entry::udp(c, to, to, TIMEOUT));
    }
    let mut i = 0u32;
    while out.len() < entries {
        // A TCP Service's frontend answered by an address of the cluster's pod network, and
        // connections elsewhere, alternately.
        let c = next_client();
        let entry = if i.is_multiple_of(2) {
            let to = SocketAddr::new(
                synthetic::service_ip(UDP_SERVICES + (i as usize / 2) % 1000).into(),
                80,
            );
            let pod = SocketAddr::new(
                Ipv4Addr::from(0x0a80_0000 + 1 + i / 2 % 50_000).into(),
                8080,
            );
            Entry::tcp_established(c, to, pod, TIMEOUT)
        } else {
            let to = SocketAddr::new(Ipv4Addr::from(0xc0a8_0000 + i % 60_000).into(), 443);
            Entry::tcp_established(c, to, to, TIMEOUT)
        };
        out.push(entry);
        i += 1;
    }
    out
}

/// Writes a change through the API and returns the daemon's syncs of it, as it logged them:
/// changes written back to back may take more than one sync (those written during a sync wait
/// for the next, `--min-sync-period` after its end), so syncs are taken until none comes for
/// longer than that period and a reading.
fn change(
    what: &str,
    write: impl FnOnce() -> Result<(), String>,
    daemon: &mut Daemon,
) -> Result<Vec<SyncRow>, String> {
    let seen = daemon.synced().len();
    let cpu_before = cpu_time(daemon.pid());
    write()?;
    let mut logged = daemon.wait_synced(seen, SYNC_WAIT)?.len();
    let started = Instant::now();
    loop {
        std::thread::sleep(QUIET);
        let now = daemon.synced().len();
        if now == logged || started.elapsed() > SYNC_WAIT {
            break;
        }
        logged = now;
    }
    let lines = daemon.synced();
    let cpu = cpu_time(daemon.pid()).saturating_sub(cpu_before);
    let count = lines.len() - seen;
    let new: Vec<SyncRow> = lines[seen..]
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let what = if count > 1 {
                format!("{what} (sync {} of {count})", i + 1)
            } else {
                what.to_string()
            };
            // The CPU of all of them goes to the first.
            row(&what, line, if i == 0 { cpu } else { Duration::ZERO })
        })
        .collect();
    for r in &new {
        eprintln!(
            "conntrack: {}: read {} ({} examined, {} deleted) in {}",
            r.what,
            r.conntrack_read,
            r.examined,
            r.deleted,
            ms(r.conntrack)
        );
    }
    Ok(new)
}

pub fn measure(config: &Config) -> Result<ConntrackRun, String> {
    if config.services < UDP_SERVICES + 1_000 {
        return Err(format!(
            "--conntrack needs at least {} services ({UDP_SERVICES} made UDP)",
            UDP_SERVICES + 1_000
        ));
    }
    let _limits = RaisedLimits::raise(config.entries)?;
    let ns = Netns::create("bct").map_err(|e| e.to_string())?;
    let api = ApiServer::start_in(&ns, 4096)?;
    api.load(config.services, config.endpoints)?;
    let mut udp = Vec::new();
    for s in 0..UDP_SERVICES {
        let frontend = SocketAddr::new(synthetic::service_ip(s).into(), 53);
        udp.push((frontend, make_udp(&api, s)?));
    }
    let kubeconfig = std::env::temp_dir().join(format!(
        "kubenft-bench-{}-conntrack.kubeconfig",
        std::process::id()
    ));
    api.server
        .write_kubeconfig(&kubeconfig)
        .map_err(|e| e.to_string())?;
    let log = kubeconfig.with_extension("log");
    let result = run(config, &ns, &api, &kubeconfig, &log, &udp);
    drop(api);
    drop(ns);
    let _ = std::fs::remove_file(&kubeconfig);
    if result.is_ok() {
        let _ = std::fs::remove_file(&log);
    } else {
        eprintln!("the daemon's log: {}", log.display());
    }
    result
}

fn run(
    config: &Config,
    ns: &Netns,
    api: &ApiServer,
    kubeconfig: &Path,
    log: &Path,
    udp: &[(SocketAddr, Vec<IpAddr>)],
) -> Result<ConntrackRun, String> {
    let mut daemon = Daemon::start(ns, kubeconfig, log.to_path_buf())?;
    daemon.wait_synced(0, FIRST_SYNC_WAIT)?;
    std::thread::sleep(Duration::from_secs(2));

    eprintln!(
        "conntrack: filling the table with {} entries …",
        config.entries
    );
    let entries = table(config.entries, udp);
    let started = Instant::now();
    let made = ns
        .run(move || create(entries))
        .map_err(|e| e.to_string())??;
    let fill = started.elapsed();
    if made.created < config.entries {
        return Err(format!(
            "the kernel took {} of {} entries: {:?}",
            made.created, config.entries, made.refused
        ));
    }

    // GRE: a protocol the synthetic table and the daemon's own traffic never use.
    let walks = ns
        .run(|| {
            (0..WALKS)
                .map(|_| match timed_dump(libc::IPPROTO_GRE as u8) {
                    Ok((0, took)) => Ok(took),
                    Ok((n, _)) => Err(format!("{n} GRE entries in the table")),
                    Err(e) => Err(e),
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| e.to_string())??;
    eprintln!("conntrack: the kernel's walk alone: {walks:?}");

    let mut rows = Vec::new();

    for i in 0..TCP_CHANGES {
        let write = || api.add_endpoint(UDP_SERVICES + i).map(|_| ());
        rows.extend(change("TCP endpoint added", write, &mut daemon)?);
        std::thread::sleep(Duration::from_millis(1_200));
    }
    let write = || add_udp_endpoint(api, 0);
    rows.extend(change(
        "UDP endpoint added (nothing stale)",
        write,
        &mut daemon,
    )?);

    let mut removed = BTreeSet::new();
    let write = || {
        for s in 0..UDP_SERVICES {
            removed.insert(remove_first_endpoint(api, s)?);
        }
        Ok(())
    };
    rows.extend(change("100 UDP endpoints removed", write, &mut daemon)?);

    let frontends: BTreeSet<SocketAddr> = udp.iter().map(|(f, _)| *f).collect();
    let flows = ns
        .run(kubenft::conntrack::list_flows)
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let to_frontends = flows
        .iter()
        .filter(|f| f.proto == 17 && frontends.contains(&f.orig_dst));
    let stale_left = to_frontends
        .clone()
        .filter(|f| removed.contains(&f.reply_src.ip()))
        .count();
    let kept_left = to_frontends.count() - stale_left;
    drop(flows);

    eprintln!("conntrack: the idle daemon for {:?} …", config.idle);
    let cpu_before = cpu_time(daemon.pid());
    std::thread::sleep(config.idle);
    let idle_cpu = cpu_time(daemon.pid()).saturating_sub(cpu_before);

    // A restart: its first sync reads the table whatever changed.
    drop(daemon);
    let started = Instant::now();
    let mut restarted = Daemon::start(ns, kubeconfig, log.with_extension("restart.log"))?;
    let lines = restarted.wait_synced(0, FIRST_SYNC_WAIT)?;
    let cpu = cpu_time(restarted.pid());
    rows.push(row("restart: its first sync", &lines[0], cpu));
    eprintln!("conntrack: restarted and synced in {:?}", started.elapsed());
    let _ = std::fs::remove_file(log.with_extension("restart.log"));

    Ok(ConntrackRun {
        entries: config.entries,
        services: config.services,
        endpoints: config.endpoints,
        created: made.created,
        fill,
        walks,
        rows,
        stale_made: UDP_SERVICES * CLIENTS,
        stale_left,
        kept_made: udp.iter().map(|(_, e)| e.len()).sum::<usize>() * CLIENTS
            - UDP_SERVICES * CLIENTS,
        kept_left,
        idle: config.idle,
        idle_cpu,
    })
}
