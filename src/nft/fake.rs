//! An in-memory stand-in for the kernel's nf_tables: applies a `Transaction` all-or-nothing on a
//! copy, enforcing the same existence and reference rules (ENOENT, EEXIST, EBUSY), so planners and
//! diffs can be tested for correctness and operation counts without root or a kernel.

use std::collections::BTreeMap;

use super::diff::same_set_type;
use super::model::{Element, Rule, Stmt, Table};
use super::transaction::{Op, TableRef, Transaction};

/// Why the fake refused an operation; mirrors the errno the kernel would return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// ENOENT: the object or something it refers to does not exist.
    NotFound,
    /// EEXIST: an object of that name exists with a different definition.
    Exists,
    /// EBUSY: the object is still referenced.
    Busy,
    /// ENFILE: the set holds as many elements as its declared size.
    Full,
    /// EINVAL: a construct the oldest supported kernels refuse.
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("op {op_index} refused ({refusal:?}): {reason}")]
pub struct FakeError {
    pub op_index: usize,
    pub(crate) refusal: Refusal,
    pub reason: String,
}

/// Tables keyed by (family, name), as the kernel holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeKernel {
    pub tables: BTreeMap<TableRef, Table>,
    next_handle: u64,
}

fn refuse<T>(refusal: Refusal, reason: String) -> Result<T, (Refusal, String)> {
    Err((refusal, reason))
}

impl FakeKernel {
    pub fn new() -> Self {
        FakeKernel {
            tables: BTreeMap::new(),
            next_handle: 1,
        }
    }

    /// Applies every op or none: on error the state is exactly as before.
    pub fn apply(&mut self, tx: &Transaction) -> Result<(), FakeError> {
        let mut work = self.clone();
        for (op_index, op) in tx.ops.iter().enumerate() {
            work.apply_op(op).map_err(|(refusal, reason)| FakeError {
                op_index,
                refusal,
                reason,
            })?;
        }
        *self = work;
        Ok(())
    }

    pub fn table(&self, t: &TableRef) -> Option<&Table> {
        self.tables.get(t)
    }

    fn table_mut(&mut self, t: &TableRef) -> Result<&mut Table, (Refusal, String)> {
        match self.tables.get_mut(t) {
            Some(table) => Ok(table),
            None => refuse(
                Refusal::NotFound,
                format!("table {:?} {} does not exist", t.family, t.name),
            ),
        }
    }

