//! A fragment (what one service port or the skeleton adds to a table) and their assembly.

use super::*;

/// What one service port (or the fixed skeleton) contributes to a family's table: its chains,
/// the sets only it declares (endpoint-map shards, affinity sets), and its elements of shared
/// sets. The table is the union of the skeleton and every service's fragment; an element key
/// two fragments share is taken from the first in service order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fragment {
    pub(crate) chains: Vec<Chain>,
    /// Declarations only, without elements.
    pub(crate) sets: Vec<Set>,
    /// Elements by set name, each set once, keys unique within the fragment.
    pub(crate) elements: Vec<(String, Vec<Element>)>,
}

impl Fragment {
    pub(crate) fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.sets.is_empty() && self.elements.is_empty()
    }

    /// The elements this fragment puts in `set`.
    pub(crate) fn elements_of(&self, set: &str) -> &[Element] {
        self.elements
            .iter()
            .find(|(s, _)| s == set)
            .map_or(&[], |(_, e)| e.as_slice())
    }

    pub(super) fn push_element(&mut self, set: &str, element: Element) {
        let i = match self.elements.iter().position(|(s, _)| s == set) {
            Some(i) => i,
            None => {
                self.elements.push((set.to_string(), Vec::new()));
                self.elements.len() - 1
            }
        };
        self.elements[i].1.push(element);
    }

    /// Two ports or addresses of one service can yield the same key: the first stays. Done
    /// once the fragment is built rather than per element, which would be quadratic in a
    /// service's elements (endpoints × addresses it is reached at).
    pub(super) fn dedup_keys(&mut self) {
        for (_, elements) in &mut self.elements {
            if elements.len() > 1 {
                let first: Vec<bool> = {
                    let mut seen = std::collections::HashSet::with_capacity(elements.len());
                    elements.iter().map(|e| seen.insert(&e.key)).collect()
                };
                let mut first = first.into_iter();
                elements.retain(|_| first.next().unwrap_or(true));
            }
        }
    }

    pub(super) fn declare(&mut self, set: Set) {
        if !self.sets.iter().any(|s| s.name == set.name) {
            self.sets.push(set);
        }
    }
}

/// The table `head` (family, name, comment, no contents) filled with `fragments`, in order:
/// the first chain, set or element key seen wins.
pub(crate) fn assemble(head: &Table, fragments: impl IntoIterator<Item = Fragment>) -> Table {
    let mut t = head.clone();
    for f in fragments {
        for set in f.sets {
            t.sets.entry(set.name.clone()).or_insert(set);
        }
        for chain in f.chains {
            t.chains.entry(chain.name.clone()).or_insert(chain);
        }
        for (name, elements) in f.elements {
            let set = t
                .sets
                .get_mut(&name)
                .expect("a fragment's elements go to declared sets");
            set.elements.extend(elements);
        }
    }
    for set in t.sets.values_mut() {
        sort_and_dedup_by_key(&mut set.elements);
    }
    t.normalize();
    t
}

/// Sorts a set's elements gathered in fragment order, keeping the first of equal keys: a
/// stable sort keeps them in fragment order. Sorting by key leaves the elements in the order
/// `normalize` wants, without a copy of every key to remember which were seen.
pub(crate) fn sort_and_dedup_by_key(elements: &mut Vec<Element>) {
    elements.sort_by(|a, b| a.key.cmp(&b.key));
    elements.dedup_by(|later, first| later.key == first.key);
}
