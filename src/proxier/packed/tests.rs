use super::*;
use std::borrow::Cow;

use ipnet::{Ipv4Net, Ipv6Net};

use super::elements::order_prefix;
use crate::nft::model::{AddrType, CtState, CtStatus, DataType, Rule, Stmt, Verdict};

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
    let stored = PackedFragment::pack(&fragment, |s| Arc::new(s.clone()), &mut SetNames::default());
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
    let none: Vec<Element> = PartOrderElements::new(&[], stored.iter(), "none", |_| true).collect();
    assert_eq!(none, Vec::new());
}

/// Five parts of elements in set `s` (the first unpacked, the others packed, each also
/// holding an element of another set): keys of one to three values of every kind, part
/// `p` holding the keys of indices i·(p+3) mod 60, so parts repeat keys and share them,
/// each with its own data.
fn parts_sharing_keys() -> (Vec<Vec<Element>>, Vec<PackedFragment>) {
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
fn packed_in_set_s(parts: &[Vec<Element>], other: Option<Element>) -> Vec<PackedFragment> {
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
            PackedFragment::pack(&fragment, |s| Arc::new(s.clone()), &mut SetNames::default())
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
