//! Conntrack, as a service proxy needs it: the [`reconcile`]r that deletes UDP entries which no
//! longer follow the rules, the TCP entries that began while the rules were missing
//! ([`delete_never_dnated`]), both over ctnetlink in the calling thread's network namespace,
//! and the node's conntrack sysctls ([`tuning`]).
//!
//! UDP has no connection teardown, so a conntrack entry lives as long as packets keep coming.
//! A DNS client that retries every second against a ClusterIP that had no endpoints (rejected)
//! or whose endpoint died (DNATed to nowhere) would keep hitting the cached entry forever; the
//! kernel only consults the ruleset again for a new entry. kube-proxy deletes these entries
//! after every sync, and so does kubenft.

pub(crate) mod reconcile;
pub(crate) mod tuning;

pub use reconcile::{Frontends, Reading, Reconciler, UdpService, delete_never_dnated, reconcile};

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::family::IpFamily;
use crate::netlink::attr::{AttrError, AttrIter, AttrWriter, NLA_F_NESTED};
use crate::netlink::socket::NLM_F_ACK;
use crate::netlink::{Message, NetlinkSocket, NfHeader, SocketError};

/// The name of a transport protocol number, as a flow is printed.
fn proto_name(number: u8) -> Option<&'static str> {
    match number {
        6 => Some("tcp"),
        17 => Some("udp"),
        132 => Some("sctp"),
        _ => None,
    }
}

/// conntrack keeps one table per family.
impl IpFamily {
    fn af(self) -> u8 {
        match self {
            IpFamily::V4 => libc::AF_INET as u8,
            IpFamily::V6 => libc::AF_INET6 as u8,
        }
    }

    /// Its place in per-family arrays: IPv4, IPv6.
    fn index(self) -> usize {
        self as usize
    }
}

/// One conntrack entry's two directions, as the kernel reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// IP protocol number.
    pub proto: u8,
    pub(crate) orig_src: SocketAddr,
    pub orig_dst: SocketAddr,
    pub reply_src: SocketAddr,
    pub(crate) reply_dst: SocketAddr,
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match proto_name(self.proto) {
            Some(name) => write!(f, "{name}")?,
            None => write!(f, "proto {}", self.proto)?,
        }
        write!(
            f,
            " {} -> {} (reply {} -> {})",
            self.orig_src, self.orig_dst, self.reply_src, self.reply_dst
        )
    }
}

/// What `delete_flows` did.
#[derive(Debug, Default)]
pub struct DeleteReport {
    /// Entries deleted.
    pub deleted: usize,
    /// Matching entries that expired or were deleted by someone else before we got to them.
    pub(crate) already_gone: usize,
    /// Matching entries the kernel refused to delete.
    pub failed: Vec<DeleteFailure>,
    /// Dumped entries that could not be decoded, and so were neither matched nor deleted.
    pub(crate) undecodable: usize,
}

/// One entry that could not be deleted, and why.
#[derive(Debug)]
pub struct DeleteFailure {
    pub flow: Flow,
    pub error: std::io::Error,
}

