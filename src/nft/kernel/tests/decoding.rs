//! Decoding and lifting case by case: rules nft would not generate for the model, truncated
//! and malformed messages, set key types, interval reassembly, torn and unreadable set dumps.

use super::ip_table::IP_TABLE;
use super::*;
use crate::nft::kernel::decode::RawSet;

/// Set `name` of table `t` as a dump describes it: 4-byte keys of nft type `key_type`, no
/// data, timeout or comment.
fn raw_set(name: &str, flags: u32, key_type: u32) -> RawSet {
    RawSet {
        table: "t".into(),
        name: name.into(),
        flags,
        key_type,
        key_len: 4,
        data_type: None,
        timeout_ms: None,
        size: None,
        field_lens: Vec::new(),
        comment: None,
        key_typeof: false,
    }
}

#[test]
fn a_rule_nft_would_not_generate_for_the_model_is_an_error_naming_chain_and_handle() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let ns = netns_with(
        "dumplift",
        "table ip kubenft {\n chain odd {\n ip ttl 3 accept\n }\n}\n",
    );
    let err = ns
        .run(|| {
            let mut sock = NetlinkSocket::open().unwrap();
            dump_table(&mut sock, Family::Ip, "kubenft").unwrap_err()
        })
        .unwrap();
    match &err {
        DumpError::Lift(LiftError { chain, handle, .. }) => {
            assert_eq!(chain, "odd");
            assert!(*handle > 0);
        }
        other => panic!("expected a lift error, got {other}"),
    }
    assert!(err.to_string().contains("payload"), "{err}");
}

#[test]
fn truncated_and_malformed_rule_messages_are_errors() {
    use crate::netlink::attr::AttrWriter;
    use crate::nft::kernel::sys::*;
    let mut w = AttrWriter::new();
    w.string(NFTA_RULE_TABLE, "t")
        .string(NFTA_RULE_CHAIN, "c")
        .be64(NFTA_RULE_HANDLE, 4)
        .nested(NFTA_RULE_EXPRESSIONS, |l| {
            l.nested(NFTA_LIST_ELEM, |e| {
                e.string(NFTA_EXPR_NAME, "cmp").nested(NFTA_EXPR_DATA, |d| {
                    d.be32(NFTA_CMP_SREG, 1).be32(NFTA_CMP_OP, 0);
                });
            });
        });
    // A cmp without data is rejected, not defaulted.
    assert!(matches!(
        decode::rule(&w.buf),
        Err(DecodeError::Missing {
            attr: "NFTA_CMP_DATA",
            ..
        })
    ));
    // Every truncation of a valid message is either an error or a shorter valid message.
    for cut in 0..w.buf.len() {
        let _ = decode::rule(&w.buf[..cut]);
    }
    let mut bad = w.buf.clone();
    bad[0] = 0xff; // first attribute length overruns the buffer
    assert!(matches!(decode::rule(&bad), Err(DecodeError::Attr { .. })));
    let mut short = AttrWriter::new();
    short.bytes(NFTA_RULE_HANDLE, &[1, 2, 3]);
    assert!(matches!(
        decode::rule(&short.buf),
        Err(DecodeError::Attr { .. })
    ));
}

#[test]
fn a_compare_on_a_register_never_loaded_is_a_lift_error() {
    let rule = RawRule {
        table: "t".into(),
        chain: "c".into(),
        handle: 9,
        exprs: vec![decode::Expr::Cmp {
            sreg: 1,
            op: 0,
            data: vec![6],
        }],
        comment: None,
    };
    let sets = std::collections::BTreeMap::<String, SetInfo>::new();
    let err = lift::lift_rule(Family::Ip, &rule, &sets).unwrap_err();
    assert!(
        matches!(&err, LiftError { chain, handle: 9, .. } if chain == "c"),
        "{err}"
    );
}

