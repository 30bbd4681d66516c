//! Sustained churn at scale: the real daemon on the node of the standard lab holds a synthetic
//! cluster served by the test API server; a client in its own namespace keeps connecting to 20
//! of the Services (their endpoints are addresses of the lab's two pods, every packet through
//! the node's rules), while the endpoints of the other Services change through the API at a
//! steady rate. Each change gives one endpoint a fresh address, so the kernel's own
//! notification of the element that carries it (nf_tables' multicast group, read over netlink
//! in the node's namespace: no polling) says when that change was programmed.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kubenft::lab::{Topology, sh};
use kubenft::netlink::socket::split_messages;
use kubenft::netns::Netns;
use kubenft::nft::kernel::decode::{self, RawData};
use kubenft::nft::kernel::sys::{NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWSETELEM};
use kubenft_testkit::Kind;
use netlink_sys::{Socket, protocols::NETLINK_NETFILTER};

use crate::daemon::{self, ApiServer, FIRST_SYNC_WAIT, field, status_mib};
use crate::pod_server::{Answering, Server};
use crate::synthetic;

/// Services that receive connections throughout; never changed.
pub const CONNECTED: usize = 20;
/// Their endpoints' port: an echo server on each pod.
pub(crate) const BACKEND_PORT: u16 = 9000;
/// New connections per second, round-robin over the connected Services (a steady load that
/// leaves the machine's two cores to the daemon and the writer).
const CONNECTIONS_PER_SECOND: u64 = 100;
/// The long-lived connections (one per connected Service) echo a byte this often.
const LONG_LIVED_EVERY: Duration = Duration::from_millis(100);
/// How long one connection may take to connect, or to echo its byte.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// After the last write, how long changes not yet seen in the kernel are waited for.
const SETTLE: Duration = Duration::from_secs(30);

/// New endpoint addresses: 10.200.0.0 + n, inside the synthetic cluster CIDR (10.128.0.0/9),
/// above every synthetic endpoint (10.128.0.1 + i) and below the lab's pods (10.244.0.0/16).
const CHURN_BASE: u32 = 0x0ac8_0000;
/// Addresses available for changes (10.200.0.0 – 10.215.255.255).
pub const CHURN_SPACE: usize = 1 << 20;

/// The address of change `k`'s new endpoint.
pub fn churn_ip(k: usize) -> Ipv4Addr {
    assert!(k < CHURN_SPACE, "change {k} beyond the churn address space");
    Ipv4Addr::from(CHURN_BASE + k as u32)
}

/// The change whose new endpoint has this address, if it is one.
pub fn churn_index(addr: Ipv4Addr) -> Option<usize> {
    let k = u32::from(addr).checked_sub(CHURN_BASE)? as usize;
    (k < CHURN_SPACE).then_some(k)
}

/// Endpoint `e` of connected Service `j`: an address of pod 1 or 2 (alternating), from .10 up.
pub(crate) fn backend_ip(j: usize, e: usize, endpoints: usize) -> Ipv4Addr {
    let a = j * endpoints + e;
    Ipv4Addr::new(10, 244, (a % 2 + 1) as u8, (10 + a / 2) as u8)
}

/// The most endpoints per Service the connected ones can have: their addresses are .10 to
/// .249 of the two pods.
pub const MAX_ENDPOINTS: usize = 480 / CONNECTED;

/// The indices of the connected Services, spread over the cluster.
pub fn connected(services: usize) -> Vec<usize> {
    (0..CONNECTED).map(|j| j * services / CONNECTED).collect()
}

/// A Go-style duration as the daemon's flags take it: `1s`, `250ms`, `1.5s`, `2m`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// Nearest-rank percentiles (the smallest value with at least q of the samples at or below
/// it); `None` without samples.
pub fn spread(mut v: Vec<Duration>) -> Option<Spread> {
    if v.is_empty() {
        return None;
    }
    v.sort();
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Spread {
        p50: at(0.50),
        p99: at(0.99),
        max: v[v.len() - 1],
    })
}