    /// Applies one operation as the kernel would, or says what the kernel would refuse. Long
    /// because it is the dispatch table: one arm per `Op` variant with that operation's checks.
    fn apply_op(&mut self, op: &Op) -> Result<(), (Refusal, String)> {
        match op {
            Op::AddTable { table, comment } => {
                self.tables.entry(table.clone()).or_insert_with(|| Table {
                    family: table.family,
                    name: table.name.clone(),
                    comment: comment.clone(),
                    ..Table::default()
                });
            }
            Op::DeleteTable { table } => {
                if self.tables.remove(table).is_none() {
                    return refuse(
                        Refusal::NotFound,
                        format!("table {} does not exist", table.name),
                    );
                }
            }
            Op::FlushTable { table } => {
                for chain in self.table_mut(table)?.chains.values_mut() {
                    chain.rules.clear();
                }
            }
            Op::AddChain { table, chain } => {
                let t = self.table_mut(table)?;
                match t.chains.get(&chain.name) {
                    Some(existing) if existing.base != chain.base => {
                        return refuse(
                            Refusal::Exists,
                            format!("chain {} exists with another hook", chain.name),
                        );
                    }
                    Some(_) => {}
                    None => {
                        let mut c = chain.clone();
                        c.rules.clear();
                        t.chains.insert(c.name.clone(), c);
                    }
                }
            }
            Op::FlushChain { table, chain } => {
                let t = self.table_mut(table)?;
                match t.chains.get_mut(chain) {
                    Some(c) => c.rules.clear(),
                    None => {
                        return refuse(Refusal::NotFound, format!("chain {chain} does not exist"));
                    }
                }
            }
            Op::DeleteChain { table, chain } => {
                let t = self.table_mut(table)?;
                if !t.chains.contains_key(chain) {
                    return refuse(Refusal::NotFound, format!("chain {chain} does not exist"));
                }
                if let Some(user) = chain_user(t, chain) {
                    return refuse(
                        Refusal::Busy,
                        format!("chain {chain} is still referenced by {user}"),
                    );
                }
                t.chains.remove(chain);
            }
            Op::AddSet { table, set } => {
                let t = self.table_mut(table)?;
                match t.sets.get(&set.name) {
                    Some(existing) => {
                        if !same_set_type(existing, set) {
                            return refuse(
                                Refusal::Exists,
                                format!("set {} exists with another type", set.name),
                            );
                        }
                    }
                    None => {
                        let mut s = set.clone();
                        s.elements.clear();
                        t.sets.insert(s.name.clone(), s);
                    }
                }
            }
            Op::FlushSet { table, set } => {
                let t = self.table_mut(table)?;
                match t.sets.get_mut(set) {
                    Some(s) => s.elements.clear(),
                    None => return refuse(Refusal::NotFound, format!("set {set} does not exist")),
                }
            }
            Op::DeleteSet { table, set } => {
                let t = self.table_mut(table)?;
                if !t.sets.contains_key(set) {
                    return refuse(Refusal::NotFound, format!("set {set} does not exist"));
                }
                let user = t.chains.values().find(|c| {
                    c.rules
                        .iter()
                        .any(|r| r.referenced_sets().contains(&set.as_str()))
                });
                if let Some(c) = user {
                    return refuse(
                        Refusal::Busy,
                        format!("set {set} is still used by a rule in chain {}", c.name),
                    );
                }
                t.sets.remove(set);
            }
            Op::AddElements {
                table,
                set,
                elements,
            } => {
                let t = self.table_mut(table)?;
                for e in elements {
                    if let Some(target) = e.referenced_chain()
                        && !t.chains.contains_key(target)
                    {
                        return refuse(
                            Refusal::NotFound,
                            format!("element of {set} jumps to missing chain {target}"),
                        );
                    }
                }
                let Some(s) = t.sets.get_mut(set) else {
                    return refuse(Refusal::NotFound, format!("set {set} does not exist"));
                };
                for e in elements {
                    match s.elements.iter().find(|x| x.key == e.key) {
                        Some(x) if x.data != e.data => {
                            return refuse(
                                Refusal::Exists,
                                format!("element {:?} of {set} exists with other data", e.key),
                            );
                        }
                        Some(_) => {}
                        None if s.size.is_some_and(|n| s.elements.len() >= n as usize) => {
                            return refuse(Refusal::Full, format!("set {set} is full"));
                        }
                        None => s.elements.push(e.clone()),
                    }
                }
                s.elements.sort();
            }
            Op::DeleteElements {
                table,
                set,
                elements,
            } => {
                let t = self.table_mut(table)?;
                let Some(s) = t.sets.get_mut(set) else {
                    return refuse(Refusal::NotFound, format!("set {set} does not exist"));
                };
                for e in elements {
                    let Some(pos) = s.elements.iter().position(|x: &Element| x.key == e.key) else {
                        return refuse(
                            Refusal::NotFound,
                            format!("element {:?} not in {set}", e.key),
                        );
                    };
                    s.elements.remove(pos);
                }
            }
            Op::AddRule { table, chain, rule } => {
                let handle = self.next_handle;
                let t = self.table_mut(table)?;
                for target in rule.referenced_chains() {
                    if !t.chains.contains_key(target) {
                        return refuse(
                            Refusal::NotFound,
                            format!("rule in {chain} jumps to missing chain {target}"),
                        );
                    }
                }
                for set in rule.referenced_sets() {
                    if !t.sets.contains_key(set) {
                        return refuse(
                            Refusal::NotFound,
                            format!("rule in {chain} uses missing set {set}"),
                        );
                    }
                }
                if let Some(map) = membership_test_on_a_map(t, rule) {
                    return refuse(
                        Refusal::Invalid,
                        format!(
                            "rule in {chain} tests membership in map {map}: kernels before 6.5 \
                             accept a lookup on a map only into a register"
                        ),
                    );
                }
                let Some(c) = t.chains.get_mut(chain) else {
                    return refuse(Refusal::NotFound, format!("chain {chain} does not exist"));
                };
                let mut r = rule.clone();
                r.handle = Some(handle);
                c.rules.push(r);
                self.next_handle += 1;
            }
            Op::DeleteRule {
                table,
                chain,
                handle,
            } => {
                let t = self.table_mut(table)?;
                let Some(c) = t.chains.get_mut(chain) else {
                    return refuse(Refusal::NotFound, format!("chain {chain} does not exist"));
                };
                let Some(pos) = c.rules.iter().position(|r| r.handle == Some(*handle)) else {
                    return refuse(
                        Refusal::NotFound,
                        format!("no rule with handle {handle} in {chain}"),
                    );
                };
                c.rules.remove(pos);
            }
        }
        Ok(())
    }
}

