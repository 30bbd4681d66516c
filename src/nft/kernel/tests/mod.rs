//! Dumps checked against the kernel: hand-written `nft -f` text is applied in a fresh namespace,
//! read back over netlink, and must decode to the hand-written model value.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::decode::{self, DecodeError, RawRule};
use super::dump::{DumpError, dump_table};
use super::lift::{self, LiftError, SetInfo};
use crate::netlink::NetlinkSocket;
use crate::netns::{Netns, can_create};
use crate::nft::model::*;

use crate::nft::model::CtState as Cs;

mod decoding;
mod ip_table;

/// A fresh namespace `tag` in which `nft -f` has applied `text`.
fn netns_with(tag: &str, text: &str) -> Netns {
    let ns = Netns::create(tag).unwrap();
    let path = std::env::temp_dir().join(format!("{}.nft", ns.name()));
    std::fs::write(&path, text).unwrap();
    ns.exec(&["nft", "-f", path.to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_file(&path);
    ns
}

fn apply_and_dump(tag: &str, text: &str, family: Family, name: &str) -> Option<Table> {
    let ns = netns_with(tag, text);
    let name = name.to_owned();
    ns.run(move || {
        let mut sock = NetlinkSocket::open().unwrap();
        dump_table(&mut sock, family, &name).unwrap()
    })
    .unwrap()
}

fn without_handles(mut t: Table) -> Table {
    for c in t.chains.values_mut() {
        for r in &mut c.rules {
            assert!(r.handle.is_some(), "dumped rules carry their handle");
            r.handle = None;
        }
    }
    t
}

fn chain(name: &str, base: Option<BaseChain>, rules: Vec<Rule>) -> (String, Chain) {
    (
        name.to_owned(),
        Chain {
            base,
            ..Chain::new(name).with_rules(rules)
        },
    )
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn base(kind: ChainType, hook: Hook, priority: i32, policy: Policy) -> Option<BaseChain> {
    Some(BaseChain {
        kind,
        hook,
        priority,
        policy,
    })
}

fn assert_tables_eq(got: &Table, want: &Table) {
    assert_eq!(got.sets, want.sets, "sets differ");
    for (name, c) in &want.chains {
        assert_eq!(got.chains.get(name), Some(c), "chain {name} differs");
    }
    assert_eq!(got, want);
}

const IP6_TABLE: &str = r#"
table ip6 kubenft {
  set cidrs6 {
    type ipv6_addr
    flags interval
    elements = { fd00::/64, 2001:db8::1, fe80::/10 comment "link-local" }
  }
  map service-ips {
    type ipv6_addr . inet_proto . inet_service : verdict
    elements = { fd00::10 . tcp . 80 comment "ns/web:http" : goto endpoint-1 }
  }
  chain endpoint-1 {
    meta l4proto tcp dnat to [fd00::1]:8080
  }
  chain nat-output {
    type nat hook output priority -100; policy accept;
    ip6 daddr . meta l4proto . th dport vmap @service-ips
  }
  chain filter-input {
    type filter hook input priority 0; policy accept;
    ip6 saddr fd00::/64 ip6 daddr 2001:db8::1 accept
    ip6 saddr fd00:0:0:1::/65 accept
    ip6 daddr @cidrs6 reject
    reject with tcp reset
  }
}
"#;

#[test]
fn an_ip6_table_dumps_with_v6_cidrs_and_nat() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    use Selector::*;
    let got = apply_and_dump("dumpip6", IP6_TABLE, Family::Ip6, "kubenft").unwrap();
    let mut cidrs = Set::new("cidrs6", vec![DataType::Ipv6Addr]);
    cidrs.interval = true;
    cidrs.elements = vec![
        Element::new(vec![Value::Ipv6(v6("2001:db8::1"))]),
        Element::new(vec![Value::Ipv6Net("fd00::/64".parse().unwrap())]),
        Element::new(vec![Value::Ipv6Net("fe80::/10".parse().unwrap())]).with_comment("link-local"),
    ];
    let mut svc = Set::verdict_map(
        "service-ips",
        vec![
            DataType::Ipv6Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    );
    svc.elements = vec![
        Element::map(
            vec![
                Value::Ipv6(v6("fd00::10")),
                Value::Proto(6),
                Value::Port(80),
            ],
            Verdict::goto("endpoint-1"),
        )
        .with_comment("ns/web:http"),
    ];
    let want = Table {
        family: Family::Ip6,
        name: "kubenft".into(),
        comment: None,
        sets: [cidrs, svc]
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect(),
        chains: [
            chain(
                "endpoint-1",
                None,
                vec![Rule::new(vec![
                    Stmt::match_eq(L4Proto, Value::Proto(6)),
                    Stmt::Dnat {
                        addr: IpAddr::V6(v6("fd00::1")),
                        port: Some(8080),
                    },
                ])],
            ),
            chain(
                "nat-output",
                base(ChainType::Nat, Hook::Output, -100, Policy::Accept),
                vec![Rule::new(vec![Stmt::VMap {
                    key: vec![Ip6Daddr, L4Proto, ThDport],
                    map: MapRef::Named("service-ips".into()),
                }])],
            ),
            chain(
                "filter-input",
                base(ChainType::Filter, Hook::Input, 0, Policy::Accept),
                vec![
                    Rule::new(vec![
                        Stmt::match_eq(Ip6Saddr, Value::Ipv6Net("fd00::/64".parse().unwrap())),
                        Stmt::match_eq(Ip6Daddr, Value::Ipv6(v6("2001:db8::1"))),
                        Stmt::Verdict(Verdict::Accept),
                    ]),
                    Rule::new(vec![
                        Stmt::match_eq(
                            Ip6Saddr,
                            Value::Ipv6Net("fd00:0:0:1::/65".parse().unwrap()),
                        ),
                        Stmt::Verdict(Verdict::Accept),
                    ]),
                    Rule::new(vec![
                        Stmt::in_set(vec![Ip6Daddr], "cidrs6"),
                        Stmt::Reject(RejectKind::Default),
                    ]),
                    Rule::new(vec![
                        Stmt::match_eq(L4Proto, Value::Proto(6)),
                        Stmt::Reject(RejectKind::TcpReset),
                    ]),
                ],
            ),
        ]
        .into_iter()
        .collect(),
    };
    assert_tables_eq(&without_handles(got), &want);
}

const INET_TABLE: &str = r#"
table inet kubenft {
  comment "dual stack"
  set marks {
    type mark
    elements = { 0x10, 0x4000 }
  }
  set pairs {
    type ipv4_addr . inet_service
    flags interval
    elements = { 10.0.0.0/8 . 80 comment "web" }
  }
  chain c {
    type nat hook prerouting priority -100; policy accept;
    ip daddr 10.0.0.1 accept
    ip6 daddr fd00::1 accept
    meta nfproto ipv4 accept
    meta l4proto tcp dnat ip to 10.0.0.1:80
    meta l4proto tcp dnat ip6 to [fd00::1]:80
    meta mark @marks accept
    ip saddr . th dport @pairs accept
    ip saddr 10.0.0.1 ip daddr 10.0.0.0/8 th sport 53 th dport 53 accept
    reject
  }
}
"#;

#[test]
fn an_inet_table_drops_the_implicit_nfproto_dependency() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    use Selector::*;
    let got = apply_and_dump("dumpinet", INET_TABLE, Family::Inet, "kubenft").unwrap();
    let mut marks = Set::new("marks", vec![DataType::Mark]);
    marks.elements = vec![
        Element::new(vec![Value::Mark(0x10)]),
        Element::new(vec![Value::Mark(0x4000)]),
    ];
    let mut pairs = Set::new("pairs", vec![DataType::Ipv4Addr, DataType::InetService]);
    pairs.interval = true;
    pairs.elements = vec![
        Element::new(vec![
            Value::Ipv4Net("10.0.0.0/8".parse().unwrap()),
            Value::Port(80),
        ])
        .with_comment("web"),
    ];
    let accept = Stmt::Verdict(Verdict::Accept);
    let want = Table {
        family: Family::Inet,
        name: "kubenft".into(),
        comment: Some("dual stack".into()),
        sets: [marks, pairs]
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect(),
        chains: [chain(
            "c",
            base(ChainType::Nat, Hook::Prerouting, -100, Policy::Accept),
            vec![
                Rule::new(vec![
                    Stmt::match_eq(IpDaddr, Value::Ipv4(v4("10.0.0.1"))),
                    accept.clone(),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(Ip6Daddr, Value::Ipv6(v6("fd00::1"))),
                    accept.clone(),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(NfProto, Value::NfProto(2)),
                    accept.clone(),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(L4Proto, Value::Proto(6)),
                    Stmt::Dnat {
                        addr: IpAddr::V4(v4("10.0.0.1")),
                        port: Some(80),
                    },
                ]),
                Rule::new(vec![
                    Stmt::match_eq(L4Proto, Value::Proto(6)),
                    Stmt::Dnat {
                        addr: IpAddr::V6(v6("fd00::1")),
                        port: Some(80),
                    },
                ]),
                Rule::new(vec![Stmt::in_set(vec![Mark], "marks"), accept.clone()]),
                Rule::new(vec![
                    Stmt::in_set(vec![IpSaddr, ThDport], "pairs"),
                    accept.clone(),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(IpSaddr, Value::Ipv4(v4("10.0.0.1"))),
                    Stmt::match_eq(IpDaddr, Value::Ipv4Net("10.0.0.0/8".parse().unwrap())),
                    Stmt::match_eq(ThSport, Value::Port(53)),
                    Stmt::match_eq(ThDport, Value::Port(53)),
                    accept,
                ]),
                Rule::new(vec![Stmt::Reject(RejectKind::Default)]),
            ],
        )]
        .into_iter()
        .collect(),
    };
    assert_tables_eq(&without_handles(got), &want);
}

#[test]
fn a_missing_table_dumps_as_none_and_other_tables_are_ignored() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let text = "table ip other {\n chain c {\n accept\n }\n}\ntable ip6 kubenft {\n}\n";
    assert_eq!(
        apply_and_dump("dumpnone", text, Family::Ip, "kubenft"),
        None
    );
    let empty = apply_and_dump("dumpempty", text, Family::Ip6, "kubenft").unwrap();
    assert!(empty.chains.is_empty() && empty.sets.is_empty());
}
