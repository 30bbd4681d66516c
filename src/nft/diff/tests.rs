use super::*;
use crate::nft::fake::FakeKernel;
use crate::nft::model::*;
use crate::nft::transaction::Transaction;
use std::net::Ipv4Addr;

fn chain(name: &str, rules: Vec<Vec<Stmt>>) -> Chain {
    Chain::new(name).with_rules(rules.into_iter().map(Rule::new).collect())
}

fn dnat(last_octet: u8) -> Vec<Stmt> {
    vec![
        Stmt::match_eq(Selector::L4Proto, Value::Proto(6)),
        Stmt::Dnat {
            addr: Ipv4Addr::new(10, 1, 0, last_octet).into(),
            port: Some(80),
        },
    ]
}

/// A small kube-like table: `services` map → service chain → numgen over endpoint chains.
fn cluster(services: u8, endpoints: u8) -> Table {
    let mut t = Table::new(Family::Ip, "kubenft");
    let mut elements = Vec::new();
    t.chains.insert(
        "nat-prerouting".into(),
        Chain::base("nat-prerouting", ChainType::Nat, Hook::Prerouting, -100).with_rules(vec![
            Rule::new(vec![Stmt::VMap {
                key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
                map: MapRef::Named("service-ips".into()),
            }]),
        ]),
    );
    for s in 0..services {
        let svc = format!("service-{s}");
        let mut targets = Vec::new();
        for e in 0..endpoints {
            let ep = format!("endpoint-{s}-{e}");
            t.chains.insert(ep.clone(), chain(&ep, vec![dnat(e)]));
            targets.push((vec![Value::Mark(u32::from(e))], Verdict::goto(ep)));
        }
        let rules = if targets.is_empty() {
            vec![vec![Stmt::Reject(RejectKind::Default)]]
        } else {
            vec![vec![Stmt::NumgenVMap {
                modulus: u32::from(endpoints),
                map: MapRef::Anonymous(targets),
            }]]
        };
        t.chains.insert(svc.clone(), chain(&svc, rules));
        elements.push(
            Element::map(
                vec![
                    Value::Ipv4(Ipv4Addr::new(172, 30, 0, s)),
                    Value::Proto(6),
                    Value::Port(80),
                ],
                Verdict::goto(svc),
            )
            .with_comment(format!("default/svc-{s}:http")),
        );
    }
    elements.sort();
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
        .with_elements(elements),
    );
    t
}

fn converge(from: Option<&Table>, to: &Table) -> (usize, Table) {
    let mut kernel = FakeKernel::new();
    if let Some(from) = from {
        kernel
            .apply(&Transaction {
                ops: plan(None, from),
                expected_generation: None,
            })
            .unwrap();
    }
    let current = kernel.table(&to.table_ref()).cloned();
    let ops = plan(current.as_ref(), to);
    let n = ops.len();
    kernel
        .apply(&Transaction {
            ops,
            expected_generation: None,
        })
        .expect("kernel accepts the plan");
    let mut got = kernel.table(&to.table_ref()).unwrap().clone();
    for c in got.chains.values_mut() {
        for r in &mut c.rules {
            r.handle = None;
        }
    }
    (n, got)
}

#[test]
fn planning_from_nothing_builds_the_whole_table() {
    let want = cluster(3, 2);
    let (_, got) = converge(None, &want);
    assert_eq!(got, want);
}

#[test]
fn an_unchanged_table_needs_no_operations() {
    let t = cluster(5, 3);
    let (n, got) = converge(Some(&t), &t);
    assert_eq!(n, 0);
    assert_eq!(got, t);
}

