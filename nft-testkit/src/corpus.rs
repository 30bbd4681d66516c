//! A shared test corpus: named tables that together use every construct of the model in all
//! three families, plus a synthetic kube-proxy-shaped table of any size for benchmarks.
//!
//! Every table here is accepted by nft 1.0.6 and kernel 6.x (tests/render.rs applies each one in
//! a fresh namespace), so encoders, dumps and the diff can be checked against it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use kubenft::nft::model::{
    AddrType, BaseChain, Chain, ChainType, CmpOp, CtState, CtStatus, DataType, Element, Family,
    Hook, MapData, MapRef, MarkOp, Policy, RateUnit, RejectKind, Rule, Selector, Set, Stmt, Table,
    Value, Verdict,
};
use kubenft::nft::transaction::{Op, TableRef, Transaction};

/// The masquerade mark bit, as kube-proxy uses it.
const MASQ_BIT: u32 = 0x4000;

/// Every named corpus table, each already normalized.
pub fn corpus() -> Vec<(&'static str, Table)> {
    let mut all = vec![
        ("ip-kube-layout", kube_layout(Family::Ip)),
        ("ip6-kube-layout", kube_layout(Family::Ip6)),
        ("inet-everything", inet_everything()),
        ("ip-route-and-misc", ip_route_and_misc()),
        ("ip6-misc", ip6_misc()),
        ("ip-kube-like-small", kube_like(3, 2)),
    ];
    for (_, t) in &mut all {
        t.normalize();
    }
    all
}

