//! The byte format of a packed element: its key, its data (none, a verdict or values) and its
//! comment, each value tagged and its fields written as they are.
//!
//! Guarantees: reading gives back the very element that was written (a net keeps its host
//! bits); equal keys pack to equal bytes, so where only equality matters packed keys are
//! compared and hashed as bytes, never unpacked.

use ipnet::{Ipv4Net, Ipv6Net};

use crate::nft::model::{AddrType, CtState, CtStatus, Element, MapData, Value, Verdict};

pub(super) fn pack_element(out: &mut Vec<u8>, e: &Element, comments: &mut Vec<Box<str>>) {
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

pub(super) fn write_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

pub(super) fn read_varint(bytes: &mut &[u8]) -> usize {
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

pub(super) fn write_str(out: &mut Vec<u8>, s: &str) {
    write_varint(out, s.len());
    out.extend(s.as_bytes());
}

pub(super) fn write_key(out: &mut Vec<u8>, values: &[Value]) {
    write_varint(out, values.len());
    for v in values {
        write_value(out, v);
    }
}

pub(super) fn write_value(out: &mut Vec<u8>, v: &Value) {
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

pub(super) fn write_verdict(out: &mut Vec<u8>, v: &Verdict) {
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

pub(super) fn take<'a>(bytes: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, tail) = bytes.split_at(n);
    *bytes = tail;
    head
}

pub(super) fn take_array<const N: usize>(bytes: &mut &[u8]) -> [u8; N] {
    take(bytes, N).try_into().expect("N bytes")
}

pub(super) fn read_u32(bytes: &mut &[u8]) -> u32 {
    u32::from_le_bytes(take_array(bytes))
}

pub(super) fn take_str<'a>(bytes: &mut &'a [u8]) -> &'a [u8] {
    let n = read_varint(bytes);
    take(bytes, n)
}

pub(super) fn read_str(bytes: &mut &[u8]) -> String {
    String::from_utf8(take_str(bytes).to_vec()).expect("packed from a str")
}

pub(super) fn read_key(bytes: &mut &[u8]) -> Vec<Value> {
    let n = read_varint(bytes);
    (0..n).map(|_| read_value(bytes)).collect()
}

/// Past a packed key, without decoding it.
pub(super) fn skip_key(bytes: &mut &[u8]) {
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

pub(super) fn skip_verdict(bytes: &mut &[u8]) {
    if take(bytes, 1)[0] >= 4 {
        take_str(bytes);
    }
}

pub(super) fn read_value(bytes: &mut &[u8]) -> Value {
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

pub(super) fn read_verdict(bytes: &mut &[u8]) -> Verdict {
    match take(bytes, 1)[0] {
        0 => Verdict::Accept,
        1 => Verdict::Drop,
        2 => Verdict::Continue,
        3 => Verdict::Return,
        4 => Verdict::Jump(read_str(bytes)),
        _ => Verdict::Goto(read_str(bytes)),
    }
}

/// A value's tag in the packed form: its variant's place in `Value`'s declaration, so tags
/// sort as values do (`order_prefix` relies on it).
pub(super) fn value_tag(v: &Value) -> u8 {
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
