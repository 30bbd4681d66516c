//! An nfnetlink socket for any netfilter subsystem (nf_tables, ctnetlink), or a socket of
//! another netlink protocol (sock_diag) for plain dumps: whole datagrams in, every netlink
//! message out, kernel errors reported with the errno and the sequence number of the request
//! they answer.
//!
//! A socket belongs to the network namespace of the thread that opened it, so one opened inside
//! `Netns::run` talks to that namespace's nftables for its whole life.

use std::io;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

pub use netlink_sys::protocols::NETLINK_SOCK_DIAG;

use super::attr::AttrIter;

// linux/netlink.h message types and flags, named as in the header.
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLM_F_ROOT: u16 = 0x100;
pub(crate) const NLM_F_MATCH: u16 = 0x200;
pub(crate) const NLM_F_DUMP: u16 = NLM_F_ROOT | NLM_F_MATCH;
pub const NLM_F_CREATE: u16 = 0x400;
pub(crate) const NLM_F_APPEND: u16 = 0x800;
/// On an NLMSG_ERROR: the original message's payload was trimmed (NETLINK_CAP_ACK).
pub(crate) const NLM_F_CAPPED: u16 = 0x100;
/// On an NLMSG_ERROR: extended-ack TLVs follow.
pub(crate) const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;

// linux/netfilter/nfnetlink.h, named as in the header.
pub(crate) const NFNETLINK_V0: u8 = 0;
pub(crate) const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub(crate) const NFNL_MSG_BATCH_END: u16 = 0x11;
/// `AF_UNSPEC` (`NFPROTO_UNSPEC`): no address family.
const AF_UNSPEC: u8 = 0;

/// Size of `struct nlmsghdr`.
pub(crate) const NLMSG_HDRLEN: usize = 16;
/// Size of `struct nfgenmsg`.
pub(crate) const NFGENMSG_LEN: usize = 4;

/// Receive buffer offered on every read (the kernel's cap for one dump message is 32 KiB).
const DUMP_BUFFER: usize = 64 << 10;

/// Default socket buffers: dumps of a large table arrive faster than we parse them.
const DEFAULT_BUFFER: usize = 4 << 20;
/// The kernel answers synchronously; a reply this late means none is coming.
const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("opening a netlink socket of protocol {protocol}: {source}")]
    Open {
        protocol: isize,
        #[source]
        source: io::Error,
    },
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
    pub(crate) seq: u32,
    /// Message type of the request this answers.
    pub(crate) msg_type: u16,
    /// Extended-ack text, when the kernel gave one.
    pub message: Option<String>,
}

impl NlError {
    pub fn is_ack(&self) -> bool {
        self.errno == 0
    }

    pub(crate) fn to_io(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }
}

/// One netlink message received from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub(crate) msg_type: u16,
    pub flags: u16,
    pub(crate) seq: u32,
    pub pid: u32,
    /// Everything after the `nlmsghdr`.
    pub(crate) payload: Vec<u8>,
}

impl Message {
    pub(crate) fn is_done(&self) -> bool {
        self.msg_type == NLMSG_DONE
    }

    /// The NLMSG_ERROR body (ACK or error), or `None` for other message types.
    pub fn error(&self) -> Result<Option<NlError>, SocketError> {
        if self.msg_type != NLMSG_ERROR {
            return Ok(None);
        }
        parse_error(&self.payload, self.flags).map(Some)
    }

    /// The message number within nfnetlink subsystem `subsys` (the low byte of the type), if
    /// this message belongs to that subsystem.
    pub fn subsys_msg(&self, subsys: u16) -> Option<u16> {
        (self.msg_type >> 8 == subsys).then_some(self.msg_type & 0xff)
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

/// Header fields of one nfnetlink message to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfHeader {
    /// Full netlink type: `(subsystem << 8) | message`, or `NFNL_MSG_BATCH_*`.
    pub(crate) msg_type: u16,
    pub flags: u16,
    pub(crate) seq: u32,
    /// `NFPROTO_*`.
    pub family: u8,
    /// Big-endian on the wire; batch begin/end carry `NFNL_SUBSYS_NFTABLES` here.
    pub(crate) res_id: u16,
}

impl NfHeader {
    /// A request of message `msg` to nfnetlink subsystem `subsys` (`NLM_F_REQUEST` is always
    /// set).
    pub fn request(subsys: u16, msg: u16, flags: u16, family: u8, seq: u32) -> Self {
        NfHeader {
            msg_type: (subsys << 8) | msg,
            flags: flags | NLM_F_REQUEST,
            seq,
            family,
            res_id: 0,
        }
    }