pub struct Config {
    pub services: usize,
    pub endpoints: usize,
    /// Changes per second asked of the writer.
    pub rate: usize,
    pub seconds: u64,
    /// Passed to the daemon as `--min-sync-period`.
    pub min_sync_period: String,
}

impl Config {
    /// Refuses what the bench cannot measure honestly.
    pub fn check(&self) -> Result<Duration, String> {
        let period = parse_duration(&self.min_sync_period).ok_or_else(|| {
            format!(
                "--churn-min-sync-period {}: expected a duration like 1s or 250ms",
                self.min_sync_period
            )
        })?;
        if self.services <= 2 * CONNECTED {
            return Err(format!(
                "--churn: more than {} services needed ({CONNECTED} keep their endpoints)",
                2 * CONNECTED
            ));
        }
        if !(1..=MAX_ENDPOINTS).contains(&self.endpoints) {
            return Err(format!(
                "--churn: 1 to {MAX_ENDPOINTS} endpoints per service (the connected services' \
                 endpoints are addresses of the lab's two pods)"
            ));
        }
        // Synthetic endpoints are 10.128.0.1 + i: they must stay below the churn addresses.
        if self.services * self.endpoints >= (CHURN_BASE - 0x0a80_0000) as usize {
            return Err("--churn: too many endpoints for the synthetic address plan".into());
        }
        if self.rate == 0 || self.seconds == 0 || self.changes() > CHURN_SPACE {
            return Err(format!(
                "--churn-rate × --churn-seconds: 1 to {CHURN_SPACE} changes"
            ));
        }
        Ok(period)
    }

    pub fn changes(&self) -> usize {
        self.rate * self.seconds as usize
    }
}

#[derive(Debug, Default, Clone)]
pub struct Traffic {
    /// New connections (connect, one byte echoed, close) and how many failed.
    pub connections: usize,
    pub failed: usize,
    /// Bytes echoed over the long-lived connections, and how many of those failed (the
    /// connection is then opened again).
    pub round_trips: usize,
    pub long_failed: usize,
    /// The first few failures, for the report.
    pub errors: Vec<String>,
}

impl Traffic {
    fn error(&mut self, what: String) {
        if self.errors.len() < 5 {
            self.errors.push(what);
        }
    }
}

/// What the daemon's log says of the syncs during the churn.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LoggedSyncs {
    pub partial: usize,
    /// Full syncs after the first one.
    pub full: usize,
    /// `sync failed` lines over the daemon's whole run.
    pub failed: usize,
    /// The syncs' own durations (model update, planning, commit), of which the model update
    /// and the kernel's round trip; the after-sync steps that follow the commit; their
    /// operation counts.
    pub seconds: Option<Spread>,
    pub model: Option<Spread>,
    pub kernel: Option<Spread>,
    pub after_sync: Option<Spread>,
    pub ops_p50: usize,
    pub ops_max: usize,
}

/// The daemon's log from its `skip_partial`-th partial sync on (the syncs before the churn
/// are not counted), failures over the whole log.
pub fn logged_syncs(log: &str, skip_partial: usize) -> LoggedSyncs {
    let synced: Vec<&str> = log.lines().filter(|l| l.contains(" synced ")).collect();
    let partial: Vec<&str> = synced
        .iter()
        .copied()
        .filter(|l| l.contains("kind=Partial"))
        .skip(skip_partial)
        .collect();
    let mut ops: Vec<usize> = partial
        .iter()
        .filter_map(|l| field(l, "ops")?.parse().ok())
        .collect();
    ops.sort_unstable();
    let durations = |key: &str| {
        spread(
            partial
                .iter()
                .filter_map(|l| field(l, key)?.parse().ok())
                .map(Duration::from_secs_f64)
                .collect(),
        )
    };
    LoggedSyncs {
        partial: partial.len(),
        full: synced
            .iter()
            .filter(|l| l.contains("kind=Full"))
            .count()
            .saturating_sub(1),
        failed: log.lines().filter(|l| l.contains("sync failed")).count(),
        seconds: durations("seconds"),
        model: durations("model_seconds"),
        kernel: durations("kernel_seconds"),
        after_sync: durations("after_sync_seconds"),
        ops_p50: ops
            .get(ops.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0),
        ops_max: ops.last().copied().unwrap_or(0),
    }
}

