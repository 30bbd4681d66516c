//! Canonical forms of the model: `Table::normalize` makes equal rulesets equal values, and
//! `Table::without_handles` strips what only the kernel knows, so desired and dumped state compare.

use super::model::Table;

impl Table {
    /// Sorts every set's elements and drops exact duplicates, so two tables holding the same
    /// elements in different insertion orders compare equal and render identically.
    pub fn normalize(&mut self) {
        for set in self.sets.values_mut() {
            set.elements.sort();
            set.elements.dedup();
        }
    }

    /// A copy with every rule handle cleared: a dump without the kernel's bookkeeping.
    pub fn without_handles(&self) -> Table {
        let mut t = self.clone();
        for chain in t.chains.values_mut() {
            for rule in &mut chain.rules {
                rule.handle = None;
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{Chain, DataType, Element, Rule, Set, Value, Verdict};
    use super::*;
    use std::collections::BTreeMap;

    fn table_with_elements(elements: Vec<Element>) -> Table {
        let set = Set::new("s", vec![DataType::InetService]).with_elements(elements);
        Table {
            sets: BTreeMap::from([("s".to_string(), set)]),
            ..Table::default()
        }
    }

    fn port(p: u16) -> Element {
        Element::new(vec![Value::Port(p)])
    }

    #[test]
    fn normalize_sorts_elements_and_removes_duplicates() {
        let mut t = table_with_elements(vec![port(443), port(80), port(443)]);
        t.normalize();
        assert_eq!(t.sets["s"].elements, vec![port(80), port(443)]);
    }

    #[test]
    fn without_handles_clears_rule_handles_only() {
        let mut t = table_with_elements(vec![]);
        let rule = Rule {
            handle: Some(7),
            ..Rule::new(vec![Verdict::Accept.into()]).with_comment("c")
        };
        t.chains
            .insert("c".into(), Chain::new("c").with_rules(vec![rule.clone()]));
        let stripped = t.without_handles();
        assert_eq!(stripped.chains["c"].rules[0].handle, None);
        assert_eq!(stripped.chains["c"].rules[0].stmts, rule.stmts);
        assert_eq!(t.chains["c"].rules[0].handle, Some(7));
    }
}
