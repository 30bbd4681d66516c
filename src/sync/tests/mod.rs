use super::*;
use crate::nft::model::{Chain, DataType, Element, Rule, Set};

fn chain(name: &str, rules: usize) -> Chain {
    Chain {
        name: name.into(),
        base: None,
        comment: None,
        rules: (0..rules)
            .map(|i| Rule {
                comment: Some(format!("{name} rule {i}")),
                ..Rule::default()
            })
            .collect(),
    }
}

fn set(name: &str, elements: usize) -> Set {
    let port = |i: usize| Element::new(vec![crate::nft::model::Value::Port(i as u16)]);
    Set::new(name, vec![DataType::InetService]).with_elements((0..elements).map(port).collect())
}

fn table(family: Family, chains: Vec<Chain>, sets: Vec<Set>) -> Table {
    Table {
        family,
        name: "kubenft".into(),
        comment: Some("rules for Kubernetes services".into()),
        chains: chains.into_iter().map(|c| (c.name.clone(), c)).collect(),
        sets: sets.into_iter().map(|s| (s.name.clone(), s)).collect(),
    }
}

/// One line per op: verb and object, enough to check order without comparing whole values.
fn outline(tx: &Transaction) -> Vec<String> {
    tx.ops
        .iter()
        .map(|op| match op {
            Op::AddTable { table, comment } => {
                format!(
                    "add table {:?} {} {}",
                    table.family,
                    table.name,
                    comment.is_some()
                )
            }
            Op::DeleteTable { table } => format!("delete table {:?}", table.family),
            Op::AddChain { chain, .. } => format!("add chain {}", chain.name),
            Op::AddSet { set, .. } => format!("add set {}", set.name),
            Op::AddElements { set, elements, .. } => {
                format!("add elements {set} x{}", elements.len())
            }
            Op::AddRule { chain, rule, .. } => {
                format!(
                    "add rule {chain}: {}",
                    rule.comment.as_deref().unwrap_or("")
                )
            }
            other => format!("unexpected {other:?}"),
        })
        .collect()
}

#[test]
fn a_full_sync_replaces_each_table_with_references_pointing_backwards() {
    let tables = [
        table(
            Family::Ip,
            vec![chain("services", 2), chain("endpoint-x", 1)],
            vec![set("ports", 2), set("empty", 0)],
        ),
        table(Family::Ip6, vec![chain("services", 0)], vec![]),
    ];
    let tx = full_sync_transaction(&tables);
    assert_eq!(tx.expected_generation, None);
    assert_eq!(
        outline(&tx),
        [
            "add table Ip kubenft false",
            "delete table Ip",
            "add table Ip kubenft true",
            "add chain endpoint-x",
            "add chain services",
            "add set empty",
            "add set ports",
            "add elements ports x2",
            "add rule endpoint-x: endpoint-x rule 0",
            "add rule services: services rule 0",
            "add rule services: services rule 1",
            "add table Ip6 kubenft false",
            "delete table Ip6",
            "add table Ip6 kubenft true",
            "add chain services",
        ]
    );
}

#[test]
fn a_full_sync_carries_chains_and_sets_unchanged() {
    let t = table(Family::Ip, vec![chain("c", 1)], vec![set("s", 3)]);
    let tx = full_sync_transaction(std::slice::from_ref(&t));
    let added_chain = tx.ops.iter().find_map(|op| match op {
        Op::AddChain { chain, .. } => Some(chain),
        _ => None,
    });
    assert_eq!(added_chain, Some(&t.chains["c"]));
    let elements = tx.ops.iter().find_map(|op| match op {
        Op::AddElements { elements, .. } => Some(elements),
        _ => None,
    });
    assert_eq!(elements, Some(&t.sets["s"].elements));
}

#[test]
fn no_tables_make_an_empty_transaction() {
    assert!(full_sync_transaction(&[]).ops.is_empty());
}

#[test]
fn cleanup_deletes_both_families_and_tolerates_missing_tables() {
    let tx = cleanup_transaction("kubenft");
    let want = [Family::Ip, Family::Ip6].into_iter().flat_map(|family| {
        let table = TableRef {
            family,
            name: "kubenft".into(),
        };
        [
            Op::AddTable {
                table: table.clone(),
                comment: None,
            },
            Op::DeleteTable { table },
        ]
    });
    assert_eq!(tx.ops, want.collect::<Vec<_>>());
}

mod reconcile;
