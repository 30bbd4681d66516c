//! What refers to what inside a table: the chain a verdict or map element jumps to and the sets
//! a rule reads. The kernel refuses to delete anything still referenced (EBUSY) and to add a
//! reference to something missing (ENOENT), so ordering operations and checking a plan both
//! need this.

use super::model::{Element, MapData, MapRef, Rule, Stmt, Verdict};

impl Verdict {
    /// The chain this verdict transfers control to, if any.
    pub(crate) fn target_chain(&self) -> Option<&str> {
        match self {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(c),
            _ => None,
        }
    }
}

impl MapRef {
    fn named(&self) -> Option<&str> {
        match self {
            MapRef::Named(n) => Some(n),
            MapRef::Anonymous(_) => None,
        }
    }
}

impl Rule {
    /// Chains this rule can jump or go to, directly or through an anonymous verdict map.
    pub(crate) fn referenced_chains(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for stmt in &self.stmts {
            match stmt {
                Stmt::Verdict(v) => out.extend(v.target_chain()),
                Stmt::VMap {
                    map: MapRef::Anonymous(entries),
                    ..
                }
                | Stmt::NumgenVMap {
                    map: MapRef::Anonymous(entries),
                    ..
                } => out.extend(entries.iter().filter_map(|(_, v)| v.target_chain())),
                _ => {}
            }
        }
        out
    }

    /// Named sets and maps this rule reads or updates.
    pub(crate) fn referenced_sets(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for stmt in &self.stmts {
            match stmt {
                Stmt::Lookup { set, .. } | Stmt::Update { set, .. } => out.push(set.as_str()),
                Stmt::VMap { map, .. } | Stmt::NumgenVMap { map, .. } => out.extend(map.named()),
                Stmt::DnatNumgenMap { map, .. }
                | Stmt::DnatHashMap { map, .. }
                | Stmt::DnatSlotMap { map, .. }
                | Stmt::DnatMap { map, .. } => out.push(map.as_str()),
                _ => {}
            }
        }
        out
    }
}

impl Element {
    /// The chain this map element's verdict points at, if any.
    pub fn referenced_chain(&self) -> Option<&str> {
        self.data
            .as_ref()
            .and_then(MapData::verdict)
            .and_then(Verdict::target_chain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::model::Selector;

    #[test]
    fn every_statement_that_names_a_set_references_it() {
        let key = vec![Selector::IpDaddr];
        let stmts = [
            Stmt::Lookup {
                key: key.clone(),
                set: "lookup".into(),
                negate: false,
            },
            Stmt::Update {
                set: "update".into(),
                key: key.clone(),
            },
            Stmt::VMap {
                key: key.clone(),
                map: MapRef::Named("vmap".into()),
            },
            Stmt::NumgenVMap {
                modulus: 2,
                map: MapRef::Named("numgen-vmap".into()),
            },
            Stmt::DnatNumgenMap {
                modulus: 2,
                offset: 0,
                map: "dnat-numgen".into(),
            },
            Stmt::DnatHashMap {
                fields: key.clone(),
                seed: 1,
                modulus: 2,
                offset: 0,
                map: "dnat-hash".into(),
            },
            Stmt::DnatSlotMap {
                key: key.clone(),
                modulus: 2,
                map: "dnat-slot".into(),
            },
            Stmt::DnatMap {
                key,
                map: "dnat".into(),
            },
        ];
        let rule = Rule::new(stmts.to_vec());
        assert_eq!(
            rule.referenced_sets(),
            [
                "lookup",
                "update",
                "vmap",
                "numgen-vmap",
                "dnat-numgen",
                "dnat-hash",
                "dnat-slot",
                "dnat"
            ]
        );
    }
}