pub struct ChurnRun {
    pub services: usize,
    pub endpoints: usize,
    pub rate: usize,
    pub seconds: u64,
    pub min_sync_period: Duration,
    /// Changes written, and at what rate the writer managed them (first to last write).
    pub written: usize,
    pub achieved_rate: f64,
    /// How far behind its schedule the writer fell at worst.
    pub writer_lag: Duration,
    /// API write → the kernel's notification of the change, over the changes seen.
    pub programmed: Option<Spread>,
    /// Changes written but never seen in the kernel within `SETTLE` of the last write.
    pub unseen: usize,
    /// Notifications lost because the monitor's socket buffer overflowed (ENOBUFS): changes
    /// may then be reported unseen that were programmed.
    pub monitor_overruns: usize,
    pub traffic: Traffic,
    pub syncs: LoggedSyncs,
    /// The daemon's VmRSS at the first write, after half of the writes, after the last change
    /// was programmed; and its VmHWM then.
    pub rss_mib: [f64; 3],
    pub peak_rss_mib: f64,
}

impl ChurnRun {
    /// The bar: p99 of API write → programmed within the minimum sync period plus 100 ms,
    /// with every change programmed.
    pub fn bar(&self) -> Duration {
        self.min_sync_period + Duration::from_millis(100)
    }

    pub fn passes(&self) -> bool {
        self.unseen == 0 && self.programmed.is_some_and(|p| p.p99 <= self.bar())
    }
}

/// The echo backends' answer: each byte sent back, until the client closes.
pub(crate) fn echo_until_closed(mut s: TcpStream) {
    let mut b = [0u8; 1];
    while s.read_exact(&mut b).is_ok() && s.write_all(&b).is_ok() {}
}

/// One new connection: connect, one byte echoed, close.
pub(crate) fn one_connection(to: SocketAddr, byte: u8) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&to, CONNECTION_TIMEOUT)
        .map_err(|e| format!("{to}: connect: {e}"))?;
    echo(&mut s, byte).map_err(|e| format!("{to}: {e}"))
}

pub(crate) fn echo(s: &mut TcpStream, byte: u8) -> Result<(), String> {
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(CONNECTION_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.write_all(&[byte]).map_err(|e| format!("write: {e}"))?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).map_err(|e| format!("echo: {e}"))?;
    if b[0] != byte {
        return Err(format!("echoed {} for {byte}", b[0]));
    }
    Ok(())
}

/// New connections round-robin over `targets`, paced at CONNECTIONS_PER_SECOND, until `stop`.
fn new_connections(targets: Vec<SocketAddr>, stop: Arc<AtomicBool>) -> Traffic {
    let mut t = Traffic::default();
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let to = targets[t.connections % targets.len()];
        if let Err(e) = one_connection(to, t.connections as u8) {
            t.failed += 1;
            t.error(e);
        }
        t.connections += 1;
        let due = start + Duration::from_secs(t.connections as u64) / CONNECTIONS_PER_SECOND as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    t
}

/// One connection per target kept open, each echoing a byte every LONG_LIVED_EVERY, until
/// `stop`; a failed one is counted and opened again.
fn long_lived_connections(targets: Vec<SocketAddr>, stop: Arc<AtomicBool>) -> Traffic {
    let mut t = Traffic::default();
    let mut open: Vec<Option<TcpStream>> = targets.iter().map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        for (to, conn) in targets.iter().zip(open.iter_mut()) {
            let byte = t.round_trips as u8;
            let result = match conn {
                Some(s) => echo(s, byte),
                None => TcpStream::connect_timeout(to, CONNECTION_TIMEOUT)
                    .map_err(|e| format!("connect: {e}"))
                    .and_then(|mut s| {
                        let r = echo(&mut s, byte);
                        *conn = Some(s);
                        r
                    }),
            };
            t.round_trips += 1;
            if let Err(e) = result {
                t.long_failed += 1;
                t.error(format!("{to} (long-lived): {e}"));
                *conn = None;
            }
        }
        std::thread::sleep(LONG_LIVED_EVERY);
    }
    t
}

