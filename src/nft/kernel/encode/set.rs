//! Sets and maps on the wire: their attributes and the userdata nft reads back, anonymous
//! verdict maps, and element lists (ranges of interval sets, split to fit one attribute).

use std::borrow::Borrow;

use super::super::decode;
use super::super::dump::nfproto;
use super::super::lower::{AnonMap, key_bytes, value_bytes, write_key};
use super::super::sys::*;
use super::{
    EncodeError, Msg, NLM_F_CREATE, data_value, udata_string, verdict_attrs, write_udata_string,
};
use crate::netlink::attr::AttrWriter;
use crate::nft::model::{DataType, Element, MapData, Set, Value};
use crate::nft::transaction::TableRef;

/// Keeps each element list well under the 64 KiB limit of one nested attribute.
const MAX_ELEMENT_BYTES: usize = 48 * 1024;

fn udata_u32(kind: u8, value: u32) -> Vec<u8> {
    let mut v = vec![kind, 4];
    v.extend_from_slice(&value.to_ne_bytes());
    v
}

/// Udata TLV holding other TLVs.
fn udata_nest(kind: u8, inner: &[u8]) -> Vec<u8> {
    let mut v = vec![kind, inner.len() as u8];
    v.extend_from_slice(inner);
    v
}

// Set udata kinds (libnftnl's NFTNL_UDATA_SET_*).
const UDATA_SET_KEY_BYTEORDER: u8 = 0;
const UDATA_SET_DATA_BYTEORDER: u8 = 1;
const UDATA_SET_KEY_TYPEOF: u8 = 3;
const UDATA_SET_DATA_TYPEOF: u8 = 4;
const UDATA_SET_DATA_INTERVAL: u8 = 6;
// Inside a typeof TLV: the expression's kind, then its own udata.
const UDATA_TYPEOF_EXPR: u8 = 0;
const UDATA_TYPEOF_DATA: u8 = 1;

/// The userdata of a set whose key is or contains a plain integer, the way nft writes it for
/// `typeof [ip daddr . …] numgen random mod 1 : <data expressions>`. A bare `integer` has no size in
/// nft's type system, so without the `typeof` description `nft list` prints `type 0`, which
/// nft cannot read back: an operator's `nft list ruleset > f; nft -f f` would fail.
pub(super) fn typeof_udata(set: &Set) -> Vec<u8> {
    let mut udata = udata_u32(UDATA_SET_KEY_BYTEORDER, key_byteorder(&set.key));
    if !set.data.is_empty() {
        udata.extend(udata_u32(
            UDATA_SET_DATA_BYTEORDER,
            data_byteorder(&set.data),
        ));
    }
    udata.extend(udata_nest(UDATA_SET_KEY_TYPEOF, &typeof_expr(&set.key)));
    if !set.data.is_empty() {
        udata.extend(udata_nest(UDATA_SET_DATA_TYPEOF, &typeof_expr(&set.data)));
        udata.extend(udata_u32(UDATA_SET_DATA_INTERVAL, 0));
    }
    udata
}

/// Byte order nft records for map data given by expressions: host for meta keys and
/// numgen, big endian for header fields, none for concatenations and verdicts.
fn data_byteorder(data: &[DataType]) -> u32 {
    match data {
        [DataType::Mark | DataType::Integer | DataType::IfName | DataType::InetProto] => 1,
        [DataType::Ipv4Addr | DataType::Ipv6Addr | DataType::InetService] => 2,
        _ => 0,
    }
}

