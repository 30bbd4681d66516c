//! Conntrack entries made to order: `CT_NEW` messages over ctnetlink in a namespace, UDP flows
//! between addresses no packet ever uses (100.64.0.0/10, CGNAT space), each with its own
//! timeout so the kernel expires them by itself. No packet is sent: the entries only take room
//! in the node's conntrack table and in every dump of it (the daemon's stale-UDP reconciler
//! dumps the UDP entries after each sync). They are never assured, so a full table evicts them
//! before it refuses a real connection.

use std::net::Ipv4Addr;

use kubenft::netns::Netns;
use netlink_sys::{Socket, protocols::NETLINK_NETFILTER};

/// linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h, netlink.h.
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const NLA_F_NESTED: u16 = 0x8000;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_TIMEOUT: u16 = 7;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

/// Where the filler flows go: one server address, port 53.
const SERVER: Ipv4Addr = Ipv4Addr::new(100, 127, 255, 254);
/// Clients are 100.64.0.0 + n / 16 with source port 20000 + n % 16.
const CLIENT_BASE: u32 = 0x6440_0000;

/// Flow `n`'s (client address, client port).
pub fn client(n: usize) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::from(CLIENT_BASE + (n / 16) as u32),
        20_000 + (n % 16) as u16,
    )
}

fn attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    out.extend(((4 + payload.len()) as u16).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    out.extend(payload);
    out.resize(out.len().next_multiple_of(4), 0);
}

fn nested(out: &mut Vec<u8>, kind: u16, inner: impl FnOnce(&mut Vec<u8>)) {
    let mut body = Vec::new();
    inner(&mut body);
    attr(out, kind | NLA_F_NESTED, &body);
}

fn tuple(out: &mut Vec<u8>, kind: u16, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16)) {
    nested(out, kind, |t| {
        nested(t, CTA_TUPLE_IP, |ip| {
            attr(ip, CTA_IP_V4_SRC, &src.0.octets());
            attr(ip, CTA_IP_V4_DST, &dst.0.octets());
        });
        nested(t, CTA_TUPLE_PROTO, |p| {
            attr(p, CTA_PROTO_NUM, &[libc::IPPROTO_UDP as u8]);
            attr(p, CTA_PROTO_SRC_PORT, &src.1.to_be_bytes());
            attr(p, CTA_PROTO_DST_PORT, &dst.1.to_be_bytes());
        });
    });
}

/// One `CT_NEW` message for flow `n`, expiring after `timeout_s`.
pub fn ct_new(n: usize, timeout_s: u32, seq: u32) -> Vec<u8> {
    let mut body = vec![libc::AF_INET as u8, 0, 0, 0]; // nfgenmsg: family, version, res_id
    let c = client(n);
    tuple(&mut body, CTA_TUPLE_ORIG, c, (SERVER, 53));
    tuple(&mut body, CTA_TUPLE_REPLY, (SERVER, 53), c);
    attr(&mut body, CTA_TIMEOUT, &timeout_s.to_be_bytes());
    message(
        IPCTNL_MSG_CT_NEW,
        NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL,
        seq,
        body,
    )
}

/// A `CT_GET` of flow `n`: answered with the entry, or with ENOENT once it expired.
fn ct_get(n: usize, seq: u32) -> Vec<u8> {
    let mut body = vec![libc::AF_INET as u8, 0, 0, 0];
    tuple(&mut body, CTA_TUPLE_ORIG, client(n), (SERVER, 53));
    message(IPCTNL_MSG_CT_GET, NLM_F_REQUEST, seq, body)
}

fn message(kind: u16, flags: u16, seq: u32, body: Vec<u8>) -> Vec<u8> {
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend(((16 + body.len()) as u32).to_ne_bytes());
    msg.extend((NFNL_SUBSYS_CTNETLINK << 8 | kind).to_ne_bytes());
    msg.extend(flags.to_ne_bytes());
    msg.extend(seq.to_ne_bytes());
    msg.extend(0u32.to_ne_bytes());
    msg.extend(body);
    msg
}

/// Flows of a fill of `count` looked up to tell whether it expired.
const PROBES: usize = 32;

