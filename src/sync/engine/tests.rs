use super::*;
use crate::nft::digest::SetDigest;
use crate::nft::fake::FakeKernel;
use crate::nft::model::{Chain, Element, Set};
use crate::nft::transaction::{ElementStream, Op, Transaction};
use crate::sync::records::{DIGEST_SET, DIGESTED_MIN_ELEMENTS};

/// The fake kernel with a generation counter, as `Kernel` needs.
#[derive(Default)]
struct Fake {
    kernel: FakeKernel,
    generation: u32,
    applied: Vec<usize>,
    reads: usize,
    /// Elements read back, of every set.
    elements_read: usize,
    fail_next: bool,
}

impl Kernel for Fake {
    fn generation(&mut self) -> Result<u32, KernelError> {
        Ok(self.generation)
    }
    fn read_table(
        &mut self,
        family: Family,
        name: &str,
        unread: &BTreeSet<String>,
    ) -> Result<Observed, KernelError> {
        self.reads += 1;
        let t = TableRef {
            family,
            name: name.into(),
        };
        Ok(self.kernel.table(&t).map_or(Observed::Absent, |t| {
            let mut t = crate::nft::kernel::canonical(t);
            for (name, set) in &mut t.sets {
                if unread.contains(name) {
                    set.elements.clear();
                } else {
                    self.elements_read += set.elements.len();
                }
            }
            Observed::Read(t)
        }))
    }
    fn read_set(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
    ) -> Result<Option<Set>, KernelError> {
        let t = TableRef {
            family,
            name: table.into(),
        };
        let set = self.kernel.table(&t).and_then(|t| t.sets.get(set)).cloned();
        self.elements_read += set.as_ref().map_or(0, |s| s.elements.len());
        Ok(set)
    }
    fn apply(&mut self, tx: &Transaction) -> Result<usize, KernelError> {
        if let Some(g) = tx.expected_generation
            && g != self.generation
        {
            return Err(KernelError::GenerationChanged { expected: g });
        }
        if std::mem::take(&mut self.fail_next) {
            return Err(KernelError::Other("injected failure".into()));
        }
        self.kernel
            .apply(tx)
            .map_err(|e| KernelError::Other(e.into()))?;
        self.generation += 1;
        self.applied.push(tx.ops.len());
        Ok(tx.ops.len() * 100)
    }
    fn outline(&mut self) -> &mut dyn Outline {
        &mut self.kernel
    }
}

fn table(chains: &[&str]) -> Table {
    Table {
        family: Family::Ip,
        name: "kubenft".into(),
        comment: None,
        chains: chains
            .iter()
            .map(|c| {
                (
                    c.to_string(),
                    Chain {
                        name: c.to_string(),
                        base: None,
                        comment: None,
                        rules: vec![],
                    },
                )
            })
            .collect(),
        sets: Default::default(),
    }
}

fn change(before: &[&str], after: &[&str]) -> TableChange {
    TableChange {
        family: Family::Ip,
        before: Some(table(before)),
        after: Some(table(after)),
    }
}

/// Whole tables, handed out one set at a time.
struct Whole(Vec<Table>);

impl SetElements for Whole {
    fn sets_with_elements(&self, family: Family) -> std::collections::BTreeSet<String> {
        let t = self.0.iter().find(|t| t.family == family);
        t.into_iter()
            .flat_map(|t| t.sets.values())
            .filter(|s| !s.elements.is_empty())
            .map(|s| s.name.clone())
            .collect()
    }

    fn elements(&self, family: Family, set: &str) -> ElementStream<'_> {
        let t = self.0.iter().find(|t| t.family == family);
        let set = t.and_then(|t| t.sets.get(set));
        Box::new(set.into_iter().flat_map(|s| s.elements.iter().cloned()))
    }

    fn may_hold(&self, family: Family, set: &str, n: usize) -> bool {
        let t = self.0.iter().find(|t| t.family == family);
        t.and_then(|t| t.sets.get(set))
            .map_or(0, |s| s.elements.len())
            >= n
    }
}