/// A transaction that creates `t` from nothing: table, sets, elements, all chains, then rules
/// (chains first so jumps and gotos resolve regardless of order).
pub fn creation_transaction(t: &Table) -> Transaction {
    let table = TableRef {
        family: t.family,
        name: t.name.clone(),
    };
    let mut ops = vec![Op::AddTable {
        table: table.clone(),
        comment: t.comment.clone(),
    }];
    for set in t.sets.values() {
        ops.push(Op::AddSet {
            table: table.clone(),
            set: Set {
                elements: Vec::new(),
                ..set.clone()
            },
        });
    }
    for chain in t.chains.values() {
        ops.push(Op::AddChain {
            table: table.clone(),
            chain: Chain {
                rules: Vec::new(),
                ..chain.clone()
            },
        });
    }
    for set in t.sets.values().filter(|s| !s.elements.is_empty()) {
        ops.push(Op::AddElements {
            table: table.clone(),
            set: set.name.clone(),
            elements: set.elements.clone(),
        });
    }
    for chain in t.chains.values() {
        for rule in &chain.rules {
            ops.push(Op::AddRule {
                table: table.clone(),
                chain: chain.name.clone(),
                rule: rule.clone(),
            });
        }
    }
    Transaction {
        ops,
        expected_generation: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Small builders: the corpus reads as data.

/// An interval map from numgen slots to `address . port` (the planner's endpoint map).
fn endpoint_map(name: &str, addr: DataType, elements: Vec<Element>) -> Set {
    Set {
        interval: true,
        ..Set::map(
            name,
            vec![DataType::Integer],
            vec![addr, DataType::InetService],
        )
        .with_elements(elements)
    }
}

/// A hash map from `daddr . l4proto . dport . slot` to `address . port` (the planner's shared
/// slot map).
fn slot_map(name: &str, daddr: DataType, elements: Vec<Element>) -> Set {
    let mut s = frontend_map(name, daddr, elements);
    s.key.push(DataType::Integer);
    s.comment = Some("service address . protocol . port . slot to endpoint address . port".into());
    s
}

/// A hash map from `daddr . l4proto . dport` to `address . port` (the planner's
/// `pick-fallback`).
fn frontend_map(name: &str, daddr: DataType, elements: Vec<Element>) -> Set {
    Set::map(
        name,
        vec![daddr, DataType::InetProto, DataType::InetService],
        vec![daddr, DataType::InetService],
    )
    .with_comment("service address . protocol . port to its first endpoint")
    .with_size(64)
    .with_elements(elements)
}

/// `frontend`'s element of a `frontend_map`, pointing at `to`.
fn frontend_of(frontend: (IpAddr, u8, u16), to: (IpAddr, u16), comment: &str) -> Element {
    Element {
        key: vec![
            addr_value(frontend.0),
            Value::Proto(frontend.1),
            Value::Port(frontend.2),
        ],
        data: Some(MapData::Values(vec![addr_value(to.0), Value::Port(to.1)])),
        comment: (!comment.is_empty()).then(|| comment.to_string()),
    }
}

/// `dnat to daddr . l4proto . dport map @map` in a table of `family`.
fn dnat_by_frontend(family: Family, map: &str) -> Stmt {
    Stmt::DnatMap {
        key: vec![daddr_of(family), Selector::L4Proto, Selector::ThDport],
        map: map.into(),
    }
}

fn daddr_of(family: Family) -> Selector {
    if family == Family::Ip6 {
        Selector::Ip6Daddr
    } else {
        Selector::IpDaddr
    }
}

/// An address as a set key part or map data.
fn addr_value(addr: IpAddr) -> Value {
    match addr {
        IpAddr::V4(a) => Value::Ipv4(a),
        IpAddr::V6(a) => Value::Ipv6(a),
    }
}

/// Slot `slot` of the service at `service` (an address . protocol . port), owned by `to`.
fn slot_of(service: (IpAddr, u8, u16), slot: u32, to: (IpAddr, u16), comment: &str) -> Element {
    let mut e = frontend_of(service, to, comment);
    e.key.push(Value::Mark(slot));
    e
}

/// The rule drawing a slot of `modulus` in the slot map `map` of a table of `family`.
fn draw_slot(family: Family, modulus: u32, map: &str) -> Stmt {
    Stmt::DnatSlotMap {
        key: vec![daddr_of(family), Selector::L4Proto, Selector::ThDport],
        modulus,
        map: map.into(),
    }
}

/// Slots `first..=last` of an endpoint map, owned by `addr:port`.
fn slot(first: u32, last: u32, addr: IpAddr, port: u16, comment: &str) -> Element {
    Element {
        key: vec![Value::IntRange { first, last }],
        data: Some(MapData::Values(vec![addr_value(addr), Value::Port(port)])),
        comment: (!comment.is_empty()).then(|| comment.to_string()),
    }
}

fn table(family: Family, name: &str, comment: &str, chains: Vec<Chain>, sets: Vec<Set>) -> Table {
    Table {
        family,
        name: name.to_string(),
        comment: (!comment.is_empty()).then(|| comment.to_string()),
        chains: chains.into_iter().map(|c| (c.name.clone(), c)).collect(),
        sets: sets.into_iter().map(|s| (s.name.clone(), s)).collect(),
    }
}

/// Address selectors and types of an ip or ip6 table.
struct Addrs {
    saddr: Selector,
    daddr: Selector,
    ty: DataType,
}

fn addrs(family: Family) -> Addrs {
    match family {
        Family::Ip6 => Addrs {
            saddr: Selector::Ip6Saddr,
            daddr: Selector::Ip6Daddr,
            ty: DataType::Ipv6Addr,
        },
        _ => Addrs {
            saddr: Selector::IpSaddr,
            daddr: Selector::IpDaddr,
            ty: DataType::Ipv4Addr,
        },
    }
}

fn v4(a: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(a)
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().expect("corpus IPv6 literal")
}

/// The fixed part of the kube-proxy layout (design §3): every base chain with its hook and
/// priority, the dispatch chains, masquerading, and the sets and maps, for ip or ip6.
fn kube_layout(family: Family) -> Table {
    let a = addrs(family);
    let is6 = family == Family::Ip6;
    let addr = |n: u8| -> Value {
        if is6 {
            Value::Ipv6(v6(&format!("fd00:96::{n:x}")))
        } else {
            Value::Ipv4(v4([10, 96, 0, n]))
        }
    };
    let pod = |n: u8| -> IpAddr {
        if is6 {
            IpAddr::V6(v6(&format!("fd00:100::{n:x}")))
        } else {
            IpAddr::V4(v4([10, 100, 0, n]))
        }
    };
    let pod_value = |n: u8| -> Value {
        match pod(n) {
            IpAddr::V4(x) => Value::Ipv4(x),
            IpAddr::V6(x) => Value::Ipv6(x),
        }
    };
    let cluster_cidr = if is6 {
        Value::Ipv6Net("fd00:100::/56".parse().expect("cidr"))
    } else {
        Value::Ipv4Net("10.100.0.0/16".parse().expect("cidr"))
    };
    let service_cidr = if is6 {
        Value::Ipv6Net("fd00:96::/112".parse().expect("cidr"))
    } else {
        Value::Ipv4Net("10.96.0.0/16".parse().expect("cidr"))
    };
    let svc = "service-ULMVA6XW-ns1/svc1/tcp/p80";
    let ep1 = if is6 {
        "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__fd00.100..1/80"
    } else {
        "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.100.0.1/80"
    };
    let ep2 = if is6 {
        "endpoint-ZYF2DKQR-ns1/svc1/tcp/p80__fd00.100..2/80"
    } else {
        "endpoint-ZYF2DKQR-ns1/svc1/tcp/p80__10.100.0.2/80"
    };
    let ext = "external-ULMVA6XW-ns1/svc1/tcp/p80";
    let fw = "firewall-ULMVA6XW-ns1/svc1/tcp/p80";
    let affinity = if is6 {
        "affinity-5OJB2KTY-ns1/svc1/tcp/p80__fd00.100..1/80"
    } else {
        "affinity-5OJB2KTY-ns1/svc1/tcp/p80__10.100.0.1/80"
    };
    let tcp = Value::Proto(6);
    let udp = Value::Proto(17);
    let sctp = Value::Proto(132);
    let svc_key = vec![a.daddr, Selector::L4Proto, Selector::ThDport];
    let port_key = vec![Selector::L4Proto, Selector::ThDport];

    let endpoint = |name: &str, n: u8, with_affinity: bool| -> Chain {
        let mut rules = vec![
            Rule::new(vec![
                Stmt::match_eq(a.saddr, pod_value(n)),
                Stmt::jump("mark-for-masquerade"),
            ])
            .with_comment("hairpin: the endpoint talks to itself through the service"),
        ];
        if with_affinity {
            rules.push(Rule::new(vec![Stmt::Update {
                set: affinity.to_string(),
                key: vec![a.saddr],
            }]));
        }
        rules.push(Rule::new(vec![
            Stmt::match_eq(Selector::L4Proto, tcp.clone()),
            Stmt::Dnat {
                addr: pod(n),
                port: Some(80),
            },
        ]));
        Chain::new(name)
            .with_comment("ns1/svc1:p80 endpoint")
            .with_rules(rules)
    };

    let chains = vec![
        Chain::base(
            "filter-prerouting-pre-dnat",
            ChainType::Filter,
            Hook::Prerouting,
            -110,
        )
        .with_comment("source ranges of load balancers, before DNAT")
        .with_rules(vec![Rule::new(vec![
            Stmt::ct_new(),
            Stmt::jump("firewall-check"),
        ])]),
        Chain::base(
            "filter-output-pre-dnat",
            ChainType::Filter,
            Hook::Output,
            -110,
        )
        .with_rules(vec![Rule::new(vec![
            Stmt::ct_new(),
            Stmt::jump("firewall-check"),
        ])]),
        Chain::base("nat-prerouting", ChainType::Nat, Hook::Prerouting, -100).with_rules(vec![
            Rule::new(vec![Stmt::jump("services")]).with_comment("dispatch to services"),
        ]),
        Chain::base("nat-output", ChainType::Nat, Hook::Output, -100)
            .with_rules(vec![Rule::new(vec![Stmt::jump("services")])]),
        Chain::base("filter-forward", ChainType::Filter, Hook::Forward, 0).with_rules(vec![
            Rule::new(vec![Stmt::ct_new(), Stmt::jump("service-endpoints-check")]),
            Rule::new(vec![Stmt::ct_new(), Stmt::jump("cluster-ips-check")]),
        ]),
        Chain::base("filter-input", ChainType::Filter, Hook::Input, 0).with_rules(vec![
            Rule::new(vec![Stmt::ct_new(), Stmt::jump("nodeport-endpoints-check")]),
            Rule::new(vec![Stmt::ct_new(), Stmt::jump("service-endpoints-check")]),
        ]),
        Chain::base("filter-output", ChainType::Filter, Hook::Output, 0).with_rules(vec![
            Rule::new(vec![Stmt::ct_new(), Stmt::jump("service-endpoints-check")]),
            Rule::new(vec![Stmt::ct_new(), Stmt::jump("cluster-ips-check")]),
        ]),
        Chain::base("nat-postrouting", ChainType::Nat, Hook::Postrouting, 100)
            .with_rules(vec![Rule::new(vec![Stmt::jump("masquerading")])]),
        Chain::new("services")
            .with_comment("ClusterIP, external IP and load balancer dispatch")
            .with_rules(vec![
                Rule::new(vec![Stmt::VMap {
                    key: svc_key.clone(),
                    map: MapRef::Named("service-ips".into()),
                }]),
                Rule::new(vec![
                    Stmt::match_eq(Selector::FibDaddrType, Value::AddrType(AddrType::Local)),
                    Stmt::VMap {
                        key: port_key.clone(),
                        map: MapRef::Named("service-nodeports".into()),
                    },
                ])
                .with_comment("node ports on local addresses"),
            ]),
        Chain::new("firewall-check").with_rules(vec![Rule::new(vec![Stmt::VMap {
            key: svc_key.clone(),
            map: MapRef::Named("firewall-ips".into()),
        }])]),
        Chain::new("service-endpoints-check").with_rules(vec![Rule::new(vec![Stmt::VMap {
            key: svc_key.clone(),
            map: MapRef::Named("no-endpoint-services".into()),
        }])]),
        Chain::new("nodeport-endpoints-check").with_rules(vec![Rule::new(vec![
            Stmt::match_eq(Selector::FibDaddrType, Value::AddrType(AddrType::Local)),
            Stmt::VMap {
                key: port_key.clone(),
                map: MapRef::Named("no-endpoint-nodeports".into()),
            },
        ])]),
        Chain::new("cluster-ips-check").with_rules(vec![
            Rule::new(vec![
                Stmt::Lookup {
                    key: vec![a.daddr],
                    set: "cluster-ips".into(),
                    negate: false,
                },
                Stmt::goto("reject-chain"),
            ])
            .with_comment("reject traffic to an active ClusterIP on an unused port"),
            Rule::new(vec![
                Stmt::match_eq(a.daddr, service_cidr),
                Stmt::Verdict(Verdict::Drop),
            ])
            .with_comment("drop traffic to unallocated ClusterIPs"),
        ]),
        Chain::new("reject-chain")
            .with_comment("helper for reject verdicts from maps")
            .with_rules(vec![Rule::new(vec![Stmt::Reject(RejectKind::Default)])]),
        Chain::new("mark-for-masquerade")
            .with_rules(vec![Rule::new(vec![Stmt::SetMark(MarkOp::Or(MASQ_BIT))])]),
        Chain::new("masquerading").with_rules(vec![
            Rule::new(vec![
                Stmt::Match {
                    left: Selector::Mark,
                    mask: Some(MASQ_BIT),
                    op: CmpOp::Eq,
                    right: Value::Mark(0),
                },
                Stmt::Verdict(Verdict::Return),
            ]),
            Rule::new(vec![Stmt::SetMark(MarkOp::Xor(MASQ_BIT))]),
            Rule::new(vec![Stmt::Masquerade { fully_random: true }]),
        ]),
        Chain::new(svc)
            .with_comment("ns1/svc1:p80 cluster IP")
            .with_rules(vec![
                Rule::new(vec![
                    Stmt::match_ne(a.saddr, cluster_cidr),
                    Stmt::jump("mark-for-masquerade"),
                ]),
                Rule::new(vec![Stmt::VMap {
                    key: vec![a.saddr],
                    map: MapRef::Anonymous(vec![(vec![pod_value(9)], Verdict::goto(ep1))]),
                }]),
                Rule::new(vec![Stmt::Lookup {
                    key: vec![a.saddr],
                    set: affinity.to_string(),
                    negate: false,
                }]),
                Rule::new(vec![Stmt::NumgenVMap {
                    modulus: 2,
                    map: MapRef::Anonymous(vec![
                        (vec![Value::Mark(0)], Verdict::goto(ep1)),
                        (vec![Value::Mark(1)], Verdict::goto(ep2)),
                    ]),
                }]),
                // The map-free pick the planner uses for a few endpoints.
                Rule::new(vec![
                    Stmt::NumgenIs {
                        modulus: 3,
                        value: 0,
                    },
                    Stmt::goto(ep1),
                ]),
                Rule::new(vec![
                    Stmt::NumgenIs {
                        modulus: 2,
                        value: 1,
                    },
                    Stmt::goto(ep2),
                ]),
            ]),
        Chain::new(ext).with_rules(vec![
            Rule::new(vec![Stmt::jump("mark-for-masquerade")])
                .with_comment("masquerade traffic from outside the cluster"),
            Rule::new(vec![Stmt::goto(svc)]),
        ]),
        Chain::new(fw).with_rules(vec![Rule::new(vec![
            Stmt::Lookup {
                key: vec![a.saddr],
                set: "firewall-allow".into(),
                negate: true,
            },
            Stmt::Verdict(Verdict::Drop),
        ])]),
        endpoint(ep1, 1, true),
        endpoint(ep2, 2, false),
    ];

    let mut cluster_ips = Set::new("cluster-ips", vec![a.ty])
        .with_size(1024)
        .with_comment("active ClusterIPs");
    cluster_ips.elements = vec![Element::new(vec![addr(1)]), Element::new(vec![addr(2)])];
    let mut nodeport_ips = Set::new("nodeport-ips", vec![a.ty]);
    nodeport_ips.elements = vec![Element::new(vec![if is6 {
        Value::Ipv6(v6("fd00:1::10"))
    } else {
        Value::Ipv4(v4([192, 168, 1, 10]))
    }])];
    let svc_map_key = vec![a.ty, DataType::InetProto, DataType::InetService];
    let mut service_ips = Set::verdict_map("service-ips", svc_map_key.clone())
        .with_comment("ClusterIP, ExternalIP and LoadBalancer IP traffic");
    service_ips.elements = vec![
        Element::map(
            vec![addr(1), tcp.clone(), Value::Port(80)],
            Verdict::goto(svc),
        )
        .with_comment("ns1/svc1:p80"),
        Element::map(
            vec![addr(3), tcp.clone(), Value::Port(80)],
            Verdict::goto(ext),
        )
        .with_comment("ns1/svc1:p80 external IP"),
    ];
    let mut service_nodeports = Set::verdict_map(
        "service-nodeports",
        vec![DataType::InetProto, DataType::InetService],
    )
    .with_comment("NodePort traffic");
    service_nodeports.elements = vec![
        Element::map(vec![tcp.clone(), Value::Port(30080)], Verdict::goto(ext))
            .with_comment("ns1/svc1:p80"),
        Element::map(vec![udp.clone(), Value::Port(30053)], Verdict::Drop),
    ];
    let mut no_endpoint_services = Set::verdict_map("no-endpoint-services", svc_map_key.clone())
        .with_comment("vmap to drop or reject packets to services with no endpoints");
    no_endpoint_services.elements = vec![
        Element::map(
            vec![addr(2), udp.clone(), Value::Port(53)],
            Verdict::goto("reject-chain"),
        )
        .with_comment("ns2/dns:dns has no endpoints"),
        Element::map(vec![addr(2), sctp.clone(), Value::Port(9)], Verdict::Drop)
            .with_comment("ns2/dns:sctp has no local endpoints"),
    ];
    let mut no_endpoint_nodeports = Set::verdict_map(
        "no-endpoint-nodeports",
        vec![DataType::InetProto, DataType::InetService],
    );
    no_endpoint_nodeports.elements = vec![Element::map(
        vec![udp.clone(), Value::Port(30053)],
        Verdict::goto("reject-chain"),
    )];
    let mut firewall_ips = Set::verdict_map("firewall-ips", svc_map_key)
        .with_comment("destinations that are subject to LoadBalancerSourceRanges");
    firewall_ips.elements = vec![Element::map(
        vec![addr(3), tcp.clone(), Value::Port(80)],
        Verdict::goto(fw),
    )];
    let mut firewall_allow = Set::new("firewall-allow", vec![a.ty]);
    firewall_allow.interval = true;
    firewall_allow.elements = if is6 {
        vec![
            Element::new(vec![Value::Ipv6Net("2001:db8::/32".parse().expect("cidr"))]),
            Element::new(vec![Value::Ipv6(v6("2001:db9::1"))]),
        ]
    } else {
        vec![
            Element::new(vec![Value::Ipv4Net(
                "203.0.113.0/24".parse().expect("cidr"),
            )]),
            Element::new(vec![Value::Ipv4Net(
                "198.51.100.0/25".parse().expect("cidr"),
            )]),
            Element::new(vec![Value::Ipv4(v4([192, 0, 2, 7]))]),
        ]
    };
    let mut aff = Set::new(affinity, vec![a.ty]).with_comment("ClientIP affinity for ns1/svc1:p80");
    aff.dynamic = true;
    aff.timeout = Some(10_800);
    // What the kernel makes the size of a set a rule adds to, when none is declared.
    aff.size = Some(65_535);

    let name = if is6 { "kubenft6" } else { "kubenft" };
    table(
        family,
        name,
        "rules for kube-proxy replacement kubenft",
        chains,
        vec![
            cluster_ips,
            nodeport_ips,
            service_ips,
            service_nodeports,
            no_endpoint_services,
            no_endpoint_nodeports,
            firewall_ips,
            firewall_allow,
            aff,
        ],
    )
}

/// An inet table using the constructs that only inet has (meta nfproto, `dnat ip`/`dnat ip6`,
/// icmpx rejects) and everything else at least once.
fn inet_everything() -> Table {
    let tcp = Value::Proto(6);
    let chains = vec![
        Chain::base("prerouting", ChainType::Nat, Hook::Prerouting, -100)
            .with_comment("inet nat entry")
            .with_rules(vec![
                Rule::new(vec![
                    Stmt::match_eq(Selector::NfProto, Value::NfProto(2)),
                    Stmt::VMap {
                        key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
                        map: MapRef::Named("services4".into()),
                    },
                ])
                .with_comment("IPv4 services"),
                Rule::new(vec![
                    Stmt::match_eq(Selector::NfProto, Value::NfProto(10)),
                    Stmt::VMap {
                        key: vec![Selector::Ip6Daddr, Selector::L4Proto, Selector::ThDport],
                        map: MapRef::Named("services6".into()),
                    },
                ])
                .with_comment("IPv6 services"),
                Rule::new(vec![Stmt::VMap {
                    key: vec![Selector::L4Proto, Selector::ThDport],
                    map: MapRef::Anonymous(vec![
                        (
                            vec![tcp.clone(), Value::Port(30080)],
                            Verdict::jump("dnat4"),
                        ),
                        (
                            vec![Value::Proto(17), Value::Port(30053)],
                            Verdict::jump("dnat6"),
                        ),
                    ]),
                }]),
            ]),
        Chain::base("postrouting", ChainType::Nat, Hook::Postrouting, 100).with_rules(vec![
            Rule::new(vec![
                Stmt::Match {
                    left: Selector::Mark,
                    mask: Some(MASQ_BIT),
                    op: CmpOp::Ne,
                    right: Value::Mark(0),
                },
                Stmt::Masquerade {
                    fully_random: false,
                },
            ]),
            Rule::new(vec![
                Stmt::Lookup {
                    key: vec![Selector::Mark],
                    set: "marks".into(),
                    negate: false,
                },
                Stmt::Masquerade { fully_random: true },
            ]),
        ]),
        Chain {
            base: Some(BaseChain {
                kind: ChainType::Filter,
                hook: Hook::Forward,
                priority: 0,
                policy: Policy::Drop,
            }),
            ..Chain::new("forward")
        }
        .with_comment("default drop forward chain")
        .with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(
                    Selector::CtState,
                    Value::CtState(CtState(CtState::ESTABLISHED.0 | CtState::RELATED.0)),
                ),
                Stmt::Verdict(Verdict::Accept),
            ]),
            Rule::new(vec![
                Stmt::match_eq(Selector::CtState, Value::CtState(CtState::INVALID)),
                Stmt::Verdict(Verdict::Drop),
            ]),
            Rule::new(vec![
                Stmt::match_ne(Selector::CtState, Value::CtState(CtState::UNTRACKED)),
                Stmt::Match {
                    left: Selector::CtState,
                    mask: Some(CtState::NEW.0),
                    op: CmpOp::Eq,
                    right: Value::CtState(CtState::NEW),
                },
                Stmt::jump("checks"),
            ]),
            Rule::new(vec![
                Stmt::match_eq(Selector::IifName, Value::IfName("veth*".into())),
                Stmt::match_ne(Selector::OifName, Value::IfName("eth0".into())),
                Stmt::Verdict(Verdict::Accept),
            ])
            .with_comment("pod traffic"),
            Rule::new(vec![
                Stmt::Lookup {
                    key: vec![Selector::IifName],
                    set: "trusted-ifaces".into(),
                    negate: false,
                },
                Stmt::Verdict(Verdict::Accept),
            ]),
        ]),
        Chain::base("input", ChainType::Filter, Hook::Input, 0).with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::FibSaddrType, Value::AddrType(AddrType::Broadcast)),
                Stmt::Verdict(Verdict::Drop),
            ]),
            Rule::new(vec![
                Stmt::match_eq(Selector::FibDaddrType, Value::AddrType(AddrType::Multicast)),
                Stmt::Verdict(Verdict::Drop),
            ]),
            Rule::new(vec![
                Stmt::match_ne(Selector::FibSaddrType, Value::AddrType(AddrType::Unicast)),
                Stmt::Counter,
                Stmt::Verdict(Verdict::Continue),
            ]),
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, tcp.clone()),
                Stmt::match_eq(Selector::ThSport, Value::Port(53)),
                Stmt::Limit {
                    rate: 10,
                    unit: RateUnit::Second,
                    burst: 5,
                },
                Stmt::Verdict(Verdict::Accept),
            ]),
            Rule::new(vec![
                Stmt::Limit {
                    rate: 100,
                    unit: RateUnit::Minute,
                    burst: 20,
                },
                Stmt::Limit {
                    rate: 1000,
                    unit: RateUnit::Hour,
                    burst: 1,
                },
                Stmt::Limit {
                    rate: 5,
                    unit: RateUnit::Day,
                    burst: 50,
                },
                Stmt::Reject(RejectKind::IcmpPortUnreachable),
            ]),
        ]),
        Chain::new("checks").with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(
                    Selector::IpSaddr,
                    Value::Ipv4Net("10.0.0.0/8".parse().expect("cidr")),
                ),
                Stmt::match_eq(Selector::L4Proto, tcp.clone()),
                Stmt::Reject(RejectKind::TcpReset),
            ]),
            Rule::new(vec![
                Stmt::match_ne(
                    Selector::Ip6Saddr,
                    Value::Ipv6Net("fd00::/8".parse().expect("cidr")),
                ),
                Stmt::Reject(RejectKind::Default),
            ]),
            Rule::new(vec![
                Stmt::Lookup {
                    key: vec![Selector::Ip6Daddr],
                    set: "blocked6".into(),
                    negate: true,
                },
                Stmt::Verdict(Verdict::Return),
            ]),
            Rule::new(vec![
                Stmt::match_eq(Selector::Mark, Value::Mark(0x10)),
                Stmt::SetMark(MarkOp::And(!MASQ_BIT)),
                Stmt::SetMark(MarkOp::Set(0x20)),
            ]),
        ]),
        Chain::new("dnat4").with_rules(vec![
            Rule::new(vec![Stmt::Update {
                set: "recent4".into(),
                key: vec![Selector::IpSaddr, Selector::ThDport],
            }]),
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, tcp.clone()),
                Stmt::Dnat {
                    addr: IpAddr::V4(v4([10, 1, 0, 2])),
                    port: Some(80),
                },
            ]),
        ]),
        Chain::new("dnat6").with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, Value::Proto(17)),
                Stmt::Dnat {
                    addr: IpAddr::V6(v6("fd00::1")),
                    port: Some(53),
                },
            ]),
            Rule::new(vec![Stmt::Dnat {
                addr: IpAddr::V6(v6("fd00::2")),
                port: None,
            }]),
        ]),
        Chain::new("pick")
            .with_comment("numgen over a named map")
            .with_rules(vec![Rule::new(vec![Stmt::NumgenVMap {
                modulus: 2,
                map: MapRef::Named("pick-map".into()),
            }])]),
    ];

    let mut services4 = Set::verdict_map(
        "services4",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    );
    services4.elements = vec![
        Element::map(
            vec![
                Value::Ipv4(v4([10, 96, 0, 1])),
                tcp.clone(),
                Value::Port(80),
            ],
            Verdict::goto("dnat4"),
        )
        .with_comment("ns/svc:http"),
    ];
    let mut services6 = Set::verdict_map(
        "services6",
        vec![
            DataType::Ipv6Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    );
    services6.elements = vec![
        Element::map(
            vec![
                Value::Ipv6(v6("fd00:96::1")),
                Value::Proto(17),
                Value::Port(53),
            ],
            Verdict::goto("dnat6"),
        )
        .with_comment("ns/dns:dns"),
    ];
    let mut marks = Set::new("marks", vec![DataType::Mark]);
    marks.elements = vec![
        Element::new(vec![Value::Mark(MASQ_BIT)]),
        Element::new(vec![Value::Mark(0x8000)]),
    ];
    let mut trusted = Set::new("trusted-ifaces", vec![DataType::IfName]);
    trusted.elements = vec![
        Element::new(vec![Value::IfName("cni0".into())]),
        Element::new(vec![Value::IfName("lo".into())]).with_comment("loopback"),
    ];
    let mut blocked6 = Set::new("blocked6", vec![DataType::Ipv6Addr]);
    blocked6.interval = true;
    blocked6.elements = vec![Element::new(vec![Value::Ipv6Net(
        "2001:db8::/32".parse().expect("cidr"),
    )])];
    let mut recent4 = Set::new("recent4", vec![DataType::Ipv4Addr, DataType::InetService]);
    recent4.dynamic = true;
    recent4.timeout = Some(5_430);
    recent4.size = Some(65_535);
    let mut pick = Set::verdict_map("pick-map", vec![DataType::Integer]);
    pick.elements = vec![
        Element::map(vec![Value::Mark(0)], Verdict::goto("dnat4")),
        Element::map(vec![Value::Mark(1)], Verdict::goto("dnat6")),
    ];

    table(
        Family::Inet,
        "kubenft",
        "",
        chains,
        vec![
            services4, services6, marks, trusted, blocked6, recent4, pick,
        ],
    )
}

