//! How the planner holds a fragment between plans: elements packed into bytes, declarations
//! shared. A `Fragment` spends ~220 bytes on an endpoint-map element (an 80-byte `Element`, a
//! key `Vec`, a data `Vec`, a comment `String`) and the planner holds one per endpoint; packed
//! it is ~30. Unpacking gives back the very fragment that was packed.
//!
//! By concept: this file holds `PackedFragment` and the packed lists of elements it is made of;
//! `packing` is the byte format of one element, `elements` reads a set's elements across
//! fragments (sorted by key, or in the order the fragments hold them), and `digest` sums
//! them without sorting.

mod digest;
mod elements;
mod packing;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;

use foldhash::fast::FixedState;

use super::layout::Fragment;
use crate::nft::digest::ElementEncoder;
use crate::nft::model::{Chain, Element, MapData, Set, Value};
pub(super) use digest::digests_of;
pub(super) use elements::{PartOrderElements, SortedElements};
use packing::{
    pack_element, read_key, read_value, read_varint, read_verdict, skip_key, skip_verdict, take,
    write_key,
};

/// A set's name and its elements of one fragment, packed.
type PackedSet = (Arc<str>, Box<[u8]>);

/// One copy of each set name the fragments put elements in: thousands of fragments name the
/// same few sets, and a set's elements are found by its name in each of them.
#[derive(Debug, Clone, Default)]
pub(super) struct SetNames(HashSet<Arc<str>, FixedState>);

impl SetNames {
    /// The one copy of `name`.
    pub(super) fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.0.get(name) {
            return shared.clone();
        }
        let shared: Arc<str> = name.into();
        self.0.insert(shared.clone());
        shared
    }
}

/// A fragment as the planner holds it.
#[derive(Debug, Clone, Default)]
pub(super) struct PackedFragment {
    pub(crate) chains: Box<[Chain]>,
    /// Declarations, shared with the planner's copy of equal ones.
    pub(crate) sets: Box<[Arc<Set>]>,
    /// Elements by set, in the fragment's order; each element is its key (part count, then
    /// each part as tag and bytes), data (tag, then a verdict or values) and comment index
    /// (0 for none). Counts, lengths and indices are LEB128: nearly all are one byte.
    elements: Box<[PackedSet]>,
    /// Element comments, each once (a service's elements mostly share its name).
    comments: Box<[Box<str>]>,
}

impl PackedFragment {
    /// `fragment` packed; its declarations become `share(set)`, the names of the sets it puts
    /// elements in those of `names`. Taken by reference: the planner still reads a changed
    /// service's new fragment after storing it.
    pub(super) fn pack(
        fragment: &Fragment,
        share: impl FnMut(&Set) -> Arc<Set>,
        names: &mut SetNames,
    ) -> Self {
        let mut comments: Vec<Box<str>> = Vec::new();
        let elements = fragment
            .elements
            .iter()
            .map(|(set, elements)| {
                let mut bytes = Vec::new();
                for e in elements {
                    pack_element(&mut bytes, e, &mut comments);
                }
                (names.get(set), bytes.into_boxed_slice())
            })
            .collect();
        PackedFragment {
            // Copies hold no spare capacity (the planner holds one or more chains per service).
            chains: fragment.chains.iter().cloned().collect(),
            sets: fragment.sets.iter().map(share).collect(),
            elements,
            comments: comments.into_boxed_slice(),
        }
    }

    /// The fragment that was packed.
    pub(super) fn unpack(&self) -> Fragment {
        Fragment {
            chains: self.chains.to_vec(),
            sets: self.sets.iter().map(|s| Set::clone(s)).collect(),
            elements: self
                .elements
                .iter()
                .map(|(set, _)| (set.to_string(), self.elements_of(set).collect()))
                .collect(),
        }
    }

    /// The sets this fragment puts elements in.
    pub(super) fn element_sets(&self) -> impl Iterator<Item = &str> {
        self.elements
            .iter()
            .filter(|(_, packed)| !packed.is_empty())
            .map(|(s, _)| &**s)
    }

