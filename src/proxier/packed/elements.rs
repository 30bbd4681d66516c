//! A set's elements across the skeleton and the stored fragments, unpacked one at a time:
//! sorted by key as `assemble` sorts them (`SortedElements`), or in the order the parts hold
//! them (`PartOrderElements`).
//!
//! Guarantees: both hand out the same elements, the first of equal keys in part order, as the
//! assembled table holds them; while sorting, an element is held as where it lies (8 bytes),
//! never unpacked.

use std::borrow::Cow;
use std::collections::HashSet;

use foldhash::fast::FixedState;

use crate::nft::model::{Element, Value};

use super::PackedFragment;
use super::next_packed;
use super::packing::{read_key, read_value, read_varint, value_tag, write_key};

/// Where a set's elements come from: a fragment as built, or one as stored.
enum Part<'a> {
    Unpacked(&'a [Element]),
    /// A stored fragment and its packed elements of the set.
    Packed(&'a PackedFragment, &'a [u8]),
}

/// The keys of one element, value by value: a packed one is decoded as it is compared.
enum KeyValues<'a> {
    Unpacked(std::slice::Iter<'a, Value>),
    Packed { bytes: &'a [u8], left: usize },
}

impl<'a> Iterator for KeyValues<'a> {
    type Item = Cow<'a, Value>;

    fn next(&mut self) -> Option<Cow<'a, Value>> {
        match self {
            KeyValues::Unpacked(values) => values.next().map(Cow::Borrowed),
            KeyValues::Packed { bytes, left } => {
                let more = *left > 0;
                more.then(|| {
                    *left -= 1;
                    Cow::Owned(read_value(bytes))
                })
            }
        }
    }
}

/// The elements of one set of a table, sorted by key, unpacked one at a time as they are
/// taken: while they are sorted, each is held as where it lies (8 bytes), not unpacked
/// (~300 bytes for an endpoint-map element with its key, data and comment).
pub(in crate::proxier) struct SortedElements<'a> {
    parts: Vec<Part<'a>>,
    /// Each element as its part and its index (unpacked) or byte offset (packed) there.
    order: std::vec::IntoIter<(u32, u32)>,
}

impl<'a> SortedElements<'a> {
    /// The elements `unpacked` and then each of `stored` put in `set`, as
    /// `sort_and_dedup_by_key` orders their concatenation: sorted by key, the first of equal
    /// keys kept.
    pub(in crate::proxier) fn new(
        unpacked: &'a [Element],
        stored: impl IntoIterator<Item = &'a PackedFragment>,
        set: &str,
    ) -> Self {
        let parts: Vec<Part<'a>> = std::iter::once(Part::Unpacked(unpacked))
            .chain(
                stored
                    .into_iter()
                    .map(|f| Part::Packed(f, f.packed_set(set))),
            )
            .filter(|part| match part {
                Part::Unpacked(elements) => !elements.is_empty(),
                Part::Packed(_, bytes) => !bytes.is_empty(),
            })
            .collect();
        let key = |part: u32, at: u32| match &parts[part as usize] {
            Part::Unpacked(elements) => KeyValues::Unpacked(elements[at as usize].key.iter()),
            Part::Packed(_, bytes) => {
                let mut bytes = &bytes[at as usize..];
                let left = read_varint(&mut bytes);
                KeyValues::Packed { bytes, left }
            }
        };
        // Each element with its key's order prefix, decoded once here: most comparisons of
        // the sort are then of two numbers, not of two keys decoded again.
        let mut order: Vec<(u64, u32, u32)> = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let i = u32::try_from(i).expect("fewer than 2^32 parts");
            match part {
                Part::Unpacked(elements) => {
                    order.extend((0..elements.len() as u32).map(|at| {
                        let prefix = order_prefix(key(i, at));
                        (prefix, i, at)
                    }));
                }
                Part::Packed(_, all) => {
                    let mut bytes = *all;
                    while !bytes.is_empty() {
                        let at = (all.len() - bytes.len()) as u32;
                        order.push((order_prefix(key(i, at)), i, at));
                        next_packed(&mut bytes);
                    }
                }
            }
        }
        // Stable, so equal keys stay in part order and `dedup_by` keeps the first.
        order.sort_by(|&(pa, a, at_a), &(pb, b, at_b)| {
            pa.cmp(&pb).then_with(|| key(a, at_a).cmp(key(b, at_b)))
        });
        order.dedup_by(|&mut (pl, l, at_l), &mut (pf, f, at_f)| {
            pl == pf && key(l, at_l).eq(key(f, at_f))
        });
        SortedElements {
            parts,
            order: order
                .into_iter()
                .map(|(_, part, at)| (part, at))
                .collect::<Vec<_>>()
                .into_iter(),
        }
    }
}

