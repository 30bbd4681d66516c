//! An order-independent digest of a set's elements: their count and the sum of a 128-bit hash
//! of each. Adding or removing an element updates it in constant time, so a transaction's
//! element operations tell what the digest of a set becomes without rehashing the set.
//!
//! The hash reads a fixed, versioned encoding of the element (not `std::hash`, whose output
//! may change between builds): a digest written by one kubenft is checked by the next. It
//! reads a comment as the kernel stores it (`render::sanitize_comment`), so a planned element
//! and the same element read back have the same digest.

use std::cell::RefCell;

use sha2::{Digest, Sha256};

use super::model::{AddrType, Element, MapData, Value, Verdict};
use super::render::sanitize_comment;

/// The elements of a set, summed: equal digests mean equal elements (to 2⁻¹²⁸ for sets that
/// differ by accident; the hash is SHA-256, so also for sets made to differ on purpose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct SetDigest {
    pub elements: u64,
    pub sum: u128,
}

impl SetDigest {
    pub fn of<'a>(elements: impl IntoIterator<Item = &'a Element>) -> SetDigest {
        let mut d = SetDigest::default();
        for e in elements {
            d.add(e);
        }
        d
    }

    pub fn add(&mut self, e: &Element) {
        self.elements = self.elements.wrapping_add(1);
        self.sum = self.sum.wrapping_add(element_hash(e));
    }

    pub fn remove(&mut self, e: &Element) {
        self.elements = self.elements.wrapping_sub(1);
        self.sum = self.sum.wrapping_sub(element_hash(e));
    }

    /// Adds the element `hash` came from (`ElementEncoder::hash`).
    pub fn add_hash(&mut self, hash: u128) {
        self.elements = self.elements.wrapping_add(1);
        self.sum = self.sum.wrapping_add(hash);
    }

    /// Removes the element `hash` came from.
    pub fn remove_hash(&mut self, hash: u128) {
        self.elements = self.elements.wrapping_sub(1);
        self.sum = self.sum.wrapping_sub(hash);
    }
}

fn element_hash(e: &Element) -> u128 {
    thread_local! {
        // One encoding buffer per thread: a first sync hashes every element it sends.
        static ENCODER: RefCell<ElementEncoder> = RefCell::default();
    }
    ENCODER.with_borrow_mut(|encoder| {
        encoder.key(e.key.len());
        e.key.iter().for_each(|v| encoder.value(v));
        match &e.data {
            None => encoder.no_data(),
            Some(MapData::Verdict(v)) => encoder.verdict(v),
            Some(MapData::Values(values)) => {
                encoder.values(values.len());
                values.iter().for_each(|v| encoder.value(v));
            }
        }
        encoder.comment(e.comment.as_deref());
        encoder.hash()
    })
}

/// An element's hash, its encoding written part by part in the element's order (key, data,
/// comment), for elements held in another form than `Element` (the planner's packed ones).
///
/// Version 1 of the encoding: every part tagged, every variable-length part prefixed with its
/// length, so two different elements never encode alike. Changing it makes every stored digest
/// mismatch once (the sets are then read back), so keep it as it is.
#[derive(Debug, Default)]
pub struct ElementEncoder {
    bytes: Vec<u8>,
}

impl ElementEncoder {
    /// Starts an element whose key has `values` values.
    pub fn key(&mut self, values: usize) {
        self.bytes.clear();
        self.bytes.extend([1, values as u8]);
    }

    /// One value of the key or of the data.
    pub fn value(&mut self, v: &Value) {
        encode_value(&mut self.bytes, v);
    }

    pub fn no_data(&mut self) {
        self.bytes.push(0);
    }

    pub fn verdict(&mut self, v: &Verdict) {
        self.bytes.push(1);
        encode_verdict(&mut self.bytes, v);
    }

    /// Data of `values` values, each given by `value`.
    pub fn values(&mut self, values: usize) {
        self.bytes.extend([2, values as u8]);
    }

    /// The comment, read as the kernel stores it; ends the element.
    pub fn comment(&mut self, comment: Option<&str>) {
        match comment {
            None => self.bytes.push(0),
            Some(c) => {
                self.bytes.push(1);
                encode_str(&mut self.bytes, &sanitize_comment(c));
            }
        }
    }

    /// The first 128 bits of SHA-256 over the element's encoding.
    pub fn hash(&self) -> u128 {
        let hash = Sha256::digest(&self.bytes);
        let mut first = [0u8; 16];
        first.copy_from_slice(&hash[..16]);
        u128::from_be_bytes(first)
    }
}