/// `table(chains)` with a set of `ports`, each element commented with a quote the kernel
/// stores as an apostrophe.
fn table_with_set(chains: &[&str], ports: &[u16]) -> Table {
    use crate::nft::model::{DataType, Set, Value};
    let elements = ports
        .iter()
        .map(|&p| Element {
            key: vec![Value::Port(p)],
            data: None,
            comment: Some(format!("port \"{p}\"")),
        })
        .collect();
    let set = Set::new("ports", vec![DataType::InetService]).with_elements(elements);
    let mut t = table(chains);
    t.sets.insert(set.name.clone(), set);
    t
}

fn without_elements(mut t: Table) -> Table {
    for s in t.sets.values_mut() {
        s.elements.clear();
    }
    t
}

#[test]
fn a_first_sync_filled_set_by_set_sends_what_a_whole_one_sends() {
    let desired = table_with_set(&["a", "b"], &[443, 80]);
    let mut whole = Syncer::new(Fake::default(), "kubenft");
    whole.read_back().unwrap();
    let sent = whole.sync(vec![desired.clone()], false).unwrap();

    let mut filling = Syncer::new(Fake::default(), "kubenft");
    filling.read_back().unwrap();
    let heads = vec![without_elements(desired.clone())];
    let report = filling
        .sync_filling(heads, &Whole(vec![desired.clone()]), false)
        .unwrap();
    let sent_as = |r: SyncReport| (r.kind, r.ops, r.bytes);
    assert_eq!(sent_as(report), sent_as(sent));
    let kernel = |s: &Syncer<Fake>| {
        s.kernel
            .kernel
            .table(&desired.table_ref())
            .map(crate::nft::kernel::canonical)
    };
    assert_eq!(kernel(&filling), kernel(&whole));
    assert_eq!(
        kernel(&filling).unwrap().sets["ports"].elements[0].comment,
        Some("port '80'".into())
    );
    // The plan is the caller's; the generation stays for planned changes.
    assert!(filling.applied_tables().is_none());
    assert!(filling.has_generation());
}

/// `Whole`, counting how often each set's elements are asked for; its digests are refused.
struct Asked(Whole, std::cell::RefCell<BTreeMap<String, usize>>);

impl SetElements for Asked {
    fn sets_with_elements(&self, family: Family) -> BTreeSet<String> {
        self.0.sets_with_elements(family)
    }

    fn elements(&self, family: Family, set: &str) -> ElementStream<'_> {
        *self.1.borrow_mut().entry(set.to_string()).or_default() += 1;
        self.0.elements(family, set)
    }

    fn may_hold(&self, family: Family, set: &str, n: usize) -> bool {
        self.0.may_hold(family, set, n)
    }

    fn digest(&self, _: Family, set: &str) -> SetDigest {
        panic!("the digest of {set} was asked for: its elements are read twice")
    }
}

#[test]
fn a_first_sync_filled_set_by_set_reads_each_set_once_and_sends_the_records_a_whole_one_sends() {
    let desired = sets_table(0..BIG);
    let mut whole = Syncer::new(Fake::default(), "kubenft");
    whole.read_back().unwrap();
    let sent = whole.sync(vec![desired.clone()], false).unwrap();

    let mut filling = Syncer::new(Fake::default(), "kubenft");
    filling.read_back().unwrap();
    let asked = Asked(Whole(vec![desired.clone()]), Default::default());
    let report = filling
        .sync_filling(vec![without_elements(desired.clone())], &asked, false)
        .unwrap();
    assert_eq!((report.ops, report.bytes), (sent.ops, sent.bytes));
    assert_eq!(
        asked.1.into_inner(),
        BTreeMap::from([("big".to_string(), 1), ("small".to_string(), 1)])
    );
    let kernel = |s: &Syncer<Fake>| s.kernel.kernel.table(&ip()).cloned();
    assert_eq!(kernel(&filling), kernel(&whole));
    assert_eq!(kernel(&filling).unwrap().sets[DIGEST_SET].elements.len(), 1);

    // What the engine remembers of the kernel is what the whole sync remembers: the next
    // change sends the same operations.
    let change = |s: &mut Syncer<Fake>| {
        s.release_tables();
        let change = TableChange {
            family: Family::Ip,
            before: Some(desired.clone()),
            after: Some(sets_table(1..BIG + 1)),
        };
        let r = s.sync_changes(vec![change]).unwrap().unwrap();
        (r.ops, r.bytes)
    };
    assert_eq!(change(&mut filling), change(&mut whole));
    assert_eq!(kernel(&filling), kernel(&whole));
}

