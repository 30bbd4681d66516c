//! The kernel's `jhash` expression computed in user space: the same number the kernel draws
//! for `jhash <fields> mod M seed S offset O`, so a planner can tell which slot a packet takes
//! and a tool can read a programmed map as the kernel will use it.
//!
//! The kernel hashes the fields as they sit in its registers: each field starts on a 4-byte
//! boundary and the padding is zero (addresses and ports in network order, `meta l4proto` as
//! one byte). `jhash` reads that buffer in 32-bit words of the CPU's byte order; this follows a
//! little-endian kernel, as on x86-64 and arm64.

use super::model::Value;

/// Bob Jenkins' lookup3 `hashlittle`, as the kernel's `jhash(key, length, initval)`.
pub fn jhash(key: &[u8], initval: u32) -> u32 {
    const JHASH_INITVAL: u32 = 0xdead_beef;
    let mut a = JHASH_INITVAL
        .wrapping_add(key.len() as u32)
        .wrapping_add(initval);
    let (mut b, mut c) = (a, a);
    let word = |k: &[u8]| {
        let mut w = [0u8; 4];
        w[..k.len()].copy_from_slice(k);
        u32::from_le_bytes(w)
    };
    let mut rest = key;
    while rest.len() > 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    if rest.is_empty() {
        return c;
    }
    // The tail adds bytes as a little-endian word would hold them, missing bytes zero.
    a = a.wrapping_add(word(&rest[..rest.len().min(4)]));
    if rest.len() > 4 {
        b = b.wrapping_add(word(&rest[4..rest.len().min(8)]));
    }
    if rest.len() > 8 {
        c = c.wrapping_add(word(&rest[8..]));
    }
    final_mix(&mut a, &mut b, &mut c);
    c
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn final_mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// `hash mod modulus` as the kernel takes it (`reciprocal_scale`: the high bits, not `%`).
pub fn scale(hash: u32, modulus: u32) -> u32 {
    ((u64::from(hash) * u64::from(modulus)) >> 32) as u32
}

/// The register image of `values` (one per hashed field): each value in network order,
/// padded with zeros to 4 bytes. `None` if a value cannot be a hashed field.
pub(crate) fn fields_bytes(values: &[Value]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for v in values {
        match v {
            Value::Ipv4(a) => out.extend(a.octets()),
            Value::Ipv6(a) => out.extend(a.octets()),
            Value::Port(p) => out.extend(p.to_be_bytes()),
            Value::Proto(p) => out.push(*p),
            _ => return None,
        }
        out.resize(out.len().div_ceil(4) * 4, 0);
    }
    Some(out)
}

/// What `jhash <fields> mod modulus seed seed offset offset` yields for a packet whose
/// fields hold `values`.
pub fn draw(values: &[Value], seed: u32, modulus: u32, offset: u32) -> Option<u32> {
    let bytes = fields_bytes(values)?;
    Some(scale(jhash(&bytes, seed), modulus).wrapping_add(offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    // Published test values of lookup3.c's `hashlittle` (driver5).
    #[test]
    fn jhash_matches_lookup3_reference_values() {
        assert_eq!(jhash(b"", 0), 0xdead_beef);
        assert_eq!(jhash(b"", 0xdead_beef), 0xbd5b_7dde);
        assert_eq!(jhash(b"Four score and seven years ago", 0), 0x1777_0551);
        assert_eq!(jhash(b"Four score and seven years ago", 1), 0xcd62_8161);
    }

    #[test]
    fn scaling_takes_the_high_bits_as_the_kernel_does() {
        assert_eq!(scale(u32::MAX, 65536), 65535);
        assert_eq!(scale(0x0001_ffff, 65536), 1);
        assert_eq!(scale(0x8000_0000, 10), 5);
    }

    #[test]
    fn fields_are_padded_to_register_words() {
        let bytes = fields_bytes(&[
            Value::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
            Value::Port(80),
            Value::Proto(6),
        ])
        .unwrap();
        assert_eq!(bytes, vec![10, 0, 0, 1, 0, 80, 0, 0, 6, 0, 0, 0]);
        assert_eq!(fields_bytes(&[Value::Mark(1)]), None);
    }
}
