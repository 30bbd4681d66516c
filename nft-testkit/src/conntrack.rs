//! Conntrack entries made over ctnetlink (`IPCTNL_MSG_CT_NEW`, as `conntrack -I` makes them),
//! for tests and benchmarks that need a large table without the traffic that would fill it.
//! Entries go into the calling thread's network namespace; the kernel's `nf_conntrack_max`
//! (global) bounds how many it takes.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use kubenft::netlink::attr::AttrWriter;
use kubenft::netlink::{NetlinkSocket, NfHeader};

// linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h, nf_conntrack_common.h and
// nf_conntrack_tcp.h, named as in the headers.
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_STATUS: u16 = 3;
const CTA_PROTOINFO: u16 = 4;
const CTA_TIMEOUT: u16 = 7;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const CTA_FILTER: u16 = 25;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_FLAG_CTA_PROTO_NUM: u32 = 1 << 3;
const CTA_PROTOINFO_TCP: u16 = 1;
const CTA_PROTOINFO_TCP_STATE: u16 = 1;
const TCP_CONNTRACK_ESTABLISHED: u8 = 3;
const IPS_SEEN_REPLY: u32 = 1 << 1;
const IPS_ASSURED: u32 = 1 << 2;
/// The kernel marks an entry made over ctnetlink confirmed as it creates it, and refuses a
/// status that would change that (EBUSY): `conntrack -I` sends it too.
const IPS_CONFIRMED: u32 = 1 << 3;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;

/// Entries sent per datagram: the kernel creates them one after another inside the send.
const PER_DATAGRAM: usize = 200;

/// One entry: its two directions. A flow DNATed to an endpoint has the endpoint as its reply's
/// source; one that was not has the original destination there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// `libc::IPPROTO_TCP` or `libc::IPPROTO_UDP`.
    pub proto: u8,
    pub orig_src: SocketAddr,
    pub orig_dst: SocketAddr,
    pub reply_src: SocketAddr,
    pub reply_dst: SocketAddr,
    /// Seconds until the kernel expires it.
    pub timeout: u32,
    /// Whether it saw replies (and so is assured: a full table evicts it last).
    pub replied: bool,
}

impl Entry {
    /// A UDP flow from `client` to `to`, answered by `answered_by`, that saw replies.
    pub fn udp(client: SocketAddr, to: SocketAddr, answered_by: SocketAddr, timeout: u32) -> Entry {
        Entry {
            proto: libc::IPPROTO_UDP as u8,
            orig_src: client,
            orig_dst: to,
            reply_src: answered_by,
            reply_dst: client,
            timeout,
            replied: true,
        }
    }

    /// A UDP flow from `client` to `to` that never saw a reply: the first entry a full table
    /// evicts.
    pub fn udp_unreplied(client: SocketAddr, to: SocketAddr, timeout: u32) -> Entry {
        Entry {
            replied: false,
            ..Entry::udp(client, to, to, timeout)
        }
    }

    /// An established TCP connection from `client` to `to`, answered by `answered_by`.
    pub fn tcp_established(
        client: SocketAddr,
        to: SocketAddr,
        answered_by: SocketAddr,
        timeout: u32,
    ) -> Entry {
        Entry {
            proto: libc::IPPROTO_TCP as u8,
            ..Entry::udp(client, to, answered_by, timeout)
        }
    }

    fn encode(&self, seq: u32, out: &mut Vec<u8>) {
        let mut a = AttrWriter::new();
        a.nested(CTA_TUPLE_ORIG, |t| {
            tuple(t, self.proto, self.orig_src, self.orig_dst)
        });
        a.nested(CTA_TUPLE_REPLY, |t| {
            tuple(t, self.proto, self.reply_src, self.reply_dst)
        });
        let status = if self.replied {
            IPS_SEEN_REPLY | IPS_ASSURED | IPS_CONFIRMED
        } else {
            IPS_CONFIRMED
        };
        a.be32(CTA_STATUS, status);
        a.be32(CTA_TIMEOUT, self.timeout);
        if self.proto == libc::IPPROTO_TCP as u8 {
            a.nested(CTA_PROTOINFO, |p| {
                p.nested(CTA_PROTOINFO_TCP, |tcp| {
                    tcp.u8(CTA_PROTOINFO_TCP_STATE, TCP_CONNTRACK_ESTABLISHED);
                });
            });
        }
        NfHeader::request(
            NFNL_SUBSYS_CTNETLINK,
            IPCTNL_MSG_CT_NEW,
            NLM_F_CREATE | NLM_F_EXCL,
            self.family(),
            seq,
        )
        .encode(&a.buf, out);
    }

    /// A lookup of this entry by its original tuple.
    fn encode_get(&self, seq: u32, out: &mut Vec<u8>) {
        let mut a = AttrWriter::new();
        a.nested(CTA_TUPLE_ORIG, |t| {
            tuple(t, self.proto, self.orig_src, self.orig_dst)
        });
        NfHeader::request(
            NFNL_SUBSYS_CTNETLINK,
            IPCTNL_MSG_CT_GET,
            0,
            self.family(),
            seq,
        )
        .encode(&a.buf, out);
    }

    fn family(&self) -> u8 {
        match self.orig_src.ip() {
            IpAddr::V4(_) => libc::AF_INET as u8,
            IpAddr::V6(_) => libc::AF_INET6 as u8,
        }
    }
}