#[test]
fn a_first_sync_filled_set_by_set_declares_no_records_for_small_sets() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.read_back().unwrap();
    let desired = sets_table(0..10);
    s.sync_filling(
        vec![without_elements(desired.clone())],
        &Whole(vec![desired]),
        false,
    )
    .unwrap();
    let sets = &s.kernel().kernel.table(&ip()).unwrap().sets;
    assert_eq!(sets.keys().collect::<Vec<_>>(), ["big", "small"]);
}

#[test]
fn a_sync_filled_set_by_set_over_a_table_the_kernel_holds_sends_only_the_difference() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![table_with_set(&["a"], &[80])], true).unwrap();
    s.read_back().unwrap();
    let desired = table_with_set(&["a"], &[80, 443]);
    let heads = vec![without_elements(desired.clone())];
    let report = s
        .sync_filling(heads, &Whole(vec![desired.clone()]), false)
        .unwrap();
    assert_eq!((report.kind, report.ops), (SyncKind::Full, 1));
    let held = s.kernel.kernel.table(&desired.table_ref()).unwrap();
    assert_eq!(
        crate::nft::kernel::canonical(held),
        crate::nft::kernel::canonical(&desired)
    );
}

#[test]
fn planned_changes_apply_after_a_commit_and_send_only_their_difference() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    assert_eq!(
        s.sync_changes(vec![change(&[], &["a"])]).unwrap(),
        None,
        "nothing committed yet"
    );
    s.sync(vec![table(&["a", "b"])], false).unwrap();
    s.release_tables();

    // Parts only: "b" is not mentioned, so it stays.
    let r = s
        .sync_changes(vec![change(&["a"], &["c"])])
        .unwrap()
        .unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Partial, 2), "add c, delete a");
    let t = &s.kernel().kernel.tables.values().next().unwrap().chains;
    assert_eq!(t.keys().collect::<Vec<_>>(), ["b", "c"]);
    assert_eq!(s.kernel().reads, 2, "only the first sync read the kernel");

    let r = s.sync_changes(vec![]).unwrap().unwrap();
    assert_eq!(r.ops, 0);
}

#[test]
fn planned_changes_are_refused_after_a_foreign_commit_or_a_failure() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![table(&["a"])], false).unwrap();
    s.kernel().generation += 1;
    assert_eq!(s.sync_changes(vec![change(&["a"], &["b"])]).unwrap(), None);
    assert_eq!(s.kernel().applied.len(), 1, "nothing sent");
    assert!(!s.has_generation(), "the caller must sync fully");

    s.sync(vec![table(&["a"])], false).unwrap();
    s.kernel().fail_next = true;
    assert!(s.sync_changes(vec![change(&["a"], &["b"])]).is_err());
    assert_eq!(s.sync_changes(vec![change(&["a"], &["b"])]).unwrap(), None);
}

#[test]
fn the_first_sync_reads_the_kernel_and_later_ones_work_from_memory() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    let r = s.sync(vec![table(&["a", "b"])], false).unwrap();
    assert_eq!(r.kind, SyncKind::Full);
    assert_eq!(s.kernel().reads, 2, "both families read");

    let r = s.sync(vec![table(&["a", "b", "c"])], false).unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Partial, 1));
    assert_eq!(s.kernel().reads, 2, "no read for a partial sync");

    let r = s.sync(vec![table(&["a", "b", "c"])], false).unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Partial, 0), "nothing to do");
}

#[test]
fn a_foreign_commit_turns_the_next_sync_into_a_full_one_that_repairs_our_table() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![table(&["a", "b"])], false).unwrap();
    // Another program deletes our table.
    let t = TableRef {
        family: Family::Ip,
        name: "kubenft".into(),
    };
    s.kernel().kernel.tables.remove(&t);
    s.kernel().generation += 1;

    let r = s.sync(vec![table(&["a", "b"])], false).unwrap();
    assert_eq!(r.kind, SyncKind::Full);
    assert!(r.ops > 0, "the table is recreated");
    assert_eq!(s.kernel().kernel.table(&t).map(|t| t.chains.len()), Some(2));
}

