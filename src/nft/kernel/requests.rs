//! nf_tables requests over the netfilter socket (`crate::netlink`): reading one object, dumping
//! a kind of object, and the ruleset generation.

use super::sys::{NFNL_SUBSYS_NFTABLES, NFPROTO_UNSPEC, NFT_MSG_GETGEN, NFTA_GEN_ID};
use crate::netlink::attr::AttrIter;
use crate::netlink::socket::{NFGENMSG_LEN, NLM_F_ACK, NLMSG_HDRLEN};
use crate::netlink::{Message, NetlinkSocket, NfHeader, SocketError};

/// The header of nf_tables request `msg` (`NFT_MSG_*`).
pub fn header(msg: u16, flags: u16, family: u8, seq: u32) -> NfHeader {
    NfHeader::request(NFNL_SUBSYS_NFTABLES, msg, flags, family, seq)
}

/// Dumps every object of request `msg`, up to NLMSG_DONE. A dump the kernel flags as
/// interrupted (`NLM_F_DUMP_INTR`) is `DumpInterrupted`, so the caller can retry on a
/// consistent snapshot.
pub fn dump(
    sock: &mut NetlinkSocket,
    request: &'static str,
    msg: u16,
    family: u8,
    attrs: &[u8],
) -> Result<Vec<Message>, SocketError> {
    let header = header(msg, NLM_F_ACK, family, sock.next_seq(1));
    let mut replies = Vec::new();
    let interrupted = sock.dump_each(request, header, attrs, |m| {
        // NLMSG_NOOP and anything not from nf_tables carry no dump data.
        if m.subsys_msg(NFNL_SUBSYS_NFTABLES).is_some() {
            replies.push(m);
        }
    })?;
    if interrupted {
        return Err(SocketError::DumpInterrupted { request });
    }
    Ok(replies)
}

/// Sends get request `msg` and returns its one reply message.
pub fn get(
    sock: &mut NetlinkSocket,
    request: &'static str,
    msg: u16,
    family: u8,
    attrs: &[u8],
) -> Result<Message, SocketError> {
    let header = header(msg, 0, family, sock.next_seq(1));
    sock.request(request, header, attrs)
}

/// The current ruleset generation id (NFT_MSG_GETGEN): it changes with every committed
/// transaction, so equal ids mean nothing changed in between.
pub fn generation(sock: &mut NetlinkSocket) -> Result<u32, SocketError> {
    let reply = get(sock, "GETGEN", NFT_MSG_GETGEN, NFPROTO_UNSPEC, &[])?;
    let (_, _, attrs) = reply.nfgen()?;
    let malformed = |reason| SocketError::Malformed {
        offset: NLMSG_HDRLEN + NFGENMSG_LEN,
        reason,
    };
    for attr in AttrIter::new(attrs) {
        let attr = attr.map_err(|_| malformed("bad attribute in NEWGEN"))?;
        if attr.kind == NFTA_GEN_ID {
            return attr
                .be32()
                .map_err(|_| malformed("NFTA_GEN_ID is not 4 bytes"));
        }
    }
    Err(malformed("the generation reply has no NFTA_GEN_ID"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr::AttrWriter;
    use crate::netlink::socket::NLM_F_CREATE;
    use crate::netns::{Netns, can_create};
    use crate::nft::kernel::sys::*;

    #[test]
    fn the_generation_id_moves_when_a_namespace_ruleset_changes() {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("gen").unwrap();
        let mut sock = ns.run(|| NetlinkSocket::open().unwrap()).unwrap();
        let before = generation(&mut sock).unwrap();
        assert_eq!(generation(&mut sock).unwrap(), before);
        ns.exec(&["nft", "add", "table", "ip", "gentest"]).unwrap();
        let after = generation(&mut sock).unwrap();
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
        let mut w = AttrWriter::new();
        w.string(NFTA_TABLE_NAME, "absent");
        let err = get(
            &mut sock,
            "GETTABLE",
            NFT_MSG_GETTABLE,
            NFPROTO_IPV4,
            &w.buf,
        )
        .unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENOENT), "{err}");
    }

    #[test]
    fn a_failing_batch_reports_the_failed_message_seq_and_the_last_ack() {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("batch").unwrap();
        let mut sock = ns.run(|| NetlinkSocket::open().unwrap()).unwrap();
        let seq = sock.next_seq(5);
        let mut batch = Vec::new();
        NfHeader::batch_begin(NFNL_SUBSYS_NFTABLES, seq).encode(&[], &mut batch);
        let mut w = AttrWriter::new();
        w.string(NFTA_TABLE_NAME, "b");
        header(NFT_MSG_NEWTABLE, NLM_F_CREATE, NFPROTO_IPV4, seq + 1).encode(&w.buf, &mut batch);
        let mut w = AttrWriter::new();
        w.string(NFTA_CHAIN_TABLE, "absent")
            .string(NFTA_CHAIN_NAME, "c");
        header(NFT_MSG_NEWCHAIN, NLM_F_CREATE, NFPROTO_IPV4, seq + 2).encode(&w.buf, &mut batch);
        let mut w = AttrWriter::new();
        w.string(NFTA_CHAIN_TABLE, "b")
            .string(NFTA_CHAIN_NAME, "ok");
        header(
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE | NLM_F_ACK,
            NFPROTO_IPV4,
            seq + 3,
        )
        .encode(&w.buf, &mut batch);
        NfHeader::batch_end(NFNL_SUBSYS_NFTABLES, seq + 4).encode(&[], &mut batch);
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
