//! How the planner holds a fragment between plans: elements packed into bytes, declarations
//! shared. A `Fragment` spends ~220 bytes on an endpoint-map element (an 80-byte `Element`, a
//! key `Vec`, a data `Vec`, a comment `String`) and the planner holds one per endpoint; packed
//! it is ~30. Unpacking gives back the very fragment that was packed.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use foldhash::fast::FixedState;
use ipnet::{Ipv4Net, Ipv6Net};

use super::build::Fragment;
use crate::nft::digest::{ElementEncoder, SetDigest};
use crate::nft::model::{
    AddrType, Chain, CtState, CtStatus, Element, MapData, Set, Value, Verdict,
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
pub(super) struct Stored {
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

impl Stored {
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
        Stored {
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
    pub(super) fn differing(&self, other: &Stored, set: &str) -> (Vec<Element>, Vec<Element>) {
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
        let unpack = |stored: &Stored, elements: Vec<Comparable>| {
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

/// Where a set's elements come from: a fragment as built, or one as stored.
enum Part<'a> {
    Unpacked(&'a [Element]),
    /// A stored fragment and its packed elements of the set.
    Packed(&'a Stored, &'a [u8]),
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
pub(super) struct SortedElements<'a> {
    parts: Vec<Part<'a>>,
    /// Each element as its part and its index (unpacked) or byte offset (packed) there.
    order: std::vec::IntoIter<(u32, u32)>,
}

impl<'a> SortedElements<'a> {
    /// The elements `unpacked` and then each of `stored` put in `set`, as
    /// `sort_and_dedup_by_key` orders their concatenation: sorted by key, the first of equal
    /// keys kept.
    pub(super) fn new(
        unpacked: &'a [Element],
        stored: impl IntoIterator<Item = &'a Stored>,
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
fn order_prefix<'v>(key: impl Iterator<Item = Cow<'v, Value>>) -> u64 {
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

/// A value's tag in the packed form: its variant's place in `Value`'s declaration, so tags
/// sort as values do (`order_prefix` relies on it).
fn value_tag(v: &Value) -> u8 {
    match v {
        Value::Ipv4(_) => 0,
        Value::Ipv6(_) => 1,
        Value::Ipv4Net(_) => 2,
        Value::Ipv6Net(_) => 3,
        Value::Proto(_) => 4,
        Value::Port(_) => 5,
        Value::Mark(_) => 6,
        Value::NfProto(_) => 7,
        Value::IfName(_) => 8,
        Value::AddrType(_) => 9,
        Value::CtState(_) => 10,
        Value::CtStatus(_) => 11,
        Value::IntRange { .. } => 12,
    }
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
pub(super) struct PartOrderElements<'a, I, R> {
    unpacked: std::slice::Iter<'a, Element>,
    /// The packed keys of `unpacked` handed out so far (a skeleton's few).
    unpacked_keys: HashSet<Vec<u8>, FixedState>,
    set: Box<str>,
    stored: I,
    may_repeat: R,
    /// The fragment being read and its packed elements not read yet.
    current: Option<(&'a Stored, &'a [u8])>,
    /// The packed keys handed out so far that `may_repeat`.
    seen: HashSet<&'a [u8], FixedState>,
}

impl<'a, I, R> PartOrderElements<'a, I, R>
where
    I: Iterator<Item = &'a Stored>,
    R: FnMut(&[Value]) -> bool,
{
    pub(super) fn new(unpacked: &'a [Element], stored: I, set: &str, may_repeat: R) -> Self {
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
    I: Iterator<Item = &'a Stored>,
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

/// The digest of each of `sets`: of the elements `SortedElements::new(unpacked(set), stored,
/// set)` hands out, found in one walk over the fragments and without sorting the elements. A
/// digest is a sum, so every element is added as it is read, and then the elements that are
/// not the first of equal keys in part order are taken out again: equal keys pack to equal
/// bytes, so only elements whose packed keys share a hash need comparing.
pub(super) fn digests_of<'a>(
    unpacked: impl Fn(&str) -> &'a [Element],
    stored: impl IntoIterator<Item = &'a Stored>,
    sets: &[&str],
) -> Vec<SetDigest> {
    struct Summing<'a> {
        unpacked: &'a [Element],
        unpacked_keys: Vec<Vec<u8>>,
        digest: SetDigest,
        /// Every element's key hash and where it lies: part (0 for `unpacked`, else the
        /// fragment's index + 1) and index or byte offset there.
        keys: Vec<(u64, u32, u32)>,
    }
    let mut summing: Vec<Summing> = sets
        .iter()
        .map(|set| {
            let unpacked = unpacked(set);
            let unpacked_keys: Vec<Vec<u8>> = unpacked
                .iter()
                .map(|e| {
                    let mut key = Vec::new();
                    write_key(&mut key, &e.key);
                    key
                })
                .collect();
            let keys = (unpacked_keys.iter().enumerate())
                .map(|(at, key)| (bytes_hash(key), 0, at as u32))
                .collect();
            Summing {
                digest: SetDigest::of(unpacked),
                unpacked,
                unpacked_keys,
                keys,
            }
        })
        .collect();
    let mut fragments: Vec<&Stored> = Vec::new();
    let mut encoder = ElementEncoder::default();
    for fragment in stored {
        fragments.push(fragment);
        let part = fragments.len() as u32;
        for (j, (name, all)) in fragment.elements.iter().enumerate() {
            let Some(i) = sets.iter().position(|s| **s == **name) else {
                continue;
            };
            // `packed_set` reads a set's first list only.
            if fragment.elements[..j].iter().any(|(n, _)| n == name) {
                continue;
            }
            let s = &mut summing[i];
            let mut bytes = &all[..];
            while !bytes.is_empty() {
                let at = (all.len() - bytes.len()) as u32;
                let (key, rest) = next_packed(&mut bytes);
                s.keys.push((bytes_hash(key), part, at));
                s.digest
                    .add_hash(fragment.element_hash(key, rest, &mut encoder));
            }
        }
    }
    for (s, set) in summing.iter_mut().zip(sets) {
        let packed_at = |part: u32, at: u32| {
            let all = fragments[part as usize - 1].packed_set(set);
            next_packed(&mut &all[at as usize..])
        };
        let key_at = |part: u32, at: u32| -> &[u8] {
            match part {
                0 => &s.unpacked_keys[at as usize],
                p => packed_at(p, at).0,
            }
        };
        s.keys.sort_unstable();
        let mut later = Vec::new();
        for run in s
            .keys
            .chunk_by(|a, b| a.0 == b.0)
            .filter(|run| run.len() > 1)
        {
            for (i, &(_, part, at)) in run.iter().enumerate() {
                let key = key_at(part, at);
                if run[..i].iter().any(|&(_, p, a)| key_at(p, a) == key) {
                    later.push((part, at));
                }
            }
        }
        for (part, at) in later {
            match part {
                0 => s.digest.remove(&s.unpacked[at as usize]),
                p => {
                    let (key, rest) = packed_at(p, at);
                    let hash = fragments[p as usize - 1].element_hash(key, rest, &mut encoder);
                    s.digest.remove_hash(hash);
                }
            }
        }
    }
    summing.into_iter().map(|s| s.digest).collect()
}

/// A 64-bit hash of `bytes`, to find equal keys (FxHash's mixing, a word at a time).
fn bytes_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(K);
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    (h.rotate_left(5) ^ u64::from_le_bytes(last)).wrapping_mul(K)
}

fn pack_element(out: &mut Vec<u8>, e: &Element, comments: &mut Vec<Box<str>>) {
    write_key(out, &e.key);
    match &e.data {
        None => out.push(0),
        Some(MapData::Verdict(v)) => {
            out.push(1);
            write_verdict(out, v);
        }
        Some(MapData::Values(values)) => {
            out.push(2);
            write_key(out, values);
        }
    }
    let comment = match &e.comment {
        None => 0,
        Some(c) => match comments.iter().position(|k| **k == **c) {
            Some(i) => i + 1,
            None => {
                comments.push(c.as_str().into());
                comments.len()
            }
        },
    };
    write_varint(out, comment);
}

fn write_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn read_varint(bytes: &mut &[u8]) -> usize {
    let mut n = 0;
    let mut shift = 0;
    loop {
        let b = take(bytes, 1)[0];
        n |= usize::from(b & 0x7f) << shift;
        if b < 0x80 {
            return n;
        }
        shift += 7;
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    write_varint(out, s.len());
    out.extend(s.as_bytes());
}

fn write_key(out: &mut Vec<u8>, values: &[Value]) {
    write_varint(out, values.len());
    for v in values {
        write_value(out, v);
    }
}

fn write_value(out: &mut Vec<u8>, v: &Value) {
    out.push(value_tag(v));
    match v {
        Value::Ipv4(a) => out.extend(a.octets()),
        Value::Ipv6(a) => out.extend(a.octets()),
        Value::Ipv4Net(n) => {
            out.extend(n.addr().octets());
            out.push(n.prefix_len());
        }
        Value::Ipv6Net(n) => {
            out.extend(n.addr().octets());
            out.push(n.prefix_len());
        }
        Value::Proto(p) | Value::NfProto(p) => out.push(*p),
        Value::Port(p) => out.extend(p.to_le_bytes()),
        Value::Mark(m) => out.extend(m.to_le_bytes()),
        Value::IfName(s) => write_str(out, s),
        Value::AddrType(t) => out.push(match t {
            AddrType::Unicast => 0,
            AddrType::Local => 1,
            AddrType::Broadcast => 2,
            AddrType::Multicast => 3,
        }),
        Value::CtState(s) => out.extend(s.0.to_le_bytes()),
        Value::CtStatus(s) => out.extend(s.0.to_le_bytes()),
        Value::IntRange { first, last } => {
            out.extend(first.to_le_bytes());
            out.extend(last.to_le_bytes());
        }
    }
}

fn write_verdict(out: &mut Vec<u8>, v: &Verdict) {
    match v {
        Verdict::Accept => out.push(0),
        Verdict::Drop => out.push(1),
        Verdict::Continue => out.push(2),
        Verdict::Return => out.push(3),
        Verdict::Jump(c) => {
            out.push(4);
            write_str(out, c);
        }
        Verdict::Goto(c) => {
            out.push(5);
            write_str(out, c);
        }
    }
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, tail) = bytes.split_at(n);
    *bytes = tail;
    head
}

fn take_array<const N: usize>(bytes: &mut &[u8]) -> [u8; N] {
    take(bytes, N).try_into().expect("N bytes")
}

fn read_u32(bytes: &mut &[u8]) -> u32 {
    u32::from_le_bytes(take_array(bytes))
}

fn take_str<'a>(bytes: &mut &'a [u8]) -> &'a [u8] {
    let n = read_varint(bytes);
    take(bytes, n)
}

fn read_str(bytes: &mut &[u8]) -> String {
    String::from_utf8(take_str(bytes).to_vec()).expect("packed from a str")
}

fn read_key(bytes: &mut &[u8]) -> Vec<Value> {
    let n = read_varint(bytes);
    (0..n).map(|_| read_value(bytes)).collect()
}

/// Past a packed key, without decoding it.
fn skip_key(bytes: &mut &[u8]) {
    for _ in 0..read_varint(bytes) {
        let tag = take(bytes, 1)[0];
        let n = match tag {
            0 | 6 | 10 | 11 => 4,
            1 => 16,
            2 => 5,
            3 => 17,
            4 | 7 | 9 => 1,
            5 => 2,
            8 => read_varint(bytes),
            12 => 8,
            _ => unreachable!("value tag {tag} was never packed"),
        };
        take(bytes, n);
    }
}

fn skip_verdict(bytes: &mut &[u8]) {
    if take(bytes, 1)[0] >= 4 {
        take_str(bytes);
    }
}

fn read_value(bytes: &mut &[u8]) -> Value {
    let tag = take(bytes, 1)[0];
    match tag {
        0 => Value::Ipv4(take_array::<4>(bytes).into()),
        1 => Value::Ipv6(take_array::<16>(bytes).into()),
        2 => {
            let addr = take_array::<4>(bytes).into();
            let prefix = take(bytes, 1)[0];
            Value::Ipv4Net(Ipv4Net::new(addr, prefix).expect("packed from a net"))
        }
        3 => {
            let addr = take_array::<16>(bytes).into();
            let prefix = take(bytes, 1)[0];
            Value::Ipv6Net(Ipv6Net::new(addr, prefix).expect("packed from a net"))
        }
        4 => Value::Proto(take(bytes, 1)[0]),
        5 => Value::Port(u16::from_le_bytes(take_array(bytes))),
        6 => Value::Mark(read_u32(bytes)),
        7 => Value::NfProto(take(bytes, 1)[0]),
        8 => Value::IfName(read_str(bytes)),
        9 => Value::AddrType(match take(bytes, 1)[0] {
            0 => AddrType::Unicast,
            1 => AddrType::Local,
            2 => AddrType::Broadcast,
            _ => AddrType::Multicast,
        }),
        10 => Value::CtState(CtState(read_u32(bytes))),
        11 => Value::CtStatus(CtStatus(read_u32(bytes))),
        12 => {
            let first = read_u32(bytes);
            let last = read_u32(bytes);
            Value::IntRange { first, last }
        }
        _ => unreachable!("value tag {tag} was never packed"),
    }
}

fn read_verdict(bytes: &mut &[u8]) -> Verdict {
    match take(bytes, 1)[0] {
        0 => Verdict::Accept,
        1 => Verdict::Drop,
        2 => Verdict::Continue,
        3 => Verdict::Return,
        4 => Verdict::Jump(read_str(bytes)),
        _ => Verdict::Goto(read_str(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::model::{DataType, Rule, Stmt};

    /// A value of every kind (addresses, nets, ports, names, ranges …).
    fn every_value() -> Vec<Value> {
        vec![
            Value::Ipv4("10.0.0.1".parse().unwrap()),
            Value::Ipv6("fd00::1".parse().unwrap()),
            // Host bits are kept: a net is packed as written.
            Value::Ipv4Net("10.1.2.3/16".parse().unwrap()),
            Value::Ipv6Net("fd00::5/64".parse().unwrap()),
            Value::Proto(6),
            Value::Port(65535),
            Value::Mark(0x4000),
            Value::NfProto(10),
            Value::IfName("eth*".into()),
            Value::IfName(String::new()),
            Value::AddrType(AddrType::Unicast),
            Value::AddrType(AddrType::Local),
            Value::AddrType(AddrType::Broadcast),
            Value::AddrType(AddrType::Multicast),
            Value::CtState(CtState::NEW),
            Value::CtStatus(CtStatus::DNAT),
            Value::IntRange {
                first: 7,
                last: u32::MAX,
            },
        ]
    }

    #[test]
    fn unpacks_what_was_packed() {
        let every_value = every_value();
        let verdicts = [
            Verdict::Accept,
            Verdict::Drop,
            Verdict::Continue,
            Verdict::Return,
            Verdict::Jump("a".into()),
            Verdict::Goto("b-é".into()),
        ];
        let mut elements: Vec<Element> = every_value
            .iter()
            .map(|v| Element {
                key: vec![v.clone()],
                data: None,
                comment: Some("shared".into()),
            })
            .collect();
        elements.extend(verdicts.iter().enumerate().map(|(i, v)| Element {
            key: vec![Value::Port(i as u16), Value::Proto(17)],
            data: Some(MapData::Verdict(v.clone())),
            comment: Some(format!("own {i}")),
        }));
        elements.push(Element {
            key: Vec::new(),
            data: Some(MapData::Values(every_value.clone())),
            comment: None,
        });
        let set = Set {
            name: "s".into(),
            key: vec![DataType::Ipv4Addr],
            data: Vec::new(),
            interval: false,
            dynamic: false,
            timeout: None,
            size: None,
            comment: Some("c".into()),
            elements: Vec::new(),
        };
        let fragment = Fragment {
            chains: vec![Chain {
                name: "c".into(),
                base: None,
                comment: Some("x".into()),
                rules: vec![Rule {
                    stmts: vec![Stmt::Counter],
                    comment: None,
                    handle: None,
                }],
            }],
            sets: vec![set],
            elements: vec![("s".into(), elements.clone()), ("empty".into(), Vec::new())],
        };
        let stored = Stored::pack(&fragment, |s| Arc::new(s.clone()), &mut SetNames::default());
        let back = stored.unpack();
        assert_eq!(back.chains, fragment.chains);
        assert_eq!(back.sets, fragment.sets);
        assert_eq!(back.elements, fragment.elements);
        for e in &elements {
            assert_eq!(stored.find("s", &e.key).as_ref(), Some(e));
        }
        assert_eq!(stored.find("s", &[Value::Port(99)]), None);
        assert_eq!(stored.find("empty", &[]), None);
    }

    #[test]
    fn sorted_elements_are_the_parts_elements_sorted_by_key_the_first_of_equal_keys_kept() {
        let (parts, stored) = parts_sharing_keys();
        let expected = sorted_by_key_first_kept(&parts);
        assert!(expected.len() < parts.concat().len());
        let sorted: Vec<Element> = SortedElements::new(&parts[0], &stored, "s").collect();
        assert_eq!(sorted, expected);
        let none: Vec<Element> = SortedElements::new(&[], &stored, "none").collect();
        assert_eq!(none, Vec::new());
    }

    #[test]
    fn part_order_elements_are_the_sorted_ones_in_the_order_the_parts_hold_them() {
        let (parts, stored) = parts_sharing_keys();
        let in_part_order: Vec<Element> =
            PartOrderElements::new(&parts[0], stored.iter(), "s", |_| true).collect();
        // The first of equal keys in part order, each part's elements as it holds them.
        let mut expected: Vec<Element> = Vec::new();
        for e in parts.concat() {
            if !expected.iter().any(|x| x.key == e.key) {
                expected.push(e);
            }
        }
        assert!(expected.len() < parts.concat().len());
        assert_eq!(in_part_order, expected);
        let none: Vec<Element> =
            PartOrderElements::new(&[], stored.iter(), "none", |_| true).collect();
        assert_eq!(none, Vec::new());
    }

    /// Five parts of elements in set `s` (the first unpacked, the others packed, each also
    /// holding an element of another set): keys of one to three values of every kind, part
    /// `p` holding the keys of indices i·(p+3) mod 60, so parts repeat keys and share them,
    /// each with its own data.
    fn parts_sharing_keys() -> (Vec<Vec<Element>>, Vec<Stored>) {
        let values = every_value();
        let element = |i: usize, part: usize| Element {
            key: (0..=i % 3)
                .map(|j| values[(i * 7 + j * 5) % values.len()].clone())
                .collect(),
            data: Some(MapData::Values(vec![Value::Port(part as u16)])),
            comment: Some(format!("part {part}")),
        };
        let parts: Vec<Vec<Element>> = (0..5)
            .map(|p| (0..40).map(|i| element((i * (p + 3)) % 60, p)).collect())
            .collect();
        let stored = packed_in_set_s(&parts[1..], Some(element(1, 9)));
        (parts, stored)
    }

    /// Each of `parts` packed as a fragment holding it in set `s` (and `other` in a set of
    /// that name).
    fn packed_in_set_s(parts: &[Vec<Element>], other: Option<Element>) -> Vec<Stored> {
        parts
            .iter()
            .map(|elements| {
                let mut sets = vec![("s".to_string(), elements.clone())];
                if let Some(other) = &other {
                    sets.insert(0, ("other".into(), vec![other.clone()]));
                }
                let fragment = Fragment {
                    chains: Vec::new(),
                    sets: Vec::new(),
                    elements: sets,
                };
                Stored::pack(&fragment, |s| Arc::new(s.clone()), &mut SetNames::default())
            })
            .collect()
    }

    /// The parts' elements as `assemble` puts them in a set: sorted by key, the first of equal
    /// keys kept.
    fn sorted_by_key_first_kept(parts: &[Vec<Element>]) -> Vec<Element> {
        let mut all = parts.concat();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all.dedup_by(|later, first| later.key == first.key);
        all
    }

    /// Values of every kind from small domains, so that keys often share a beginning.
    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let net4 = (any::<u8>(), 0u8..=32).prop_map(|(last, len)| {
            Value::Ipv4Net(Ipv4Net::new([10, 0, 0, last].into(), len).unwrap())
        });
        let net6 = (any::<u8>(), 0u8..=128).prop_map(|(last, len)| {
            let addr = std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last.into());
            Value::Ipv6Net(Ipv6Net::new(addr, len).unwrap())
        });
        prop_oneof![
            (0u32..4).prop_map(|n| Value::Ipv4((0x0a00_0000 + n).into())),
            (0u128..4).prop_map(|n| Value::Ipv6((0xfd00u128 << 112 | n).into())),
            net4,
            net6,
            (0u8..3).prop_map(Value::Proto),
            (0u16..590).prop_map(|p| Value::Port(p * 111)),
            any::<u32>().prop_map(Value::Mark),
            (0u8..3).prop_map(Value::NfProto),
            "[a-c]{0,9}".prop_map(Value::IfName),
            prop_oneof![
                Just(AddrType::Unicast),
                Just(AddrType::Local),
                Just(AddrType::Multicast)
            ]
            .prop_map(Value::AddrType),
            (0u32..4).prop_map(|n| Value::CtState(CtState(n))),
            (0u32..4).prop_map(|n| Value::CtStatus(CtStatus(n << 30))),
            (0u32..3, 0u32..3).prop_map(|(first, n)| Value::IntRange {
                first,
                last: first + n
            }),
        ]
    }

    proptest::proptest! {
        #[test]
        fn keys_in_order_have_their_order_prefixes_in_order(
            mut keys in proptest::collection::vec(proptest::collection::vec(any_value(), 0..4), 2..60),
        ) {
            keys.sort();
            let prefixes: Vec<u64> =
                keys.iter().map(|k| order_prefix(k.iter().map(Cow::Borrowed))).collect();
            for (pair, keys) in prefixes.windows(2).zip(keys.windows(2)) {
                proptest::prop_assert!(pair[0] <= pair[1], "{:?}", keys);
            }
        }

        #[test]
        fn sorted_elements_sort_any_keys_as_their_values_sort(
            parts in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any_value(), 1..3), 0..12),
                1..5,
            ),
        ) {
            let element = |key: &Vec<Value>, part: usize| Element {
                key: key.clone(),
                data: None,
                comment: Some(format!("part {part}")),
            };
            let parts: Vec<Vec<Element>> = parts
                .iter()
                .enumerate()
                .map(|(p, keys)| keys.iter().map(|k| element(k, p)).collect())
                .collect();
            let stored = packed_in_set_s(&parts[1..], None);
            let sorted: Vec<Element> = SortedElements::new(&parts[0], &stored, "s").collect();
            let mut in_part_order: Vec<Element> =
                PartOrderElements::new(&parts[0], stored.iter(), "s", |_| true).collect();
            in_part_order.sort_by(|a, b| a.key.cmp(&b.key));
            proptest::prop_assert_eq!(&in_part_order, &sorted);
            proptest::prop_assert_eq!(sorted, sorted_by_key_first_kept(&parts));
        }
    }
}
