//! The renderer's output, golden text for each statement, declaration and operation.

use super::stmt::render_stmt;
use super::*;
use crate::nft::model::Chain;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

fn tref(family: Family) -> TableRef {
    TableRef {
        family,
        name: "kubenft".into(),
    }
}

fn matches(left: Selector, mask: Option<u32>, op: CmpOp, right: Value) -> Stmt {
    Stmt::Match {
        left,
        mask,
        op,
        right,
    }
}

#[test]
fn a_service_dispatch_vmap_renders_as_a_concatenation() {
    let s = Stmt::VMap {
        key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
        map: MapRef::Named("service-ips".into()),
    };
    assert_eq!(
        s.to_string(),
        "ip daddr . meta l4proto . th dport vmap @service-ips"
    );
}

#[test]
fn numgen_keys_render_as_plain_numbers() {
    let s = Stmt::NumgenVMap {
        modulus: 2,
        map: MapRef::Anonymous(vec![
            (vec![Value::Mark(0)], Verdict::goto("a")),
            (vec![Value::Mark(1)], Verdict::goto("b")),
        ]),
    };
    assert_eq!(
        s.to_string(),
        "numgen random mod 2 vmap { 0 : goto a, 1 : goto b }"
    );
}

#[test]
fn masquerade_mark_statements_render_with_eight_digit_hex() {
    assert_eq!(
        Stmt::SetMark(MarkOp::Or(0x4000)).to_string(),
        "meta mark set meta mark or 0x00004000"
    );
    assert_eq!(
        Stmt::SetMark(MarkOp::Xor(0x4000)).to_string(),
        "meta mark set meta mark xor 0x00004000"
    );
    assert_eq!(
        matches(Selector::Mark, Some(0x4000), CmpOp::Eq, Value::Mark(0)).to_string(),
        "meta mark & 0x00004000 == 0x00000000"
    );
    assert_eq!(
        matches(Selector::Mark, Some(0x4000), CmpOp::Ne, Value::Mark(0)).to_string(),
        "meta mark & 0x00004000 != 0x00000000"
    );
}

#[test]
fn plain_matches_omit_the_equals_sign_and_negate_with_bang_equals() {
    let cidr = Value::Ipv4Net("10.0.0.0/8".parse().unwrap());
    assert_eq!(
        matches(Selector::IpSaddr, None, CmpOp::Ne, cidr).to_string(),
        "ip saddr != 10.0.0.0/8"
    );
    assert_eq!(
        matches(
            Selector::CtState,
            None,
            CmpOp::Eq,
            Value::CtState(CtState(CtState::NEW.0 | CtState::ESTABLISHED.0))
        )
        .to_string(),
        "ct state established,new"
    );
    assert_eq!(
        matches(
            Selector::FibDaddrType,
            None,
            CmpOp::Eq,
            Value::AddrType(AddrType::Local)
        )
        .to_string(),
        "fib daddr type local"
    );
    assert_eq!(
        matches(
            Selector::IifName,
            None,
            CmpOp::Eq,
            Value::IfName("veth*".into())
        )
        .to_string(),
        "iifname \"veth*\""
    );
    let lookup = Stmt::Lookup {
        key: vec![Selector::IpDaddr],
        set: "x".into(),
        negate: true,
    };
    assert_eq!(lookup.to_string(), "ip daddr != @x");
}

#[test]
fn dnat_names_the_address_family_only_in_inet_tables() {
    let v4 = Stmt::Dnat {
        addr: IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)),
        port: Some(80),
    };
    let v6 = Stmt::Dnat {
        addr: IpAddr::V6("fd00::1".parse::<Ipv6Addr>().unwrap()),
        port: Some(80),
    };
    assert_eq!(render_stmt(&v4, Some(Family::Ip)), "dnat to 10.1.0.2:80");
    assert_eq!(
        render_stmt(&v4, Some(Family::Inet)),
        "dnat ip to 10.1.0.2:80"
    );
    assert_eq!(render_stmt(&v6, Some(Family::Ip6)), "dnat to [fd00::1]:80");
    assert_eq!(
        render_stmt(&v6, Some(Family::Inet)),
        "dnat ip6 to [fd00::1]:80"
    );
}