#[test]
fn set_key_type_ids_decode_concatenations_in_order() {
    assert_eq!(
        decode::data_types("s", 0x730d).unwrap(),
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService
        ]
    );
    assert!(decode::data_types("s", 63).is_err());
    assert!(decode::data_types("s", 0).is_err());
}

#[test]
fn canonical_drops_only_the_nfproto_dependency_nft_would_add_and_plain_spells_rejects() {
    let nf4 = Stmt::match_eq(Selector::NfProto, Value::NfProto(2));
    let to = Stmt::match_eq(Selector::IpDaddr, Value::Ipv4(v4("10.0.0.1")));
    let to6 = Stmt::match_eq(Selector::Ip6Daddr, Value::Ipv6(v6("fd00::1")));
    let mut t = Table {
        family: Family::Inet,
        name: "t".into(),
        ..Table::default()
    };
    t.chains.extend([chain(
        "c",
        None,
        vec![
            Rule::new(vec![nf4.clone(), to.clone()]),
            Rule::new(vec![nf4.clone(), to6.clone()]),
            Rule::new(vec![
                nf4.clone(),
                Stmt::Reject(RejectKind::IcmpPortUnreachable),
            ]),
        ],
    )]);
    let c = crate::nft::kernel::dump::canonical(&t);
    let rules: Vec<_> = c.chains["c"]
        .rules
        .iter()
        .map(|r| r.stmts.clone())
        .collect();
    assert_eq!(
        rules,
        vec![
            vec![to.clone()],
            vec![nf4.clone(), to6],
            vec![nf4.clone(), Stmt::Reject(RejectKind::Default)],
        ]
    );
    t.family = Family::Ip;
    let c = crate::nft::kernel::dump::canonical(&t);
    assert_eq!(c.chains["c"].rules[0].stmts, vec![nf4, to]);
}

#[test]
fn interval_elements_reassemble_into_cidrs_including_adjacent_and_top_ranges() {
    use crate::nft::kernel::decode::RawElem;
    use crate::nft::kernel::sys::{NFT_SET_ELEM_INTERVAL_END, NFT_SET_INTERVAL};
    let raw = raw_set("s", NFT_SET_INTERVAL, 7);
    let e = |k: [u8; 4], end: bool| RawElem {
        key: k.to_vec(),
        key_end: None,
        data: None,
        flags: if end { NFT_SET_ELEM_INTERVAL_END } else { 0 },
        comment: None,
        expiration_ms: None,
    };
    // 0.0.0.0 end marker, 10.0.0.0/8 then adjacent 11.0.0.0/8, and 240.0.0.0/4 to the top,
    // in the reverse order the kernel's rbtree walk returns.
    let elems = vec![
        e([240, 0, 0, 0], false),
        e([12, 0, 0, 0], true),
        e([11, 0, 0, 0], false),
        e([11, 0, 0, 0], true),
        e([10, 0, 0, 0], false),
        e([0, 0, 0, 0], true),
    ];
    let set = crate::nft::kernel::dump::build_set(&raw, elems).unwrap();
    let keys: Vec<_> = set.elements.iter().map(|e| e.key[0].clone()).collect();
    assert_eq!(
        keys,
        vec![
            Value::Ipv4Net("10.0.0.0/8".parse().unwrap()),
            Value::Ipv4Net("11.0.0.0/8".parse().unwrap()),
            Value::Ipv4Net("240.0.0.0/4".parse().unwrap()),
        ]
    );
    // A range that is not one prefix has no model value.
    let not_cidr = vec![e([10, 0, 0, 1], false), e([10, 0, 0, 4], true)];
    let err = crate::nft::kernel::dump::build_set(&raw, not_cidr).unwrap_err();
    assert!(err.to_string().contains("not a prefix"), "{err}");
}