    /// Opens a batch: the messages up to `batch_end` are one transaction of `subsys`.
    pub fn batch_begin(subsys: u16, seq: u32) -> Self {
        NfHeader::batch(NFNL_MSG_BATCH_BEGIN, subsys, seq)
    }

    /// Closes a batch opened by `batch_begin`.
    pub fn batch_end(subsys: u16, seq: u32) -> Self {
        NfHeader::batch(NFNL_MSG_BATCH_END, subsys, seq)
    }

    fn batch(msg_type: u16, subsys: u16, seq: u32) -> Self {
        NfHeader {
            msg_type,
            flags: NLM_F_REQUEST,
            seq,
            family: AF_UNSPEC,
            res_id: subsys,
        }
    }

    /// Appends `nlmsghdr + nfgenmsg + attrs` to `out`; `attrs` must already be 4-byte padded
    /// (as `AttrWriter` produces).
    pub fn encode(&self, attrs: &[u8], out: &mut Vec<u8>) {
        let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
        encode_nlmsghdr(len, self.msg_type, self.flags, self.seq, out);
        out.push(self.family);
        out.push(NFNETLINK_V0);
        out.extend_from_slice(&self.res_id.to_be_bytes());
        out.extend_from_slice(attrs);
    }
}

/// Appends a `nlmsghdr` for a message of `len` bytes in all (port id 0: to the kernel).
fn encode_nlmsghdr(len: usize, msg_type: u16, flags: u16, seq: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&msg_type.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
}

/// A bound netlink socket (NETLINK_NETFILTER unless opened with `open_protocol`).
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
        Self::open_protocol(NETLINK_NETFILTER)
    }

    /// Like `open`, for netlink protocol `protocol` (`NETLINK_SOCK_DIAG`, say).
    pub fn open_protocol(protocol: isize) -> Result<Self, SocketError> {
        let mut sock =
            Socket::new(protocol).map_err(|source| SocketError::Open { protocol, source })?;
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

    /// Reserves `count` consecutive sequence numbers and returns the first.
    pub(crate) fn next_seq(&mut self, count: u32) -> u32 {
        let first = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(count.max(1));
        first
    }

    /// Raises both socket buffers to at least `bytes`: a batch larger than the send buffer
    /// fails with EMSGSIZE, and replies larger than the receive buffer are dropped (ENOBUFS).
    /// Uses the *FORCE options (root can exceed rmem_max/wmem_max) and falls back to the
    /// plain ones, which the kernel caps.
    pub(crate) fn set_buffers(&mut self, bytes: usize) -> Result<(), SocketError> {
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
    pub(crate) fn batch_replies(&mut self) -> Result<Vec<NlError>, SocketError> {
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
    pub(crate) fn set_timeout(
        &self,
        timeout: Option<std::time::Duration>,
    ) -> Result<(), SocketError> {
        use std::os::fd::AsRawFd;
        let tv = timeout.map_or(
            libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            // Field types inferred: musl's libc deprecates naming `time_t` and `suseconds_t`.
            |d| libc::timeval {
                tv_sec: d.as_secs() as _,
                tv_usec: d.subsec_micros() as _,
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

    /// Sends one request, `header` with `flags` added, and returns the sequence number its
    /// replies carry.
    fn send_request(
        &mut self,
        header: NfHeader,
        flags: u16,
        attrs: &[u8],
    ) -> Result<u32, SocketError> {
        let header = NfHeader {
            flags: header.flags | flags,
            ..header
        };
        let mut out = Vec::new();
        header.encode(attrs, &mut out);
        self.send(&out)?;
        Ok(header.seq)
    }

    /// Sends the dump request `header` (with `NLM_F_DUMP` added) and hands each reply message
    /// to it to `each`, up to NLMSG_DONE; ACKs are skipped and a kernel error fails the dump.
    /// Returns whether the kernel flagged the dump as interrupted (`NLM_F_DUMP_INTR`: what it
    /// walked changed meanwhile), for callers that need a consistent snapshot.
    pub(crate) fn dump_each(
        &mut self,
        request: &'static str,
        header: NfHeader,
        attrs: &[u8],
        each: impl FnMut(Message),
    ) -> Result<bool, SocketError> {
        let seq = self.send_request(header, NLM_F_DUMP, attrs)?;
        self.read_dump(request, seq, each)
    }

    /// Sends a dump request of a protocol other than nfnetlink: `msg_type` with `body` (the
    /// protocol's own header and its attributes, 4-byte padded) after the `nlmsghdr`; then
    /// reads the dump as `dump_each` does.
    #[cfg(feature = "daemon")]
    pub(crate) fn dump_plain(
        &mut self,
        request: &'static str,
        msg_type: u16,
        body: &[u8],
        each: impl FnMut(Message),
    ) -> Result<bool, SocketError> {
        let seq = self.next_seq(1);
        let mut out = Vec::with_capacity(NLMSG_HDRLEN + body.len());
        let flags = NLM_F_REQUEST | NLM_F_DUMP;
        encode_nlmsghdr(NLMSG_HDRLEN + body.len(), msg_type, flags, seq, &mut out);
        out.extend_from_slice(body);
        self.send(&out)?;
        self.read_dump(request, seq, each)
    }

    /// Hands each reply to the dump request `seq` to `each`, up to NLMSG_DONE (see
    /// `dump_each`).
    fn read_dump(
        &mut self,
        request: &'static str,
        seq: u32,
        mut each: impl FnMut(Message),
    ) -> Result<bool, SocketError> {
        let mut interrupted = false;
        loop {
            for m in self.recv()? {
                if m.seq != seq {
                    continue; // a late reply to an earlier request
                }
                interrupted |= m.flags & NLM_F_DUMP_INTR != 0;
                if m.is_done() {
                    return Ok(interrupted);
                }
                if let Some(err) = m.error()? {
                    if err.is_ack() {
                        continue;
                    }
                    return Err(kernel_error(request, &err));
                }
                each(m);
            }
        }
    }

    /// Sends the request `header` (with `NLM_F_ACK` added: the ACK ends the answer) and
    /// returns its one reply message.
    pub fn request(
        &mut self,
        request: &'static str,
        header: NfHeader,
        attrs: &[u8],
    ) -> Result<Message, SocketError> {
        let seq = self.send_request(header, NLM_F_ACK, attrs)?;
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

    /// `NLM_F_MULTI`: a message of a multi-part answer, as the kernel marks dump replies.
    const NLM_F_MULTI: u16 = 0x2;

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
        err_body.extend_from_slice(&nlmsg((10 << 8) | 1, NLM_F_REQUEST, 41, &[])[..16]);
        let mut dgram = nlmsg(10 << 8, NLM_F_MULTI, 41, &[2, 0, 0, 5, 1]);
        dgram.extend(nlmsg(NLMSG_ERROR, NLM_F_CAPPED, 41, &err_body));
        dgram.extend(nlmsg(NLMSG_DONE, NLM_F_MULTI, 41, &0i32.to_ne_bytes()));
        let msgs = split_messages(&dgram).unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[0].subsys_msg(10), Some(0));
        assert_eq!(msgs[0].subsys_msg(1), None);
        assert!(msgs[0].flags & NLM_F_MULTI != 0);
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
        NfHeader::request(10, 16, NLM_F_ACK, 2, 9).encode(&[4, 0, 1, 0], &mut out);
        assert_eq!(out.len(), 24);
        assert_eq!(u32::from_ne_bytes(out[0..4].try_into().unwrap()), 24);
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), (10 << 8) | 16);
        assert_eq!(
            u16::from_ne_bytes([out[6], out[7]]),
            NLM_F_REQUEST | NLM_F_ACK
        );
        assert_eq!(&out[16..20], &[2, NFNETLINK_V0, 0, 0]);
    }
}