/// Changes seen in the kernel: for change k, nanoseconds after `base` at which the first
/// element carrying its address was notified (0: not yet).
pub(crate) type Seen = Arc<Vec<AtomicU64>>;

/// nf_tables' notification group (`NFNLGRP_NFTABLES`, linux/netfilter/nfnetlink.h).
const NFNLGRP_NFTABLES: u32 = 7;

/// A socket in `ns` subscribed to nf_tables' notifications, with a large receive buffer (a
/// sync of hundreds of changes notifies thousands of elements at once) and a short receive
/// timeout (so the reader notices when to stop).
pub(crate) fn monitor_socket(ns: &Netns) -> Result<Socket, String> {
    ns.run(|| -> std::io::Result<Socket> {
        let mut s = Socket::new(NETLINK_NETFILTER)?;
        s.bind_auto()?;
        s.add_membership(NFNLGRP_NFTABLES)?;
        let fd = s.as_raw_fd();
        let set = |option: libc::c_int, value: &[u8]| {
            // SAFETY: a valid socket and an option value of the size the option expects.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    option,
                    value.as_ptr().cast(),
                    value.len() as libc::socklen_t,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        set(libc::SO_RCVBUFFORCE, &(64i32 << 20).to_ne_bytes())?;
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: timeval is plain data; its bytes are what SO_RCVTIMEO reads.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&raw const timeout).cast::<u8>(),
                std::mem::size_of::<libc::timeval>(),
            )
        };
        set(libc::SO_RCVTIMEO, bytes)?;
        Ok(s)
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("nf_tables monitor socket: {e}"))
}

/// The change whose address begins an element's key or data (the slot maps' data is
/// `address . port`, the hairpin set's key `address . …`).
fn change_of(e: &decode::RawElem) -> Option<usize> {
    let first4 = |b: &[u8]| Some(Ipv4Addr::from(<[u8; 4]>::try_from(b.get(..4)?).ok()?));
    let data = match &e.data {
        Some(RawData::Value(v)) => first4(v).and_then(churn_index),
        _ => None,
    };
    data.or_else(|| first4(&e.key).and_then(churn_index))
}

/// Reads notifications until `stop`, marking each change when an element carrying its
/// address is added; returns the overruns (ENOBUFS: notifications lost).
pub(crate) fn monitor(sock: Socket, seen: Seen, base: Instant, stop: Arc<AtomicBool>) -> usize {
    let mut overruns = 0;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    while !stop.load(Ordering::Relaxed) {
        buf.clear();
        match sock.recv(&mut buf, 0) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                overruns += 1;
                continue;
            }
            Err(_) => continue, // the timeout: look at `stop`
        }
        let at = base.elapsed().as_nanos().max(1) as u64;
        let Ok(messages) = split_messages(&buf) else {
            continue;
        };
        for m in messages {
            if m.subsys_msg(NFNL_SUBSYS_NFTABLES) != Some(NFT_MSG_NEWSETELEM) {
                continue;
            }
            let Ok((_, _, attrs)) = m.nfgen() else {
                continue;
            };
            let Ok((_, elems)) = decode::set_elems(attrs) else {
                continue;
            };
            for k in elems.iter().filter_map(change_of) {
                if let Some(slot) = seen.get(k) {
                    let _ = slot.compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed);
                }
            }
        }
    }
    overruns
}