#[test]
fn an_element_listed_twice_marks_the_set_dump_as_torn_so_it_is_read_again() {
    use crate::nft::kernel::decode::RawElem;
    let raw = raw_set("ips", 0, 7);
    let e = |k: [u8; 4]| RawElem {
        key: k.to_vec(),
        key_end: None,
        data: None,
        flags: 0,
        comment: None,
        expiration_ms: None,
    };
    let err = crate::nft::kernel::dump::build_set(
        &raw,
        vec![e([10, 0, 0, 1]), e([10, 0, 0, 2]), e([10, 0, 0, 1])],
    )
    .unwrap_err();
    assert!(
        matches!(err, crate::nft::kernel::dump::DumpError::Torn { .. }),
        "{err}"
    );
}

/// A named integer-keyed map without nft's `typeof` description (as kubenft wrote them
/// before) is unreadable, so the engine replaces the table with one nft can list and read back;
/// with the description, or as an anonymous map (which nft lists inline), it reads.
#[test]
fn an_integer_keyed_map_without_its_typeof_description_reads_as_unreadable() {
    use crate::nft::kernel::sys::{NFT_SET_ANONYMOUS, NFT_SET_CONSTANT, NFT_SET_MAP};
    let raw = |flags, key_typeof| RawSet {
        flags: NFT_SET_MAP | flags,
        data_type: Some(crate::nft::kernel::sys::NFT_DATA_VERDICT),
        key_typeof,
        ..raw_set("pick", 0, 4)
    };
    let err = crate::nft::kernel::dump::build_set(&raw(0, false), Vec::new()).unwrap_err();
    assert!(
        matches!(err, crate::nft::kernel::dump::DumpError::Set { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("typeof"), "{err}");
    assert!(crate::nft::kernel::dump::build_set(&raw(0, true), Vec::new()).is_ok());
    let anonymous = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT;
    assert!(crate::nft::kernel::dump::build_set(&raw(anonymous, false), Vec::new()).is_ok());
}

#[test]
fn truncated_or_corrupted_kernel_dump_messages_decode_to_errors_never_panics() {
    use crate::nft::kernel::sys::*;
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let ns = netns_with("dumpfuzz", IP_TABLE);
    let msgs = ns
        .run(|| {
            let mut sock = NetlinkSocket::open().unwrap();
            let mut all = Vec::new();
            for (msg, kind) in [
                (NFT_MSG_GETCHAIN, "chain"),
                (NFT_MSG_GETSET, "set"),
                (NFT_MSG_GETRULE, "rule"),
            ] {
                for m in
                    super::super::requests::dump(&mut sock, "dump", msg, NFPROTO_IPV4, &[]).unwrap()
                {
                    all.push((kind, m.nfgen().unwrap().2.to_vec()));
                }
            }
            let mut w = crate::netlink::attr::AttrWriter::new();
            w.string(NFTA_SET_ELEM_LIST_TABLE, "kubenft")
                .string(NFTA_SET_ELEM_LIST_SET, "service-ips");
            let elems = super::super::requests::dump(
                &mut sock,
                "elems",
                NFT_MSG_GETSETELEM,
                NFPROTO_IPV4,
                &w.buf,
            );
            for m in elems.unwrap() {
                all.push(("elems", m.nfgen().unwrap().2.to_vec()));
            }
            all
        })
        .unwrap();
    assert!(msgs.len() > 20, "{} messages", msgs.len());
    let sets = std::collections::BTreeMap::new();
    let decode_any = |kind: &str, b: &[u8]| match kind {
        "chain" => decode::chain(b).map(|_| ()),
        "set" => decode::set(b).map(|_| ()),
        "elems" => decode::set_elems(b).map(|_| ()),
        _ => decode::rule(b).map(|r| {
            let _ = lift::lift_rule(Family::Ip, &r, &sets);
        }),
    };
    let mut errors = 0;
    for (kind, bytes) in &msgs {
        decode_any(kind, bytes).expect("intact messages decode");
        for cut in 0..bytes.len() {
            errors += usize::from(decode_any(kind, &bytes[..cut]).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            errors += usize::from(decode_any(kind, &b).is_err());
        }
    }
    assert!(errors > 0, "corruption is detected at least somewhere");
}
