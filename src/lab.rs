//! A throw-away network lab for tests and the demo: links between namespaces, echo backends
//! that answer with their name and the source address they saw, and client requests that
//! report what happened (answered, refused, timed out).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::netns::Netns;

/// Runs a whitespace-separated command inside `ns`, panicking with its stderr on failure.
pub fn sh(ns: &Netns, cmd: &str) {
    let args: Vec<&str> = cmd.split_whitespace().collect();
    ns.exec(&args)
        .unwrap_or_else(|e| panic!("{}: {cmd}: {e}", ns.name()));
}

/// Moves one end of a new veth pair into `b`; names stay under IFNAMSIZ.
pub fn link(a: &Netns, a_if: &str, b: &Netns, b_if: &str) {
    sh(a, &format!("ip link add {a_if} type veth peer name {b_if}"));
    sh(a, &format!("ip link set {b_if} netns {}", b.name()));
    sh(a, &format!("ip link set {a_if} up"));
    sh(b, &format!("ip link set {b_if} up"));
}

/// A TCP server answering every connection with "<name> <peer address>\n" until dropped.
pub struct Backend {
    stop: Arc<AtomicBool>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

pub fn serve(ns: &Netns, name: &'static str) -> Backend {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let listener = ns
        .run(|| {
            // Dual-stack: IPv4 clients arrive as IPv4-mapped IPv6 addresses.
            let l = TcpListener::bind("[::]:8080").unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .unwrap();
    std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, peer)) => {
                    let ip = match peer.ip() {
                        std::net::IpAddr::V6(v6) => v6
                            .to_ipv4_mapped()
                            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
                        v4 => v4,
                    };
                    let _ = writeln!(s, "{name} {ip}");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    Backend { stop }
}

/// A UDP echo backend on `[::]:5353` in `ns`: answers every datagram with `name`.
pub fn serve_udp(ns: &Netns, name: &'static str) -> Backend {
    serve_udp_on(ns, name, 5353)
}

/// `serve_udp` on `port`.
pub fn serve_udp_on(ns: &Netns, name: &'static str, port: u16) -> Backend {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let socket = ns
        .run(move || {
            let s = std::net::UdpSocket::bind(("::", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            s
        })
        .unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while !flag.load(Ordering::Relaxed) {
            if let Ok((_, peer)) = socket.recv_from(&mut buf) {
                let _ = socket.send_to(name.as_bytes(), peer);
            }
        }
    });
    Backend { stop }
}

/// (backend name, source address it saw) of one connection from the client namespace.
pub fn request(client: &Netns, to: SocketAddr) -> (String, String) {
    client
        .run(move || {
            let s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).expect("answer");
            let mut parts = line.split_whitespace();
            (
                parts.next().unwrap().to_string(),
                parts.next().unwrap().to_string(),
            )
        })
        .unwrap()
}

/// How long a connection attempt may take before it counts as dropped. Long enough for one
/// SYN retransmission: over IPv6 the first SYN's port-unreachable was seen not to abort the
/// connect, the retransmitted one's does (under investigation).
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1800);

/// One connection from the calling thread (which must be in the client's namespace): the
/// backend's answer line, or what went wrong.
pub fn connect_once(to: SocketAddr) -> Result<String, String> {
    let s =
        TcpStream::connect_timeout(&to, CONNECT_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    if line.is_empty() {
        return Err("closed without an answer".into());
    }
    Ok(line)
}

/// What a connection attempt came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Answered { backend: String, source: String },
    Refused,
    TimedOut,
    Other(String),
}

/// Like `request`, but reports refusals and timeouts instead of panicking.
pub fn try_request(client: &Netns, to: SocketAddr) -> Outcome {
    client
        .run(
            move || match TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    let mut line = String::new();
                    match BufReader::new(s).read_line(&mut line) {
                        Ok(_) => {
                            let mut parts = line.split_whitespace();
                            Outcome::Answered {
                                backend: parts.next().unwrap_or_default().to_string(),
                                source: parts.next().unwrap_or_default().to_string(),
                            }
                        }
                        Err(e) => Outcome::Other(e.to_string()),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Outcome::Refused,
                Err(e)
                    if e.kind() == std::io::ErrorKind::TimedOut
                        || e.kind() == std::io::ErrorKind::WouldBlock =>
                {
                    Outcome::TimedOut
                }
                Err(e) => Outcome::Other(e.to_string()),
            },
        )
        .unwrap()
}