    /// The elements this fragment puts in `set`.
    pub(super) fn elements_of<'a>(&'a self, set: &str) -> impl Iterator<Item = Element> + use<'a> {
        self.packed_of(set)
            .map(|(key, rest)| self.element(key, rest))
    }

    /// How many elements this fragment puts in each set it puts any in, by the set's shared
    /// name; counted without unpacking them.
    pub(super) fn element_counts(&self) -> impl Iterator<Item = (&Arc<str>, usize)> {
        self.elements
            .iter()
            .filter(|(_, packed)| !packed.is_empty())
            .map(|(set, packed)| (set, split_packed(packed).count()))
    }

    /// How many elements this fragment puts in `set`, counted without unpacking them.
    pub(super) fn count_of(&self, set: &str) -> usize {
        self.packed_of(set).count()
    }

    /// This fragment's element of `set` under `key`.
    pub(super) fn find(&self, set: &str, key: &[Value]) -> Option<Element> {
        let mut wanted = Vec::new();
        write_key(&mut wanted, key);
        self.packed_of(set)
            .find(|(k, _)| *k == wanted.as_slice())
            .map(|(k, rest)| self.element(k, rest))
    }

    /// The elements of `set` that this fragment and `other` do not both hold as they are:
    /// those only this one holds, and those only `other` holds, each sorted by key. Elements
    /// are compared packed (their comments as text), so those both hold are never unpacked: a
    /// replanned service nearly always keeps most of its elements, in the same order.
    pub(super) fn differing(
        &self,
        other: &PackedFragment,
        set: &str,
    ) -> (Vec<Element>, Vec<Element>) {
        let ours: Vec<Comparable> = self.comparable_of(set).collect();
        let theirs: Vec<Comparable> = other.comparable_of(set).collect();
        let head = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
        let (ours, theirs) = (&ours[head..], &theirs[head..]);
        let tail = ours
            .iter()
            .rev()
            .zip(theirs.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let mut ours = ours[..ours.len() - tail].to_vec();
        let mut theirs = theirs[..theirs.len() - tail].to_vec();
        // Keys are unique within a fragment's set, and packing keeps their order apart from
        // the values': sorted by bytes, then decoded and sorted by key.
        ours.sort_unstable();
        theirs.sort_unstable();
        let (mut only_ours, mut only_theirs) = (Vec::new(), Vec::new());
        let (mut a, mut b) = (ours.into_iter().peekable(), theirs.into_iter().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x == y => {
                    a.next();
                    b.next();
                }
                (Some(x), Some(y)) if x < y => only_ours.extend(a.next()),
                (_, Some(_)) => only_theirs.extend(b.next()),
                (Some(_), None) => only_ours.extend(a.next()),
                (None, None) => break,
            }
        }
        let unpack = |stored: &PackedFragment, elements: Vec<Comparable>| {
            let mut elements: Vec<Element> = elements
                .into_iter()
                .map(|c| stored.element(c.key, c.rest))
                .collect();
            elements.sort_unstable_by(|x, y| x.key.cmp(&y.key));
            elements
        };
        (unpack(self, only_ours), unpack(other, only_theirs))
    }

    /// Each element of `set`, packed, as `differing` compares it.
    fn comparable_of<'a>(&'a self, set: &str) -> impl Iterator<Item = Comparable<'a>> + use<'a> {
        self.packed_of(set).map(|(key, rest)| {
            let mut after_data = rest;
            match take(&mut after_data, 1)[0] {
                0 => {}
                1 => skip_verdict(&mut after_data),
                _ => skip_key(&mut after_data),
            }
            let data = &rest[..rest.len() - after_data.len()];
            let comment = match read_varint(&mut after_data) {
                0 => None,
                i => Some(&*self.comments[i - 1]),
            };
            Comparable {
                key,
                data,
                comment,
                rest,
            }
        })
    }

    /// Each element of `set` as its packed key and rest.
    fn packed_of<'a>(&'a self, set: &str) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a> {
        split_packed(self.packed_set(set))
    }

    /// The packed elements of `set`, one after another.
    fn packed_set(&self, set: &str) -> &[u8] {
        self.elements
            .iter()
            .find(|(s, _)| &**s == set)
            .map_or(&[], |(_, b)| b)
    }

    /// The digest hash of a packed element (`next_packed`'s key and rest), read without
    /// unpacking it: the same as `SetDigest`'s of the element unpacked.
    fn element_hash(&self, mut key: &[u8], mut rest: &[u8], encoder: &mut ElementEncoder) -> u128 {
        let values = read_varint(&mut key);
        encoder.key(values);
        for _ in 0..values {
            encoder.value(&read_value(&mut key));
        }
        match take(&mut rest, 1)[0] {
            0 => encoder.no_data(),
            1 => encoder.verdict(&read_verdict(&mut rest)),
            _ => {
                let values = read_varint(&mut rest);
                encoder.values(values);
                for _ in 0..values {
                    encoder.value(&read_value(&mut rest));
                }
            }
        }
        let comment = match read_varint(&mut rest) {
            0 => None,
            i => Some(&*self.comments[i - 1]),
        };
        encoder.comment(comment);
        encoder.hash()
    }

    fn element(&self, mut key: &[u8], rest: &[u8]) -> Element {
        self.element_with_key(read_key(&mut key), rest)
    }

    /// The element of `key` (read already) and its packed `rest`.
    fn element_with_key(&self, key: Vec<Value>, mut rest: &[u8]) -> Element {
        let data = match take(&mut rest, 1)[0] {
            0 => None,
            1 => Some(MapData::Verdict(read_verdict(&mut rest))),
            _ => Some(MapData::Values(read_key(&mut rest))),
        };
        let comment = match read_varint(&mut rest) {
            0 => None,
            i => Some(self.comments[i - 1].to_string()),
        };
        Element { key, data, comment }
    }
}

/// A packed element as two fragments can compare it: its packed key and data and its comment
/// (a comment's index differs between fragments, its text does not), with the rest of its
/// bytes to unpack it from.
#[derive(Debug, Clone, Copy)]
struct Comparable<'a> {
    key: &'a [u8],
    data: &'a [u8],
    comment: Option<&'a str>,
    /// `data` and the comment's index: not compared, the index is the fragment's own.
    rest: &'a [u8],
}

impl Comparable<'_> {
    fn compared(&self) -> (&[u8], &[u8], Option<&str>) {
        (self.key, self.data, self.comment)
    }
}

impl PartialEq for Comparable<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.compared() == other.compared()
    }
}

impl Eq for Comparable<'_> {}

impl PartialOrd for Comparable<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Comparable<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.compared().cmp(&other.compared())
    }
}

/// The packed elements in `bytes`, one after another, each as `next_packed` splits it.
fn split_packed(mut bytes: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    std::iter::from_fn(move || (!bytes.is_empty()).then(|| next_packed(&mut bytes)))
}

/// The next packed element of `bytes` as its key and rest, `bytes` moved past it.
fn next_packed<'a>(bytes: &mut &'a [u8]) -> (&'a [u8], &'a [u8]) {
    let all = *bytes;
    skip_key(bytes);
    let key = &all[..all.len() - bytes.len()];
    let after_key = *bytes;
    match take(bytes, 1)[0] {
        0 => {}
        1 => skip_verdict(bytes),
        _ => skip_key(bytes),
    }
    read_varint(bytes);
    (key, &after_key[..after_key.len() - bytes.len()])
}
