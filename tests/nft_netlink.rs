//! The netlink engine against the real kernel, in throw-away namespaces: what it applies is
//! what `nft -f` makes of the rendered text, reads back identically, and fails atomically.

use kubenft::netns::{Netns, can_create};
use kubenft::nft::kernel::{ApplyError, Nftables, canonical};
use kubenft::nft::model::Table;
use kubenft::nft::render::render_table;
use kubenft::nft::transaction::Transaction;
use kubenft_nft_testkit::corpus::{corpus, creation_transaction};
use kubenft_nft_testkit::inspect::{apply_script, list_table_json, list_table_text};

fn root() -> bool {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return false;
    }
    true
}

fn apply_in(ns: &Netns, tx: Transaction) -> Result<kubenft::nft::kernel::ApplyStats, String> {
    ns.run(move || {
        Nftables::open()
            .map_err(|e| e.to_string())?
            .apply(&tx)
            .map_err(|e| e.to_string())
    })
    .unwrap()
}

fn dump_in(ns: &Netns, t: &Table) -> Option<Table> {
    let (family, name) = (t.family, t.name.clone());
    ns.run(move || Nftables::open().unwrap().dump_table(family, &name).unwrap())
        .unwrap()
}

/// Compares two normalised listings item by item, so a failure names the object that differs.
fn assert_same_listing(name: &str, a: &serde_json::Value, b: &serde_json::Value) {
    let (xs, ys) = (
        a["nftables"].as_array().unwrap(),
        b["nftables"].as_array().unwrap(),
    );
    for (x, y) in xs.iter().zip(ys) {
        assert_eq!(x, y, "{name}: netlink (left) vs nft -f (right)");
    }
    assert_eq!(xs.len(), ys.len(), "{name}: number of listed objects");
}

