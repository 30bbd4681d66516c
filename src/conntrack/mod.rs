//! Conntrack, as a service proxy needs it: the [`reconcile`]r that deletes UDP entries which no
//! longer follow the rules, over ctnetlink in the calling thread's network namespace, and the
//! node's conntrack sysctls ([`tuning`]).
//!
//! UDP has no connection teardown, so a conntrack entry lives as long as packets keep coming.
//! A DNS client that retries every second against a ClusterIP that had no endpoints (rejected)
//! or whose endpoint died (DNATed to nowhere) would keep hitting the cached entry forever; the
//! kernel only consults the ruleset again for a new entry. kube-proxy deletes these entries
//! after every sync, and so does kubenft.

pub(crate) mod reconcile;
pub(crate) mod tuning;

pub use reconcile::{FamilyReport, Frontends, Reconciler, UdpService, reconcile};

use std::fmt;
use std::net::SocketAddr;

use netlink_packet_core::{DecodeError, Emitable, Nla, ParseableParametrized};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Tuple,
};

use crate::netlink::attr::NLA_F_NESTED;
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

pub(crate) use crate::family::IpFamily;

/// conntrack keeps one table per family.
impl IpFamily {
    fn af(self) -> u8 {
        match self {
            IpFamily::V4 => libc::AF_INET as u8,
            IpFamily::V6 => libc::AF_INET6 as u8,
        }
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
    /// One family's entries of one protocol, selected by the kernel (`CTA_FILTER`, Linux 5.8+):
    /// entries of other protocols are never copied to us.
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
        let orig =
            ConntrackAttribute::CtaTupleOrig(vec![Tuple::Proto(vec![ProtoTuple::Protocol(
                proto.into(),
            )])]);
        let mut bytes = vec![0u8; orig.buffer_len()];
        orig.emit(&mut bytes);
        // Written by hand: the attribute types this crate emits cannot carry NLA_F_NESTED, and
        // the kernel parses CTA_FILTER strictly: it must be flagged as nested.
        let flags = CTA_FILTER_FLAG_CTA_PROTO_NUM.to_ne_bytes();
        let inner_len = 4 + flags.len() as u16;
        for field in [
            4 + inner_len,
            CTA_FILTER | NLA_F_NESTED,
            inner_len,
            CTA_FILTER_ORIG_FLAGS,
        ] {
            bytes.extend(field.to_ne_bytes());
        }
        bytes.extend(flags);
        (family.af(), bytes)
    }
}

/// A dumped entry: its tuples for matching, and what identifies it exactly for deletion.
#[derive(Debug)]
struct Entry {
    flow: Flow,
    family: u8,
    key: Vec<ConntrackAttribute>,
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

/// Decodes one dumped entry; `None` for entries without ports (ICMP and the like).
fn decode_entry(msg: &Message) -> Result<Option<Entry>, DecodeError> {
    let (family, _, attrs) = msg.nfgen().map_err(|e| DecodeError::from(e.to_string()))?;
    let parsed = ConntrackMessage::parse_with_param(attrs, IPCTNL_MSG_CT_NEW as u8)?;
    let ConntrackMessage::New(attrs) = parsed else {
        return Ok(None);
    };
    let (mut orig, mut reply) = (None, None);
    let mut key = Vec::new();
    for attr in attrs {
        match attr {
            ConntrackAttribute::CtaTupleOrig(tuple) => orig = Some(tuple),
            ConntrackAttribute::CtaTupleReply(tuple) => reply = Some(tuple),
            ConntrackAttribute::Other(nla) if matches!(nla.kind(), CTA_ID | CTA_ZONE) => {
                key.push(ConntrackAttribute::Other(nla))
            }
            _ => {}
        }
    }
    let (Some(orig), Some(reply)) = (orig, reply) else {
        return Err(DecodeError::from("conntrack entry without both tuples"));
    };
    let (Some((proto, orig_src, orig_dst)), Some((_, reply_src, reply_dst))) =
        (endpoints(&orig), endpoints(&reply))
    else {
        return Ok(None);
    };
    key.insert(0, ConntrackAttribute::CtaTupleOrig(orig));
    Ok(Some(Entry {
        flow: Flow {
            proto,
            orig_src,
            orig_dst,
            reply_src,
            reply_dst,
        },
        family,
        key,
    }))
}

/// Protocol number, source and destination of one tuple, if it has addresses and ports.
fn endpoints(tuple: &[Tuple]) -> Option<(u8, SocketAddr, SocketAddr)> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
    for part in tuple {
        match part {
            Tuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => src = Some(*a),
                        IPTuple::DestinationAddress(a) => dst = Some(*a),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(fields) => {
                for field in fields {
                    match field {
                        ProtoTuple::Protocol(p) => proto = Some(u8::from(*p)),
                        ProtoTuple::SourcePort(p) => sport = Some(*p),
                        ProtoTuple::DestinationPort(p) => dport = Some(*p),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((
        proto?,
        SocketAddr::new(src?, sport?),
        SocketAddr::new(dst?, dport?),
    ))
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
            let mut attrs = vec![0u8; entry.key.as_slice().buffer_len()];
            entry.key.as_slice().emit(&mut attrs);
            let seq = first.wrapping_add(i as u32);
            NfHeader::request(
                NFNL_SUBSYS_CTNETLINK,
                IPCTNL_MSG_CT_DELETE,
                NLM_F_ACK,
                entry.family,
                seq,
            )
            .encode(&attrs, &mut request);
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
