//! Real traffic through a ruleset applied by the netlink engine: a client, a node and two
//! backend pods in network namespaces. A concatenated verdict map dispatches to a service
//! chain, `numgen random mod 2` picks an endpoint, `dnat` rewrites, and the 0x4000 mark decides
//! whether the node masquerades — exactly the mechanics kubenft's ruleset relies on.

use std::net::IpAddr;

use crate::common;
use crate::explain_harness;

use common::{Topology, request};
use explain_harness::{assert_explained, pod_backend};
use kubenft::netns::can_create;
use kubenft::nft::kernel::Nftables;
use kubenft::nft::model::*;
use kubenft_nft_testkit::corpus::creation_transaction;

const MASQ: u32 = 0x4000;

fn chain(name: &str, base: Option<BaseChain>, rules: Vec<Vec<Stmt>>) -> Chain {
    Chain {
        base,
        ..Chain::new(name).with_rules(rules.into_iter().map(Rule::new).collect())
    }
}

fn nat(hook: Hook, priority: i32) -> Option<BaseChain> {
    Some(BaseChain {
        kind: ChainType::Nat,
        hook,
        priority,
        policy: Policy::Accept,
    })
}

/// Two services on port 80 with the same two endpoints: `.10` marks for masquerade, `.11` not.
fn ruleset() -> Table {
    let mut t = Table {
        family: Family::Ip,
        name: "kubenft".into(),
        ..Table::default()
    };
    let mut add = |c: Chain| {
        t.chains.insert(c.name.clone(), c);
    };
    add(chain(
        "nat-prerouting",
        nat(Hook::Prerouting, -100),
        vec![vec![Stmt::VMap {
            key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
            map: MapRef::Named("service-ips".into()),
        }]],
    ));
    add(chain(
        "nat-postrouting",
        nat(Hook::Postrouting, 100),
        vec![vec![Stmt::jump("masquerading")]],
    ));
    add(chain(
        "mark-for-masquerade",
        None,
        vec![vec![Stmt::SetMark(MarkOp::Or(MASQ))]],
    ));
    add(chain(
        "masquerading",
        None,
        vec![
            vec![
                Stmt::Match {
                    left: Selector::Mark,
                    mask: Some(MASQ),
                    op: CmpOp::Eq,
                    right: Value::Mark(0),
                },
                Stmt::Verdict(Verdict::Return),
            ],
            vec![Stmt::SetMark(MarkOp::Xor(MASQ))],
            vec![Stmt::Masquerade { fully_random: true }],
        ],
    ));
    for (i, pod) in [(1u8, "pod-1"), (2, "pod-2")] {
        add(chain(
            &format!("endpoint-{pod}"),
            None,
            vec![vec![
                Stmt::Match {
                    left: Selector::L4Proto,
                    mask: None,
                    op: CmpOp::Eq,
                    right: Value::Proto(6),
                },
                Stmt::Dnat {
                    addr: IpAddr::from([10, 244, i, 2]),
                    port: Some(8080),
                },
            ]],
        ));
    }
    let pick = Stmt::NumgenVMap {
        modulus: 2,
        map: MapRef::Anonymous(vec![
            (vec![Value::Mark(0)], Verdict::goto("endpoint-pod-1")),
            (vec![Value::Mark(1)], Verdict::goto("endpoint-pod-2")),
        ]),
    };
    add(chain(
        "service-masq",
        None,
        vec![vec![Stmt::jump("mark-for-masquerade")], vec![pick.clone()]],
    ));
    add(chain("service-plain", None, vec![vec![pick]]));
    let element = |last: u8, chain: &str| {
        Element::map(
            vec![
                Value::Ipv4([10, 96, 0, last].into()),
                Value::Proto(6),
                Value::Port(80),
            ],
            Verdict::goto(chain),
        )
        .with_comment(format!("test/{chain}:http"))
    };
    t.sets.insert(
        "service-ips".into(),
        Set::verdict_map(
            "service-ips",
            vec![
                DataType::Ipv4Addr,
                DataType::InetProto,
                DataType::InetService,
            ],
        )
        .with_elements(vec![
            element(10, "service-masq"),
            element(11, "service-plain"),
        ]),
    );
    t
}

#[test]
fn numgen_dispatch_reaches_both_backends_and_the_mark_alone_decides_masquerading() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let lab = Topology::build("tr").unwrap();
    let (node, client) = (&lab.node, &lab.client);
    let table = ruleset();
    node.run(move || {
        Nftables::open()
            .unwrap()
            .apply(&creation_transaction(&table))
            .unwrap()
    })
    .unwrap();

    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let (backend, source) = request(client, "10.96.0.10:80".parse().unwrap());
        let node_side = if backend == "pod-1" {
            "10.244.1.1"
        } else {
            "10.244.2.1"
        };
        assert_eq!(
            source, node_side,
            "marked traffic is masqueraded to the node's address"
        );
        seen.insert(backend);
    }
    assert_eq!(
        seen.len(),
        2,
        "numgen spreads over both endpoints: {seen:?}"
    );

    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let (backend, source) = request(client, "10.96.0.11:80".parse().unwrap());
        assert_eq!(
            source, "10.0.0.2",
            "unmarked traffic keeps the client's address"
        );
        seen.insert(backend);
    }
    assert_eq!(
        seen.len(),
        2,
        "numgen spreads over both endpoints: {seen:?}"
    );

    // `kubenft explain` reads this hand-made table as it reads kubenft's own: both endpoints,
    // masqueraded by the mark or not.
    for (to, masquerade) in [("10.96.0.10:80", true), ("10.96.0.11:80", false)] {
        let got = assert_explained(node, client, "10.0.0.2", to, 16, 0.25, &pod_backend);
        let eps = got["endpoints"].as_array().unwrap();
        assert_eq!(eps.len(), 2, "{got:#}");
        assert!(eps.iter().all(|e| e["masquerade"] == masquerade), "{got:#}");
    }
}