#[test]
fn a_failed_sync_leaves_the_kernel_as_it_was_and_makes_the_next_sync_full() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![table(&["a"])], false).unwrap();
    let before = s.kernel().kernel.clone();
    s.kernel().fail_next = true;
    assert!(s.sync(vec![table(&["a", "b"])], false).is_err());
    assert_eq!(s.kernel().kernel, before, "nothing half-applied");
    assert!(!s.has_applied_state());

    let r = s.sync(vec![table(&["a", "b"])], false).unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Full, 1));
}

#[test]
fn a_forced_full_sync_on_an_unchanged_kernel_sends_nothing() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![table(&["a", "b"])], false).unwrap();
    let r = s.sync(vec![table(&["a", "b"])], true).unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Full, 0));
    assert_eq!(s.kernel().applied, [3], "only the first sync committed");
}

/// A table holding `big` marks in set "big" (recorded: at least DIGESTED_MIN_ELEMENTS) and
/// 3 in set "small" (read back whole).
fn sets_table(big: impl IntoIterator<Item = u32>) -> Table {
    use crate::nft::model::{DataType, Value};
    let marks = |m: Vec<u32>| m.into_iter().map(|m| Element::new(vec![Value::Mark(m)]));
    let mut t = table(&["a"]);
    for (name, elements) in [
        ("big", marks(big.into_iter().collect()).collect()),
        ("small", marks(vec![1, 2, 3]).collect()),
    ] {
        t.sets.insert(
            name.into(),
            Set::new(name, vec![DataType::Mark]).with_elements(elements),
        );
    }
    t
}

const BIG: u32 = DIGESTED_MIN_ELEMENTS as u32;

fn ip() -> TableRef {
    TableRef {
        family: Family::Ip,
        name: "kubenft".into(),
    }
}

/// A new syncer on `kernel`, as after a restart: reads back trusting the records.
fn restarted(kernel: Fake) -> Syncer<Fake> {
    let mut s = Syncer::new(kernel, "kubenft");
    s.read_back().unwrap();
    s
}

fn kernel_of(s: Syncer<Fake>) -> Fake {
    let mut fake = s.kernel;
    fake.elements_read = 0;
    fake.applied.clear();
    fake
}

#[test]
fn a_restart_on_an_unchanged_kernel_reads_no_recorded_set_and_sends_nothing() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..BIG)], false).unwrap();
    let records = &s.kernel().kernel.table(&ip()).unwrap().sets[DIGEST_SET];
    assert_eq!(records.elements.len(), 1, "only the big set has a record");

    let mut s = restarted(kernel_of(s));
    assert!(
        s.applied_tables().unwrap()[0].sets["big"]
            .elements
            .is_empty(),
        "its record vouches for it"
    );
    let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Full, 0));
    assert_eq!(
        s.kernel().elements_read,
        3 + 1,
        "the small set and the record"
    );

    // What it remembers is whole: the next change is a difference from it.
    let r = s.sync(vec![sets_table(1..BIG + 1)], false).unwrap();
    assert_eq!(r.kind, SyncKind::Partial);
    assert_eq!(r.ops, 2 + 2, "one element out, one in; the record replaced");
}

#[test]
fn a_set_changed_while_down_is_read_back_alone_and_its_record_follows() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..BIG)], false).unwrap();

    let mut s = restarted(kernel_of(s));
    let r = s.sync(vec![sets_table(1..BIG + 1)], false).unwrap();
    assert_eq!(r.ops, 2 + 2);
    assert_eq!(s.kernel().elements_read, 3 + 1 + BIG as usize);

    // The record now vouches for the new elements.
    let mut s = restarted(kernel_of(s));
    let r = s.sync(vec![sets_table(1..BIG + 1)], false).unwrap();
    assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
}

#[test]
fn records_follow_planned_changes_and_partial_syncs() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..BIG)], false).unwrap();
    s.sync(vec![sets_table(0..BIG + 5)], false).unwrap();
    s.release_tables();
    let change = TableChange {
        family: Family::Ip,
        before: Some(sets_table(0..BIG + 5)),
        after: Some(sets_table(2..BIG + 5)),
    };
    let r = s.sync_changes(vec![change]).unwrap().unwrap();
    assert_eq!(r.ops, 1 + 2, "two elements out; the record replaced");

    let mut s = restarted(kernel_of(s));
    let r = s.sync(vec![sets_table(2..BIG + 5)], false).unwrap();
    assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
}

