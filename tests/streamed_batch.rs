//! A first sync that streams each set's elements from the planner into the batch sends the
//! very bytes that encoding the whole planned tables sends.

#[path = "../benchmark/src/synthetic.rs"]
#[allow(dead_code)]
mod synthetic;

use kubenft::nft::kernel::apply::batch_bytes;
use kubenft::nft::model::Table;
use kubenft::nft::transaction::{ElementStream, Op, SetElements, TableRef};
use kubenft::proxier::Planner;
use kubenft::sync::{creation_transaction, reconcile_transaction};

/// The batch of a first sync of `whole` (every set filled), and of the planner's tables
/// without elements, each set's elements streamed in while it is encoded.
fn both_batches(planner: &Planner, whole: &[Table], heads: &[Table]) -> (Vec<u8>, Vec<u8>) {
    let filled = batch_bytes(&reconcile_transaction(&[], whole, Some(7)), None).unwrap();
    let tx = creation_transaction(heads, |t| planner.sets_with_elements(t.family), Some(7));
    let mut fill =
        |t: &TableRef, set: &str| -> ElementStream<'_> { planner.elements(t.family, set) };
    let streamed = batch_bytes(&tx, Some(&mut fill)).unwrap();
    (filled, streamed)
}

#[test]
fn a_large_cluster_streamed_set_by_set_encodes_to_the_batch_of_its_whole_tables() {
    // 4,000 services of 1 to 40 endpoints (pick sets of several sizes), a tenth of them
    // NodePort services with a Local policy (chains and endpoint maps of their own).
    synthetic::set_nodeport_percent(10, 4000).unwrap();
    let mut state = synthetic::cluster(3000, 10);
    for s in 3000..4000 {
        synthetic::add_service(&mut state, s, 1 + s % 40);
    }
    let config = synthetic::config();
    let mut planner = Planner::new();
    let whole = planner.plan(&state, &config);
    let heads = planner.plan_without_elements(&state, &config);

    let largest = whole
        .iter()
        .flat_map(|t| t.sets.values())
        .map(|s| s.elements.len())
        .max()
        .unwrap();
    assert!(largest > 30_000, "largest set: {largest} elements");
    let filled_sets = reconcile_transaction(&[], &whole, None)
        .ops
        .iter()
        .filter(|op| matches!(op, Op::AddElements { .. }))
        .count();
    assert!(filled_sets > 10, "{filled_sets} sets filled");
    let (filled, streamed) = both_batches(&planner, &whole, &heads);
    // Megabytes of elements: hundreds of full element messages, each ended by the element
    // streamed in after it.
    assert!(filled.len() > 5 << 20, "{} bytes", filled.len());
    let first_difference = filled.iter().zip(&streamed).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "the streamed batch differs");
    assert_eq!(filled.len(), streamed.len());
}