/// Writes the connected Services' EndpointSlices: `endpoints` addresses of the pods, port
/// BACKEND_PORT; with `udp`, the Services and their slices get a second port, UDP 53 → that
/// port.
pub(crate) fn connect_services(
    api: &ApiServer,
    services: usize,
    endpoints: usize,
    udp: Option<u16>,
) -> Result<(), String> {
    for (j, s) in connected(services).into_iter().enumerate() {
        let n = synthetic::service_name(s);
        let mut ports =
            vec![serde_json::json!({"name": "http", "port": BACKEND_PORT, "protocol": "TCP"})];
        if let Some(port) = udp {
            ports.push(serde_json::json!({"name": "dns", "port": port, "protocol": "UDP"}));
            let ip = synthetic::service_ip(s).to_string();
            let service = serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": n.name, "namespace": n.namespace},
                "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [
                    {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": port},
                ]},
            });
            api.server.apply(&service).map_err(|e| e.to_string())?;
        }
        let slice = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{}-x", n.name), "namespace": n.namespace,
                         "labels": {"kubernetes.io/service-name": n.name}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": (0..endpoints).map(|e| serde_json::json!({
                "addresses": [backend_ip(j, e, endpoints).to_string()],
                "nodeName": synthetic::NODE, "conditions": {"ready": true},
            })).collect::<Vec<_>>(),
        });
        api.server.apply(&slice).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Change `k`: endpoint `k / n mod endpoints` of the k-th churned Service (round-robin, so a
/// Service changes again only after every other one did) gets the address `churn_ip(k)`.
pub(crate) fn change(
    api: &ApiServer,
    churned: &[usize],
    endpoints: usize,
    k: usize,
) -> Result<(), String> {
    let n = synthetic::service_name(churned[k % churned.len()]);
    let name = format!("{}-x", n.name);
    let mut slice = api
        .server
        .get(Kind::EndpointSlice, Some(&n.namespace), &name)
        .ok_or_else(|| format!("EndpointSlice {}/{name} is not stored", n.namespace))?;
    let e = (k / churned.len()) % endpoints;
    let endpoint = slice
        .get_mut("endpoints")
        .and_then(|l| l.get_mut(e))
        .ok_or_else(|| format!("EndpointSlice {}/{name} has no endpoint {e}", n.namespace))?;
    endpoint["addresses"] = serde_json::json!([churn_ip(k).to_string()]);
    api.server.apply(&slice).map_err(|e| e.to_string())?;
    Ok(())
}

/// The lab: pods with the connected Services' endpoint addresses and an echo server each; the
/// client routes the whole service range through the node.
pub(crate) fn lab(tag: &str, endpoints: usize) -> Result<(Topology, Vec<Server>), String> {
    let topo = Topology::build(tag).map_err(|e| e.to_string())?;
    sh(&topo.client, "ip route add 10.96.0.0/12 via 10.0.0.1");
    let mut backends = Vec::new();
    for (p, pod) in topo.pods.iter().enumerate() {
        let script: String = (0..CONNECTED)
            .flat_map(|j| (0..endpoints).map(move |e| backend_ip(j, e, endpoints)))
            .filter(|ip| usize::from(ip.octets()[2]) == p + 1)
            .map(|ip| format!("addr add {ip}/24 dev eth0\n"))
            .collect();
        pod.exec_with_stdin(&["ip", "-batch", "-"], &script)
            .map_err(|e| e.to_string())?;
        // Every connection on a thread of its own: the long-lived ones stay open.
        backends.push(Server::start(
            pod,
            BACKEND_PORT,
            Answering::ThreadEach,
            echo_until_closed,
        )?);
    }
    Ok((topo, backends))
}

/// Waits until every target answers one connection from the client.
pub(crate) fn wait_answering(client: &Netns, targets: &[SocketAddr]) -> Result<(), String> {
    let targets = targets.to_vec();
    client
        .run(move || {
            let start = Instant::now();
            for &to in &targets {
                loop {
                    match one_connection(to, 1) {
                        Ok(()) => break,
                        Err(e) if start.elapsed() > Duration::from_secs(60) => {
                            return Err(format!("not answering after 60 s: {e}"));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(100)),
                    }
                }
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?
}

pub fn measure(config: &Config) -> Result<ChurnRun, String> {
    let min_sync_period = config.check()?;
    let (services, endpoints) = (config.services, config.endpoints);
    let bin = daemon::binary()?;
    let (topo, backends) = lab("chrn", endpoints)?;
    // Every write of the churn is kept for watches to resume from.
    let api = ApiServer::start_in(&topo.node, config.changes() + 1024)?;
    api.load(services, endpoints)?;
    connect_services(&api, services, endpoints, None)?;
    let kubeconfig = std::env::temp_dir().join(format!(
        "kubenft-bench-{}-churn-{services}x{endpoints}.kubeconfig",
        std::process::id()
    ));
    api.server
        .write_kubeconfig(&kubeconfig)
        .map_err(|e| e.to_string())?;
    let log_path = kubeconfig.with_extension("log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let mut child = Daemon(spawn_daemon(
        &bin,
        &topo.node,
        &kubeconfig,
        &config.min_sync_period,
        &[],
        log,
    )?);
    // `ip netns exec` execs the daemon in place, so the child's pid is the daemon's.
    let pid = child.0.id();
    let result = churn(config, min_sync_period, &topo, &api, &log_path, pid, || {
        child.0.try_wait().ok().flatten()
    });
    drop(child);
    drop(backends);
    drop(api);
    drop(topo);
    let _ = std::fs::remove_file(&kubeconfig);
    // The evidence for the failed-sync count.
    eprintln!("the daemon's log: {}", log_path.display());
    result
}

/// `kubenft run` in `node` against the test API server of `kubeconfig`, on the synthetic
/// cluster's node, logging to `log`.
pub(crate) fn spawn_daemon(
    bin: &std::path::Path,
    node: &Netns,
    kubeconfig: &std::path::Path,
    min_sync_period: &str,
    extra: &[&str],
    log: std::fs::File,
) -> Result<std::process::Child, String> {
    Command::new("ip")
        .args(["netns", "exec", node.name()])
        .arg(bin)
        .args(["run", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--hostname-override", synthetic::NODE])
        .args(["--cluster-cidr", synthetic::CLUSTER_CIDR])
        .args(["--min-sync-period", min_sync_period])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))
}

/// The daemon's process, killed when dropped (also when the bench panics).
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn churn(
    config: &Config,
    min_sync_period: Duration,
    topo: &Topology,
    api: &ApiServer,
    log_path: &std::path::Path,
    pid: u32,
    mut exited: impl FnMut() -> Option<std::process::ExitStatus>,
) -> Result<ChurnRun, String> {
    let (services, endpoints) = (config.services, config.endpoints);
    let read_log = || std::fs::read_to_string(log_path).unwrap_or_default();
    let start = Instant::now();
    loop {
        let text = read_log();
        if text
            .lines()
            .any(|l| l.contains(" synced ") && l.contains("kind=Full"))
        {
            break;
        }
        if let Some(status) = exited() {
            return Err(format!("the daemon exited ({status}):\n{text}"));
        }
        if start.elapsed() > FIRST_SYNC_WAIT {
            return Err(format!("no first sync within {FIRST_SYNC_WAIT:?}:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let targets: Vec<SocketAddr> = connected(services)
        .into_iter()
        .map(|s| SocketAddr::from((synthetic::service_ip(s), 80)))
        .collect();
    wait_answering(&topo.client, &targets)?;

    let base = Instant::now();
    let seen: Seen = Arc::new((0..config.changes()).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (sock, seen, stop) = (monitor_socket(&topo.node)?, seen.clone(), stop.clone());
        std::thread::spawn(move || monitor(sock, seen, base, stop))
    };
    let traffic: Vec<JoinHandle<_>> = [
        new_connections as fn(Vec<SocketAddr>, Arc<AtomicBool>) -> Traffic,
        long_lived_connections,
    ]
    .into_iter()
    .map(|f| {
        let (targets, stop) = (targets.clone(), stop.clone());
        topo.client.spawn(move || f(targets, stop))
    })
    .collect::<Result<_, _>>()
    .map_err(|e| e.to_string())?;

    let partial_before = logged_syncs(&read_log(), 0).partial;
    let churned: Vec<usize> = {
        let keep = connected(services);
        (0..services).filter(|s| !keep.contains(s)).collect()
    };
    let total = config.changes();
    // Per change written: nanoseconds after `base`, just before its write.
    let mut written: Vec<u64> = Vec::with_capacity(total);
    let mut rss = [status_mib(pid, "VmRSS:"); 3];
    let mut writer_lag = Duration::ZERO;
    let mut write_error = None;
    let first_write = Instant::now();
    let mut last_write = first_write;
    for k in 0..total {
        let due = first_write + Duration::from_secs(k as u64) / config.rate as u32;
        let now = Instant::now();
        match due.checked_duration_since(now) {
            Some(wait) => std::thread::sleep(wait),
            None => writer_lag = writer_lag.max(now - due),
        }
        if k == total / 2 {
            rss[1] = status_mib(pid, "VmRSS:");
        }
        last_write = Instant::now();
        if let Err(e) = change(api, &churned, endpoints, k) {
            write_error = Some(e);
            break;
        }
        written.push(last_write.duration_since(base).as_nanos() as u64);
    }
    let count = written.len();
    let unseen = |seen: &Seen| {
        seen[..count]
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) == 0)
            .count()
    };
    let settle = Instant::now();
    while unseen(&seen) > 0 && settle.elapsed() < SETTLE && exited().is_none() {
        std::thread::sleep(Duration::from_millis(100));
    }
    rss[2] = status_mib(pid, "VmRSS:");
    let peak_rss_mib = status_mib(pid, "VmHWM:");
    stop.store(true, Ordering::Relaxed);
    let mut total_traffic = Traffic::default();
    for t in traffic {
        let t = t
            .join()
            .map_err(|_| "a client thread panicked".to_string())?
            .map_err(|e| e.to_string())?;
        total_traffic.connections += t.connections;
        total_traffic.failed += t.failed;
        total_traffic.round_trips += t.round_trips;
        total_traffic.long_failed += t.long_failed;
        total_traffic.errors.extend(t.errors);
    }
    let monitor_overruns = monitor.join().unwrap_or(0);
    if let Some(e) = write_error {
        return Err(format!("writing change {count}: {e}"));
    }
    let programmed = spread(
        written
            .iter()
            .zip(seen.iter())
            .filter_map(|(&w, s)| {
                let at = s.load(Ordering::Relaxed);
                (at != 0).then(|| Duration::from_nanos(at.saturating_sub(w)))
            })
            .collect(),
    );
    let elapsed = last_write.duration_since(first_write).as_secs_f64();
    Ok(ChurnRun {
        services,
        endpoints,
        rate: config.rate,
        seconds: config.seconds,
        min_sync_period,
        written: count,
        achieved_rate: if elapsed > 0.0 {
            (count.saturating_sub(1)) as f64 / elapsed
        } else {
            0.0
        },
        writer_lag,
        programmed,
        unseen: unseen(&seen),
        monitor_overruns,
        traffic: total_traffic,
        syncs: logged_syncs(&read_log(), partial_before),
        rss_mib: rss,
        peak_rss_mib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).rev().map(|i| i * MS).collect();
        let s = spread(v).unwrap();
        assert_eq!((s.p50, s.p99, s.max), (50 * MS, 99 * MS, 100 * MS));
        let one = spread(vec![7 * MS]).unwrap();
        assert_eq!((one.p50, one.p99, one.max), (7 * MS, 7 * MS, 7 * MS));
        // 1,000 samples with 11 slow ones: the p99 is among the slow ones.
        let mut v = vec![MS; 989];
        v.extend(std::iter::repeat_n(900 * MS, 11));
        assert_eq!(spread(v).unwrap().p99, 900 * MS);
        assert_eq!(spread(vec![]), None);
    }

    #[test]
    fn durations_parse_like_the_daemons_flags() {
        assert_eq!(parse_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Some(250 * MS));
        assert_eq!(parse_duration("1.5s"), Some(1500 * MS));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        for bad in ["1", "s", "1h", "-1s", "fast"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn churn_addresses_map_back_to_their_change_and_nothing_else_does() {
        for k in [0, 1, 255, 256, 30_000, CHURN_SPACE - 1] {
            assert_eq!(churn_index(churn_ip(k)), Some(k));
        }
        assert_eq!(churn_ip(0), Ipv4Addr::new(10, 200, 0, 0));
        // Synthetic endpoints, the lab's pods and its node are not changes.
        for other in [
            Ipv4Addr::new(10, 128, 0, 1),
            Ipv4Addr::new(10, 199, 255, 255),
            Ipv4Addr::new(10, 216, 0, 0),
            backend_ip(CONNECTED - 1, MAX_ENDPOINTS - 1, MAX_ENDPOINTS),
            Ipv4Addr::new(10, 0, 0, 1),
        ] {
            assert_eq!(churn_index(other), None, "{other}");
        }
    }

    #[test]
    fn connected_backends_are_distinct_pod_addresses() {
        let mut all = std::collections::BTreeSet::new();
        for j in 0..CONNECTED {
            for e in 0..MAX_ENDPOINTS {
                let ip = backend_ip(j, e, MAX_ENDPOINTS);
                let [a, b, c, d] = ip.octets();
                assert!((a, b) == (10, 244) && (1..=2).contains(&c) && (10..=249).contains(&d));
                assert!(all.insert(ip), "{ip} twice");
            }
        }
        assert_eq!(connected(10_000)[..3], [0, 500, 1000]);
    }

    #[test]
    fn an_element_is_matched_by_the_address_in_its_data_or_key() {
        let addr = |k| churn_ip(k).octets().to_vec();
        let elem = |key: Vec<u8>, data: Option<Vec<u8>>| decode::RawElem {
            key,
            key_end: None,
            data: data.map(RawData::Value),
            flags: 0,
            comment: None,
            expiration_ms: None,
        };
        // A slot: ClusterIP . proto . port . slot → address . port.
        let slot_key = [10, 96, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0, 0, 0, 0, 3].to_vec();
        let mut data = addr(42);
        data.extend([0x1f, 0x90, 0, 0]);
        assert_eq!(change_of(&elem(slot_key.clone(), Some(data))), Some(42));
        assert_eq!(change_of(&elem(addr(7), None)), Some(7));
        assert_eq!(change_of(&elem(slot_key, None)), None);
    }

    #[test]
    fn the_log_counts_syncs_after_the_churn_started_and_every_failure() {
        let log = "\
T1 INFO synced kind=Full ops=9 bytes=1 seconds=3.0 model_seconds=1
T2 INFO synced kind=Partial ops=5 bytes=1 seconds=0.5
T3 ERROR sync failed error=x
T4 INFO synced kind=Partial ops=40 bytes=1 seconds=0.020 model_seconds=0.002 kernel_seconds=0.009
T5 INFO synced kind=Partial ops=60 bytes=1 seconds=0.040
T6 INFO synced kind=Partial ops=50 bytes=1 seconds=0.030
T7 INFO synced kind=Full ops=3 bytes=1 seconds=2.0
";
        let s = logged_syncs(log, 1);
        assert_eq!((s.partial, s.full, s.failed), (3, 1, 1));
        assert_eq!((s.ops_p50, s.ops_max), (50, 60));
        let secs = s.seconds.unwrap();
        assert_eq!((secs.p50, secs.max), (30 * MS, 40 * MS));
        assert_eq!(s.model.unwrap().max, 2 * MS);
        assert_eq!(s.kernel.unwrap().p50, 9 * MS);
        assert_eq!(s.after_sync, None);
    }
}