fn encode_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u32).to_be_bytes());
    out.extend(s.as_bytes());
}

fn encode_verdict(out: &mut Vec<u8>, v: &Verdict) {
    match v {
        Verdict::Accept => out.push(1),
        Verdict::Drop => out.push(2),
        Verdict::Continue => out.push(3),
        Verdict::Return => out.push(4),
        Verdict::Jump(chain) => {
            out.push(5);
            encode_str(out, chain);
        }
        Verdict::Goto(chain) => {
            out.push(6);
            encode_str(out, chain);
        }
    }
}

fn encode_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Ipv4(a) => {
            out.push(1);
            out.extend(a.octets());
        }
        Value::Ipv6(a) => {
            out.push(2);
            out.extend(a.octets());
        }
        Value::Ipv4Net(n) => {
            out.push(3);
            out.extend(n.addr().octets());
            out.push(n.prefix_len());
        }
        Value::Ipv6Net(n) => {
            out.push(4);
            out.extend(n.addr().octets());
            out.push(n.prefix_len());
        }
        Value::Proto(p) => out.extend([5, *p]),
        Value::Port(p) => {
            out.push(6);
            out.extend(p.to_be_bytes());
        }
        Value::Mark(m) => {
            out.push(7);
            out.extend(m.to_be_bytes());
        }
        Value::NfProto(p) => out.extend([8, *p]),
        Value::IfName(name) => {
            out.push(9);
            encode_str(out, name);
        }
        Value::AddrType(t) => out.extend([
            10,
            match t {
                AddrType::Unicast => 1,
                AddrType::Local => 2,
                AddrType::Broadcast => 3,
                AddrType::Multicast => 5,
            },
        ]),
        Value::CtState(s) => {
            out.push(11);
            out.extend(s.0.to_be_bytes());
        }
        Value::CtStatus(s) => {
            out.push(12);
            out.extend(s.0.to_be_bytes());
        }
        Value::IntRange { first, last } => {
            out.push(13);
            out.extend(first.to_be_bytes());
            out.extend(last.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn slot(last_octet: u8, slot: u32, comment: &str) -> Element {
        Element {
            key: vec![
                Value::Ipv4(Ipv4Addr::new(10, 96, 0, 1)),
                Value::Proto(6),
                Value::Port(80),
                Value::Mark(slot),
            ],
            data: Some(MapData::Values(vec![
                Value::Ipv4(Ipv4Addr::new(10, 1, 0, last_octet)),
                Value::Port(8080),
            ])),
            comment: Some(comment.into()),
        }
    }

    #[test]
    fn the_digest_does_not_depend_on_the_order_of_the_elements() {
        let a = [slot(1, 0, "a"), slot(2, 1, "a"), slot(3, 2, "a")];
        let b = [slot(3, 2, "a"), slot(1, 0, "a"), slot(2, 1, "a")];
        assert_eq!(SetDigest::of(&a), SetDigest::of(&b));
        assert_eq!(SetDigest::of(&a).elements, 3);
    }

    #[test]
    fn removing_what_was_added_restores_the_digest() {
        let mut d = SetDigest::of(&[slot(1, 0, "a")]);
        let before = d;
        d.add(&slot(2, 1, "a"));
        assert_ne!(d, before);
        d.remove(&slot(2, 1, "a"));
        assert_eq!(d, before);
    }

    #[test]
    fn key_data_and_comment_each_change_the_digest() {
        let base = SetDigest::of(&[slot(1, 0, "a")]);
        for other in [slot(1, 1, "a"), slot(2, 0, "a"), slot(1, 0, "b")] {
            assert_ne!(
                SetDigest::of(std::slice::from_ref(&other)),
                base,
                "{other:?}"
            );
        }
        let verdicts = |v: Verdict| {
            SetDigest::of(&[Element {
                key: vec![Value::Port(80)],
                data: Some(MapData::Verdict(v)),
                comment: None,
            }])
        };
        assert_ne!(
            verdicts(Verdict::Jump("a".into())),
            verdicts(Verdict::Goto("a".into()))
        );
    }

    #[test]
    fn the_encoding_is_fixed() {
        // A digest stored by one build is compared by the next: this value must not change.
        assert_eq!(
            SetDigest::of(&[slot(1, 0, "default/web:http")]).sum,
            0xd251_7ef7_dfa6_57a7_ef61_1784_0a30_720b
        );
    }
}