/// nft's description of the expression a key or data part is typed after, the expressions
/// `render` writes in its `typeof` line: kind ids are nft's `enum expr_types` (stored in the
/// kernel, so fixed across nft versions), fields are nft's protocol and meta key numbers.
fn typeof_expr(types: &[DataType]) -> Vec<u8> {
    const EXPR_VERDICT: u32 = 1;
    const EXPR_PAYLOAD: u32 = 7;
    const EXPR_META: u32 = 9;
    const EXPR_CONCAT: u32 = 13;
    const EXPR_NUMGEN: u32 = 23;
    let (kind, data) = match types {
        [DataType::Integer] => {
            // numgen random mod 1 offset 0
            let mut d = udata_u32(0, NFT_NG_RANDOM);
            d.extend(udata_u32(1, 1));
            d.extend(udata_u32(2, 0));
            (EXPR_NUMGEN, d)
        }
        [DataType::Verdict] => (EXPR_VERDICT, Vec::new()),
        [t @ (DataType::Ipv4Addr | DataType::Ipv6Addr | DataType::InetService)] => {
            // (protocol description, field): ip daddr, ip6 daddr, th dport
            let (desc, field) = match t {
                DataType::Ipv4Addr => (12, 12),
                DataType::Ipv6Addr => (13, 9),
                _ => (11, 2),
            };
            let mut d = udata_u32(0, desc);
            d.extend(udata_u32(1, field));
            (EXPR_PAYLOAD, d)
        }
        [t @ (DataType::InetProto | DataType::Mark | DataType::IfName)] => {
            let key = match t {
                DataType::InetProto => NFT_META_L4PROTO,
                DataType::Mark => NFT_META_MARK,
                _ => NFT_META_IIFNAME,
            };
            (EXPR_META, udata_u32(0, key))
        }
        parts => {
            let mut d = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                d.extend(udata_nest(
                    i as u8,
                    &typeof_expr(std::slice::from_ref(part)),
                ));
            }
            (EXPR_CONCAT, d)
        }
    };
    let mut v = udata_u32(UDATA_TYPEOF_EXPR, kind);
    v.extend(udata_nest(UDATA_TYPEOF_DATA, &data));
    v
}

/// nft's datatype ids (the inverse of `decode::data_types`).
fn type_id(t: DataType) -> u32 {
    match t {
        DataType::Verdict => 1,
        DataType::Integer => 4,
        DataType::Ipv4Addr => 7,
        DataType::Ipv6Addr => 8,
        DataType::InetProto => 12,
        DataType::InetService => 13,
        DataType::Mark => 19,
        DataType::IfName => 41,
    }
}

fn type_len(t: DataType) -> u32 {
    decode::type_len(t) as u32
}

/// nft's key byte order in set userdata: 1 host, 2 big endian, 0 for concatenations.
fn key_byteorder(key: &[DataType]) -> u32 {
    match key {
        [DataType::Mark | DataType::Integer | DataType::IfName] => 1,
        [_] => 2,
        _ => 0,
    }
}

fn key_len(key: &[DataType]) -> u32 {
    if key.len() == 1 {
        type_len(key[0])
    } else {
        key.iter().map(|t| type_len(*t).div_ceil(4) * 4).sum()
    }
}

pub(super) fn set_attrs(table: &str, set: &Set, id: u32) -> AttrWriter {
    let mut flags = 0;
    if !set.data.is_empty() {
        flags |= NFT_SET_MAP;
    }
    if set.interval {
        flags |= NFT_SET_INTERVAL;
        if set.key.len() > 1 {
            flags |= NFT_SET_CONCAT;
        }
    }
    if set.timeout.is_some() {
        flags |= NFT_SET_TIMEOUT;
    }
    if set.dynamic {
        flags |= NFT_SET_EVAL;
    }
    let key_type = set.key.iter().fold(0u32, |acc, t| (acc << 6) | type_id(*t));
    let mut w = AttrWriter::new();
    w.string(NFTA_SET_TABLE, table)
        .string(NFTA_SET_NAME, &set.name)
        .be32(NFTA_SET_FLAGS, flags);
    w.be32(NFTA_SET_KEY_TYPE, key_type)
        .be32(NFTA_SET_KEY_LEN, key_len(&set.key));
    if set.data == [DataType::Verdict] {
        w.be32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT)
            .be32(NFTA_SET_DATA_LEN, 0);
    } else if !set.data.is_empty() {
        let data_type = set
            .data
            .iter()
            .fold(0u32, |acc, t| (acc << 6) | type_id(*t));
        w.be32(NFTA_SET_DATA_TYPE, data_type)
            .be32(NFTA_SET_DATA_LEN, key_len(&set.data));
    }
    w.be32(NFTA_SET_ID, id);
    if let Some(secs) = set.timeout {
        w.be64(NFTA_SET_TIMEOUT, u64::from(secs) * 1000);
    }
    let concat = set.interval && set.key.len() > 1;
    if concat || set.size.is_some() {
        w.nested(NFTA_SET_DESC, |w| {
            if let Some(size) = set.size {
                w.be32(NFTA_SET_DESC_SIZE, size);
            }
            if concat {
                w.nested(NFTA_SET_DESC_CONCAT, |w| {
                    for t in &set.key {
                        w.nested(NFTA_LIST_ELEM, |w| {
                            w.be32(NFTA_SET_FIELD_LEN, type_len(*t));
                        });
                    }
                });
            }
        });
    }
    let mut udata = if set.key.contains(&DataType::Integer) {
        typeof_udata(set)
    } else {
        let mut udata = udata_u32(0, key_byteorder(&set.key));
        if !set.data.is_empty() {
            udata.extend(udata_u32(1, 0));
        }
        udata
    };
    if let Some(c) = &set.comment {
        udata.extend(udata_string(7, c));
    }
    w.bytes(NFTA_SET_USERDATA, &udata);
    w
}

