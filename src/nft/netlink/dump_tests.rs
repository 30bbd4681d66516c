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

fn apply_and_dump(tag: &str, text: &str, family: Family, name: &str) -> Option<Table> {
    let ns = Netns::create(tag).unwrap();
    let path = std::env::temp_dir().join(format!("{}.nft", ns.name()));
    std::fs::write(&path, text).unwrap();
    ns.exec(&["nft", "-f", path.to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_file(&path);
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

const IP_TABLE: &str = r#"
table ip kubenft {
  comment "kubenft test table"
  set cluster-ips {
    type ipv4_addr
    comment "ClusterIPs"
    elements = { 10.96.0.1, 10.96.0.10 }
  }
  set cidrs {
    type ipv4_addr
    flags interval
    elements = { 10.0.0.0/8, 192.168.1.0/24 comment "lan", 1.2.3.4, 224.0.0.0/3 }
  }
  set affinity-x {
    type ipv4_addr
    flags dynamic,timeout
    timeout 3h
    elements = { 10.9.9.9 }
  }
  map service-ips {
    type ipv4_addr . inet_proto . inet_service : verdict
    comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
    elements = { 10.96.0.1 . tcp . 443 comment "default/kubernetes:https" : goto service-a,
                 10.96.0.10 . udp . 53 : jump service-a }
  }
  map service-nodeports {
    type inet_proto . inet_service : verdict
    elements = { tcp . 30080 : goto service-a }
  }
  map ifaces {
    type ifname : verdict
    elements = { "eth0" : accept }
  }
  chain service-a {
    comment "ns/svc:port"
    ip saddr != 10.0.0.0/8 jump mark-for-masquerade
    numgen random mod 2 vmap { 0 : goto endpoint-1, 1 : goto endpoint-2 }
  }
  chain endpoint-1 {
    ip saddr 10.1.0.1 jump mark-for-masquerade
    update @affinity-x { ip saddr }
    meta l4proto tcp dnat to 10.1.0.1:8080
  }
  chain endpoint-2 {
    meta l4proto udp dnat to 10.1.0.2
  }
  chain mark-for-masquerade {
    meta mark set meta mark or 0x4000
  }
  chain masquerading {
    meta mark and 0x4000 == 0 return
    meta mark set meta mark xor 0x4000
    masquerade fully-random
  }
  chain nat-prerouting {
    type nat hook prerouting priority -100; policy accept;
    jump services comment "kubenft dispatch"
  }
  chain nat-postrouting {
    type nat hook postrouting priority 100; policy accept;
    jump masquerading
  }
  chain services {
    ip daddr . meta l4proto . th dport vmap @service-ips
    fib daddr type local meta l4proto . th dport vmap @service-nodeports
  }
  chain reject-chain {
    reject
  }
  chain filter-forward {
    type filter hook forward priority 0; policy drop;
    ct state new jump firewall
    ct state invalid drop
    ct state != established counter
    ct state new,established accept
    ip daddr @cluster-ips reject
    ip daddr != @cluster-ips drop
    ip saddr @cidrs accept
    limit rate 5/second burst 10 packets accept
    iifname "eth0" accept
    oifname "veth*" accept
    iifname vmap @ifaces
    fib saddr type local reject with tcp reset
    meta mark set 0x10
    meta mark set meta mark and 0xff
    meta mark 0x20 continue
    ip saddr 10.16.0.0/12 ip daddr 10.0.0.0/16 th sport 1024 th dport 80 meta l4proto udp continue
    meta mark and 0x4000 != 0 accept
  }
  chain firewall {
    ip daddr 192.0.2.1 ip saddr != @cidrs drop
  }
}
"#;

fn ip_expected() -> Table {
    use CmpOp::{Eq, Ne};
    use Selector::*;
    let mut sets = std::collections::BTreeMap::new();
    let mut cluster = Set::new("cluster-ips", vec![DataType::Ipv4Addr]);
    cluster.comment = Some("ClusterIPs".into());
    cluster.elements = vec![
        Element::new(vec![Value::Ipv4(v4("10.96.0.1"))]),
        Element::new(vec![Value::Ipv4(v4("10.96.0.10"))]),
    ];
    let mut cidrs = Set::new("cidrs", vec![DataType::Ipv4Addr]);
    cidrs.interval = true;
    cidrs.elements = vec![
        Element::new(vec![Value::Ipv4(v4("1.2.3.4"))]),
        Element::new(vec![Value::Ipv4Net("10.0.0.0/8".parse().unwrap())]),
        Element::new(vec![Value::Ipv4Net("192.168.1.0/24".parse().unwrap())]).with_comment("lan"),
        Element::new(vec![Value::Ipv4Net("224.0.0.0/3".parse().unwrap())]),
    ];
    // The element in the text is runtime state of a dynamic set: not dumped.
    let mut aff = Set::new("affinity-x", vec![DataType::Ipv4Addr]);
    aff.dynamic = true;
    aff.timeout = Some(3 * 3600);
    let mut svc = Set::verdict_map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    );
    svc.comment = Some("ClusterIP, ExternalIP and LoadBalancer IP traffic".into());
    svc.elements = vec![
        Element::map(
            vec![
                Value::Ipv4(v4("10.96.0.1")),
                Value::Proto(6),
                Value::Port(443),
            ],
            Verdict::goto("service-a"),
        )
        .with_comment("default/kubernetes:https"),
        Element::map(
            vec![
                Value::Ipv4(v4("10.96.0.10")),
                Value::Proto(17),
                Value::Port(53),
            ],
            Verdict::jump("service-a"),
        ),
    ];
    let mut np = Set::verdict_map(
        "service-nodeports",
        vec![DataType::InetProto, DataType::InetService],
    );
    np.elements = vec![Element::map(
        vec![Value::Proto(6), Value::Port(30080)],
        Verdict::goto("service-a"),
    )];
    let mut ifaces = Set::verdict_map("ifaces", vec![DataType::IfName]);
    ifaces.elements = vec![Element::map(
        vec![Value::IfName("eth0".into())],
        Verdict::Accept,
    )];
    for s in [cluster, cidrs, aff, svc, np, ifaces] {
        sets.insert(s.name.clone(), s);
    }

    let jump = |c: &str| Stmt::jump(c);
    let mut chains: std::collections::BTreeMap<_, _> = [
        chain(
            "service-a",
            None,
            vec![
                Rule::new(vec![
                    Stmt::match_ne(IpSaddr, Value::Ipv4Net("10.0.0.0/8".parse().unwrap())),
                    jump("mark-for-masquerade"),
                ]),
                Rule::new(vec![Stmt::NumgenVMap {
                    modulus: 2,
                    map: MapRef::Anonymous(vec![
                        (vec![Value::Mark(0)], Verdict::goto("endpoint-1")),
                        (vec![Value::Mark(1)], Verdict::goto("endpoint-2")),
                    ]),
                }]),
            ],
        ),
        chain(
            "endpoint-1",
            None,
            vec![
                Rule::new(vec![
                    Stmt::match_eq(IpSaddr, Value::Ipv4(v4("10.1.0.1"))),
                    jump("mark-for-masquerade"),
                ]),
                Rule::new(vec![Stmt::Update {
                    set: "affinity-x".into(),
                    key: vec![IpSaddr],
                }]),
                Rule::new(vec![
                    Stmt::match_eq(L4Proto, Value::Proto(6)),
                    Stmt::Dnat {
                        addr: IpAddr::V4(v4("10.1.0.1")),
                        port: Some(8080),
                    },
                ]),
            ],
        ),
        chain(
            "endpoint-2",
            None,
            vec![Rule::new(vec![
                Stmt::match_eq(L4Proto, Value::Proto(17)),
                Stmt::Dnat {
                    addr: IpAddr::V4(v4("10.1.0.2")),
                    port: None,
                },
            ])],
        ),
        chain(
            "mark-for-masquerade",
            None,
            vec![Rule::new(vec![Stmt::SetMark(MarkOp::Or(0x4000))])],
        ),
        chain(
            "masquerading",
            None,
            vec![
                Rule::new(vec![
                    Stmt::Match {
                        left: Mark,
                        mask: Some(0x4000),
                        op: Eq,
                        right: Value::Mark(0),
                    },
                    Stmt::Verdict(Verdict::Return),
                ]),
                Rule::new(vec![Stmt::SetMark(MarkOp::Xor(0x4000))]),
                Rule::new(vec![Stmt::Masquerade { fully_random: true }]),
            ],
        ),
        chain(
            "nat-prerouting",
            base(ChainType::Nat, Hook::Prerouting, -100, Policy::Accept),
            vec![Rule {
                stmts: vec![jump("services")],
                comment: Some("kubenft dispatch".into()),
                handle: None,
            }],
        ),
        chain(
            "nat-postrouting",
            base(ChainType::Nat, Hook::Postrouting, 100, Policy::Accept),
            vec![Rule::new(vec![jump("masquerading")])],
        ),
        chain(
            "services",
            None,
            vec![
                Rule::new(vec![Stmt::VMap {
                    key: vec![IpDaddr, L4Proto, ThDport],
                    map: MapRef::Named("service-ips".into()),
                }]),
                Rule::new(vec![
                    Stmt::match_eq(FibDaddrType, Value::AddrType(AddrType::Local)),
                    Stmt::VMap {
                        key: vec![L4Proto, ThDport],
                        map: MapRef::Named("service-nodeports".into()),
                    },
                ]),
            ],
        ),
        chain(
            "reject-chain",
            None,
            vec![Rule::new(vec![Stmt::Reject(RejectKind::Default)])],
        ),
        chain(
            "filter-forward",
            base(ChainType::Filter, Hook::Forward, 0, Policy::Drop),
            vec![
                Rule::new(vec![
                    Stmt::match_eq(CtState, Value::CtState(Cs::NEW)),
                    jump("firewall"),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(CtState, Value::CtState(Cs::INVALID)),
                    Stmt::Verdict(Verdict::Drop),
                ]),
                Rule::new(vec![
                    Stmt::match_ne(CtState, Value::CtState(Cs::ESTABLISHED)),
                    Stmt::Counter,
                ]),
                Rule::new(vec![
                    Stmt::match_eq(CtState, Value::CtState(Cs(Cs::NEW.0 | Cs::ESTABLISHED.0))),
                    Stmt::Verdict(Verdict::Accept),
                ]),
                Rule::new(vec![
                    Stmt::Lookup {
                        key: vec![IpDaddr],
                        set: "cluster-ips".into(),
                        negate: false,
                    },
                    Stmt::Reject(RejectKind::Default),
                ]),
                Rule::new(vec![
                    Stmt::Lookup {
                        key: vec![IpDaddr],
                        set: "cluster-ips".into(),
                        negate: true,
                    },
                    Stmt::Verdict(Verdict::Drop),
                ]),
                Rule::new(vec![
                    Stmt::Lookup {
                        key: vec![IpSaddr],
                        set: "cidrs".into(),
                        negate: false,
                    },
                    Stmt::Verdict(Verdict::Accept),
                ]),
                Rule::new(vec![
                    Stmt::Limit {
                        rate: 5,
                        unit: RateUnit::Second,
                        burst: 10,
                    },
                    Stmt::Verdict(Verdict::Accept),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(IifName, Value::IfName("eth0".into())),
                    Stmt::Verdict(Verdict::Accept),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(OifName, Value::IfName("veth*".into())),
                    Stmt::Verdict(Verdict::Accept),
                ]),
                Rule::new(vec![Stmt::VMap {
                    key: vec![IifName],
                    map: MapRef::Named("ifaces".into()),
                }]),
                // nft put the `meta l4proto tcp` that `reject with tcp reset` needs first.
                Rule::new(vec![
                    Stmt::match_eq(L4Proto, Value::Proto(6)),
                    Stmt::match_eq(FibSaddrType, Value::AddrType(AddrType::Local)),
                    Stmt::Reject(RejectKind::TcpReset),
                ]),
                Rule::new(vec![Stmt::SetMark(MarkOp::Set(0x10))]),
                Rule::new(vec![Stmt::SetMark(MarkOp::And(0xff))]),
                Rule::new(vec![
                    Stmt::match_eq(Mark, Value::Mark(0x20)),
                    Stmt::Verdict(Verdict::Continue),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(IpSaddr, Value::Ipv4Net("10.16.0.0/12".parse().unwrap())),
                    Stmt::match_eq(IpDaddr, Value::Ipv4Net("10.0.0.0/16".parse().unwrap())),
                    Stmt::match_eq(ThSport, Value::Port(1024)),
                    Stmt::match_eq(ThDport, Value::Port(80)),
                    Stmt::match_eq(L4Proto, Value::Proto(17)),
                    Stmt::Verdict(Verdict::Continue),
                ]),
                Rule::new(vec![
                    Stmt::Match {
                        left: Mark,
                        mask: Some(0x4000),
                        op: Ne,
                        right: Value::Mark(0),
                    },
                    Stmt::Verdict(Verdict::Accept),
                ]),
            ],
        ),
        chain(
            "firewall",
            None,
            vec![Rule::new(vec![
                Stmt::match_eq(IpDaddr, Value::Ipv4(v4("192.0.2.1"))),
                Stmt::Lookup {
                    key: vec![IpSaddr],
                    set: "cidrs".into(),
                    negate: true,
                },
                Stmt::Verdict(Verdict::Drop),
            ])],
        ),
    ]
    .into_iter()
    .collect();
    chains.get_mut("service-a").unwrap().comment = Some("ns/svc:port".into());
    Table {
        family: Family::Ip,
        name: "kubenft".into(),
        comment: Some("kubenft test table".into()),
        chains,
        sets,
    }
}

fn assert_tables_eq(got: &Table, want: &Table) {
    assert_eq!(got.sets, want.sets, "sets differ");
    for (name, c) in &want.chains {
        assert_eq!(got.chains.get(name), Some(c), "chain {name} differs");
    }
    assert_eq!(got, want);
}

#[test]
fn an_ip_table_with_every_construct_dumps_to_the_model_nft_wrote() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let got = apply_and_dump("dumpip", IP_TABLE, Family::Ip, "kubenft").expect("table exists");
    assert_tables_eq(&without_handles(got), &ip_expected());
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
                        Stmt::Lookup {
                            key: vec![Ip6Daddr],
                            set: "cidrs6".into(),
                            negate: false,
                        },
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
                Rule::new(vec![
                    Stmt::Lookup {
                        key: vec![Mark],
                        set: "marks".into(),
                        negate: false,
                    },
                    accept.clone(),
                ]),
                Rule::new(vec![
                    Stmt::Lookup {
                        key: vec![IpSaddr, ThDport],
                        set: "pairs".into(),
                        negate: false,
                    },
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

#[test]
fn a_rule_nft_would_not_generate_for_the_model_is_an_error_naming_chain_and_handle() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let ns = Netns::create("dumplift").unwrap();
    let path = std::env::temp_dir().join(format!("{}.nft", ns.name()));
    std::fs::write(
        &path,
        "table ip kubenft {\n chain odd {\n ip ttl 3 accept\n }\n}\n",
    )
    .unwrap();
    ns.exec(&["nft", "-f", path.to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_file(&path);
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
    use super::sys::*;
    use crate::netlink::attr::AttrWriter;
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
    let c = super::dump::canonical(&t);
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
    let c = super::dump::canonical(&t);
    assert_eq!(c.chains["c"].rules[0].stmts, vec![nf4, to]);
}

#[test]
fn interval_elements_reassemble_into_cidrs_including_adjacent_and_top_ranges() {
    use super::decode::{RawElem, RawSet};
    use super::sys::{NFT_SET_ELEM_INTERVAL_END, NFT_SET_INTERVAL};
    let raw = RawSet {
        table: "t".into(),
        name: "s".into(),
        flags: NFT_SET_INTERVAL,
        key_type: 7,
        key_len: 4,
        data_type: None,
        timeout_ms: None,
        field_lens: Vec::new(),
        comment: None,
        key_typeof: false,
    };
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
    let set = super::dump::build_set(&raw, elems).unwrap();
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
    let err = super::dump::build_set(&raw, not_cidr).unwrap_err();
    assert!(err.to_string().contains("not a prefix"), "{err}");
}

#[test]
fn an_element_listed_twice_marks_the_set_dump_as_torn_so_it_is_read_again() {
    use super::decode::{RawElem, RawSet};
    let raw = RawSet {
        table: "t".into(),
        name: "ips".into(),
        flags: 0,
        key_type: 7,
        key_len: 4,
        data_type: None,
        timeout_ms: None,
        field_lens: Vec::new(),
        comment: None,
        key_typeof: false,
    };
    let e = |k: [u8; 4]| RawElem {
        key: k.to_vec(),
        key_end: None,
        data: None,
        flags: 0,
        comment: None,
        expiration_ms: None,
    };
    let err = super::dump::build_set(
        &raw,
        vec![e([10, 0, 0, 1]), e([10, 0, 0, 2]), e([10, 0, 0, 1])],
    )
    .unwrap_err();
    assert!(matches!(err, super::dump::DumpError::Torn { .. }), "{err}");
}

/// A named integer-keyed map without nft's `typeof` description (as kubenft wrote them
/// before) is unreadable, so the engine replaces the table with one nft can list and read back;
/// with the description, or as an anonymous map (which nft lists inline), it reads.
#[test]
fn an_integer_keyed_map_without_its_typeof_description_reads_as_unreadable() {
    use super::decode::RawSet;
    use super::sys::{NFT_SET_ANONYMOUS, NFT_SET_CONSTANT, NFT_SET_MAP};
    let raw = |flags, key_typeof| RawSet {
        table: "t".into(),
        name: "pick".into(),
        flags: NFT_SET_MAP | flags,
        key_type: 4,
        key_len: 4,
        data_type: Some(super::sys::NFT_DATA_VERDICT),
        timeout_ms: None,
        field_lens: Vec::new(),
        comment: None,
        key_typeof,
    };
    let err = super::dump::build_set(&raw(0, false), Vec::new()).unwrap_err();
    assert!(matches!(err, super::dump::DumpError::Set { .. }), "{err}");
    assert!(err.to_string().contains("typeof"), "{err}");
    assert!(super::dump::build_set(&raw(0, true), Vec::new()).is_ok());
    let anonymous = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT;
    assert!(super::dump::build_set(&raw(anonymous, false), Vec::new()).is_ok());
}

#[test]
fn truncated_or_corrupted_kernel_dump_messages_decode_to_errors_never_panics() {
    use super::sys::*;
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let ns = Netns::create("dumpfuzz").unwrap();
    let path = std::env::temp_dir().join(format!("{}.nft", ns.name()));
    std::fs::write(&path, IP_TABLE).unwrap();
    ns.exec(&["nft", "-f", path.to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_file(&path);
    let msgs = ns
        .run(|| {
            let mut sock = NetlinkSocket::open().unwrap();
            let mut all = Vec::new();
            for (msg, kind) in [
                (NFT_MSG_GETCHAIN, "chain"),
                (NFT_MSG_GETSET, "set"),
                (NFT_MSG_GETRULE, "rule"),
            ] {
                for m in super::requests::dump(&mut sock, "dump", msg, NFPROTO_IPV4, &[]).unwrap() {
                    all.push((kind, m.nfgen().unwrap().2.to_vec()));
                }
            }
            let mut w = crate::netlink::attr::AttrWriter::new();
            w.string(NFTA_SET_ELEM_LIST_TABLE, "kubenft")
                .string(NFTA_SET_ELEM_LIST_SET, "service-ips");
            for m in
                super::requests::dump(&mut sock, "elems", NFT_MSG_GETSETELEM, NFPROTO_IPV4, &w.buf)
                    .unwrap()
            {
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