/// The first eight bytes of an encoding of `key` that sorts as keys do (each value's tag,
/// then its fields big-endian, a name ended by a zero), as a number: of two keys in order,
/// the first one's prefix is never the larger.
pub(super) fn order_prefix<'v>(key: impl Iterator<Item = Cow<'v, Value>>) -> u64 {
    let mut prefix = Prefix::default();
    for value in key {
        let room = prefix.push(&[value_tag(&value)])
            && match &*value {
                Value::Ipv4(a) => prefix.push(&a.octets()),
                Value::Ipv6(a) => prefix.push(&a.octets()),
                Value::Ipv4Net(n) => {
                    prefix.push(&n.addr().octets()) && prefix.push(&[n.prefix_len()])
                }
                Value::Ipv6Net(n) => {
                    prefix.push(&n.addr().octets()) && prefix.push(&[n.prefix_len()])
                }
                Value::Proto(p) | Value::NfProto(p) => prefix.push(&[*p]),
                Value::Port(p) => prefix.push(&p.to_be_bytes()),
                Value::Mark(m) => prefix.push(&m.to_be_bytes()),
                Value::IfName(name) => prefix.push(name.as_bytes()) && prefix.push(&[0]),
                // Address types are ordered by their own declaration, which this need not
                // repeat: the prefix ends here, equal for every address type.
                Value::AddrType(_) => false,
                Value::CtState(s) => prefix.push(&s.0.to_be_bytes()),
                Value::CtStatus(s) => prefix.push(&s.0.to_be_bytes()),
                Value::IntRange { first, last } => {
                    prefix.push(&first.to_be_bytes()) && prefix.push(&last.to_be_bytes())
                }
            };
        if !room {
            break;
        }
    }
    u64::from_be_bytes(prefix.bytes)
}

/// Up to eight bytes, the rest zero.
#[derive(Default)]
struct Prefix {
    bytes: [u8; 8],
    len: usize,
}

impl Prefix {
    /// Appends what fits of `bytes`; false once full.
    fn push(&mut self, bytes: &[u8]) -> bool {
        let n = bytes.len().min(8 - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        self.len < 8
    }
}

impl Iterator for SortedElements<'_> {
    type Item = Element;

    fn next(&mut self) -> Option<Element> {
        let (part, at) = self.order.next()?;
        Some(match &self.parts[part as usize] {
            Part::Unpacked(elements) => elements[at as usize].clone(),
            Part::Packed(stored, bytes) => {
                let (key, rest) = next_packed(&mut &bytes[at as usize..]);
                stored.element(key, rest)
            }
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.order.size_hint()
    }
}

/// The elements `SortedElements` hands out, in the order the parts hold them rather than by
/// key: for a batch that creates the set, where the kernel does not care. Each part is read
/// front to back once, and an element is left out where an earlier part (or an earlier element
/// of its own) holds its key. To find those, only the keys `may_repeat` says may be held twice
/// are remembered (as the packed bytes the fragments hold: equal keys pack alike); a key it
/// passes over is handed out as it comes.
pub(in crate::proxier) struct PartOrderElements<'a, I, R> {
    unpacked: std::slice::Iter<'a, Element>,
    /// The packed keys of `unpacked` handed out so far (a skeleton's few).
    unpacked_keys: HashSet<Vec<u8>, FixedState>,
    set: Box<str>,
    stored: I,
    may_repeat: R,
    /// The fragment being read and its packed elements not read yet.
    current: Option<(&'a PackedFragment, &'a [u8])>,
    /// The packed keys handed out so far that `may_repeat`.
    seen: HashSet<&'a [u8], FixedState>,
}

impl<'a, I, R> PartOrderElements<'a, I, R>
where
    I: Iterator<Item = &'a PackedFragment>,
    R: FnMut(&[Value]) -> bool,
{
    pub(in crate::proxier) fn new(
        unpacked: &'a [Element],
        stored: I,
        set: &str,
        may_repeat: R,
    ) -> Self {
        PartOrderElements {
            unpacked: unpacked.iter(),
            unpacked_keys: HashSet::default(),
            set: set.into(),
            stored,
            may_repeat,
            current: None,
            seen: HashSet::default(),
        }
    }
}

impl<'a, I, R> Iterator for PartOrderElements<'a, I, R>
where
    I: Iterator<Item = &'a PackedFragment>,
    R: FnMut(&[Value]) -> bool,
{
    type Item = Element;

    fn next(&mut self) -> Option<Element> {
        for e in self.unpacked.by_ref() {
            let mut key = Vec::new();
            write_key(&mut key, &e.key);
            if self.unpacked_keys.insert(key) {
                return Some(e.clone());
            }
        }
        loop {
            match &mut self.current {
                Some((stored, bytes)) if !bytes.is_empty() => {
                    let (packed_key, rest) = next_packed(bytes);
                    let key = read_key(&mut &packed_key[..]);
                    let first = (self.unpacked_keys.is_empty()
                        || !self.unpacked_keys.contains(packed_key))
                        && (!(self.may_repeat)(&key) || self.seen.insert(packed_key));
                    if first {
                        return Some(stored.element_with_key(key, rest));
                    }
                }
                _ => {
                    let stored = self.stored.next()?;
                    self.current = Some((stored, stored.packed_set(&self.set)));
                }
            }
        }
    }
}