pub(super) fn anon_map_messages(
    table: &TableRef,
    anon: &AnonMap,
    id: u32,
) -> Result<Vec<Msg>, EncodeError> {
    let family = nfproto(table.family);
    let mut w = AttrWriter::new();
    let flags = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_MAP;
    let key_type = anon
        .key
        .iter()
        .fold(0u32, |acc, t| (acc << 6) | type_id(*t));
    w.string(NFTA_SET_TABLE, &table.name)
        .string(NFTA_SET_NAME, "__map%d")
        .be32(NFTA_SET_FLAGS, flags);
    w.be32(NFTA_SET_KEY_TYPE, key_type)
        .be32(NFTA_SET_KEY_LEN, key_len(&anon.key));
    w.be32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT)
        .be32(NFTA_SET_DATA_LEN, 0);
    w.be32(NFTA_SET_ID, id);
    w.nested(NFTA_SET_DESC, |w| {
        w.be32(NFTA_SET_DESC_SIZE, anon.elements.len() as u32);
    });
    let mut udata = udata_u32(0, key_byteorder(&anon.key));
    udata.extend(udata_u32(1, 0));
    w.bytes(NFTA_SET_USERDATA, &udata);
    let mut out = vec![Msg {
        msg: NFT_MSG_NEWSET,
        flags: NLM_F_CREATE,
        family,
        attrs: w.buf,
    }];
    let elements = anon.elements.iter().map(|(k, v)| Element {
        key: k.clone(),
        data: Some(MapData::Verdict(v.clone())),
        comment: None,
    });
    element_messages(
        &table.name,
        "__map%d",
        Some(id),
        false,
        elements,
        &mut |attrs| {
            out.push(Msg {
                msg: NFT_MSG_NEWSETELEM,
                flags: NLM_F_CREATE,
                family,
                attrs,
            })
        },
    )?;
    Ok(out)
}

/// The kernel elements of one model element of an interval set: a range is a start element
/// and an INTERVAL_END element one past its last address (none when the range reaches the top).
fn interval_elements(e: &Element) -> Vec<(Vec<u8>, Option<Vec<u8>>, u32)> {
    if e.key.len() > 1 {
        // Concatenated ranges (pipapo) carry their inclusive end in the same element.
        let (mut start, mut end) = (Vec::new(), Vec::new());
        for v in &e.key {
            let (a, b) = match v {
                Value::Ipv4Net(n) => (
                    n.network().octets().to_vec(),
                    n.broadcast().octets().to_vec(),
                ),
                Value::Ipv6Net(n) => (
                    n.network().octets().to_vec(),
                    n.broadcast().octets().to_vec(),
                ),
                other => {
                    let b = value_bytes(other);
                    (b.clone(), b)
                }
            };
            for (out, mut part) in [(&mut start, a), (&mut end, b)] {
                part.resize(part.len().div_ceil(4) * 4, 0);
                out.extend(part);
            }
        }
        return vec![(start, Some(end), 0)];
    }
    let range = match e.key.as_slice() {
        [Value::IntRange { first, last }] => {
            Some((first.to_be_bytes().to_vec(), last.to_be_bytes().to_vec()))
        }
        [Value::Ipv4(a)] => Some((a.octets().to_vec(), a.octets().to_vec())),
        [Value::Ipv6(a)] => Some((a.octets().to_vec(), a.octets().to_vec())),
        [Value::Ipv4Net(n)] => Some((
            n.network().octets().to_vec(),
            n.broadcast().octets().to_vec(),
        )),
        [Value::Ipv6Net(n)] => Some((
            n.network().octets().to_vec(),
            n.broadcast().octets().to_vec(),
        )),
        _ => None,
    };
    match range {
        None => vec![(key_bytes(&e.key), None, 0)],
        Some((start, last)) => {
            let mut out = vec![(start, None, 0)];
            if let Some(end) = increment(&last) {
                out.push((end, None, NFT_SET_ELEM_INTERVAL_END));
            }
            out
        }
    }
}

