//! The data plane: real TCP connections through a node namespace programmed with a synthetic
//! cluster. New-connection latency (connect + 1-byte echo) to a service through kubenft's
//! table and through kube-proxy's iptables-mode chains, against the pod reached directly; and
//! how numgen spreads connections over a service's endpoints.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kubenft::cluster::ClusterState;
use kubenft::lab::{Topology, sh};
use kubenft::nft::kernel::Nftables;
use kubenft::proxier::build;
use kubenft::sync::Syncer;

use crate::control::{iptables_ruleset, run_with_stdin};
use crate::pod_server::{Answering, Server};
use crate::synthetic::{self, cluster, config};

/// The lab's first pod, where the measured service's endpoints live.
const POD: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 2);
const ECHO_PORT: u16 = 9000;
const SPREAD_PORT: u16 = 9001;

fn echo_one_byte(mut s: TcpStream) {
    let mut b = [0u8; 1];
    if s.read_exact(&mut b).is_ok() {
        let _ = s.write_all(&b);
    }
}

fn tell_local_address(mut s: TcpStream) {
    if let Ok(local) = s.local_addr() {
        let _ = writeln!(s, "{}", local.ip());
    }
}

#[derive(Clone, Copy, Default)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
}

pub(crate) fn percentiles(mut v: Vec<Duration>) -> Latency {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Latency {
        p50: at(0.50),
        p99: at(0.99),
    }
}

pub struct LatencyRow {
    pub services: usize,
    /// The pod's address through a node without any ruleset (no conntrack).
    pub direct: Latency,
    /// The pod's address through the node holding kubenft's table.
    pub pod_via_kubenft: Latency,
    pub kubenft: Latency,
    pub iptables: Option<Latency>,
}

/// `n` connections from the calling thread (inside the client namespace), each timed from
/// connect to the echoed byte.
fn connect_and_echo(to: SocketAddr, n: usize) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let start = Instant::now();
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2))
                .unwrap_or_else(|e| panic!("connecting to {to}: {e}"));
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.write_all(&[7]).unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b)
                .unwrap_or_else(|e| panic!("echo from {to}: {e}"));
            start.elapsed()
        })
        .collect()
}

/// A lab whose first pod echoes on ECHO_PORT and whose client can also reach pods directly.
struct EchoLab {
    topo: Topology,
    _server: Server,
    target: SocketAddr,
}

fn echo_lab(tag: &str, target: SocketAddr) -> EchoLab {
    let topo = Topology::build(tag).expect("lab");
    sh(&topo.client, "ip route add 10.244.0.0/16 via 10.0.0.1");
    let server = Server::start(&topo.pods[0], ECHO_PORT, Answering::InTurn, echo_one_byte)
        .expect("echo server");
    EchoLab {
        topo,
        _server: server,
        target,
    }
}

/// `services` one-endpoint services; the last one in iteration order (the last rule of
/// iptables' KUBE-SERVICES, its worst case) is served by the lab's first pod.
fn latency_cluster(services: usize) -> (ClusterState, SocketAddr) {
    let mut state = cluster(services, 1);
    let (last, sp) = state.services.iter().next_back().expect("a service");
    let vip = SocketAddr::new(sp.cluster_ips[0], sp.port);
    let last = last.clone();
    state.endpoints.insert(
        last,
        vec![synthetic::endpoint(IpAddr::V4(POD), ECHO_PORT, 1)],
    );
    (state, vip)
}

/// The labs measuring one table size: kubenft's and, if asked, iptables' node holding it.
struct ScaleLabs {
    services: usize,
    kubenft: EchoLab,
    iptables: Option<EchoLab>,
}

fn scale_labs(services: usize, with_iptables: bool) -> ScaleLabs {
    let (state, vip) = latency_cluster(services);
    let kubenft = echo_lab("lnft", vip);
    let tables = build(&state, &config());
    kubenft
        .topo
        .node
        .run(move || {
            Syncer::new(Nftables::open().unwrap(), "kubenft")
                .sync(tables, true)
                .expect("programming kubenft")
        })
        .unwrap();
    let iptables = with_iptables.then(|| {
        let lab = echo_lab("lipt", vip);
        run_with_stdin(
            &lab.topo.node,
            "iptables-restore",
            &[],
            &iptables_ruleset(&state),
        );
        lab
    });
    ScaleLabs {
        services,
        kubenft,
        iptables,
    }
}

