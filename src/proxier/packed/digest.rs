//! The digest of a set's elements across the skeleton and the stored fragments, found in one
//! walk without sorting or unpacking them.
//!
//! Guarantees: a set's digest equals that of the elements `SortedElements` hands out for it
//! (the first of equal keys in part order), as the assembled table holds them.

use crate::nft::digest::{ElementEncoder, SetDigest};
use crate::nft::model::Element;

use super::packing::write_key;
use super::{PackedFragment, next_packed};

/// The digest of each of `sets`: of the elements `SortedElements::new(unpacked(set), stored,
/// set)` hands out, found in one walk over the fragments and without sorting the elements. A
/// digest is a sum, so every element is added as it is read, and then the elements that are
/// not the first of equal keys in part order are taken out again: equal keys pack to equal
/// bytes, so only elements whose packed keys share a hash need comparing.
pub(in crate::proxier) fn digests_of<'a>(
    unpacked: impl Fn(&str) -> &'a [Element],
    stored: impl IntoIterator<Item = &'a PackedFragment>,
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
    let mut fragments: Vec<&PackedFragment> = Vec::new();
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