#[test]
fn every_corpus_table_applied_by_netlink_lists_like_nft_f_of_its_rendering() {
    if !root() {
        return;
    }
    for (name, table) in corpus() {
        let by_netlink = Netns::create("nlA").unwrap();
        let by_nft = Netns::create("nlB").unwrap();
        apply_in(&by_netlink, creation_transaction(&table))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        apply_script(&by_nft, &render_table(&table)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = list_table_json(&by_netlink, table.family, &table.name).unwrap();
        let b = list_table_json(&by_nft, table.family, &table.name).unwrap();
        assert_same_listing(name, &a, &b);
    }
}

/// The blocks of a table listing (header lines, then each set, map and chain), sorted: the
/// kernel lists objects in creation order, which differs between our batch and nft's.
fn blocks(listing: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for line in listing.lines().filter(|l| !l.is_empty() && *l != "}") {
        if line.starts_with("\tset ") || line.starts_with("\tmap ") || line.starts_with("\tchain ")
        {
            out.push(String::new());
        }
        let block = out.last_mut().unwrap();
        block.push_str(line);
        block.push('\n');
    }
    out[1..].sort();
    out
}

/// What an operator sees: the text `nft list` prints of a netlink-applied table is what it prints
/// for `nft -f` of our rendering, and feeding that listing back to `nft -f` recreates it (a
/// backup made with `nft list ruleset > f` restores). The JSON comparison above cannot see this:
/// nft's JSON gives a set's type, not the `typeof` expressions the text declares.
#[test]
fn every_corpus_table_applied_by_netlink_lists_as_text_nft_reads_back() {
    if !root() {
        return;
    }
    for (name, table) in corpus() {
        let by_netlink = Netns::create("nlT").unwrap();
        let by_nft = Netns::create("nlF").unwrap();
        let restored = Netns::create("nlR").unwrap();
        apply_in(&by_netlink, creation_transaction(&table))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        apply_script(&by_nft, &render_table(&table)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let listed = list_table_text(&by_netlink, table.family, &table.name).unwrap();
        let want = list_table_text(&by_nft, table.family, &table.name).unwrap();
        let (got, expected) = (blocks(&listed), blocks(&want));
        for (a, b) in got.iter().zip(&expected) {
            assert_eq!(a, b, "{name}: netlink (left) vs nft -f (right) listing");
        }
        assert_eq!(got.len(), expected.len(), "{name}: number of listed blocks");
        apply_script(&restored, &listed)
            .unwrap_or_else(|e| panic!("{name}: nft -f of the listing: {e}\n{listed}"));
        let again = list_table_text(&restored, table.family, &table.name).unwrap();
        assert_eq!(again, listed, "{name}: listing after restoring it");
    }
}

#[test]
fn every_corpus_table_dumps_back_as_applied() {
    if !root() {
        return;
    }
    for (name, table) in corpus() {
        let ns = Netns::create("nlRT").unwrap();
        apply_in(&ns, creation_transaction(&table)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut got = dump_in(&ns, &table)
            .expect("table exists")
            .without_handles();
        got.normalize();
        let mut want = canonical(&table);
        want.normalize();
        if got != want {
            for (c, chain) in &want.chains {
                assert_eq!(got.chains.get(c), Some(chain), "{name}: chain {c}");
            }
            for (n, set) in &want.sets {
                assert_eq!(got.sets.get(n), Some(set), "{name}: set {n}");
            }
            assert_eq!(got, want, "corpus table {name}: dump after netlink apply");
        }
    }
}

fn ip_table() -> Table {
    corpus()
        .into_iter()
        .find(|(_, t)| t.family == kubenft::nft::model::Family::Ip)
        .unwrap()
        .1
}

#[test]
fn a_rejected_operation_is_named_and_leaves_the_table_exactly_as_before() {
    if !root() {
        return;
    }
    use kubenft::nft::model::{Chain, Rule, Stmt};
    use kubenft::nft::transaction::Op;
    let table = ip_table();
    let ns = Netns::create("nlFail").unwrap();
    apply_in(&ns, creation_transaction(&table)).unwrap();
    let before = list_table_json(&ns, table.family, &table.name).unwrap();
    let tref = table.table_ref();
    let good = Op::AddChain {
        table: tref.clone(),
        chain: Chain::new("fresh"),
    };
    let bad = Op::AddRule {
        table: tref.clone(),
        chain: "fresh".into(),
        rule: Rule::new(vec![Stmt::jump("no-such-chain")]),
    };
    let tx = Transaction {
        ops: vec![good.clone(), good, bad],
        expected_generation: None,
    };
    let err = ns
        .run(move || Nftables::open().unwrap().apply(&tx).unwrap_err())
        .unwrap();
    match &err {
        ApplyError::Rejected {
            op_index,
            errno,
            rendered,
            ..
        } => {
            assert_eq!(*op_index, 2);
            assert_eq!(errno.raw_os_error(), Some(libc::ENOENT));
            assert!(rendered.contains("no-such-chain"), "{rendered}");
        }
        other => panic!("expected a rejected op, got {other}"),
    }
    assert!(err.to_string().contains("operation 2"), "{err}");
    assert_eq!(
        list_table_json(&ns, table.family, &table.name).unwrap(),
        before
    );
}

#[test]
fn deleting_a_chain_a_map_still_jumps_to_is_explained_as_busy() {
    if !root() {
        return;
    }
    use kubenft::nft::transaction::Op;
    let table = ip_table();
    let target = table
        .sets
        .values()
        .flat_map(|s| &s.elements)
        .find_map(|e| e.referenced_chain().map(str::to_owned))
        .expect("the corpus has a map element jumping to a chain");
    let ns = Netns::create("nlBusy").unwrap();
    apply_in(&ns, creation_transaction(&table)).unwrap();
    let before = list_table_json(&ns, table.family, &table.name).unwrap();
    let tref = table.table_ref();
    let tx = Transaction {
        ops: vec![
            Op::FlushChain {
                table: tref.clone(),
                chain: target.clone(),
            },
            Op::DeleteChain {
                table: tref,
                chain: target,
            },
        ],
        expected_generation: None,
    };
    let err = ns
        .run(move || Nftables::open().unwrap().apply(&tx).unwrap_err())
        .unwrap();
    assert_eq!(err.errno(), Some(libc::EBUSY), "{err}");
    assert!(err.to_string().contains("still referenced"), "{err}");
    assert_eq!(
        list_table_json(&ns, table.family, &table.name).unwrap(),
        before
    );
}

#[test]
fn a_transaction_planned_against_a_stale_generation_is_refused() {
    if !root() {
        return;
    }
    let table = ip_table();
    let ns = Netns::create("nlGen").unwrap();
    let (result, listing_changed) = {
        let t = table.clone();
        ns.run(move || {
            let mut nft = Nftables::open().unwrap();
            let stale = nft.generation().unwrap();
            // Someone else commits in between.
            nft.apply(&creation_transaction(&t)).unwrap();
            let mut tx = kubenft::sync::cleanup_transaction(&t.name);
            tx.expected_generation = Some(stale);
            let result = nft.apply(&tx).map(|_| ());
            let still_there = nft.dump_table(t.family, &t.name).unwrap().is_some();
            (result, still_there)
        })
        .unwrap()
    };
    let err = result.unwrap_err();
    assert!(matches!(err, ApplyError::GenerationChanged { .. }), "{err}");
    assert!(
        listing_changed,
        "the refused cleanup must not have deleted the table"
    );
}

#[test]
fn half_a_million_map_elements_apply_in_one_transaction() {
    if !root() {
        return;
    }
    use kubenft::nft::model::{DataType, Element, Set, Value, Verdict};
    use kubenft::nft::transaction::Op;
    use std::net::Ipv4Addr;
    let mut table = Table::new(kubenft::nft::model::Family::Ip, "big");
    let elements: Vec<Element> = (0..500_000u32)
        .map(|i| {
            Element::map(
                vec![
                    Value::Ipv4(Ipv4Addr::from(0x0a00_0000 + i / 2)),
                    Value::Proto(6),
                    Value::Port(80 + (i % 2) as u16),
                ],
                Verdict::Drop,
            )
        })
        .collect();
    table.sets.insert(
        "service-ips".into(),
        Set::verdict_map(
            "service-ips",
            vec![
                DataType::Ipv4Addr,
                DataType::InetProto,
                DataType::InetService,
            ],
        )
        .with_elements(elements),
    );
    let tx = creation_transaction(&table);
    assert!(
        tx.ops
            .iter()
            .any(|op| matches!(op, Op::AddElements { elements, .. } if elements.len() == 500_000))
    );
    let ns = Netns::create("nlBig").unwrap();
    let stats = apply_in(&ns, tx).unwrap();
    assert!(
        stats.messages > 100,
        "elements are split over many messages: {stats:?}"
    );
    let got = dump_in(&ns, &table).unwrap();
    assert_eq!(got.sets["service-ips"].elements.len(), 500_000);
}

#[test]
fn a_planned_diff_applied_by_netlink_turns_the_kernel_into_the_new_table() {
    if !root() {
        return;
    }
    let from = kubenft_nft_testkit::corpus::kube_like(50, 3);
    let to = kubenft_nft_testkit::corpus::kube_like(40, 4);
    let ns = Netns::create("nlDiff").unwrap();
    apply_in(&ns, creation_transaction(&from)).unwrap();
    let current = dump_in(&ns, &from).unwrap();
    let ops = kubenft::nft::diff::plan(Some(&current), &canonical(&to));
    assert!(!ops.is_empty());
    apply_in(
        &ns,
        Transaction {
            ops,
            expected_generation: None,
        },
    )
    .unwrap();
    let mut got = dump_in(&ns, &to).unwrap().without_handles();
    got.normalize();
    let mut want = canonical(&to);
    want.normalize();
    assert_eq!(got, want);
    // And planning again against the result finds nothing to do.
    let again = kubenft::nft::diff::plan(Some(&dump_in(&ns, &to).unwrap()), &canonical(&to));
    assert!(again.is_empty(), "{again:?}");
}

/// Applies `text` with `nft -f` in a fresh namespace and dumps the table back by netlink.
fn nft_f_then_dump(tag: &str, text: &str, t: &Table) -> Result<Option<Table>, String> {
    let ns = Netns::create(tag).unwrap();
    apply_script(&ns, text).map_err(|e| format!("nft -f failed: {e}"))?;
    let (family, name) = (t.family, t.name.clone());
    ns.run(move || Nftables::open().unwrap().dump_table(family, &name))
        .unwrap()
        .map_err(|e| format!("dump failed: {e}"))
}

#[test]
fn every_corpus_table_rendered_and_applied_by_nft_dumps_back_to_itself() {
    if !root() {
        return;
    }
    let mut failures = Vec::new();
    for (label, want) in corpus() {
        let got = nft_f_then_dump("corpus", &render_table(&want), &want);
        // Statements with more than one spelling come back in the canonical one.
        let mut want = canonical(&want);
        want.normalize();
        match got {
            Ok(Some(mut got)) => {
                got.normalize();
                let got = got.without_handles();
                if got != want {
                    let diff: Vec<_> = want
                        .chains
                        .iter()
                        .filter(|(n, c)| got.chains.get(*n) != Some(c))
                        .map(|(n, c)| {
                            format!("chain {n}: want {c:?}\n got {:?}", got.chains.get(n))
                        })
                        .chain(
                            want.sets
                                .iter()
                                .filter(|(n, s)| got.sets.get(*n) != Some(s))
                                .map(|(n, s)| {
                                    format!("set {n}: want {s:?}\n got {:?}", got.sets.get(n))
                                }),
                        )
                        .collect();
                    failures.push(format!(
                        "{label}: dump differs:\n{}\n(table comment want {:?} got {:?})",
                        diff.join("\n"),
                        want.comment,
                        got.comment
                    ));
                }
            }
            Ok(None) => failures.push(format!("{label}: table missing after nft -f")),
            Err(e) => failures.push(format!("{label}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_kube_sized_table_spanning_many_datagrams_dumps_back_whole() {
    if !root() {
        return;
    }
    let mut want = kubenft_nft_testkit::corpus::kube_like(200, 3);
    want.normalize();
    let got = nft_f_then_dump("dumpbig", &render_table(&want), &want)
        .unwrap()
        .expect("table exists");
    let rules: usize = got.chains.values().map(|c| c.rules.len()).sum();
    assert!(
        rules > 800,
        "{rules} rules: enough to need many dump datagrams"
    );
    let mut got = got.without_handles();
    got.normalize();
    assert_eq!(got, canonical(&want));
}