/// One row per table size. Every lab is built first, then all paths of all sizes are
/// measured in interleaved batches, so every figure, and above all the comparison between
/// sizes, sees the same machine noise (tearing down a big namespace, say, keeps the kernel
/// busy for seconds). The pod is also reached directly through each kubenft node: its table
/// turns conntrack on for every packet, so the difference between that path and the service
/// is the service translation alone.
pub fn latency(scales: &[usize], samples: usize, with_iptables: bool) -> Vec<LatencyRow> {
    let direct = echo_lab("ldir", SocketAddr::from((POD, ECHO_PORT)));
    let labs: Vec<ScaleLabs> = scales
        .iter()
        .map(|&n| scale_labs(n, with_iptables))
        .collect();
    let pod = SocketAddr::from((POD, ECHO_PORT));
    // (lab, target, samples): direct first, then per size kubenft's pod, service, iptables.
    let mut paths: Vec<(&Topology, SocketAddr, Vec<Duration>)> =
        vec![(&direct.topo, direct.target, vec![])];
    for l in &labs {
        paths.push((&l.kubenft.topo, pod, vec![]));
        paths.push((&l.kubenft.topo, l.kubenft.target, vec![]));
        if let Some(i) = &l.iptables {
            paths.push((&i.topo, i.target, vec![]));
        }
    }
    for &(topo, to, _) in &paths {
        topo.client.run(move || connect_and_echo(to, 50)).unwrap(); // warm-up
    }
    let batch = 100;
    for _ in 0..samples.div_ceil(batch) {
        for (topo, to, times) in paths.iter_mut() {
            let to = *to;
            times.extend(
                topo.client
                    .run(move || connect_and_echo(to, batch))
                    .unwrap(),
            );
        }
    }
    let mut results = paths.into_iter().map(|(_, _, t)| percentiles(t));
    let direct = results.next().unwrap();
    labs.iter()
        .map(|l| LatencyRow {
            services: l.services,
            direct,
            pod_via_kubenft: results.next().unwrap(),
            kubenft: results.next().unwrap(),
            iptables: l.iptables.as_ref().map(|_| results.next().unwrap()),
        })
        .collect()
}

pub struct Spread {
    pub connections: usize,
    /// Connections per endpoint address.
    pub counts: BTreeMap<IpAddr, usize>,
    pub chi_square: f64,
    pub p_value: f64,
}

/// `connections` connections to a service with `endpoints` endpoints (addresses of the lab's
/// first pod), counted by the endpoint that answered.
pub fn spread(endpoints: usize, connections: usize) -> Spread {
    assert!((1..=200).contains(&endpoints));
    let topo = Topology::build("spread").expect("lab");
    let ips: Vec<Ipv4Addr> = (0..endpoints)
        .map(|i| Ipv4Addr::new(10, 244, 1, 10 + i as u8))
        .collect();
    for ip in &ips {
        sh(&topo.pods[0], &format!("ip addr add {ip}/24 dev eth0"));
    }
    let _server = Server::start(
        &topo.pods[0],
        SPREAD_PORT,
        Answering::InTurn,
        tell_local_address,
    )
    .expect("address server");
    let mut state = cluster(1, 0);
    let name = synthetic::service_name(0);
    state.endpoints.insert(
        name.into(),
        ips.iter()
            .map(|ip| synthetic::endpoint(IpAddr::V4(*ip), SPREAD_PORT, 1))
            .collect(),
    );
    let vip = SocketAddr::new(IpAddr::V4(synthetic::service_ip(0)), 80);
    let tables = build(&state, &config());
    topo.node
        .run(move || {
            Syncer::new(Nftables::open().unwrap(), "kubenft")
                .sync(tables.clone(), true)
                .expect("programming kubenft")
        })
        .unwrap();
    let answers = topo
        .client
        .run(move || {
            (0..connections)
                .map(|_| {
                    let mut s =
                        TcpStream::connect_timeout(&vip, Duration::from_secs(2)).expect("connect");
                    let mut line = String::new();
                    s.read_to_string(&mut line).expect("answer");
                    line.trim().parse::<IpAddr>().expect("an address")
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    let mut counts: BTreeMap<IpAddr, usize> = ips.iter().map(|ip| (IpAddr::V4(*ip), 0)).collect();
    for a in answers {
        *counts.get_mut(&a).expect("an endpoint of the service") += 1;
    }
    let expected = connections as f64 / endpoints as f64;
    let chi_square = counts
        .values()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum::<f64>();
    Spread {
        connections,
        p_value: chi_square_p_value(chi_square, endpoints.saturating_sub(1)),
        counts,
        chi_square,
    }
}

/// P(X ≥ x) for X ~ χ²(df): the regularized upper incomplete gamma Q(df/2, x/2).
pub fn chi_square_p_value(x: f64, df: usize) -> f64 {
    if df == 0 {
        return 1.0;
    }
    upper_gamma_q(df as f64 / 2.0, x / 2.0)
}

fn ln_gamma(x: f64) -> f64 {
    // Lanczos approximation (g = 7, n = 9), accurate to ~1e-15 for x > 0.
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = C[1..]
        .iter()
        .enumerate()
        .fold(C[0], |acc, (i, c)| acc + c / (x + 1.0 + i as f64));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

fn upper_gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        // Series for the lower part P, then Q = 1 - P.
        let (mut term, mut sum, mut n) = (1.0 / a, 1.0 / a, a);
        while term.abs() > sum.abs() * 1e-15 {
            n += 1.0;
            term *= x / n;
            sum += term;
        }
        1.0 - sum * front
    } else {
        // Continued fraction for Q (modified Lentz).
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..500 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        front * h
    }
}

#[cfg(test)]
mod tests {
    use super::chi_square_p_value;

    #[test]
    fn chi_square_p_values_match_the_tables() {
        // Critical values from standard χ² tables.
        for (x, df, p) in [
            (16.919, 9, 0.05),
            (21.666, 9, 0.01),
            (27.877, 9, 0.001),
            (3.841, 1, 0.05),
            (9.0, 9, 0.437),
        ] {
            let got = chi_square_p_value(x, df);
            assert!((got - p).abs() < 1e-3, "χ²={x} df={df}: {got} vs {p}");
        }
    }
}