/// An ip table with a route chain and the remaining rarely used pieces.
fn ip_route_and_misc() -> Table {
    let mut chains = vec![
        Chain::base("output-route", ChainType::Route, Hook::Output, -150)
            .with_comment("re-route marked packets")
            .with_rules(vec![Rule::new(vec![
                Stmt::match_eq(Selector::Mark, Value::Mark(1)),
                Stmt::SetMark(MarkOp::Set(2)),
            ])]),
        Chain::base("input", ChainType::Filter, Hook::Input, 10).with_rules(vec![Rule::new(vec![
            Stmt::Lookup {
                key: vec![Selector::IpSaddr, Selector::L4Proto, Selector::ThDport],
                set: "pairs".into(),
                negate: false,
            },
            Stmt::Reject(RejectKind::IcmpPortUnreachable),
        ])]),
        Chain::base("nat-in", ChainType::Nat, Hook::Input, 100)
            .with_comment("source NAT of locally delivered packets (nat on the input hook)")
            .with_rules(vec![Rule::new(vec![
                Stmt::Counter,
                Stmt::Verdict(Verdict::Accept),
            ])]),
        Chain::base("nat-out", ChainType::Nat, Hook::Output, -100).with_rules(vec![
            Rule::new(vec![Stmt::Dnat {
                addr: IpAddr::V4(v4([10, 1, 0, 3])),
                port: None,
            }])
            .with_comment("dnat without a port needs no protocol match"),
        ]),
        Chain::base("nat-pre", ChainType::Nat, Hook::Prerouting, -100).with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, Value::Proto(6)),
                Stmt::DnatNumgenMap {
                    modulus: 65536,
                    offset: 65536,
                    map: "endpoints".into(),
                },
            ])
            .with_comment("a random endpoint from block 1 of the endpoint map"),
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, Value::Proto(6)),
                Stmt::DnatHashMap {
                    fields: vec![Selector::IpSaddr],
                    seed: 0x6b75_6265,
                    modulus: 65536,
                    offset: 65536,
                    map: "endpoints".into(),
                },
            ])
            .with_comment("the endpoint of the client's address in block 1"),
        ]),
        Chain::base("nat-post", ChainType::Nat, Hook::Postrouting, 100).with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::CtStatus, Value::CtStatus(CtStatus::DNAT)),
                Stmt::Lookup {
                    key: vec![Selector::IpSaddr, Selector::IpDaddr],
                    set: "hairpins".into(),
                    negate: false,
                },
                Stmt::Masquerade {
                    fully_random: false,
                },
            ]),
        ]),
    ];
    chains.push(
        Chain::new("pick-4")
            .with_comment("a slot of 4; an empty one draws again")
            .with_rules(vec![
                Rule::new(vec![draw_slot(Family::Ip, 4, "slots")]),
                Rule::new(vec![draw_slot(Family::Ip, 4, "slots")]),
                Rule::new(vec![draw_slot(Family::Ip, 2, "slots")])
                    .with_comment("the first two slots are full"),
                Rule::new(vec![dnat_by_frontend(Family::Ip, "first")]),
            ]),
    );
    chains.push(Chain::new("retry").with_rules(
        vec![Rule::new(vec![
                Stmt::Lookup {
                    key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
                    set: "first-frontends".into(),
                    negate: false,
                },
                Stmt::goto("pick-4"),
            ]).with_comment("the map's keys as a plain set: kernels before 6.5 refuse a map here")],
    ));
    let v4_at = |a| IpAddr::V4(v4(a));
    let slots = slot_map(
        "slots",
        DataType::Ipv4Addr,
        vec![
            slot_of(
                (v4_at([10, 96, 0, 1]), 6, 80),
                0,
                (v4_at([10, 1, 0, 2]), 8080),
                "ns/web:http",
            ),
            slot_of(
                (v4_at([10, 96, 0, 1]), 6, 80),
                1,
                (v4_at([10, 1, 0, 3]), 8080),
                "ns/web:http",
            ),
            slot_of(
                (v4_at([10, 96, 0, 1]), 6, 80),
                2,
                (v4_at([10, 1, 0, 4]), 8080),
                "ns/web:http",
            ),
            slot_of(
                (v4_at([10, 96, 0, 2]), 17, 53),
                0,
                (v4_at([10, 1, 0, 5]), 53),
                "",
            ),
        ],
    );
    let first = frontend_map(
        "first",
        DataType::Ipv4Addr,
        vec![frontend_of(
            (v4_at([10, 96, 0, 1]), 6, 80),
            (v4_at([10, 1, 0, 2]), 8080),
            "ns/web:http",
        )],
    );
    let mut first_frontends = Set::new(
        "first-frontends",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    );
    first_frontends.elements = vec![Element::new(vec![
        Value::Ipv4(v4([10, 96, 0, 1])),
        Value::Proto(6),
        Value::Port(80),
    ])];
    let v4_slot =
        |first, last, addr, port, comment| slot(first, last, IpAddr::V4(v4(addr)), port, comment);
    let endpoints = endpoint_map(
        "endpoints",
        DataType::Ipv4Addr,
        vec![
            v4_slot(0, 65535, [10, 1, 0, 1], 80, ""),
            v4_slot(65536, 98303, [10, 1, 0, 2], 8080, "ns/web:http"),
            v4_slot(98304, 131071, [10, 1, 0, 3], 8080, "ns/web:http"),
        ],
    )
    .with_comment("numgen ranges to address . port");
    let mut hairpins = Set::new("hairpins", vec![DataType::Ipv4Addr, DataType::Ipv4Addr]);
    hairpins.elements = vec![Element::new(vec![
        Value::Ipv4(v4([10, 1, 0, 2])),
        Value::Ipv4(v4([10, 1, 0, 2])),
    ])];
    let mut pairs = Set::new(
        "pairs",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    )
    .with_comment("concatenated plain set");
    pairs.interval = true;
    pairs.elements = vec![
        Element::new(vec![
            Value::Ipv4Net("10.0.0.0/8".parse().expect("cidr")),
            Value::Proto(6),
            Value::Port(22),
        ]),
        Element::new(vec![
            Value::Ipv4(v4([192, 0, 2, 1])),
            Value::Proto(17),
            Value::Port(53),
        ])
        .with_comment("one host"),
    ];
    table(
        Family::Ip,
        "misc",
        "odds and ends",
        chains,
        vec![pairs, endpoints, hairpins, slots, first, first_frontends],
    )
}

