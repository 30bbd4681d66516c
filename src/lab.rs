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
            move || match TcpStream::connect_timeout(&to, Duration::from_millis(800)) {
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