/// The standard lab: a node (10.0.0.1, fd00::1) with an external client (10.0.0.2, fd00::2)
/// on one link, and two pods (10.244.N.2, fd00:244:N::2) each behind its own link to the node,
/// so every packet between them crosses the node's netfilter hooks. Like a real node it has a
/// default route, to an upstream router namespace (10.255.0.2, fd00:ff::2) that drops what it
/// gets; so packets to unprogrammed service addresses are forwarded into the filter hooks
/// instead of failing route lookup. The client routes the service ranges (10.96.0.0/16,
/// 192.0.2.0/24, fd00:96::/64) via the node. Each pod runs an echo backend on :8080 named
/// `pod-N`. Dropping it removes everything.
pub struct Topology {
    pub node: Netns,
    pub client: Netns,
    pub pods: [Netns; 2],
    pub upstream: Netns,
    _backends: Vec<Backend>,
}

impl Topology {
    /// `tag` prefixes the namespace names (keep it short: it helps tell leftovers apart).
    pub fn build(tag: &str) -> Result<Topology, crate::netns::NetnsError> {
        let node = Netns::create(&format!("{tag}Node"))?;
        let client = Netns::create(&format!("{tag}Cli"))?;
        let pods = [
            Netns::create(&format!("{tag}Pod1"))?,
            Netns::create(&format!("{tag}Pod2"))?,
        ];
        let upstream = Netns::create(&format!("{tag}Up"))?;
        sh(&node, "sysctl -qw net.ipv4.ip_forward=1");
        sh(&node, "sysctl -qw net.ipv6.conf.all.forwarding=1");
        link(&node, "to-client", &client, "eth0");
        link(&node, "to-upstream", &upstream, "eth0");
        for cmd in [
            "ip addr add 10.0.0.1/24 dev to-client",
            "ip -6 addr add fd00::1/64 dev to-client nodad",
            "ip addr add 10.255.0.1/30 dev to-upstream",
            "ip -6 addr add fd00:ff::1/64 dev to-upstream nodad",
            "ip route add default via 10.255.0.2",
            "ip -6 route add default via fd00:ff::2",
        ] {
            sh(&node, cmd);
        }
        sh(&upstream, "ip addr add 10.255.0.2/30 dev eth0");
        sh(&upstream, "ip -6 addr add fd00:ff::2/64 dev eth0 nodad");
        for cmd in [
            "ip addr add 10.0.0.2/24 dev eth0",
            "ip -6 addr add fd00::2/64 dev eth0 nodad",
            "ip route add 10.96.0.0/16 via 10.0.0.1",
            "ip route add 192.0.2.0/24 via 10.0.0.1",
            "ip -6 route add fd00:96::/64 via fd00::1",
        ] {
            sh(&client, cmd);
        }
        for (i, pod) in pods.iter().enumerate() {
            let n = i + 1;
            link(&node, &format!("to-pod{n}"), pod, "eth0");
            sh(&node, &format!("ip addr add 10.244.{n}.1/24 dev to-pod{n}"));
            sh(
                &node,
                &format!("ip -6 addr add fd00:244:{n}::1/64 dev to-pod{n} nodad"),
            );
            sh(pod, &format!("ip addr add 10.244.{n}.2/24 dev eth0"));
            sh(
                pod,
                &format!("ip -6 addr add fd00:244:{n}::2/64 dev eth0 nodad"),
            );
            sh(pod, &format!("ip route add default via 10.244.{n}.1"));
            sh(pod, &format!("ip -6 route add default via fd00:244:{n}::1"));
        }
        let backends = vec![serve(&pods[0], "pod-1"), serve(&pods[1], "pod-2")];
        Ok(Topology {
            node,
            client,
            pods,
            upstream,
            _backends: backends,
        })
    }
}