/// An ip6 table with the ip6-specific spellings (`reject with icmpv6`, `dnat to [addr]:port`).
fn ip6_misc() -> Table {
    let chains = vec![
        Chain::base("out", ChainType::Nat, Hook::Output, -100).with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::Ip6Daddr, Value::Ipv6(v6("fd00:96::10"))),
                Stmt::match_eq(Selector::L4Proto, Value::Proto(6)),
                Stmt::Dnat {
                    addr: IpAddr::V6(v6("fd00:100::5")),
                    port: Some(8443),
                },
            ])
            .with_comment("ns/web:https"),
            Rule::new(vec![
                Stmt::match_eq(Selector::Ip6Daddr, Value::Ipv6(v6("fd00:96::11"))),
                Stmt::Dnat {
                    addr: IpAddr::V6(v6("fd00:100::6")),
                    port: None,
                },
            ]),
        ]),
        Chain::base("pre", ChainType::Nat, Hook::Prerouting, -100).with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, Value::Proto(17)),
                Stmt::DnatNumgenMap {
                    modulus: 1024,
                    offset: 0,
                    map: "endpoints6".into(),
                },
            ]),
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, Value::Proto(17)),
                Stmt::DnatHashMap {
                    fields: vec![
                        Selector::Ip6Saddr,
                        Selector::ThSport,
                        Selector::Ip6Daddr,
                        Selector::ThDport,
                        Selector::L4Proto,
                    ],
                    seed: 1,
                    modulus: 1024,
                    offset: 0,
                    map: "endpoints6".into(),
                },
            ])
            .with_comment("the endpoint of the connection's 5-tuple"),
        ]),
        Chain::new("pick-2").with_rules(vec![
            Rule::new(vec![draw_slot(Family::Ip6, 2, "slots6")]),
            Rule::new(vec![dnat_by_frontend(Family::Ip6, "first6")]),
        ]),
        Chain::base("in", ChainType::Filter, Hook::Input, 0).with_rules(vec![Rule::new(vec![
            Stmt::match_eq(
                Selector::Ip6Saddr,
                Value::Ipv6Net("2001:db8::/48".parse().expect("cidr")),
            ),
            Stmt::Reject(RejectKind::IcmpPortUnreachable),
        ])]),
    ];
    let service6 = (IpAddr::V6(v6("fd00:96::12")), 132, 3868);
    let slots = slot_map(
        "slots6",
        DataType::Ipv6Addr,
        vec![
            slot_of(
                service6,
                0,
                (IpAddr::V6(v6("fd00:100::9")), 3868),
                "ns/diameter:sctp",
            ),
            slot_of(
                service6,
                1,
                (IpAddr::V6(v6("fd00:100::a")), 3868),
                "ns/diameter:sctp",
            ),
        ],
    );
    let endpoints = endpoint_map(
        "endpoints6",
        DataType::Ipv6Addr,
        vec![
            slot(0, 340, IpAddr::V6(v6("fd00:100::7")), 53, ""),
            slot(341, 1023, IpAddr::V6(v6("fd00:100::8")), 5353, "ns/dns:udp"),
        ],
    );
    let first = frontend_map(
        "first6",
        DataType::Ipv6Addr,
        vec![frontend_of(
            service6,
            (IpAddr::V6(v6("fd00:100::9")), 3868),
            "",
        )],
    );
    table(
        Family::Ip6,
        "misc6",
        "",
        chains,
        vec![endpoints, slots, first],
    )
}

