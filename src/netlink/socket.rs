//! An nfnetlink socket for nf_tables: whole datagrams in, every netlink message out, kernel
//! errors reported with the errno and the sequence number of the request they answer.
//!
//! A socket belongs to the network namespace of the thread that opened it, so one opened inside
//! `Netns::run` talks to that namespace's nftables for its whole life.

use std::io;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

use super::attr::AttrIter;
use crate::nft::netlink::sys::{
    NFNETLINK_V0, NFNL_SUBSYS_NFTABLES, NFPROTO_UNSPEC, NFT_MSG_GETGEN, NFTA_GEN_ID,
};

// linux/netlink.h message types and flags, named as in the header.
pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLMSG_OVERRUN: u16 = 4;
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_ECHO: u16 = 0x8;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_ROOT: u16 = 0x100;
pub const NLM_F_MATCH: u16 = 0x200;
pub const NLM_F_DUMP: u16 = NLM_F_ROOT | NLM_F_MATCH;
pub const NLM_F_REPLACE: u16 = 0x100;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;
/// On an NLMSG_ERROR: the original message's payload was trimmed (NETLINK_CAP_ACK).
pub const NLM_F_CAPPED: u16 = 0x100;
/// On an NLMSG_ERROR: extended-ack TLVs follow.
pub const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Size of `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// Size of `struct nfgenmsg`.
pub const NFGENMSG_LEN: usize = 4;

/// Receive buffer offered on every read (the kernel's cap for one dump message is 32 KiB).
const DUMP_BUFFER: usize = 64 << 10;

/// Default socket buffers: dumps of a large table arrive faster than we parse them.
const DEFAULT_BUFFER: usize = 4 << 20;
/// The kernel answers synchronously; a reply this late means none is coming.
const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("opening the NETLINK_NETFILTER socket: {0}")]
    Open(#[source] io::Error),
    #[error("binding the netlink socket: {0}")]
    Bind(#[source] io::Error),
    #[error("setting netlink socket options: {0}")]
    Options(#[source] io::Error),
    #[error("raising the socket buffers to {bytes} bytes: {source}")]
    Buffers {
        bytes: usize,
        #[source]
        source: io::Error,
    },
    #[error("sending {len} bytes: {source}")]
    Send {
        len: usize,
        #[source]
        source: io::Error,
    },
    #[error("sent {sent} of {len} bytes")]
    ShortSend { sent: usize, len: usize },
    #[error("receiving: {0}")]
    Receive(#[source] io::Error),
    #[error("malformed netlink message at offset {offset}: {reason}")]
    Malformed { offset: usize, reason: &'static str },
    #[error("kernel rejected {request} (seq {seq}): {source}{}", message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        request: &'static str,
        seq: u32,
        message: Option<String>,
        #[source]
        source: io::Error,
    },
    #[error("{request} dump was interrupted by a concurrent ruleset change")]
    DumpInterrupted { request: &'static str },
    #[error("the generation reply has no NFTA_GEN_ID")]
    NoGenerationId,
}

impl SocketError {
    /// The errno the kernel answered with, if this is a kernel rejection.
    pub fn errno(&self) -> Option<i32> {
        match self {
            SocketError::Kernel { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// The body of an NLMSG_ERROR: `errno == 0` is an ACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlError {
    /// Positive errno (the kernel sends it negated); 0 for an acknowledgement.
    pub errno: i32,
    /// Sequence number of the request this answers (from the echoed header).
    pub seq: u32,
    /// Message type of the request this answers.
    pub msg_type: u16,
    /// Extended-ack text, when the kernel gave one.
    pub message: Option<String>,
}

impl NlError {
    pub fn is_ack(&self) -> bool {
        self.errno == 0
    }

    pub fn to_io(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }
}

/// One netlink message received from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub msg_type: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
    /// Everything after the `nlmsghdr`.
    pub payload: Vec<u8>,
}

impl Message {
    pub fn is_done(&self) -> bool {
        self.msg_type == NLMSG_DONE
    }

    pub fn is_multi(&self) -> bool {
        self.flags & NLM_F_MULTI != 0
    }

    /// The NLMSG_ERROR body (ACK or error), or `None` for other message types.
    pub fn error(&self) -> Result<Option<NlError>, SocketError> {
        if self.msg_type != NLMSG_ERROR {
            return Ok(None);
        }
        parse_error(&self.payload, self.flags).map(Some)
    }

    /// For nf_tables messages: the `NFT_MSG_*` number (low byte of the type), if this
    /// message belongs to the nftables subsystem.
    pub fn nft_msg(&self) -> Option<u16> {
        (self.msg_type >> 8 == NFNL_SUBSYS_NFTABLES).then_some(self.msg_type & 0xff)
    }

    /// The `nfgenmsg` header (family, res_id) and the attribute bytes after it.
    pub fn nfgen(&self) -> Result<(u8, u16, &[u8]), SocketError> {
        if self.payload.len() < NFGENMSG_LEN {
            return Err(SocketError::Malformed {
                offset: NLMSG_HDRLEN,
                reason: "nfgenmsg header truncated",
            });
        }
        let family = self.payload[0];
        let res_id = u16::from_be_bytes([self.payload[2], self.payload[3]]);
        Ok((family, res_id, &self.payload[NFGENMSG_LEN..]))
    }
}

fn parse_error(payload: &[u8], flags: u16) -> Result<NlError, SocketError> {
    if payload.len() < 4 + NLMSG_HDRLEN {
        return Err(SocketError::Malformed {
            offset: NLMSG_HDRLEN,
            reason: "NLMSG_ERROR body shorter than errno + echoed header",
        });
    }
    let errno = -i32::from_ne_bytes(payload[0..4].try_into().expect("4 bytes"));
    let orig = &payload[4..4 + NLMSG_HDRLEN];
    let orig_len = u32::from_ne_bytes(orig[0..4].try_into().expect("4 bytes")) as usize;
    let msg_type = u16::from_ne_bytes([orig[4], orig[5]]);
    let seq = u32::from_ne_bytes(orig[8..12].try_into().expect("4 bytes"));
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        // TLVs follow the echoed message: its header only when capped, all of it otherwise.
        let echoed = if flags & NLM_F_CAPPED != 0 || errno == 0 {
            NLMSG_HDRLEN
        } else {
            orig_len.max(NLMSG_HDRLEN)
        };
        let start = (4 + echoed + 3) & !3;
        if let Some(tlvs) = payload.get(start..) {
            for attr in AttrIter::new(tlvs).flatten() {
                if attr.kind == NLMSGERR_ATTR_MSG {
                    message = attr.string().ok().map(str::to_owned);
                }
            }
        }
    }
    Ok(NlError {
        errno,
        seq,
        msg_type,
        message,
    })
}

/// Splits one datagram into its netlink messages.
pub fn split_messages(datagram: &[u8]) -> Result<Vec<Message>, SocketError> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let rest = &datagram[offset..];
        if rest.len() < NLMSG_HDRLEN {
            return Err(SocketError::Malformed {
                offset,
                reason: "nlmsghdr truncated",
            });
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(SocketError::Malformed {
                offset,
                reason: "nlmsg_len out of bounds",
            });
        }
        out.push(Message {
            msg_type: u16::from_ne_bytes([rest[4], rest[5]]),
            flags: u16::from_ne_bytes([rest[6], rest[7]]),
            seq: u32::from_ne_bytes(rest[8..12].try_into().expect("4 bytes")),
            pid: u32::from_ne_bytes(rest[12..16].try_into().expect("4 bytes")),
            payload: rest[NLMSG_HDRLEN..len].to_vec(),
        });
        offset += (len + 3) & !3;
    }
    Ok(out)
}

/// The full message type of an nf_tables request: `(NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_*`.
pub const fn nft_msg_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}

/// Header fields of one nfnetlink message to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfHeader {
    /// Full netlink type (see `nft_msg_type`; batch begin/end use `NFNL_MSG_BATCH_*`).
    pub msg_type: u16,
    pub flags: u16,
    pub seq: u32,
    /// `NFPROTO_*`.
    pub family: u8,
    /// Big-endian on the wire; batch begin/end carry `NFNL_SUBSYS_NFTABLES` here.
    pub res_id: u16,
}

impl NfHeader {
    /// An nf_tables request (`NLM_F_REQUEST` is always set).
    pub fn nft(msg: u16, flags: u16, family: u8, seq: u32) -> Self {
        NfHeader {
            msg_type: nft_msg_type(msg),
            flags: flags | NLM_F_REQUEST,
            seq,
            family,
            res_id: 0,
        }
    }

    /// Appends `nlmsghdr + nfgenmsg + attrs` to `out`; `attrs` must already be 4-byte padded
    /// (as `AttrWriter` produces).
    pub fn encode(&self, attrs: &[u8], out: &mut Vec<u8>) {
        let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(&self.msg_type.to_ne_bytes());
        out.extend_from_slice(&self.flags.to_ne_bytes());
        out.extend_from_slice(&self.seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.push(self.family);
        out.push(NFNETLINK_V0);
        out.extend_from_slice(&self.res_id.to_be_bytes());
        out.extend_from_slice(attrs);
    }
}

/// A bound NETLINK_NETFILTER socket.
pub struct NetlinkSocket {
    sock: Socket,
    port: u32,
    next_seq: u32,
    buf: Vec<u8>,
}

impl std::fmt::Debug for NetlinkSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetlinkSocket")
            .field("port", &self.port)
            .field("next_seq", &self.next_seq)
            .finish()
    }
}

impl NetlinkSocket {
    /// Opens and binds a socket in the calling thread's network namespace, with capped ACKs
    /// (errors echo only the request header, not the whole request) and extended ACK text.
    pub fn open() -> Result<Self, SocketError> {
        let mut sock = Socket::new(NETLINK_NETFILTER).map_err(SocketError::Open)?;
        let addr = sock.bind_auto().map_err(SocketError::Bind)?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(SocketError::Bind)?;
        sock.set_cap_ack(true).map_err(SocketError::Options)?;
        sock.set_ext_ack(true).map_err(SocketError::Options)?;
        // Start sequence numbers somewhere unlikely to collide with a previous socket's
        // stale replies (the kernel routes by port anyway; this only helps debugging).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        let mut s = NetlinkSocket {
            sock,
            port: addr.port_number(),
            next_seq: seed,
            buf: Vec::new(),
        };
        s.set_buffers(DEFAULT_BUFFER)?;
        s.set_timeout(Some(DEFAULT_TIMEOUT))?;
        Ok(s)
    }

    /// The socket's netlink port id (`nlmsg_pid` of replies).
    pub fn port_id(&self) -> u32 {
        self.port
    }

    /// Reserves `count` consecutive sequence numbers and returns the first.
    pub fn next_seq(&mut self, count: u32) -> u32 {
        let first = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(count.max(1));
        first
    }

    /// Raises both socket buffers to at least `bytes`: a batch larger than the send buffer
    /// fails with EMSGSIZE, and replies larger than the receive buffer are dropped (ENOBUFS).
    /// Uses the *FORCE options (root can exceed rmem_max/wmem_max) and falls back to the
    /// plain ones, which the kernel caps.
    pub fn set_buffers(&mut self, bytes: usize) -> Result<(), SocketError> {
        let value = bytes.min(i32::MAX as usize) as libc::c_int;
        for (force, plain) in [
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        ] {
            if setsockopt_int(&self.sock, force, value).is_err() {
                setsockopt_int(&self.sock, plain, value)
                    .map_err(|source| SocketError::Buffers { bytes, source })?;
            }
        }
        Ok(())
    }

    /// Sends one buffer (a single message or a whole batch) as one datagram.
    pub fn send(&self, bytes: &[u8]) -> Result<(), SocketError> {
        let sent = self
            .sock
            .send(bytes, 0)
            .map_err(|source| SocketError::Send {
                len: bytes.len(),
                source,
            })?;
        if sent != bytes.len() {
            return Err(SocketError::ShortSend {
                sent,
                len: bytes.len(),
            });
        }
        Ok(())
    }

    /// Receives one datagram (sized with a truncating peek, so nothing is cut) and splits it
    /// into messages. Blocks until something arrives or the receive timeout passes.
    pub fn recv(&mut self) -> Result<Vec<Message>, SocketError> {
        self.recv_flags(0)?.ok_or_else(|| {
            SocketError::Receive(io::Error::new(
                io::ErrorKind::TimedOut,
                "no reply from the kernel within the receive timeout",
            ))
        })
    }

    /// Like `recv`, but returns `None` at once when nothing is queued.
    pub fn try_recv(&mut self) -> Result<Option<Vec<Message>>, SocketError> {
        self.recv_flags(libc::MSG_DONTWAIT)
    }

    fn recv_flags(&mut self, flags: libc::c_int) -> Result<Option<Vec<Message>>, SocketError> {
        let mut size = None;
        for peek in [true, false] {
            self.buf.clear();
            // Offer at least 32 KiB: the kernel sizes each dump message after the largest
            // buffer a reader has offered (up to 32 KiB), and set dumps restart their walk per
            // message, so small messages make large dumps quadratically slower.
            self.buf.reserve(size.unwrap_or(0).max(DUMP_BUFFER));
            let f = if peek {
                flags | libc::MSG_PEEK | libc::MSG_TRUNC
            } else {
                flags
            };
            let n = loop {
                match self.sock.recv(&mut self.buf, f) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                    Err(e) => return Err(SocketError::Receive(e)),
                }
            };
            size = Some(n.max(NLMSG_HDRLEN));
        }
        let n = self.buf.len();
        split_messages(&self.buf[..n]).map(Some)
    }

    /// Reads every reply already queued and returns the NLMSG_ERROR bodies (ACKs included) in
    /// arrival order. Meant for right after sending a batch: the kernel processes a batch
    /// synchronously inside `send`, so all its errors and ACKs are queued when `send` returns.
    /// Callers match `NlError::seq` against the sequence numbers they sent.
    pub fn batch_replies(&mut self) -> Result<Vec<NlError>, SocketError> {
        let mut out = Vec::new();
        while let Some(msgs) = self.try_recv()? {
            for m in msgs {
                if let Some(err) = m.error()? {
                    out.push(err);
                }
            }
        }
        Ok(out)
    }

    /// Bounds every blocking receive (`None`: wait forever), so a missing reply is an error
    /// instead of a hung daemon.
    pub fn set_timeout(&self, timeout: Option<std::time::Duration>) -> Result<(), SocketError> {
        use std::os::fd::AsRawFd;
        let tv = timeout.map_or(
            libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            |d| libc::timeval {
                // Inferred, not `libc::time_t`: musl deprecates naming that type.
                tv_sec: d.as_secs() as _,
                tv_usec: d.subsec_micros() as libc::suseconds_t,
            },
        );
        // SAFETY: the pointer and length describe a live timeval for the duration of the call.
        let rc = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(SocketError::Options(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Sends a dump request (`NLM_F_DUMP`) and collects every reply message up to NLMSG_DONE.
    /// A kernel error fails the whole dump; `NLM_F_DUMP_INTR` is reported as
    /// `DumpInterrupted` so the caller can retry on a consistent snapshot.
    pub fn dump(
        &mut self,
        request: &'static str,
        msg: u16,
        family: u8,
        attrs: &[u8],
    ) -> Result<Vec<Message>, SocketError> {
        let seq = self.next_seq(1);
        let mut out = Vec::new();
        NfHeader::nft(msg, NLM_F_DUMP | NLM_F_ACK, family, seq).encode(attrs, &mut out);
        self.send(&out)?;
        let mut replies = Vec::new();
        let mut interrupted = false;
        loop {
            for m in self.recv()? {
                if m.seq != seq {
                    continue; // a late reply to an earlier request
                }
                interrupted |= m.flags & NLM_F_DUMP_INTR != 0;
                if m.is_done() {
                    if interrupted {
                        return Err(SocketError::DumpInterrupted { request });
                    }
                    return Ok(replies);
                }
                if let Some(err) = m.error()? {
                    if err.is_ack() {
                        continue;
                    }
                    return Err(kernel_error(request, &err));
                }
                // NLMSG_NOOP and anything not from nf_tables carry no dump data.
                if m.nft_msg().is_some() {
                    replies.push(m);
                }
            }
        }
    }

    /// Sends a single get request and returns its one reply message.
    pub fn get(
        &mut self,
        request: &'static str,
        msg: u16,
        family: u8,
        attrs: &[u8],
    ) -> Result<Message, SocketError> {
        let seq = self.next_seq(1);
        let mut out = Vec::new();
        NfHeader::nft(msg, NLM_F_ACK, family, seq).encode(attrs, &mut out);
        self.send(&out)?;
        let mut reply = None;
        loop {
            for m in self.recv()? {
                if m.seq != seq {
                    continue;
                }
                if let Some(err) = m.error()? {
                    if !err.is_ack() {
                        return Err(kernel_error(request, &err));
                    }
                    return reply.ok_or(SocketError::Malformed {
                        offset: 0,
                        reason: "ACK without a reply",
                    });
                }
                if m.is_done() {
                    continue;
                }
                reply = Some(m);
            }
        }
    }

    /// The current ruleset generation id (NFT_MSG_GETGEN): it changes with every committed
    /// transaction, so equal ids mean nothing changed in between.
    pub fn generation(&mut self) -> Result<u32, SocketError> {
        let reply = self.get("GETGEN", NFT_MSG_GETGEN, NFPROTO_UNSPEC, &[])?;
        let (_, _, attrs) = reply.nfgen()?;
        for attr in AttrIter::new(attrs) {
            let attr = attr.map_err(|_| SocketError::Malformed {
                offset: NLMSG_HDRLEN + NFGENMSG_LEN,
                reason: "bad attribute in NEWGEN",
            })?;
            if attr.kind == NFTA_GEN_ID {
                return attr.be32().map_err(|_| SocketError::Malformed {
                    offset: NLMSG_HDRLEN + NFGENMSG_LEN,
                    reason: "NFTA_GEN_ID is not 4 bytes",
                });
            }
        }
        Err(SocketError::NoGenerationId)
    }
}

fn kernel_error(request: &'static str, err: &NlError) -> SocketError {
    SocketError::Kernel {
        request,
        seq: err.seq,
        message: err.message.clone(),
        source: err.to_io(),
    }
}

fn setsockopt_int(sock: &Socket, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the pointer and length describe a live c_int for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{Netns, can_create};

    fn nlmsg(msg_type: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&msg_type.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&7u32.to_ne_bytes());
        v.extend_from_slice(payload);
        v.resize((v.len() + 3) & !3, 0);
        v
    }

    #[test]
    fn a_datagram_splits_into_its_messages_and_errors_name_the_request_seq() {
        let mut err_body = (-2i32).to_ne_bytes().to_vec();
        err_body.extend_from_slice(&nlmsg(nft_msg_type(1), NLM_F_REQUEST, 41, &[])[..16]);
        let mut dgram = nlmsg(nft_msg_type(0), NLM_F_MULTI, 41, &[2, 0, 0, 5, 1]);
        dgram.extend(nlmsg(NLMSG_ERROR, NLM_F_CAPPED, 41, &err_body));
        dgram.extend(nlmsg(NLMSG_DONE, NLM_F_MULTI, 41, &0i32.to_ne_bytes()));
        let msgs = split_messages(&dgram).unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[0].nft_msg(), Some(0));
        assert!(msgs[0].is_multi());
        let (family, res_id, attrs) = msgs[0].nfgen().unwrap();
        assert_eq!((family, res_id, attrs), (2, 5, &[1u8][..]));
        let err = msgs[1].error().unwrap().unwrap();
        assert_eq!((err.errno, err.seq), (2, 41));
        assert!(!err.is_ack());
        assert!(msgs[2].is_done());
    }

    #[test]
    fn a_truncated_datagram_is_an_error_not_a_panic() {
        let dgram = nlmsg(NLMSG_DONE, 0, 1, &[0; 4]);
        assert!(matches!(
            split_messages(&dgram[..10]),
            Err(SocketError::Malformed { .. })
        ));
        let mut long = dgram.clone();
        long[0] = 200;
        assert!(matches!(
            split_messages(&long),
            Err(SocketError::Malformed { .. })
        ));
        let short_err = nlmsg(NLMSG_ERROR, 0, 1, &[0; 8]);
        let msgs = split_messages(&short_err).unwrap();
        assert!(msgs[0].error().is_err());
    }

    #[test]
    fn an_encoded_request_has_the_nfnetlink_layout() {
        let mut out = Vec::new();
        NfHeader::nft(NFT_MSG_GETGEN, NLM_F_ACK, 2, 9).encode(&[4, 0, 1, 0], &mut out);
        assert_eq!(out.len(), 24);
        assert_eq!(u32::from_ne_bytes(out[0..4].try_into().unwrap()), 24);
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), (10 << 8) | 16);
        assert_eq!(
            u16::from_ne_bytes([out[6], out[7]]),
            NLM_F_REQUEST | NLM_F_ACK
        );
        assert_eq!(&out[16..20], &[2, NFNETLINK_V0, 0, 0]);
    }

    #[test]
    fn the_generation_id_moves_when_a_namespace_ruleset_changes() {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("gen").unwrap();
        let mut sock = ns.run(|| NetlinkSocket::open().unwrap()).unwrap();
        let before = sock.generation().unwrap();
        assert_eq!(sock.generation().unwrap(), before);
        ns.exec(&["nft", "add", "table", "ip", "gentest"]).unwrap();
        let after = sock.generation().unwrap();
        assert_ne!(before, after, "a committed change bumps the generation");
    }

    #[test]
    fn a_missing_table_is_reported_with_enoent() {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("enoent").unwrap();
        let mut sock = ns.run(|| NetlinkSocket::open().unwrap()).unwrap();
        let mut w = super::super::attr::AttrWriter::new();
        w.string(crate::nft::netlink::sys::NFTA_TABLE_NAME, "absent");
        let err = sock
            .get(
                "GETTABLE",
                crate::nft::netlink::sys::NFT_MSG_GETTABLE,
                crate::nft::netlink::sys::NFPROTO_IPV4,
                &w.buf,
            )
            .unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENOENT), "{err}");
    }

    #[test]
    fn a_failing_batch_reports_the_failed_message_seq_and_the_last_ack() {
        use super::super::attr::AttrWriter;
        use crate::nft::netlink::sys::*;
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("batch").unwrap();
        let mut sock = ns.run(|| NetlinkSocket::open().unwrap()).unwrap();
        let seq = sock.next_seq(5);
        let mut batch = Vec::new();
        let begin = |msg_type, seq| NfHeader {
            msg_type,
            flags: NLM_F_REQUEST,
            seq,
            family: NFPROTO_UNSPEC,
            res_id: NFNL_SUBSYS_NFTABLES,
        };
        begin(NFNL_MSG_BATCH_BEGIN, seq).encode(&[], &mut batch);
        let mut w = AttrWriter::new();
        w.string(NFTA_TABLE_NAME, "b");
        NfHeader::nft(NFT_MSG_NEWTABLE, NLM_F_CREATE, NFPROTO_IPV4, seq + 1)
            .encode(&w.buf, &mut batch);
        let mut w = AttrWriter::new();
        w.string(NFTA_CHAIN_TABLE, "absent")
            .string(NFTA_CHAIN_NAME, "c");
        NfHeader::nft(NFT_MSG_NEWCHAIN, NLM_F_CREATE, NFPROTO_IPV4, seq + 2)
            .encode(&w.buf, &mut batch);
        let mut w = AttrWriter::new();
        w.string(NFTA_CHAIN_TABLE, "b")
            .string(NFTA_CHAIN_NAME, "ok");
        NfHeader::nft(
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE | NLM_F_ACK,
            NFPROTO_IPV4,
            seq + 3,
        )
        .encode(&w.buf, &mut batch);
        begin(NFNL_MSG_BATCH_END, seq + 4).encode(&[], &mut batch);
        sock.send(&batch).unwrap();
        let replies = sock.batch_replies().unwrap();
        let failed: Vec<_> = replies.iter().filter(|e| !e.is_ack()).collect();
        assert_eq!(failed.len(), 1, "{replies:?}");
        assert_eq!((failed[0].seq, failed[0].errno), (seq + 2, libc::ENOENT));
        assert!(
            replies.iter().any(|e| e.seq == seq + 3),
            "the last message's ACK request is answered: {replies:?}"
        );
        // All-or-nothing: the table from message 1 was not created.
        let out = ns.exec(&["nft", "list", "tables"]).unwrap();
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(sock.try_recv().unwrap().is_none());
    }
}