/// The map a `key @set` test in `rule` names, if any. Kernels before 6.5 (Debian 12's 6.1
/// among them; docs/kernel-facts.md) refuse that rule with EINVAL; the fake is as strict, so
/// tests catch such a rule without booting one.
fn membership_test_on_a_map<'a>(t: &Table, rule: &'a Rule) -> Option<&'a str> {
    rule.stmts.iter().find_map(|stmt| match stmt {
        Stmt::Lookup { set, .. } if t.sets.get(set).is_some_and(|s| !s.data.is_empty()) => {
            Some(set.as_str())
        }
        _ => None,
    })
}

/// Something other than the chain itself that still refers to `chain`, described for errors.
fn chain_user(t: &Table, chain: &str) -> Option<String> {
    for c in t.chains.values() {
        if c.name != chain
            && c.rules
                .iter()
                .any(|r| r.referenced_chains().contains(&chain))
        {
            return Some(format!("a rule in chain {}", c.name));
        }
    }
    for s in t.sets.values() {
        if s.elements
            .iter()
            .any(|e| e.referenced_chain() == Some(chain))
        {
            return Some(format!("an element of map {}", s.name));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::model::{Chain, DataType, Family, Selector, Set};

    /// A table holding `set`, a chain `next`, and a rule in `services` testing a packet's
    /// destination address for membership in `set`.
    fn membership_test_in(set: Set) -> Transaction {
        let table = TableRef {
            family: Family::Ip,
            name: "t".into(),
        };
        let lookup = Rule::new(vec![
            Stmt::in_set(vec![Selector::IpDaddr], set.name.clone()),
            Stmt::goto("next"),
        ]);
        Transaction {
            ops: vec![
                Op::AddTable {
                    table: table.clone(),
                    comment: None,
                },
                Op::AddSet {
                    table: table.clone(),
                    set,
                },
                Op::AddChain {
                    table: table.clone(),
                    chain: Chain::new("next"),
                },
                Op::AddChain {
                    table: table.clone(),
                    chain: Chain::new("services"),
                },
                Op::AddRule {
                    table,
                    chain: "services".into(),
                    rule: lookup,
                },
            ],
            expected_generation: None,
        }
    }

    #[test]
    fn a_membership_test_on_a_map_is_refused_as_older_kernels_refuse_it() {
        let map = Set::map(
            "frontends",
            vec![DataType::Ipv4Addr],
            vec![DataType::Ipv4Addr],
        );
        let mut kernel = FakeKernel::new();
        let refused = kernel.apply(&membership_test_in(map)).unwrap_err();
        assert_eq!((refused.op_index, refused.refusal), (4, Refusal::Invalid));
        assert!(kernel.tables.is_empty(), "nothing applied");
    }

    #[test]
    fn a_membership_test_on_a_plain_set_is_accepted() {
        let set = Set::new("frontends", vec![DataType::Ipv4Addr]);
        FakeKernel::new()
            .apply(&membership_test_in(set))
            .expect("a plain set may be tested");
    }
}