// ---------------------------------------------------------------------------------------------
// Synthetic kube-proxy-shaped table

/// A kube-proxy-shaped ip table with `services` ClusterIP services of `endpoints_per_service`
/// endpoints each: a `service-ips` element per service, a service chain with masquerade check
/// and a `numgen` vmap, and an endpoint chain per endpoint (hairpin mark + dnat). Services with
/// no endpoints map to `goto reject-chain`. Service i has ClusterIP 10.96.0.0 + i + 1 and port
/// 80; endpoints live in 10.128.0.0/9 on port 8080. The result is normalized.
pub fn kube_like(services: usize, endpoints_per_service: usize) -> Table {
    let mut chains = vec![
        Chain::base("nat-prerouting", ChainType::Nat, Hook::Prerouting, -100)
            .with_rules(vec![Rule::new(vec![Stmt::jump("services")])]),
        Chain::base("nat-output", ChainType::Nat, Hook::Output, -100)
            .with_rules(vec![Rule::new(vec![Stmt::jump("services")])]),
        Chain::base("nat-postrouting", ChainType::Nat, Hook::Postrouting, 100)
            .with_rules(vec![Rule::new(vec![Stmt::jump("masquerading")])]),
        Chain::new("services").with_rules(vec![Rule::new(vec![Stmt::VMap {
            key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
            map: MapRef::Named("service-ips".into()),
        }])]),
        Chain::new("mark-for-masquerade")
            .with_rules(vec![Rule::new(vec![Stmt::SetMark(MarkOp::Or(MASQ_BIT))])]),
        Chain::new("masquerading").with_rules(vec![
            Rule::new(vec![
                Stmt::Match {
                    left: Selector::Mark,
                    mask: Some(MASQ_BIT),
                    op: CmpOp::Eq,
                    right: Value::Mark(0),
                },
                Stmt::Verdict(Verdict::Return),
            ]),
            Rule::new(vec![Stmt::SetMark(MarkOp::Xor(MASQ_BIT))]),
            Rule::new(vec![Stmt::Masquerade { fully_random: true }]),
        ]),
        Chain::new("reject-chain")
            .with_comment("helper for reject verdicts from maps")
            .with_rules(vec![Rule::new(vec![Stmt::Reject(RejectKind::Default)])]),
    ];
    let cluster_cidr = Value::Ipv4Net("10.128.0.0/9".parse().expect("cidr"));
    let mut elements = Vec::with_capacity(services);
    let mut endpoint_index: u32 = 0;
    for i in 0..services {
        let cluster_ip = Ipv4Addr::from(u32::from(v4([10, 96, 0, 0])) + i as u32 + 1);
        let path = format!("ns{}/svc{}/tcp/p80", i % 16, i);
        let svc_chain = format!("service-{:08X}-{path}", short_hash(&path));
        let verdict = if endpoints_per_service == 0 {
            Verdict::goto("reject-chain")
        } else {
            Verdict::goto(&svc_chain)
        };
        elements.push(
            Element::map(
                vec![Value::Ipv4(cluster_ip), Value::Proto(6), Value::Port(80)],
                verdict,
            )
            .with_comment(format!("ns{}/svc{}:p80", i % 16, i)),
        );
        if endpoints_per_service == 0 {
            continue;
        }
        let mut picks = Vec::with_capacity(endpoints_per_service);
        for j in 0..endpoints_per_service {
            endpoint_index += 1;
            let ep = Ipv4Addr::from(u32::from(v4([10, 128, 0, 0])) + endpoint_index);
            let ep_path = format!("{path}__{ep}/8080");
            let ep_chain = format!("endpoint-{:08X}-{ep_path}", short_hash(&ep_path));
            chains.push(Chain::new(&ep_chain).with_rules(vec![
                Rule::new(vec![
                    Stmt::match_eq(Selector::IpSaddr, Value::Ipv4(ep)),
                    Stmt::jump("mark-for-masquerade"),
                ]),
                Rule::new(vec![
                    Stmt::match_eq(Selector::L4Proto, Value::Proto(6)),
                    Stmt::Dnat {
                        addr: IpAddr::V4(ep),
                        port: Some(8080),
                    },
                ]),
            ]));
            picks.push((vec![Value::Mark(j as u32)], Verdict::goto(&ep_chain)));
        }
        chains.push(Chain::new(&svc_chain).with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::IpDaddr, Value::Ipv4(cluster_ip)),
                Stmt::match_ne(Selector::IpSaddr, cluster_cidr.clone()),
                Stmt::jump("mark-for-masquerade"),
            ]),
            Rule::new(vec![Stmt::NumgenVMap {
                modulus: endpoints_per_service as u32,
                map: MapRef::Anonymous(picks),
            }]),
        ]));
    }
    let mut service_ips = Set::verdict_map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
    )
    .with_comment("ClusterIP, ExternalIP and LoadBalancer IP traffic");
    service_ips.elements = elements;
    let mut t = table(
        Family::Ip,
        "kubenft",
        "rules for kube-proxy replacement kubenft",
        chains,
        vec![service_ips],
    );
    t.normalize();
    t
}

