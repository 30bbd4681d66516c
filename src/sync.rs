//! Turning desired tables into transactions: a full sync that replaces our tables atomically,
//! and the cleanup that removes them.
//!
//! Guarantees: each function returns ONE transaction, so the kernel applies all of it or none
//! of it; neither needs to know what the kernel currently holds, and neither fails because a
//! table does or does not exist yet.

use crate::nft::model::{Family, Table};
use crate::nft::transaction::{Op, TableRef, Transaction};

/// Replaces each table wholesale, in one transaction.
///
/// Per table: `AddTable` (so the delete cannot fail on a first run), `DeleteTable` (drops every
/// chain, set and rule we had, including ones no longer desired, which we could not name
/// without reading the kernel), then `AddTable` and the full contents. Inside one batch the
/// kernel swaps old for new: a packet sees the old ruleset or the new one, never an empty or
/// half-built table. The cost is that stateful parts of the table (dynamic affinity sets,
/// counters) restart empty; incremental syncs that keep them are the diff layer's job.
///
/// Contents are ordered so that every reference points backwards: chains first (rules and
/// verdict-map elements jump to them), then sets, then elements (which may name chains), then
/// rules (which may look up sets). Empty sets get no `AddElements`.
pub fn full_sync_transaction(tables: &[Table]) -> Transaction {
    let mut ops = Vec::new();
    for table in tables {
        let tref = TableRef {
            family: table.family,
            name: table.name.clone(),
        };
        ops.push(Op::AddTable {
            table: tref.clone(),
            comment: None,
        });
        ops.push(Op::DeleteTable {
            table: tref.clone(),
        });
        ops.push(Op::AddTable {
            table: tref.clone(),
            comment: table.comment.clone(),
        });
        for chain in table.chains.values() {
            ops.push(Op::AddChain {
                table: tref.clone(),
                chain: chain.clone(),
            });
        }
        for set in table.sets.values() {
            ops.push(Op::AddSet {
                table: tref.clone(),
                set: set.clone(),
            });
        }
        for set in table.sets.values().filter(|s| !s.elements.is_empty()) {
            ops.push(Op::AddElements {
                table: tref.clone(),
                set: set.name.clone(),
                elements: set.elements.clone(),
            });
        }
        for chain in table.chains.values() {
            for rule in &chain.rules {
                ops.push(Op::AddRule {
                    table: tref.clone(),
                    chain: chain.name.clone(),
                    rule: rule.clone(),
                });
            }
        }
    }
    Transaction {
        ops,
        expected_generation: None,
    }
}

/// Deletes our `ip` and `ip6` tables named `table_name`, and nothing else. Each delete is
/// preceded by an `AddTable` so that a missing table is not an error (the add creates it empty,
/// the delete removes it, all in the same batch).
pub fn cleanup_transaction(table_name: &str) -> Transaction {
    let mut ops = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        let table = TableRef {
            family,
            name: table_name.to_string(),
        };
        ops.push(Op::AddTable {
            table: table.clone(),
            comment: None,
        });
        ops.push(Op::DeleteTable { table });
    }
    Transaction {
        ops,
        expected_generation: None,
    }
}

#[cfg(test)]
mod tests {
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
        Set {
            name: name.into(),
            key: vec![DataType::InetService],
            data: None,
            interval: false,
            dynamic: false,
            timeout: None,
            comment: None,
            elements: (0..elements)
                .map(|i| Element {
                    key: vec![crate::nft::model::Value::Port(i as u16)],
                    data: None,
                    comment: None,
                })
                .collect(),
        }
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
}