/// How many of `PROBES` flows spread over a fill of `count` are still in `ns`'s table.
pub fn remaining(ns: &Netns, count: usize) -> Result<usize, String> {
    ns.run(move || -> Result<usize, String> {
        let mut sock = Socket::new(NETLINK_NETFILTER).map_err(|e| format!("ctnetlink: {e}"))?;
        sock.bind_auto().map_err(|e| format!("ctnetlink: {e}"))?;
        let mut found = 0;
        for i in 0..PROBES {
            let n = i * (count - 1) / (PROBES - 1);
            sock.send(&ct_get(n, i as u32 + 1), 0)
                .map_err(|e| format!("ctnetlink send: {e}"))?;
            let mut buf: Vec<u8> = Vec::with_capacity(1 << 12);
            sock.recv(&mut buf, 0)
                .map_err(|e| format!("ctnetlink recv: {e}"))?;
            match errors(&buf).first() {
                None => found += 1,
                Some(&e) if e == libc::ENOENT => {}
                Some(e) => return Err(format!("looking up a filler entry: errno {e}")),
            }
        }
        Ok(found)
    })
    .map_err(|e| e.to_string())?
}

/// The error codes of the netlink error messages in `buf` (acks, code 0, left out).
fn errors(buf: &[u8]) -> Vec<i32> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + 20 <= buf.len() {
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().unwrap());
        if kind == NLMSG_ERROR {
            let code = i32::from_ne_bytes(buf[at + 16..at + 20].try_into().unwrap());
            if code != 0 {
                found.push(-code);
            }
        }
        if len < 16 {
            break;
        }
        at += len.next_multiple_of(4);
    }
    found
}

/// What a fill did.
#[derive(Debug, Clone, Default)]
pub struct Filled {
    pub asked: usize,
    /// Messages the kernel refused, and the first refusal's errno.
    pub refused: usize,
    pub first_errno: Option<i32>,
}

/// Creates `count` UDP entries in `ns` expiring after `timeout_s`, in batches of messages per
/// send (the kernel handles each message of a datagram in turn and answers only refusals).
pub fn fill(ns: &Netns, count: usize, timeout_s: u32) -> Result<Filled, String> {
    ns.run(move || -> Result<Filled, String> {
        let mut sock = Socket::new(NETLINK_NETFILTER).map_err(|e| format!("ctnetlink: {e}"))?;
        sock.bind_auto().map_err(|e| format!("ctnetlink: {e}"))?;
        let mut filled = Filled {
            asked: count,
            ..Filled::default()
        };
        let drain = |sock: &Socket, filled: &mut Filled| {
            let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
            loop {
                buf.clear();
                match sock.recv(&mut buf, libc::MSG_DONTWAIT) {
                    Ok(_) => {
                        for e in errors(&buf) {
                            filled.refused += 1;
                            filled.first_errno.get_or_insert(e);
                        }
                    }
                    Err(_) => break,
                }
            }
        };
        let mut batch = Vec::with_capacity(1 << 15);
        for n in 0..count {
            batch.extend(ct_new(n, timeout_s, n as u32 + 1));
            if batch.len() > 24 * 1024 || n + 1 == count {
                sock.send(&batch, 0)
                    .map_err(|e| format!("ctnetlink send: {e}"))?;
                batch.clear();
                drain(&sock, &mut filled);
            }
        }
        drain(&sock, &mut filled);
        Ok(filled)
    })
    .map_err(|e| e.to_string())?
}

/// The number of conntrack entries in `ns`.
pub fn count(ns: &Netns) -> Option<usize> {
    ns.run(|| {
        std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_count")
            .ok()?
            .trim()
            .parse()
            .ok()
    })
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ct_new_message_is_framed_and_aligned() {
        let m = ct_new(17, 30, 5);
        assert_eq!(
            u32::from_ne_bytes(m[..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(m.len() % 4, 0);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x100);
        assert_eq!(client(17), (Ipv4Addr::new(100, 64, 0, 1), 20_001));
        // The timeout is the last attribute: big-endian seconds.
        assert_eq!(m[m.len() - 4..], 30u32.to_be_bytes());
    }

    #[test]
    fn refusals_are_read_from_error_messages_and_acks_are_not() {
        let msg = |code: i32| {
            let mut m = 36u32.to_ne_bytes().to_vec();
            m.extend(NLMSG_ERROR.to_ne_bytes());
            m.extend([0u8; 10]);
            m.extend(code.to_ne_bytes());
            m.extend([0u8; 16]);
            m
        };
        let mut buf = msg(0);
        buf.extend(msg(-libc::ENOMEM));
        assert_eq!(errors(&buf), vec![libc::ENOMEM]);
    }
}