/// FNV-1a: a short deterministic hash so synthetic chain names look like kube-proxy's.
fn short_hash(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Labels of every construct `t` uses. The matches are exhaustive on purpose: a new model
    /// variant does not compile here until it is given a label (and then a corpus use).
    fn constructs(t: &Table, seen: &mut BTreeSet<String>) {
        let fam = format!("{:?}", t.family);
        seen.insert(format!("family {fam}"));
        if t.comment.is_some() {
            seen.insert("table comment".into());
        }
        for set in t.sets.values() {
            for ty in set.key.iter().chain(set.data.iter()) {
                seen.insert(format!("type {ty:?}"));
            }
            if set.key.len() > 1 {
                seen.insert(format!("concatenated key {fam}"));
            }
            if set.data == [DataType::Verdict] {
                seen.insert(format!("verdict map {fam}"));
            }
            for (flag, on) in [
                ("interval", set.interval),
                ("dynamic", set.dynamic),
                ("timeout", set.timeout.is_some()),
                ("size", set.size.is_some()),
                ("set comment", set.comment.is_some()),
                (
                    "element comment",
                    set.elements.iter().any(|e| e.comment.is_some()),
                ),
            ] {
                if on {
                    seen.insert(flag.into());
                }
            }
            for e in &set.elements {
                e.key.iter().for_each(|v| value(v, seen));
                match &e.data {
                    Some(MapData::Verdict(v)) => verdict(v, seen),
                    Some(MapData::Values(values)) => values.iter().for_each(|v| value(v, seen)),
                    None => {}
                }
            }
        }
        for chain in t.chains.values() {
            if chain.comment.is_some() {
                seen.insert("chain comment".into());
            }
            match &chain.base {
                Some(b) => {
                    seen.insert(format!("base {:?} {:?} {fam}", b.kind, b.hook));
                    seen.insert(format!("policy {:?}", b.policy));
                }
                None => {
                    seen.insert("regular chain".into());
                }
            }
            for rule in &chain.rules {
                if rule.comment.is_some() {
                    seen.insert("rule comment".into());
                }
                for s in &rule.stmts {
                    stmt(s, &fam, seen);
                }
            }
        }
    }

    fn stmt(s: &Stmt, fam: &str, seen: &mut BTreeSet<String>) {
        let label = match s {
            Stmt::Match {
                left,
                mask,
                op,
                right,
            } => {
                seen.insert(format!("selector {left:?}"));
                seen.insert(format!("cmp {op:?}"));
                if mask.is_some() {
                    seen.insert("masked match".into());
                }
                value(right, seen);
                "match"
            }
            Stmt::Lookup { key, negate, .. } => {
                key.iter().for_each(|k| {
                    seen.insert(format!("selector {k:?}"));
                });
                seen.insert(format!("lookup negate={negate}"));
                "lookup"
            }
            Stmt::VMap { key, map } => {
                key.iter().for_each(|k| {
                    seen.insert(format!("selector {k:?}"));
                });
                map_ref(map, "vmap", seen);
                "vmap"
            }
            Stmt::NumgenVMap { map, .. } => {
                map_ref(map, "numgen", seen);
                "numgen"
            }
            Stmt::NumgenIs { .. } => "numgen compare",
            Stmt::DnatNumgenMap { offset, .. } => {
                seen.insert(format!("dnat numgen map offset={} {fam}", *offset != 0));
                "dnat numgen map"
            }
            Stmt::DnatHashMap { offset, .. } => {
                seen.insert(format!("dnat hash map offset={} {fam}", *offset != 0));
                "dnat hash map"
            }
            Stmt::DnatSlotMap { .. } => {
                seen.insert(format!("dnat slot map {fam}"));
                "dnat slot map"
            }
            Stmt::DnatMap { .. } => {
                seen.insert(format!("dnat map {fam}"));
                "dnat map"
            }
            Stmt::Update { .. } => "update",
            Stmt::SetMark(op) => {
                let op = match op {
                    MarkOp::Or(_) => "or",
                    MarkOp::Xor(_) => "xor",
                    MarkOp::And(_) => "and",
                    MarkOp::Set(_) => "set",
                };
                seen.insert(format!("mark {op}"));
                "set mark"
            }
            Stmt::Dnat { addr, port } => {
                let v = if addr.is_ipv4() { "v4" } else { "v6" };
                seen.insert(format!("dnat {v} port={} {fam}", port.is_some()));
                "dnat"
            }
            Stmt::Masquerade { fully_random } => {
                seen.insert(format!("masquerade fully_random={fully_random}"));
                "masquerade"
            }
            Stmt::Reject(kind) => {
                seen.insert(format!("reject {kind:?} {fam}"));
                "reject"
            }
            Stmt::Limit { unit, .. } => {
                seen.insert(format!("limit {unit:?}"));
                "limit"
            }
            Stmt::Counter => "counter",
            Stmt::Verdict(v) => {
                verdict(v, seen);
                "verdict"
            }
        };
        seen.insert(format!("stmt {label}"));
    }

    fn map_ref(m: &MapRef, user: &str, seen: &mut BTreeSet<String>) {
        match m {
            MapRef::Named(_) => {
                seen.insert(format!("{user} named"));
            }
            MapRef::Anonymous(entries) => {
                seen.insert(format!("{user} anonymous"));
                for (k, v) in entries {
                    k.iter().for_each(|x| value(x, seen));
                    verdict(v, seen);
                }
            }
        }
    }

    fn verdict(v: &Verdict, seen: &mut BTreeSet<String>) {
        let label = match v {
            Verdict::Accept => "accept",
            Verdict::Drop => "drop",
            Verdict::Continue => "continue",
            Verdict::Return => "return",
            Verdict::Jump(_) => "jump",
            Verdict::Goto(_) => "goto",
        };
        seen.insert(format!("verdict {label}"));
    }

    fn value(v: &Value, seen: &mut BTreeSet<String>) {
        let label = match v {
            Value::Ipv4(_) => "ipv4".to_string(),
            Value::Ipv6(_) => "ipv6".to_string(),
            Value::Ipv4Net(_) => "ipv4 net".to_string(),
            Value::Ipv6Net(_) => "ipv6 net".to_string(),
            Value::Proto(_) => "proto".to_string(),
            Value::Port(_) => "port".to_string(),
            Value::Mark(_) => "mark".to_string(),
            Value::NfProto(_) => "nfproto".to_string(),
            Value::IfName(n) => format!("ifname wildcard={}", n.ends_with('*')),
            Value::AddrType(t) => format!("addrtype {t:?}"),
            Value::CtState(s) => {
                for bit in [1, 2, 4, 8, 64] {
                    if s.0 & bit != 0 {
                        seen.insert(format!("ct bit {bit}"));
                    }
                }
                "ct state".to_string()
            }
            Value::CtStatus(_) => "ct status".to_string(),
            Value::IntRange { .. } => "integer range".to_string(),
        };
        seen.insert(format!("value {label}"));
    }

    #[test]
    fn the_corpus_uses_every_construct_of_the_model_in_every_family() {
        let mut seen = BTreeSet::new();
        for (_, t) in corpus() {
            constructs(&t, &mut seen);
        }
        let mut expected: Vec<String> = [
            "table comment",
            "chain comment",
            "rule comment",
            "set comment",
            "element comment",
            "interval",
            "dynamic",
            "timeout",
            "size",
            "regular chain",
            "policy Accept",
            "policy Drop",
            "masked match",
            "cmp Eq",
            "cmp Ne",
            "lookup negate=true",
            "lookup negate=false",
            "vmap named",
            "vmap anonymous",
            "numgen named",
            "numgen anonymous",
            "mark or",
            "mark xor",
            "mark and",
            "mark set",
            "masquerade fully_random=true",
            "masquerade fully_random=false",
            "limit Second",
            "limit Minute",
            "limit Hour",
            "limit Day",
            "value ipv4",
            "value ipv6",
            "value ipv4 net",
            "value ipv6 net",
            "value proto",
            "value port",
            "value mark",
            "value nfproto",
            "value ifname wildcard=true",
            "value ifname wildcard=false",
            "value ct state",
            "value ct status",
            "value integer range",
            "stmt dnat numgen map",
            "dnat numgen map offset=true Ip",
            "dnat numgen map offset=false Ip6",
            "stmt dnat hash map",
            "dnat hash map offset=true Ip",
            "dnat hash map offset=false Ip6",
            "stmt dnat slot map",
            "dnat slot map Ip",
            "dnat slot map Ip6",
            "stmt dnat map",
            "dnat map Ip",
            "dnat map Ip6",
            "value addrtype Unicast",
            "value addrtype Local",
            "value addrtype Broadcast",
            "value addrtype Multicast",
            "ct bit 1",
            "ct bit 2",
            "ct bit 4",
            "ct bit 8",
            "ct bit 64",
            "verdict accept",
            "verdict drop",
            "verdict continue",
            "verdict return",
            "verdict jump",
            "verdict goto",
            "type Ipv4Addr",
            "type Ipv6Addr",
            "type InetProto",
            "type InetService",
            "type Mark",
            "type IfName",
            "type Verdict",
            "type Integer",
            "dnat v4 port=true Ip",
            "dnat v4 port=false Ip",
            "dnat v6 port=true Ip6",
            "dnat v6 port=false Ip6",
            "dnat v4 port=true Inet",
            "dnat v6 port=true Inet",
            "dnat v6 port=false Inet",
            "reject Default Ip",
            "reject Default Ip6",
            "reject Default Inet",
            "reject TcpReset Inet",
            "reject IcmpPortUnreachable Ip",
            "reject IcmpPortUnreachable Ip6",
            "reject IcmpPortUnreachable Inet",
            "base Route Output Ip",
            "base Nat Input Ip",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for stmt in [
            "match",
            "lookup",
            "vmap",
            "numgen",
            "numgen compare",
            "update",
            "set mark",
            "dnat",
            "masquerade",
            "reject",
            "limit",
            "counter",
            "verdict",
        ] {
            expected.push(format!("stmt {stmt}"));
        }
        for sel in [
            "IpSaddr",
            "IpDaddr",
            "Ip6Saddr",
            "Ip6Daddr",
            "ThSport",
            "ThDport",
            "L4Proto",
            "NfProto",
            "Mark",
            "IifName",
            "OifName",
            "FibSaddrType",
            "FibDaddrType",
            "CtState",
        ] {
            expected.push(format!("selector {sel}"));
        }
        for fam in ["Ip", "Ip6", "Inet"] {
            expected.push(format!("family {fam}"));
            expected.push(format!("concatenated key {fam}"));
            expected.push(format!("verdict map {fam}"));
        }
        // Design §3's base chains, in both single-family tables.
        for fam in ["Ip", "Ip6"] {
            for (kind, hook) in [
                ("Filter", "Prerouting"),
                ("Filter", "Output"),
                ("Nat", "Prerouting"),
                ("Nat", "Output"),
                ("Filter", "Forward"),
                ("Filter", "Input"),
                ("Nat", "Postrouting"),
            ] {
                expected.push(format!("base {kind} {hook} {fam}"));
            }
        }
        let missing: Vec<&String> = expected.iter().filter(|e| !seen.contains(*e)).collect();
        assert!(missing.is_empty(), "corpus lacks: {missing:?}");
    }

    #[test]
    fn kube_like_has_one_chain_per_service_and_endpoint_plus_the_fixed_ones() {
        let t = kube_like(10, 3);
        assert_eq!(t.sets["service-ips"].elements.len(), 10);
        let services = t
            .chains
            .keys()
            .filter(|n| n.starts_with("service-"))
            .count();
        let endpoints = t
            .chains
            .keys()
            .filter(|n| n.starts_with("endpoint-"))
            .count();
        assert_eq!((services, endpoints), (10, 30));
        assert!(
            t.chains
                .keys()
                .all(|n| kubenft::nft::render::is_nft_identifier(n))
        );
    }

    #[test]
    fn kube_like_without_endpoints_sends_every_service_to_the_reject_chain() {
        let t = kube_like(4, 0);
        assert!(
            t.sets["service-ips"]
                .elements
                .iter()
                .all(|e| e.data == Some(Verdict::goto("reject-chain").into()))
        );
        assert!(!t.chains.keys().any(|n| n.starts_with("service-")));
    }

    #[test]
    fn the_creation_transaction_adds_chains_before_any_rule() {
        let t = kube_like(2, 2);
        let tx = creation_transaction(&t);
        let first_rule = tx
            .ops
            .iter()
            .position(|o| matches!(o, Op::AddRule { .. }))
            .expect("rules");
        let last_chain = tx
            .ops
            .iter()
            .rposition(|o| matches!(o, Op::AddChain { .. }))
            .expect("chains");
        assert!(last_chain < first_rule);
        let rules: usize = t.chains.values().map(|c| c.rules.len()).sum();
        let added = tx
            .ops
            .iter()
            .filter(|o| matches!(o, Op::AddRule { .. }))
            .count();
        assert_eq!(added, rules);
    }
}