/// Deletes element 7 of set "big" behind the engine's back, as `nft delete element` does.
fn hand_edit(kernel: &mut Fake) {
    let table = kernel.kernel.tables.get_mut(&ip()).unwrap();
    table.sets.get_mut("big").unwrap().elements.remove(7);
    kernel.generation += 1;
}

fn big_set_len(s: &mut Syncer<Fake>) -> usize {
    s.kernel().kernel.table(&ip()).unwrap().sets["big"]
        .elements
        .len()
}

#[test]
fn a_hand_edit_made_while_down_is_unseen_by_the_restart_and_repaired_by_the_next_full_sync() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..BIG)], false).unwrap();
    let mut kernel = kernel_of(s);
    // The record still vouches for the deleted element.
    hand_edit(&mut kernel);

    let mut s = restarted(kernel);
    let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
    assert_eq!(r.ops, 0, "trusting the record, the edit goes unseen");

    // The daemon's periodic full sync: the engine synced once, so it reads every element.
    s.read_back().unwrap();
    assert_eq!(
        s.kernel().elements_read,
        (3 + 1) + (1 + 3 + BIG as usize - 1),
        "then the record, the small set and every element of the big one"
    );
    let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
    assert_eq!(r.ops, 1, "the element is added back, as its record says");
    assert_eq!(big_set_len(&mut s), BIG as usize);
    let mut s = restarted(kernel_of(s));
    let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
    assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
}

#[test]
fn a_hand_edit_made_while_running_is_repaired_by_the_next_sync_reading_every_element() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..BIG)], false).unwrap();
    hand_edit(s.kernel());
    s.kernel().elements_read = 0;
    let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Full, 1));
    assert_eq!(s.kernel().elements_read, 1 + 3 + BIG as usize - 1);
    assert_eq!(big_set_len(&mut s), BIG as usize);
}

#[test]
fn a_foreign_commit_during_a_restart_makes_it_read_every_element() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..BIG)], false).unwrap();
    let mut s = restarted(kernel_of(s));
    // Between the restart's read and its commit, someone edits our set.
    hand_edit(s.kernel());
    let r = s.sync(vec![sets_table(0..BIG)], false).unwrap();
    assert_eq!(r.ops, 1, "the edit is repaired");
    assert_eq!(big_set_len(&mut s), BIG as usize);
}

#[test]
fn a_first_sync_filled_set_by_set_records_large_sets_and_a_filling_restart_trusts_them() {
    let desired = sets_table(0..BIG);
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.read_back().unwrap();
    let heads = vec![without_elements(desired.clone())];
    s.sync_filling(heads.clone(), &Whole(vec![desired.clone()]), false)
        .unwrap();
    let records = &s.kernel().kernel.table(&ip()).unwrap().sets[DIGEST_SET];
    assert_eq!(records.elements.len(), 1, "the big set's record");

    let mut s = restarted(kernel_of(s));
    let r = s
        .sync_filling(heads.clone(), &Whole(vec![desired.clone()]), false)
        .unwrap();
    assert_eq!((r.kind, r.ops), (SyncKind::Full, 0));
    assert_eq!(s.kernel().elements_read, 3 + 1);

    // A planned change is a partial sync from the records the first sync left.
    let change = TableChange {
        family: Family::Ip,
        before: Some(desired.clone()),
        after: Some(sets_table(1..BIG + 1)),
    };
    let r = s.sync_changes(vec![change]).unwrap().unwrap();
    assert_eq!(r.ops, 2 + 2, "one element out, one in; the record replaced");
    let mut s = restarted(kernel_of(s));
    let changed = sets_table(1..BIG + 1);
    let r = s
        .sync_filling(
            vec![without_elements(changed.clone())],
            &Whole(vec![changed]),
            false,
        )
        .unwrap();
    assert_eq!((r.ops, s.kernel().elements_read), (0, 3 + 1));
}

