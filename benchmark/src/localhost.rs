//! Loopback NodePorts (`--localhost-nodeports`): the real daemon with the
//! KubeProxyNFTablesLocalhostNodePorts gate and `--nodeport-addresses primary,localhost`, a
//! NodePort Service whose endpoint echoes, and clients in the node's own namespace. Three paths
//! side by side, interleaved so the machine's noise falls on all alike: the pod directly, the
//! NodePort on the node IP (kernel DNAT) and on 127.0.0.1 (the userspace proxy). For each:
//! new connections (connect + 1-byte echo) timed one by one, new connections per second from 1
//! and from 8 clients, and 1-byte round trips on one long-lived connection.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kubenft::lab::Topology;
use kubenft::netns::Netns;

use crate::churn::{CONNECTION_TIMEOUT, echo_until_closed, one_connection, spawn_daemon};
use crate::daemon::{self, ApiServer};
use crate::dataplane::{Latency, percentiles};
use crate::pod_server::{Answering, Server};
use crate::synthetic;

const NODE_PORT: u16 = 30080;
const POD_PORT: u16 = 9080;
/// How long each path's connections-per-second count runs in all, in RATE_ROUNDS turns.
const RATE_WINDOW: Duration = Duration::from_secs(3);
const RATE_ROUNDS: u32 = 10;
const PARALLEL: usize = 8;

/// One path's figures.
pub struct PathRow {
    pub path: &'static str,
    pub target: SocketAddr,
    pub connect: Latency,
    pub per_second_1: f64,
    pub per_second_8: f64,
    pub round_trip: Latency,
}

pub struct LocalhostRun {
    pub samples: usize,
    pub rows: Vec<PathRow>,
}

pub fn measure(samples: usize) -> Result<LocalhostRun, String> {
    let bin = daemon::binary()?;
    let topo = Topology::build("lnpb").map_err(|e| e.to_string())?;
    let _server = Server::start(
        &topo.pods[0],
        POD_PORT,
        Answering::ThreadEach,
        echo_until_closed,
    )?;
    let api = ApiServer::start_in(&topo.node, 1024)?;
    for object in cluster() {
        api.server.apply(&object).map_err(|e| e.to_string())?;
    }
    let kubeconfig = std::env::temp_dir().join(format!(
        "kubenft-bench-{}-localhost.kubeconfig",
        std::process::id()
    ));
    api.server
        .write_kubeconfig(&kubeconfig)
        .map_err(|e| e.to_string())?;
    let log = std::fs::File::create(kubeconfig.with_extension("log")).map_err(|e| e.to_string())?;
    let mut child = spawn_daemon(
        &bin,
        &topo.node,
        &kubeconfig,
        "1s",
        &[
            "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true",
            "--nodeport-addresses",
            "primary,localhost",
        ],
        log,
    )?;
    let paths: [(&'static str, SocketAddr); 3] = [
        (
            "pod directly",
            SocketAddr::from(([10, 244, 1, 2], POD_PORT)),
        ),
        (
            "NodePort on the node IP (kernel)",
            SocketAddr::from(([10, 0, 0, 1], NODE_PORT)),
        ),
        (
            "NodePort on 127.0.0.1 (userspace proxy)",
            SocketAddr::from(([127, 0, 0, 1], NODE_PORT)),
        ),
    ];
    let result = run(&topo.node, &paths, samples);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&kubeconfig);
    result.map(|rows| LocalhostRun { samples, rows })
}

/// The node, a NodePort Service and its one endpoint (the lab's first pod).
fn cluster() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": synthetic::NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
        }),
        serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "echo", "namespace": "bench"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "echo", "port": 80, "protocol": "TCP",
                                "targetPort": POD_PORT, "nodePort": NODE_PORT}]}
        }),
        serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "echo-x", "namespace": "bench",
                         "labels": {"kubernetes.io/service-name": "echo"}},
            "addressType": "IPv4",
            "ports": [{"name": "echo", "port": POD_PORT, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.244.1.2"], "nodeName": synthetic::NODE,
                           "conditions": {"ready": true}}]
        }),
    ]
}

