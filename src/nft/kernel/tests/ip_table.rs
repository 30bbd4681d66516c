//! One `ip` table with every construct the model has, written by `nft -f`, dumped over
//! netlink and compared with the model value written by hand.

use super::*;

pub(super) const IP_TABLE: &str = r#"
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

/// `IP_TABLE` as the model value, written out by hand. Long because it is data: every set and
/// chain of the table.
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
    // nft declares a dynamic set it creates 65,535 elements large unless told a size.
    aff.size = Some(65535);
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
                    Stmt::in_set(vec![IpDaddr], "cluster-ips"),
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
                    Stmt::in_set(vec![IpSaddr], "cidrs"),
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

#[test]
fn an_ip_table_with_every_construct_dumps_to_the_model_nft_wrote() {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let got = apply_and_dump("dumpip", IP_TABLE, Family::Ip, "kubenft").expect("table exists");
    assert_tables_eq(&without_handles(got), &ip_expected());
}
