//! Values read back from register bytes: selector widths, prefixes and addresses, in the
//! model's types.

use super::*;

pub(super) fn map_ref(name: &str, info: &SetInfo) -> MapRef {
    match &info.anonymous {
        Some(elems) => MapRef::Anonymous(elems.clone()),
        None => MapRef::Named(name.to_owned()),
    }
}

pub(super) fn ne32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

pub(super) fn is_addr(sel: Selector) -> bool {
    matches!(
        sel,
        Selector::IpSaddr | Selector::IpDaddr | Selector::Ip6Saddr | Selector::Ip6Daddr
    )
}

/// Bytes a selector occupies in a register.
pub(crate) fn full_len(sel: Selector) -> u32 {
    match sel {
        Selector::IpSaddr | Selector::IpDaddr => 4,
        Selector::Ip6Saddr | Selector::Ip6Daddr => 16,
        Selector::ThSport | Selector::ThDport => 2,
        Selector::L4Proto | Selector::NfProto => 1,
        Selector::Mark
        | Selector::FibSaddrType
        | Selector::FibDaddrType
        | Selector::CtState
        | Selector::CtStatus => 4,
        Selector::IifName | Selector::OifName => 16,
    }
}

/// The number of leading one bits of a contiguous netmask.
pub(super) fn prefix_len(mask: &[u8]) -> Option<u32> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let expect = (0..mask.len() * 8).map(|i| {
        let bit = (mask[i / 8] >> (7 - i % 8)) & 1;
        bit == 1
    });
    expect
        .enumerate()
        .all(|(i, set)| set == ((i as u32) < ones))
        .then_some(ones)
}

/// `addr/prefix` from the first bytes of an address; a full-length prefix is a plain address.
pub(super) fn prefix_value(sel: Selector, data: &[u8], prefix: u32) -> Option<Value> {
    match sel {
        Selector::IpSaddr | Selector::IpDaddr => {
            let mut b = [0u8; 4];
            b.get_mut(..data.len())?.copy_from_slice(data);
            let a = Ipv4Addr::from(b);
            if prefix == 32 {
                return Some(Value::Ipv4(a));
            }
            Some(Value::Ipv4Net(ipnet::Ipv4Net::new(a, prefix as u8).ok()?))
        }
        Selector::Ip6Saddr | Selector::Ip6Daddr => {
            let mut b = [0u8; 16];
            b.get_mut(..data.len())?.copy_from_slice(data);
            let a = Ipv6Addr::from(b);
            if prefix == 128 {
                return Some(Value::Ipv6(a));
            }
            Some(Value::Ipv6Net(ipnet::Ipv6Net::new(a, prefix as u8).ok()?))
        }
        _ => None,
    }
}

pub(super) fn selector_value(sel: Selector, data: &[u8]) -> Option<Value> {
    Some(match sel {
        Selector::IpSaddr | Selector::IpDaddr => value(DataType::Ipv4Addr, data)?,
        Selector::Ip6Saddr | Selector::Ip6Daddr => value(DataType::Ipv6Addr, data)?,
        Selector::ThSport | Selector::ThDport => value(DataType::InetService, data)?,
        Selector::L4Proto => Value::Proto(*data.first()?),
        Selector::NfProto => Value::NfProto(*data.first()?),
        Selector::Mark => Value::Mark(ne32(data)?),
        Selector::IifName | Selector::OifName => Value::IfName(ifname(data)),
        Selector::FibSaddrType | Selector::FibDaddrType => Value::AddrType(match ne32(data)? {
            1 => AddrType::Unicast,
            2 => AddrType::Local,
            3 => AddrType::Broadcast,
            5 => AddrType::Multicast,
            _ => return None,
        }),
        Selector::CtState => Value::CtState(CtState(ne32(data)?)),
        Selector::CtStatus => Value::CtStatus(CtStatus(ne32(data)?)),
    })
}