#[test]
fn the_records_go_once_no_set_is_large_and_a_small_table_has_none() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..10)], false).unwrap();
    let sets = |s: &mut Syncer<Fake>| {
        let t = s.kernel().kernel.table(&ip()).unwrap();
        t.sets.keys().cloned().collect::<Vec<_>>()
    };
    assert_eq!(sets(&mut s), ["big", "small"]);
    s.sync(vec![sets_table(0..BIG)], false).unwrap();
    assert_eq!(sets(&mut s), ["big", DIGEST_SET, "small"]);
    s.sync(vec![sets_table(0..10)], false).unwrap();
    assert_eq!(sets(&mut s), ["big", "small"]);
}

#[test]
fn a_recorded_set_whose_type_changes_is_recreated_without_reading_it() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    s.sync(vec![sets_table(0..BIG)], false).unwrap();
    let mut s = restarted(kernel_of(s));
    let mut t = sets_table(0..BIG);
    t.sets.get_mut("big").unwrap().timeout = Some(60);
    s.sync(vec![t.clone()], false).unwrap();
    assert_eq!(s.kernel().elements_read, 3 + 1);
    let kernel = s.kernel().kernel.table(&ip()).unwrap();
    assert_eq!(kernel.sets["big"].timeout, Some(60));
    assert_eq!(kernel.sets["big"].elements.len(), BIG as usize);
}

/// Leads with the deletion of table `ip other` when the kernel holds it; records how its
/// commits went.
#[derive(Default, Clone)]
struct DeleteOther {
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Leading for DeleteOther {
    fn ops(
        &mut self,
        kernel: &mut dyn Outline,
    ) -> Result<Vec<Op>, crate::nft::outline::OutlineError> {
        let other = kernel.tables()?.into_iter().find(|t| t.name == "other");
        self.log
            .lock()
            .unwrap()
            .push(format!("listed {}", other.is_some()));
        Ok(other
            .map(|table| Op::DeleteTable { table })
            .into_iter()
            .collect())
    }
    fn committed(&mut self) {
        self.log.lock().unwrap().push("committed".into());
    }
    fn abandoned(&mut self, _: &dyn std::error::Error) {
        self.log.lock().unwrap().push("abandoned".into());
    }
}

fn other_table() -> TableRef {
    TableRef {
        family: Family::Ip,
        name: "other".into(),
    }
}

fn with_other_table() -> Fake {
    let mut fake = Fake::default();
    let mut t = table(&["x"]);
    t.name = "other".into();
    fake.kernel.tables.insert(other_table(), t);
    fake
}

#[test]
fn leading_operations_ride_in_the_same_transaction_as_the_sync_once() {
    let mut s = Syncer::new(with_other_table(), "kubenft");
    let leading = DeleteOther::default();
    s.lead_next_commit_with(Box::new(leading.clone()));
    s.sync(vec![table(&["a"])], false).unwrap();
    assert_eq!(
        s.kernel().applied,
        [3],
        "one commit: the deletion and the table"
    );
    assert!(s.kernel().kernel.table(&other_table()).is_none());
    assert!(!s.leading_pending());
    s.sync(vec![table(&["a", "b"])], true).unwrap();
    assert_eq!(*leading.log.lock().unwrap(), ["listed true", "committed"]);
}

#[test]
fn refused_leading_operations_are_abandoned_and_the_next_sync_goes_without_them() {
    let mut s = Syncer::new(with_other_table(), "kubenft");
    let leading = DeleteOther::default();
    s.lead_next_commit_with(Box::new(leading.clone()));
    s.kernel().fail_next = true;
    assert!(s.sync(vec![table(&["a"])], false).is_err());
    assert!(!s.leading_pending(), "never offered again");
    s.sync(vec![table(&["a"])], false).unwrap();
    assert!(s.kernel().kernel.table(&other_table()).is_some());
    assert_eq!(*leading.log.lock().unwrap(), ["listed true", "abandoned"]);
}

#[test]
fn a_failed_commit_without_leading_operations_keeps_them_for_the_next() {
    let mut s = Syncer::new(Fake::default(), "kubenft");
    let leading = DeleteOther::default();
    s.lead_next_commit_with(Box::new(leading.clone()));
    s.kernel().fail_next = true;
    assert!(s.sync(vec![table(&["a"])], false).is_err());
    assert!(s.leading_pending(), "the failure was the sync's own");
    s.sync(vec![table(&["a"])], false).unwrap();
    assert_eq!(
        *leading.log.lock().unwrap(),
        ["listed false", "listed false", "committed"]
    );
}