#[test]
fn one_endpoint_more_touches_only_that_service_whatever_the_cluster_size() {
    let mut counts = Vec::new();
    for services in [10u8, 200] {
        let before = cluster(services, 2);
        let mut after = before.clone();
        after
            .chains
            .insert("endpoint-1-9".into(), chain("endpoint-1-9", vec![dnat(9)]));
        let svc = after.chains.get_mut("service-1").unwrap();
        svc.rules[0].stmts = vec![Stmt::NumgenVMap {
            modulus: 3,
            map: MapRef::Anonymous(vec![
                (vec![Value::Mark(0)], Verdict::goto("endpoint-1-0")),
                (vec![Value::Mark(1)], Verdict::goto("endpoint-1-1")),
                (vec![Value::Mark(2)], Verdict::goto("endpoint-1-9")),
            ]),
        }];
        let (n, got) = converge(Some(&before), &after);
        assert_eq!(got, after);
        counts.push(n);
    }
    assert_eq!(
        counts[0], counts[1],
        "op count must not grow with the number of services"
    );
    assert!(
        counts[0] <= 5,
        "a one-endpoint change is a handful of ops, got {}",
        counts[0]
    );
}

#[test]
fn removing_a_service_deletes_its_element_before_its_chains() {
    let before = cluster(3, 2);
    let mut after = cluster(3, 2);
    after
        .chains
        .retain(|n, _| !n.starts_with("service-2") && !n.starts_with("endpoint-2-"));
    after
        .sets
        .get_mut("service-ips")
        .unwrap()
        .elements
        .retain(|e| e.data != Some(Verdict::goto("service-2").into()));
    let (_, got) = converge(Some(&before), &after);
    assert_eq!(got, after);
}

#[test]
fn a_service_losing_all_endpoints_changes_its_chain_and_drops_endpoint_chains() {
    let before = cluster(2, 2);
    let mut after = cluster(2, 2);
    after.chains.retain(|n, _| !n.starts_with("endpoint-0-"));
    after.chains.get_mut("service-0").unwrap().rules[0].stmts =
        vec![Stmt::Reject(RejectKind::Default)];
    let (_, got) = converge(Some(&before), &after);
    assert_eq!(got, after);
}

#[test]
fn a_changed_map_verdict_is_replaced_in_one_plan() {
    let before = cluster(2, 1);
    let mut after = before.clone();
    for e in &mut after.sets.get_mut("service-ips").unwrap().elements {
        e.data = Some(Verdict::Drop.into());
    }
    let (_, got) = converge(Some(&before), &after);
    assert_eq!(got, after);
}

#[test]
fn a_set_whose_type_changes_is_recreated_and_its_users_refilled() {
    let before = cluster(2, 1);
    let mut after = before.clone();
    let set = after.sets.get_mut("service-ips").unwrap();
    set.comment = Some("typed again".into());
    set.timeout = Some(60);
    let (_, got) = converge(Some(&before), &after);
    assert_eq!(got, after);
}

#[test]
fn lent_elements_make_the_same_operations_and_all_come_back() {
    let before = cluster(3, 2);
    let added = cluster(4, 2);
    let mut recreated = cluster(3, 2);
    recreated.sets.get_mut("service-ips").unwrap().timeout = Some(60);
    for (current, desired) in [(None, &before), (Some(&before), &added)]
        .into_iter()
        .chain([(Some(&before), &recreated), (Some(&before), &before)])
    {
        let expected = plan(current, desired);
        let mut lending = vec![desired.clone()];
        let ops = plan_lending(current, &mut lending[0]);
        assert_eq!(ops, expected);
        if current.is_none() {
            assert!(lending[0].sets.values().all(|s| s.elements.is_empty()));
        }
        return_elements(ops, &mut lending);
        assert_eq!(
            lending,
            std::slice::from_ref(desired),
            "every element is back"
        );
    }
}

#[test]
fn a_base_chain_moved_to_another_hook_is_recreated() {
    let before = cluster(1, 1);
    let mut after = before.clone();
    after
        .chains
        .get_mut("nat-prerouting")
        .unwrap()
        .base
        .as_mut()
        .unwrap()
        .priority = -99;
    let (_, got) = converge(Some(&before), &after);
    assert_eq!(got, after);
}
