use super::*;
use netlink_packet_core::DefaultNla;
use std::net::IpAddr;

fn raw_nla(kind: u16, value: &[u8]) -> DefaultNla {
    DefaultNla::new(kind, value.to_vec())
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
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
    let tuple = |src: IpAddr, dst: IpAddr, sport: u16, dport: u16| {
        let mut fields = vec![ProtoTuple::Protocol(proto.into())];
        if with_ports {
            fields.push(ProtoTuple::SourcePort(sport));
            fields.push(ProtoTuple::DestinationPort(dport));
        }
        vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress(src),
                IPTuple::DestinationAddress(dst),
            ]),
            Tuple::Proto(fields),
        ]
    };
    let attrs = vec![
        ConntrackAttribute::CtaTupleOrig(tuple(ip("10.2.0.1"), ip("10.96.0.10"), 40000, 53)),
        ConntrackAttribute::CtaTupleReply(tuple(ip("10.1.0.5"), ip("10.2.0.1"), 5353, 40000)),
        ConntrackAttribute::CtaTimeout(30),
        ConntrackAttribute::Other(raw_nla(CTA_ID, &7u32.to_be_bytes())),
        ConntrackAttribute::Other(raw_nla(CTA_ZONE, &3u16.to_be_bytes())),
    ];
    let mut body = vec![0u8; attrs.as_slice().buffer_len()];
    attrs.as_slice().emit(&mut body);
    let mut payload = vec![2, 0, 0, 0];
    payload.extend(body);
    Message {
        msg_type: (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW,
        flags: 0,
        seq: 1,
        pid: 0,
        payload,
    }
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
    let kinds: Vec<u16> = entry.key.iter().map(|a| a.kind()).collect();
    assert_eq!(kinds, vec![1, CTA_ID, CTA_ZONE], "orig tuple, id, zone");
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
                .map(|e| Entry {
                    flow: e.flow,
                    family: e.family,
                    key: e
                        .key
                        .iter()
                        .map(|a| match a {
                            ConntrackAttribute::Other(n) if n.kind() == CTA_ID => {
                                ConntrackAttribute::Other(raw_nla(CTA_ID, &[0, 0, 0, 1]))
                            }
                            a => a.clone(),
                        })
                        .collect(),
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