#[test]
fn reject_limit_and_update_render_in_nft_syntax() {
    assert_eq!(Stmt::Reject(RejectKind::Default).to_string(), "reject");
    assert_eq!(
        Stmt::Reject(RejectKind::TcpReset).to_string(),
        "reject with tcp reset"
    );
    assert_eq!(
        render_stmt(
            &Stmt::Reject(RejectKind::IcmpPortUnreachable),
            Some(Family::Ip)
        ),
        "reject with icmp type port-unreachable"
    );
    let limit = Stmt::Limit {
        rate: 10,
        unit: RateUnit::Second,
        burst: 5,
    };
    assert_eq!(limit.to_string(), "limit rate 10/second burst 5 packets");
    let update = Stmt::Update {
        set: "affinity-x".into(),
        key: vec![Selector::IpSaddr],
    };
    assert_eq!(update.to_string(), "update @affinity-x { ip saddr }");
    assert_eq!(
        Stmt::Masquerade { fully_random: true }.to_string(),
        "masquerade fully-random"
    );
}

#[test]
fn comments_lose_quotes_and_control_characters_and_stop_at_128_bytes() {
    assert_eq!(sanitize_comment("say \"hi\"\n"), "say 'hi' ");
    let long = "é".repeat(100); // 200 bytes
    let cut = sanitize_comment(&long);
    assert_eq!(cut.len(), 128);
    assert!(cut.chars().all(|c| c == 'é'));
}

#[test]
fn identifiers_follow_the_nft_scanner() {
    assert!(is_nft_identifier(
        "endpoint-ABC-ns/svc/tcp/p80__10.0.0.1/80"
    ));
    assert!(!is_nft_identifier("1chain"));
    assert!(!is_nft_identifier("a:b"));
    assert!(!is_nft_identifier(""));
}

#[test]
fn a_table_renders_sets_then_base_chains_then_regular_chains() {
    let mut chains = BTreeMap::new();
    chains.insert(
        "a-regular".to_string(),
        Chain::new("a-regular").with_rules(vec![
            Rule::new(vec![Verdict::Accept.into()]).with_comment("ok"),
        ]),
    );
    chains.insert(
        "z-base".to_string(),
        Chain::base("z-base", ChainType::Nat, Hook::Prerouting, -100)
            .with_comment("entry")
            .with_rules(vec![Rule::new(vec![Stmt::jump("a-regular")])]),
    );
    let mut sets = BTreeMap::new();
    sets.insert(
        "ports".to_string(),
        Set {
            dynamic: true,
            timeout: Some(5400),
            ..Set::new("ports", vec![DataType::InetService]).with_elements(vec![
                Element::new(vec![Value::Port(80)]).with_comment("http"),
            ])
        },
    );
    let t = Table {
        family: Family::Ip,
        name: "kubenft".into(),
        comment: Some("t".into()),
        chains,
        sets,
    };
    let expected = "table ip kubenft {
\tcomment \"t\"
\tset ports {
\t\ttype inet_service
\t\tflags dynamic,timeout
\t\ttimeout 1h30m
\t\telements = {
\t\t\t80 comment \"http\"
\t\t}
\t}

\tchain z-base {
\t\ttype nat hook prerouting priority -100; policy accept;
\t\tcomment \"entry\"
\t\tjump a-regular
\t}

\tchain a-regular {
\t\taccept comment \"ok\"
\t}
}
";
    assert_eq!(render_table(&t), expected);
}

#[test]
fn transaction_ops_render_as_single_commands() {
    let t = tref(Family::Ip);
    let map = Set::verdict_map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    )
    .with_comment("svc");
    let element = Element::map(
        vec![
            Value::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
            Value::Proto(6),
            Value::Port(80),
        ],
        Verdict::goto("service-x"),
    )
    .with_comment("ns/svc:http");
    let tx = Transaction {
        ops: vec![
            Op::AddTable {
                table: t.clone(),
                comment: None,
            },
            Op::AddSet {
                table: t.clone(),
                set: map,
            },
            Op::AddElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: vec![element.clone()],
            },
            Op::DeleteElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: vec![element],
            },
            Op::FlushSet {
                table: t.clone(),
                set: "service-ips".into(),
            },
            Op::DeleteRule {
                table: t.clone(),
                chain: "services".into(),
                handle: 7,
            },
        ],
        expected_generation: Some(3),
    };
    let expected = "# expected ruleset generation 3
add table ip kubenft
add map ip kubenft service-ips { type ipv4_addr . inet_proto . inet_service : verdict; comment \"svc\"; }
add element ip kubenft service-ips { 10.0.0.1 . tcp . 80 comment \"ns/svc:http\" : goto service-x }
delete element ip kubenft service-ips { 10.0.0.1 . tcp . 80 }
flush map ip kubenft service-ips
delete rule ip kubenft services handle 7
";
    assert_eq!(render_transaction(&tx), expected);
}
