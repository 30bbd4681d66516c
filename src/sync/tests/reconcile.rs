use crate::nft::fake::FakeKernel;
use crate::nft::model::{Chain, DataType, Element, Set, Value};
use crate::sync::*;

fn desired(ports: &[u16]) -> Table {
    let mut t = Table::new(Family::Ip, "kubenft");
    t.chains.insert("services".into(), Chain::new("services"));
    let elements = ports.iter().map(|p| Element::new(vec![Value::Port(*p)]));
    t.sets.insert(
        "ports".into(),
        Set::new("ports", vec![DataType::InetService]).with_elements(elements.collect()),
    );
    t
}

fn observe(kernel: &FakeKernel, family: Family) -> (TableRef, Observed) {
    let r = TableRef {
        family,
        name: "kubenft".into(),
    };
    let o = kernel
        .table(&r)
        .cloned()
        .map_or(Observed::Absent, Observed::Read);
    (r, o)
}

#[test]
fn reconciling_an_unchanged_kernel_sends_nothing() {
    let mut kernel = FakeKernel::new();
    kernel
        .apply(&reconcile_transaction(&[], &[desired(&[80, 443])], None))
        .unwrap();
    let tx = reconcile_transaction(
        &[observe(&kernel, Family::Ip)],
        &[desired(&[80, 443])],
        Some(7),
    );
    assert!(tx.ops.is_empty(), "{:?}", tx.ops);
    assert_eq!(tx.expected_generation, Some(7));
}

#[test]
fn a_family_no_longer_desired_is_deleted_and_others_are_diffed() {
    let mut kernel = FakeKernel::new();
    let mut v6 = desired(&[53]);
    v6.family = Family::Ip6;
    kernel
        .apply(&reconcile_transaction(&[], &[desired(&[80]), v6], None))
        .unwrap();
    let observed = [observe(&kernel, Family::Ip), observe(&kernel, Family::Ip6)];
    let tx = reconcile_transaction(&observed, &[desired(&[80, 8080])], None);
    kernel.apply(&tx).unwrap();
    assert_eq!(
        tx.ops.len(),
        2,
        "one element added, one table deleted: {:?}",
        tx.ops
    );
    assert!(
        kernel
            .table(&TableRef {
                family: Family::Ip6,
                name: "kubenft".into()
            })
            .is_none()
    );
    assert_eq!(
        kernel.table(&desired(&[]).table_ref()).unwrap().sets["ports"]
            .elements
            .len(),
        2
    );
}

#[test]
fn an_unreadable_table_is_replaced_in_the_same_transaction() {
    let mut kernel = FakeKernel::new();
    kernel
        .apply(&reconcile_transaction(&[], &[desired(&[80])], None))
        .unwrap();
    let r = desired(&[]).table_ref();
    let tx = reconcile_transaction(
        &[(r.clone(), Observed::Unreadable)],
        &[desired(&[443])],
        None,
    );
    assert!(matches!(tx.ops[1], Op::DeleteTable { .. }));
    kernel.apply(&tx).unwrap();
    let ports: Vec<_> = kernel.table(&r).unwrap().sets["ports"]
        .elements
        .iter()
        .map(|e| e.key.clone())
        .collect();
    assert_eq!(ports, vec![vec![Value::Port(443)]]);
}
