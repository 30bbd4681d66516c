use super::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn udp_flow(orig_src: &str, orig_dst: &str, reply_src: &str) -> Flow {
    Flow {
        proto: 17,
        orig_src: sa(orig_src),
        orig_dst: sa(orig_dst),
        reply_src: sa(reply_src),
        reply_dst: sa(orig_src),
    }
}

/// Bytes as the kernel dumps them: orig and reply tuples, a status, the id and a zone.
fn dumped_entry(proto: u8, with_ports: bool) -> Message {
    let tuple = |a: &mut AttrWriter, kind: u16, src: &str, dst: &str, ports: (u16, u16)| {
        a.nested(kind, |t| {
            t.nested(CTA_TUPLE_IP, |ip| {
                ip.bytes(CTA_IP_V4_SRC, &ip4(src))
                    .bytes(CTA_IP_V4_DST, &ip4(dst));
            });
            t.nested(CTA_TUPLE_PROTO, |p| {
                p.u8(CTA_PROTO_NUM, proto);
                if with_ports {
                    p.bytes(CTA_PROTO_SRC_PORT, &ports.0.to_be_bytes());
                    p.bytes(CTA_PROTO_DST_PORT, &ports.1.to_be_bytes());
                }
            });
        });
    };
    let mut a = AttrWriter::new();
    tuple(
        &mut a,
        CTA_TUPLE_ORIG,
        "10.2.0.1",
        "10.96.0.10",
        (40000, 53),
    );
    tuple(
        &mut a,
        CTA_TUPLE_REPLY,
        "10.1.0.5",
        "10.2.0.1",
        (5353, 40000),
    );
    a.be32(3, 0x0e) // CTA_STATUS
        .be32(7, 30) // CTA_TIMEOUT
        .be32(CTA_ID, 7)
        .bytes(CTA_ZONE, &3u16.to_be_bytes());
    let mut payload = vec![2, 0, 0, 0];
    payload.extend(a.buf);
    Message {
        msg_type: (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW,
        flags: 0,
        seq: 1,
        pid: 0,
        payload,
    }
}

fn ip4(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

/// The kinds of the attributes in `key`.
fn kinds(key: &[u8]) -> Vec<u16> {
    AttrIter::new(key).map(|a| a.unwrap().kind).collect()
}

#[test]
fn a_dumped_entry_decodes_to_its_flow_and_a_delete_key_with_id_and_zone() {
    let entry = decode_entry(&dumped_entry(17, true)).unwrap().unwrap();
    assert_eq!(
        entry.flow,
        Flow {
            proto: 17,
            orig_src: sa("10.2.0.1:40000"),
            orig_dst: sa("10.96.0.10:53"),
            reply_src: sa("10.1.0.5:5353"),
            reply_dst: sa("10.2.0.1:40000"),
        }
    );
    assert_eq!(entry.family, 2);
    assert_eq!(
        kinds(&entry.key),
        vec![CTA_TUPLE_ORIG, CTA_ID, CTA_ZONE],
        "orig tuple, id, zone"
    );
}

#[test]
fn a_truncated_or_tupleless_entry_is_an_error_not_a_panic() {
    let mut msg = dumped_entry(17, true);
    let whole = msg.payload.clone();
    for cut in [4 + 3, 4 + 10, 4 + 30, whole.len() - 5] {
        msg.payload = whole[..cut].to_vec();
        assert!(decode_entry(&msg).is_err(), "cut at {cut}");
    }
    let mut a = AttrWriter::new();
    a.be32(CTA_ID, 7);
    msg.payload = [vec![2, 0, 0, 0], a.buf].concat();
    assert!(decode_entry(&msg).is_err());
}

#[test]
fn a_dumped_entry_without_ports_is_skipped_not_an_error() {
    assert!(decode_entry(&dumped_entry(1, false)).unwrap().is_none());
}

#[test]
fn a_delete_spares_an_entry_with_another_id_and_counts_a_vanished_one_as_already_gone() {
    use crate::netns::{Netns, can_create};
    use std::net::UdpSocket;
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let ns = Netns::create("ctid").unwrap();
    ns.exec_with_stdin(
        &["nft", "-f", "-"],
        "table ip t {\n chain out {\n type filter hook output priority 0;\n ct state new counter\n }\n}\n",
    )
    .unwrap();
    let (found, reports, left) = ns
        .run(|| {
            let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            let to_sink = |flow: &Flow| flow.orig_dst == sink.local_addr().unwrap();
            client.send_to(b"1", sink.local_addr().unwrap()).unwrap();
            let mut sock = NetlinkSocket::open().unwrap();
            let mut undecodable = 0;
            let entries = dump(&mut sock, DumpScope::All, &mut undecodable, to_sink)
                .unwrap()
                .entries;
            // The same tuple under another id stands for an entry re-created after the dump.
            let other_id: Vec<Entry> = entries
                .iter()
                .map(|e| {
                    let mut key = AttrWriter::new();
                    for a in AttrIter::new(&e.key) {
                        let a = a.unwrap();
                        match a.kind {
                            CTA_ID => key.be32(CTA_ID, 1),
                            CTA_TUPLE_ORIG => key.bytes(CTA_TUPLE_ORIG | NLA_F_NESTED, a.value),
                            kind => key.bytes(kind, a.value),
                        };
                    }
                    Entry {
                        flow: e.flow,
                        family: e.family,
                        key: key.buf,
                    }
                })
                .collect();
            let mut left = Vec::new();
            let mut reports = Vec::new();
            for batch in [&other_id, &entries, &entries] {
                let mut report = DeleteReport::default();
                delete_entries(&mut sock, batch, &mut report).unwrap();
                reports.push(report);
                left.push(
                    dump(&mut sock, DumpScope::All, &mut undecodable, to_sink)
                        .unwrap()
                        .entries
                        .len(),
                );
            }
            (entries.len(), reports, left)
        })
        .unwrap();
    assert_eq!(found, 1);
    let counts: Vec<(usize, usize, usize)> = reports
        .iter()
        .map(|r| (r.deleted, r.already_gone, r.failed.len()))
        .collect();
    assert_eq!(
        counts,
        vec![(0, 1, 0), (1, 0, 0), (0, 1, 0)],
        "another id: refused; the dumped id: deleted; again: already gone"
    );
    assert_eq!(left, vec![1, 0, 0]);
}

#[test]
fn a_filtered_dump_asks_for_one_family_and_the_protocol_in_the_original_tuple() {
    let scope = DumpScope::Filtered {
        family: IpFamily::V6,
        proto: libc::IPPROTO_UDP as u8,
    };
    let flags = CTA_FILTER_FLAG_CTA_PROTO_NUM.to_ne_bytes();
    let mut expected = vec![
        0x10, 0x00, 0x01, 0x80, // CTA_TUPLE_ORIG, nested
        0x0c, 0x00, 0x02, 0x80, // CTA_TUPLE_PROTO, nested
        0x05, 0x00, 0x01, 0x00, 17, 0, 0, 0, // CTA_PROTO_NUM udp, padded
    ];
    expected.extend(12u16.to_ne_bytes());
    expected.extend((CTA_FILTER | NLA_F_NESTED).to_ne_bytes());
    expected.extend(8u16.to_ne_bytes());
    expected.extend(CTA_FILTER_ORIG_FLAGS.to_ne_bytes());
    expected.extend(flags);
    assert_eq!(scope.request(), (libc::AF_INET6 as u8, expected));
    assert_eq!(DumpScope::All.request(), (AF_UNSPEC, Vec::new()));
}

#[test]
fn a_flow_prints_both_directions() {
    let flow = udp_flow("10.2.0.1:40000", "10.96.0.10:53", "10.1.0.5:5353");
    assert_eq!(
        flow.to_string(),
        "udp 10.2.0.1:40000 -> 10.96.0.10:53 (reply 10.1.0.5:5353 -> 10.2.0.1:40000)"
    );
}