fn run(
    node: &Netns,
    paths: &[(&'static str, SocketAddr)],
    samples: usize,
) -> Result<Vec<PathRow>, String> {
    let paths = paths.to_vec();
    node.run(move || {
        for &(_, to) in &paths {
            wait_answering(to)?;
        }
        // Interleaved: sample i of every path before sample i + 1 of any.
        let mut connect: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
        for _ in 0..samples {
            for (i, &(_, to)) in paths.iter().enumerate() {
                connect[i].push(connect_and_echo(to)?);
            }
        }
        let targets: Vec<SocketAddr> = paths.iter().map(|&(_, to)| to).collect();
        let one = per_second(&targets, 1);
        let eight = per_second(&targets, PARALLEL);
        let mut rows = Vec::new();
        for (i, &(path, target)) in paths.iter().enumerate() {
            rows.push(PathRow {
                path,
                target,
                connect: percentiles(std::mem::take(&mut connect[i])),
                per_second_1: one[i],
                per_second_8: eight[i],
                round_trip: round_trips(target, samples)?,
            });
        }
        Ok(rows)
    })
    .map_err(|e| e.to_string())?
}

fn wait_answering(to: SocketAddr) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match connect_and_echo(to) {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                return Err(format!("{to} not answering after 30 s: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// One new connection (connect, a byte echoed, close), timed.
fn connect_and_echo(to: SocketAddr) -> Result<Duration, String> {
    let start = Instant::now();
    one_connection(to, 7)?;
    Ok(start.elapsed())
}

/// New connections per second that `clients` threads complete back to back on each path, in
/// RATE_ROUNDS windows taken in turn: every relayed connection leaves a TIME_WAIT socket
/// toward the endpoint on the node (as a direct one does), and the kernel's search for a free
/// source port slows as they pile up, so no path may run on a cleaner table than another.
fn per_second(paths: &[SocketAddr], clients: usize) -> Vec<f64> {
    let mut done = vec![0usize; paths.len()];
    let mut spent = vec![Duration::ZERO; paths.len()];
    for _ in 0..RATE_ROUNDS {
        for (i, &to) in paths.iter().enumerate() {
            let count = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let start = Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..clients {
                    let (count, stop) = (Arc::clone(&count), Arc::clone(&stop));
                    scope.spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            if connect_and_echo(to).is_ok() {
                                count.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
                std::thread::sleep(RATE_WINDOW / RATE_ROUNDS);
                stop.store(true, Ordering::Relaxed);
            });
            spent[i] += start.elapsed();
            done[i] += count.load(Ordering::Relaxed);
        }
    }
    done.iter()
        .zip(&spent)
        .map(|(&n, t)| n as f64 / t.as_secs_f64())
        .collect()
}

/// `samples` 1-byte round trips on one connection.
fn round_trips(to: SocketAddr, samples: usize) -> Result<Latency, String> {
    let mut s = TcpStream::connect_timeout(&to, CONNECTION_TIMEOUT)
        .map_err(|e| format!("connecting to {to}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(CONNECTION_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut times = Vec::with_capacity(samples);
    let mut b = [7u8];
    for _ in 0..samples {
        // The socket options are set once, above: `churn::echo` sets them per call, which
        // would time two more system calls per round trip.
        let start = Instant::now();
        s.write_all(&b).map_err(|e| format!("{to}: write: {e}"))?;
        s.read_exact(&mut b)
            .map_err(|e| format!("{to}: echo: {e}"))?;
        times.push(start.elapsed());
    }
    Ok(percentiles(times))
}

pub fn table(run: &LocalhostRun) -> String {
    let us = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e6);
    let mut out = String::from(
        "| Path (from the node's namespace) | new connection p50 / p99 (µs) | new connections/s, 1 client | 8 clients | round trip on an open connection p50 / p99 (µs) |\n\
         |---|---|---|---|---|\n",
    );
    for r in &run.rows {
        let _ = writeln!(
            out,
            "| {} `{}` | {} / {} | {:.0} | {:.0} | {} / {} |",
            r.path,
            r.target,
            us(r.connect.p50),
            us(r.connect.p99),
            r.per_second_1,
            r.per_second_8,
            us(r.round_trip.p50),
            us(r.round_trip.p99),
        );
    }
    let _ = writeln!(
        out,
        "\n{} interleaved samples per path for the latencies; {} s per path for each connection \
         rate, in {} turns alternating between the paths.",
        run.samples,
        RATE_WINDOW.as_secs(),
        RATE_ROUNDS
    );
    out
}