#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("opening the ctnetlink socket: {0}")]
    Open(#[source] SocketError),
    #[error("dumping the conntrack table: {0}")]
    Dump(#[source] SocketError),
    #[error("deleting conntrack entries: {0}")]
    Delete(#[source] SocketError),
}

// linux/netfilter/nfnetlink.h and nfnetlink_conntrack.h, named as in the headers.
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_FLAG_CTA_PROTO_NUM: u32 = 1 << 3;
const AF_UNSPEC: u8 = 0;
/// Deletes sent per datagram: the kernel handles each message of a non-batch datagram in turn
/// and acknowledges each, so a cleanup of thousands of entries costs tens of round trips.
const DELETE_CHUNK: usize = 128;

/// Every conntrack entry (IPv4 and IPv6) of the calling thread's network namespace that has
/// ports, for inspection and tests.
pub fn list_flows() -> Result<Vec<Flow>, ConntrackError> {
    let mut sock = NetlinkSocket::open().map_err(ConntrackError::Open)?;
    let mut undecodable = 0;
    let dumped = dump(&mut sock, DumpScope::All, &mut undecodable, |_| true)?;
    Ok(dumped.entries.into_iter().map(|e| e.flow).collect())
}

/// Which entries the kernel sends.
#[derive(Debug, Clone, Copy)]
enum DumpScope {
    All,
    /// One family's entries of one protocol, selected by the kernel (`CTA_FILTER`, Linux 5.8+,
    /// which takes a family): entries of other protocols are never copied to us.
    Filtered {
        family: IpFamily,
        /// IP protocol number.
        proto: u8,
    },
}

impl DumpScope {
    /// The dump request's family and attributes.
    fn request(self) -> (u8, Vec<u8>) {
        let DumpScope::Filtered { family, proto } = self else {
            return (AF_UNSPEC, Vec::new());
        };
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
        (family.af(), a.buf)
    }
}

/// A dumped entry: its tuples for matching, and what identifies it exactly for deletion.
#[derive(Debug)]
pub(crate) struct Entry {
    flow: Flow,
    family: u8,
    /// The attributes a delete names it by, as the kernel sent them: the original tuple, the
    /// id (so an entry re-created with the same tuple meanwhile is spared) and the zone.
    key: Vec<u8>,
}

/// Why a dumped entry could not be read.
#[derive(Debug, thiserror::Error)]
enum DecodeError {
    #[error(transparent)]
    Header(#[from] SocketError),
    #[error(transparent)]
    Attribute(#[from] AttrError),
    #[error("conntrack entry {0}")]
    Malformed(&'static str),
}

/// The entries a dump kept.
struct Dumped {
    entries: Vec<Entry>,
    /// The kernel flagged the dump as interrupted: the table changed as it was walked.
    interrupted: bool,
}

/// Dumps the entries of `scope` and keeps those `keep` selects, filtering as the dump streams in
/// so a large table is never held in memory.
fn dump(
    sock: &mut NetlinkSocket,
    scope: DumpScope,
    undecodable: &mut usize,
    mut keep: impl FnMut(&Flow) -> bool,
) -> Result<Dumped, ConntrackError> {
    let (family, attrs) = scope.request();
    let header = NfHeader::request(
        NFNL_SUBSYS_CTNETLINK,
        IPCTNL_MSG_CT_GET,
        0,
        family,
        sock.next_seq(1),
    );
    let mut kept = Vec::new();
    // An interrupted dump is used as it is; the reconciler reads again after the next sync.
    let interrupted = sock
        .dump_each("IPCTNL_MSG_CT_GET", header, &attrs, |msg| {
            if msg.subsys_msg(NFNL_SUBSYS_CTNETLINK) != Some(IPCTNL_MSG_CT_NEW) {
                return;
            }
            match decode_entry(&msg) {
                Ok(Some(entry)) if keep(&entry.flow) => kept.push(entry),
                Ok(_) => {}
                Err(error) => {
                    // One odd entry must not stop the cleanup of the others.
                    tracing::warn!(%error, "skipping a conntrack entry that does not decode");
                    *undecodable += 1;
                }
            }
        })
        .map_err(ConntrackError::Dump)?;
    Ok(Dumped {
        entries: kept,
        interrupted,
    })
}

/// Decodes one dumped entry; `None` for entries without ports (ICMP and the like). Reads the
/// attributes in place: at hundreds of thousands of entries per reading, decoding is most of
/// the reconciler's own time.
fn decode_entry(msg: &Message) -> Result<Option<Entry>, DecodeError> {
    let (family, _, attrs) = msg.nfgen()?;
    let (mut orig, mut reply) = (None, None);
    let mut key = AttrWriter::new();
    for attr in AttrIter::new(attrs) {
        let attr = attr?;
        match attr.kind {
            CTA_TUPLE_ORIG => {
                orig = Some(attr.value);
                key.bytes(CTA_TUPLE_ORIG | NLA_F_NESTED, attr.value);
            }
            CTA_TUPLE_REPLY => reply = Some(attr.value),
            CTA_ID | CTA_ZONE => {
                key.bytes(attr.kind, attr.value);
            }
            _ => {}
        }
    }
    let (Some(orig), Some(reply)) = (orig, reply) else {
        return Err(DecodeError::Malformed("without both tuples"));
    };
    let (Some((proto, orig_src, orig_dst)), Some((_, reply_src, reply_dst))) =
        (endpoints(orig)?, endpoints(reply)?)
    else {
        return Ok(None);
    };
    Ok(Some(Entry {
        flow: Flow {
            proto,
            orig_src,
            orig_dst,
            reply_src,
            reply_dst,
        },
        family,
        key: key.buf,
    }))
}

/// Protocol number, source and destination of one tuple, if it has addresses and ports.
fn endpoints(tuple: &[u8]) -> Result<Option<(u8, SocketAddr, SocketAddr)>, DecodeError> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
    for part in AttrIter::new(tuple) {
        let part = part?;
        match part.kind {
            CTA_TUPLE_IP => {
                for ip in AttrIter::new(part.value) {
                    let ip = ip?;
                    let addr = match (ip.kind, ip.value.len()) {
                        (CTA_IP_V4_SRC | CTA_IP_V4_DST, 4) => {
                            IpAddr::from(<[u8; 4]>::try_from(ip.value).expect("4 bytes"))
                        }
                        (CTA_IP_V6_SRC | CTA_IP_V6_DST, 16) => {
                            IpAddr::from(<[u8; 16]>::try_from(ip.value).expect("16 bytes"))
                        }
                        (CTA_IP_V4_SRC..=CTA_IP_V6_DST, _) => {
                            return Err(DecodeError::Malformed("address of a wrong length"));
                        }
                        _ => continue,
                    };
                    match ip.kind {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => src = Some(addr),
                        _ => dst = Some(addr),
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for field in AttrIter::new(part.value) {
                    let field = field?;
                    match (field.kind, field.value) {
                        (CTA_PROTO_NUM, [p]) => proto = Some(*p),
                        (CTA_PROTO_SRC_PORT, [a, b]) => sport = Some(u16::from_be_bytes([*a, *b])),
                        (CTA_PROTO_DST_PORT, [a, b]) => dport = Some(u16::from_be_bytes([*a, *b])),
                        (CTA_PROTO_NUM..=CTA_PROTO_DST_PORT, _) => {
                            return Err(DecodeError::Malformed("protocol field of a wrong length"));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let (Some(proto), Some(src), Some(dst)) = (proto, src, dst) else {
        return Err(DecodeError::Malformed(
            "tuple without addresses or protocol",
        ));
    };
    Ok(sport.zip(dport).map(|(sport, dport)| {
        (
            proto,
            SocketAddr::new(src, sport),
            SocketAddr::new(dst, dport),
        )
    }))
}

fn delete_entries(
    sock: &mut NetlinkSocket,
    entries: &[Entry],
    report: &mut DeleteReport,
) -> Result<(), ConntrackError> {
    for chunk in entries.chunks(DELETE_CHUNK) {
        let first = sock.next_seq(chunk.len() as u32);
        let mut request = Vec::new();
        for (i, entry) in chunk.iter().enumerate() {
            let seq = first.wrapping_add(i as u32);
            NfHeader::request(
                NFNL_SUBSYS_CTNETLINK,
                IPCTNL_MSG_CT_DELETE,
                NLM_F_ACK,
                entry.family,
                seq,
            )
            .encode(&entry.key, &mut request);
        }
        sock.send(&request).map_err(ConntrackError::Delete)?;
        let mut answered = vec![false; chunk.len()];
        let mut pending = chunk.len();
        while pending > 0 {
            for msg in sock.recv().map_err(ConntrackError::Delete)? {
                let Some(err) = msg.error().map_err(ConntrackError::Delete)? else {
                    continue;
                };
                let i = err.seq.wrapping_sub(first) as usize;
                if i >= chunk.len() || std::mem::replace(&mut answered[i], true) {
                    continue; // not one of ours, or already counted
                }
                pending -= 1;
                match err.errno {
                    0 => report.deleted += 1,
                    libc::ENOENT => report.already_gone += 1,
                    _ => report.failed.push(DeleteFailure {
                        flow: chunk[i].flow,
                        error: err.to_io(),
                    }),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