fn increment(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut v = bytes.to_vec();
    for b in v.iter_mut().rev() {
        if *b == 0xff {
            *b = 0;
        } else {
            *b += 1;
            return Some(v);
        }
    }
    None
}

/// NEWSETELEM/DELSETELEM attribute sets for `elements`, each handed to `emit` as soon as it is
/// full, split to respect the attribute size limit. A plain address in an interval set is the
/// range of that one address. Where a message ends depends only on the elements before it, so
/// elements streamed in (unpacked one at a time) make the same messages as a list of them.
pub(super) fn element_messages<E: Borrow<Element>>(
    table: &str,
    set: &str,
    set_id: Option<u32>,
    interval: bool,
    elements: impl IntoIterator<Item = E>,
    emit: &mut dyn FnMut(Vec<u8>),
) -> Result<(), EncodeError> {
    let mut chunk = AttrWriter::new();
    let mut flush = |chunk: &mut AttrWriter| {
        if chunk.buf.is_empty() {
            return;
        }
        let mut w = AttrWriter::new();
        w.string(NFTA_SET_ELEM_LIST_TABLE, table)
            .string(NFTA_SET_ELEM_LIST_SET, set);
        if let Some(id) = set_id {
            w.be32(NFTA_SET_ELEM_LIST_SET_ID, id);
        }
        let list = std::mem::take(&mut chunk.buf);
        let start = w.buf.len();
        w.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |w| {
            w.buf.extend_from_slice(&list)
        });
        debug_assert!(w.buf.len() - start < 65536);
        emit(w.buf);
    };
    for e in elements {
        let e = e.borrow();
        if e.key.is_empty() {
            return Err(EncodeError::Element {
                set: set.to_owned(),
                reason: "an element without a key".into(),
            });
        }
        if !interval {
            // Nearly every element: written straight into the message.
            chunk.nested(NFTA_LIST_ELEM, |w| {
                w.nested(NFTA_SET_ELEM_KEY, |w| {
                    w.bytes_with(NFTA_DATA_VALUE, |out| write_key(out, &e.key));
                });
                element_data_and_comment(w, e);
            });
        } else {
            for (i, (key, key_end, flags)) in interval_elements(e).into_iter().enumerate() {
                chunk.nested(NFTA_LIST_ELEM, |w| {
                    if flags != 0 {
                        w.be32(NFTA_SET_ELEM_FLAGS, flags);
                    }
                    data_value(w, NFTA_SET_ELEM_KEY, &key);
                    if let Some(end) = &key_end {
                        data_value(w, NFTA_SET_ELEM_KEY_END, end);
                    }
                    if i == 0 {
                        element_data_and_comment(w, e);
                    }
                });
            }
        }
        if chunk.buf.len() > MAX_ELEMENT_BYTES {
            flush(&mut chunk);
        }
    }
    flush(&mut chunk);
    Ok(())
}

/// An element's data (a verdict or values) and comment attributes.
fn element_data_and_comment(w: &mut AttrWriter, e: &Element) {
    match &e.data {
        Some(MapData::Verdict(v)) => {
            w.nested(NFTA_SET_ELEM_DATA, |w| verdict_attrs(w, v));
        }
        Some(MapData::Values(values)) => {
            w.nested(NFTA_SET_ELEM_DATA, |w| {
                w.bytes_with(NFTA_DATA_VALUE, |out| write_key(out, values));
            });
        }
        None => {}
    }
    if let Some(c) = &e.comment {
        w.bytes_with(NFTA_SET_ELEM_USERDATA, |out| write_udata_string(out, 0, c));
    }
}