fn tuple(t: &mut AttrWriter, proto: u8, src: SocketAddr, dst: SocketAddr) {
    t.nested(CTA_TUPLE_IP, |ip| match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            ip.bytes(CTA_IP_V4_SRC, &s.octets());
            ip.bytes(CTA_IP_V4_DST, &d.octets());
        }
        (s, d) => {
            ip.bytes(CTA_IP_V6_SRC, &v6(s).octets());
            ip.bytes(CTA_IP_V6_DST, &v6(d).octets());
        }
    });
    t.nested(CTA_TUPLE_PROTO, |p| {
        p.u8(CTA_PROTO_NUM, proto);
        p.bytes(CTA_PROTO_SRC_PORT, &src.port().to_be_bytes());
        p.bytes(CTA_PROTO_DST_PORT, &dst.port().to_be_bytes());
    });
}

fn v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// What [`create`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Created {
    pub created: usize,
    /// Refused by the kernel, by errno (EEXIST: the tuple was taken; ENOMEM: the table is full).
    pub refused: std::collections::BTreeMap<i32, usize>,
}

/// Creates `entries` in the calling thread's network namespace.
pub fn create(entries: impl IntoIterator<Item = Entry>) -> Result<Created, String> {
    let mut sock = NetlinkSocket::open().map_err(|e| e.to_string())?;
    let mut created = Created::default();
    let mut request = Vec::new();
    let mut sent = 0;
    let mut flush = |request: &mut Vec<u8>, sent: &mut usize| -> Result<(), String> {
        if *sent == 0 {
            return Ok(());
        }
        sock.send(request).map_err(|e| e.to_string())?;
        // The kernel handled every message inside the send: its errors are queued now (there
        // are no acknowledgements to read, only refusals).
        let mut refused = 0;
        while let Some(msgs) = sock.try_recv().map_err(|e| e.to_string())? {
            for m in msgs {
                if let Some(err) = m.error().map_err(|e| e.to_string())?
                    && err.errno != 0
                {
                    refused += 1;
                    *created.refused.entry(err.errno).or_default() += 1;
                }
            }
        }
        created.created += *sent - refused;
        request.clear();
        *sent = 0;
        Ok(())
    };
    for (i, entry) in entries.into_iter().enumerate() {
        entry.encode(i as u32, &mut request);
        sent += 1;
        if sent == PER_DATAGRAM {
            flush(&mut request, &mut sent)?;
        }
    }
    flush(&mut request, &mut sent)?;
    Ok(created)
}

/// How many of `entries` the calling thread's network namespace still holds (looked up one by
/// one by their original tuple: the kernel answers with the entry, or ENOENT once it expired).
pub fn present(entries: &[Entry]) -> Result<usize, String> {
    let mut sock = NetlinkSocket::open().map_err(|e| e.to_string())?;
    let mut found = 0;
    for (i, entry) in entries.iter().enumerate() {
        let mut request = Vec::new();
        entry.encode_get(i as u32, &mut request);
        sock.send(&request).map_err(|e| e.to_string())?;
        let answer = sock.recv().map_err(|e| e.to_string())?;
        match answer.first().map(|m| m.error()) {
            Some(Ok(Some(err))) if err.errno == libc::ENOENT => {}
            Some(Ok(Some(err))) if err.errno != 0 => {
                return Err(format!("looking up {entry:?}: errno {}", err.errno));
            }
            Some(Err(e)) => return Err(e.to_string()),
            _ => found += 1,
        }
    }
    Ok(found)
}

/// Dumps the calling thread's namespace's IPv4 entries of protocol `proto`, selected by the
/// kernel (`CTA_FILTER`); returns how many came and how long the dump took. The kernel walks
/// its whole table for any dump, so with a protocol no entry has nothing is copied out and the
/// time is the walk alone: the least any reading of the table can cost.
pub fn timed_dump(proto: u8) -> Result<(usize, Duration), String> {
    let mut sock = NetlinkSocket::open().map_err(|e| e.to_string())?;
    let mut a = AttrWriter::new();
    a.nested(CTA_TUPLE_ORIG, |t| {
        t.nested(CTA_TUPLE_PROTO, |p| {
            p.u8(CTA_PROTO_NUM, proto);
        });
    });
    // Host byte order: the kernel reads the flags with nla_get_u32.
    a.nested(CTA_FILTER, |f| {
        f.bytes(
            CTA_FILTER_ORIG_FLAGS,
            &CTA_FILTER_FLAG_CTA_PROTO_NUM.to_ne_bytes(),
        );
    });
    let mut request = Vec::new();
    let family = libc::AF_INET as u8;
    NfHeader::request(
        NFNL_SUBSYS_CTNETLINK,
        IPCTNL_MSG_CT_GET,
        NLM_F_DUMP,
        family,
        1,
    )
    .encode(&a.buf, &mut request);
    let started = Instant::now();
    sock.send(&request).map_err(|e| e.to_string())?;
    let mut entries = 0;
    loop {
        for m in sock.recv().map_err(|e| e.to_string())? {
            if let Some(err) = m.error().map_err(|e| e.to_string())? {
                return match err.errno {
                    0 => Ok((entries, started.elapsed())),
                    errno => Err(format!("conntrack dump: errno {errno}")),
                };
            }
            match m.subsys_msg(NFNL_SUBSYS_CTNETLINK) {
                Some(IPCTNL_MSG_CT_NEW) => entries += 1,
                // NLMSG_DONE
                _ => return Ok((entries, started.elapsed())),
            }
        }
    }
}
