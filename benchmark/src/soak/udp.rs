//! UDP for the soak: an echo socket on each backend address of the lab's pods, and the
//! client's two kinds of UDP traffic to the connected Services.
//!
//! Each pod address gets a socket of its own: a wildcard socket would answer from the pod's
//! primary address, not the one the request was DNATed to, and conntrack would not match the
//! answer to the request.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kubenft::netns::Netns;

/// How long a request waits for its answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// Echo sockets, one thread each, until dropped.
pub struct Servers {
    stop: Arc<AtomicBool>,
}

impl Servers {
    /// An echo socket on `port` of each address in `addresses`, in `ns`.
    pub fn start(ns: &Netns, addresses: Vec<Ipv4Addr>, port: u16) -> Result<Servers, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = ns
            .run(move || {
                addresses
                    .into_iter()
                    .map(|ip| {
                        let s = UdpSocket::bind((ip, port))
                            .map_err(|e| format!("UDP {ip}:{port}: {e}"))?;
                        s.set_read_timeout(Some(Duration::from_millis(200)))
                            .map_err(|e| e.to_string())?;
                        Ok(s)
                    })
                    .collect::<Result<Vec<_>, String>>()
            })
            .map_err(|e| e.to_string())??;
        for s in sockets {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, peer)) = s.recv_from(&mut buf) {
                        let _ = s.send_to(&buf[..n], peer);
                    }
                }
            });
        }
        Ok(Servers { stop })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One request from a new socket (so a new source port, a new conntrack entry, a fresh DNAT):
/// `token` sent, the same bytes expected back.
pub fn request(to: SocketAddr, token: u64) -> Result<(), String> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| format!("bind: {e}"))?;
    s.connect(to).map_err(|e| format!("connect: {e}"))?;
    exchange(&s, token)
}

/// Sends `token` on a connected socket and waits for it to come back; answers to earlier
/// tokens that arrive late are skipped.
pub fn exchange(s: &UdpSocket, token: u64) -> Result<(), String> {
    s.set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.send(&token.to_be_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    let mut buf = [0u8; 64];
    loop {
        let n = s.recv(&mut buf).map_err(|e| {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                format!("no answer within {ANSWER_TIMEOUT:?}")
            } else {
                format!("recv: {e}")
            }
        })?;
        match <[u8; 8]>::try_from(&buf[..n]).map(u64::from_be_bytes) {
            Ok(t) if t == token => return Ok(()),
            Ok(t) if t < token => {} // a late answer to an earlier request
            _ => return Err(format!("answered {:?} for {token}", &buf[..n])),
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!("no answer within {ANSWER_TIMEOUT:?}"));
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
    }
}

/// A long-lived flow: one socket bound to one source port, connected to `to`.
pub fn flow_socket(to: SocketAddr) -> Result<UdpSocket, String> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| format!("bind: {e}"))?;
    s.connect(to).map_err(|e| format!("connect: {e}"))?;
    Ok(s)
}
