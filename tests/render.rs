//! The renderer against the real `nft` 1.0.6 and kernel: every corpus table, rendered, is
//! accepted by `nft -f` in a fresh namespace, reads back as expected, and the transaction form
//! builds the same ruleset as the table form.

use kubenft::netns::{self, Netns};
use kubenft::nft::model::{Element, MapRef, Selector, Stmt, Table, Value};
use kubenft::nft::render::{
    render_op, render_table, render_transaction, render_transaction_with_maps, sanitize_comment,
};
use kubenft::nft::transaction::{Op, TableRef, Transaction};
use kubenft_nft_testkit::corpus::{corpus, creation_transaction, kube_like};
use kubenft_nft_testkit::inspect::{apply_script, list_table_json, list_table_text};
use std::net::Ipv4Addr;

fn can_run() -> bool {
    if !netns::can_create() {
        eprintln!("skipping: creating network namespaces needs root (CI runs as root)");
        return false;
    }
    true
}

/// Applies `script` in a fresh namespace and returns the normalised kernel view of `t`'s table.
fn apply_and_list(tag: &str, script: &str, t: &Table) -> serde_json::Value {
    let ns = Netns::create(tag).expect("namespace");
    apply_script(&ns, script).unwrap_or_else(|e| panic!("{tag}: {e}\n--- script ---\n{script}"));
    list_table_json(&ns, t.family, &t.name).expect("list table")
}

/// What `nft list table` prints for a rule we rendered: nft spells mark arithmetic with
/// operators, shows counter values, omits the default burst, prints icmp port-unreachable
/// rejects as plain `reject` (its default), hides a `meta nfproto` that an address match
/// implies, and folds `meta l4proto tcp th …` into `tcp …`.
fn as_nft_lists_it(line: &str) -> String {
    line.replace("meta nfproto ipv4 ip ", "ip ")
        .replace("meta nfproto ipv6 ip6 ", "ip6 ")
        .replace("meta l4proto tcp th ", "tcp ")
        .replace("meta l4proto udp th ", "udp ")
        .replace("meta mark or ", "meta mark | ")
        .replace("meta mark xor ", "meta mark ^ ")
        .replace("meta mark and ", "meta mark & ")
        .replace("counter", "counter packets 0 bytes 0")
        .replace(" burst 5 packets", "")
        .replace(" with icmp type port-unreachable", "")
        .replace(" with icmpv6 type port-unreachable", "")
        .replace(" with icmpx type port-unreachable", "")
}

#[test]
fn every_corpus_table_is_accepted_by_nft_and_lists_what_was_rendered() {
    if !can_run() {
        return;
    }
    let mut unlisted = Vec::new();
    let mut listings = String::new();
    for (name, t) in corpus() {
        let script = render_table(&t);
        let ns = Netns::create("render").expect("namespace");
        apply_script(&ns, &script).unwrap_or_else(|e| panic!("{name}: {e}\n{script}"));
        let listing = list_table_text(&ns, t.family, &t.name).expect("list");
        listings.push_str(&listing);
        for chain in t.chains.values() {
            assert!(
                listing.contains(&format!("\tchain {} {{", chain.name)),
                "{name}: chain {} missing from\n{listing}",
                chain.name
            );
            for rule in &chain.rules {
                let line = kubenft::nft::render::render_rule(rule, t.family);
                // Rules nft lists differently in ways not worth mirroring: a masked ct state
                // match, anonymous maps, whose elements nft lists in its own order, and a
                // hash over `th` ports, which nft lists under the protocol matched before it.
                let reworded = rule.stmts.iter().any(|s| match s {
                    Stmt::Match {
                        mask: Some(_),
                        left,
                        ..
                    } => *left == Selector::CtState,
                    Stmt::VMap {
                        map: MapRef::Anonymous(entries),
                        ..
                    } => entries.len() > 1,
                    Stmt::DnatHashMap { fields, .. } => fields.contains(&Selector::ThSport),
                    _ => false,
                });
                if !reworded && !listing.contains(&as_nft_lists_it(&line)) {
                    unlisted.push(format!("{name}: `{line}`"));
                }
            }
        }
        for set in t.sets.values() {
            let kw = if set.data.is_empty() { "set" } else { "map" };
            assert!(
                listing.contains(&format!("\t{kw} {} {{", set.name)),
                "{name}: {kw} {} missing from\n{listing}",
                set.name
            );
            for e in set.elements.iter().filter_map(|e| e.comment.as_ref()) {
                assert!(listing.contains(&format!("comment \"{e}\"")), "{name}: {e}");
            }
        }
        if let Some(c) = &t.comment {
            assert!(listing.contains(&format!("\tcomment \"{c}\"")), "{name}");
        }
    }
    assert!(
        unlisted.is_empty(),
        "rules not listed as rendered:\n{}\n--- listings ---\n{listings}",
        unlisted.join("\n")
    );
}

#[test]
fn applying_a_rendering_in_two_fresh_namespaces_gives_identical_kernel_views() {
    if !can_run() {
        return;
    }
    for (name, t) in corpus() {
        let script = render_table(&t);
        let first = apply_and_list("twice", &script, &t);
        let second = apply_and_list("twice", &script, &t);
        assert_eq!(first, second, "{name}");
        // The view carries table and chain comments although nft's JSON leaves them out.
        let objects = first["nftables"].as_array().expect("array");
        assert_eq!(
            objects[0]["table"]["comment"].as_str(),
            t.comment.as_deref(),
            "{name}"
        );
        for chain in t.chains.values() {
            let listed = objects
                .iter()
                .find(|o| o["chain"]["name"].as_str() == Some(chain.name.as_str()))
                .expect("chain listed");
            assert_eq!(
                listed["chain"]["comment"].as_str(),
                chain.comment.as_deref(),
                "{name}: {}",
                chain.name
            );
        }
    }
}

#[test]
fn a_creation_transaction_rendered_as_commands_builds_the_same_ruleset_as_the_table() {
    if !can_run() {
        return;
    }
    for (name, t) in corpus() {
        let from_table = apply_and_list("table", &render_table(&t), &t);
        let tx_script = render_transaction(&creation_transaction(&t));
        let from_tx = apply_and_list("tx", &tx_script, &t);
        assert_eq!(
            from_table, from_tx,
            "{name}\n--- transaction ---\n{tx_script}"
        );
    }
}

#[test]
fn a_kube_like_table_of_a_hundred_services_applies_and_has_every_element() {
    if !can_run() {
        return;
    }
    let t = kube_like(100, 3);
    let view = apply_and_list("kube", &render_table(&t), &t);
    let objects = view["nftables"].as_array().expect("array");
    let map = objects
        .iter()
        .find_map(|o| o.get("map"))
        .expect("service-ips map");
    assert_eq!(map["elem"].as_array().expect("elements").len(), 100);
    let chains = objects.iter().filter(|o| o.get("chain").is_some()).count();
    assert_eq!(chains, t.chains.len());
    assert_eq!(t.chains.len(), 7 + 100 + 300);
}

#[test]
fn a_sanitised_comment_with_quotes_and_overlong_text_is_accepted_by_nft() {
    if !can_run() {
        return;
    }
    let mut t = kube_like(1, 1);
    let nasty = format!("say \"hi\"\n{}", "é".repeat(100));
    t.comment = Some(nasty.clone());
    let ns = Netns::create("comment").expect("namespace");
    apply_script(&ns, &render_table(&t)).expect("nft accepts the sanitised comment");
    let listing = list_table_text(&ns, t.family, &t.name).expect("list");
    let clean = sanitize_comment(&nasty);
    assert!(clean.len() <= 128 && !clean.contains('"'));
    assert!(
        listing.contains(&format!("comment \"{clean}\"")),
        "{listing}"
    );
}

/// The kernel handle of the first rule of `chain`, read from nft's JSON (which always has them).
fn first_rule_handle(ns: &Netns, t: &Table, chain: &str) -> u64 {
    let family = kubenft::nft::render::family_keyword(t.family);
    let out = ns
        .exec(&["nft", "-j", "list", "chain", family, &t.name, chain])
        .expect("list chain");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["nftables"]
        .as_array()
        .expect("array")
        .iter()
        .find_map(|o| o["rule"]["handle"].as_u64())
        .expect("a rule with a handle")
}

#[test]
fn change_operations_rendered_as_commands_give_the_same_ruleset_as_rendering_the_result() {
    if !can_run() {
        return;
    }
    let (_, t) = corpus()
        .into_iter()
        .find(|(n, _)| *n == "ip-kube-layout")
        .expect("corpus table");
    let table = TableRef {
        family: t.family,
        name: t.name.clone(),
    };
    let ns = Netns::create("ops").expect("namespace");
    apply_script(&ns, &render_table(&t)).expect("initial table");
    let handle = first_rule_handle(&ns, &t, "filter-forward");

    let removed = t.sets["service-ips"].elements[0].clone();
    let added = Element {
        key: vec![Value::Ipv4(Ipv4Addr::new(10, 96, 0, 9))],
        data: None,
        comment: Some("new".into()),
    };
    let mut ops = vec![
        Op::DeleteElements {
            table: table.clone(),
            set: "service-ips".into(),
            elements: vec![removed],
        },
        // A map: render_transaction must say `flush map` (it learns that from `known`).
        Op::FlushSet {
            table: table.clone(),
            set: "no-endpoint-services".into(),
        },
        Op::FlushSet {
            table: table.clone(),
            set: "cluster-ips".into(),
        },
        Op::AddElements {
            table: table.clone(),
            set: "cluster-ips".into(),
            elements: vec![added.clone()],
        },
        Op::FlushChain {
            table: table.clone(),
            chain: "services".into(),
        },
        Op::DeleteRule {
            table: table.clone(),
            chain: "filter-forward".into(),
            handle,
        },
    ];
    // Unhook firewall-check from its callers before deleting it and its map (EBUSY otherwise).
    for chain in ["filter-prerouting-pre-dnat", "filter-output-pre-dnat"] {
        ops.push(Op::FlushChain {
            table: table.clone(),
            chain: chain.into(),
        });
    }
    ops.push(Op::DeleteChain {
        table: table.clone(),
        chain: "firewall-check".into(),
    });
    ops.push(Op::DeleteSet {
        table: table.clone(),
        set: "firewall-ips".into(),
    });
    let tx = Transaction {
        ops,
        expected_generation: None,
    };
    let script = render_transaction_with_maps(&tx, &[&t]);
    assert!(script.contains("flush map ip kubenft no-endpoint-services\n"));
    apply_script(&ns, &script).unwrap_or_else(|e| panic!("{e}\n{script}"));

    let mut expected = t.clone();
    expected
        .sets
        .get_mut("service-ips")
        .unwrap()
        .elements
        .remove(0);
    expected
        .sets
        .get_mut("no-endpoint-services")
        .unwrap()
        .elements
        .clear();
    expected.sets.get_mut("cluster-ips").unwrap().elements = vec![added];
    expected.chains.get_mut("services").unwrap().rules.clear();
    expected
        .chains
        .get_mut("filter-forward")
        .unwrap()
        .rules
        .remove(0);
    for chain in ["filter-prerouting-pre-dnat", "filter-output-pre-dnat"] {
        expected.chains.get_mut(chain).unwrap().rules.clear();
    }
    expected.chains.remove("firewall-check");
    expected.sets.remove("firewall-ips");

    let after_ops = list_table_json(&ns, t.family, &t.name).expect("list");
    let rendered = apply_and_list("expected", &render_table(&expected), &expected);
    assert_eq!(after_ops, rendered, "--- ops ---\n{script}");

    // Flushing the table removes exactly the rules: chains, sets and elements stay. (Compared
    // with the live view minus rules, not a fresh rendering: nft gives a dynamic set an explicit
    // `size 65535` only when an `update` rule is created with it.)
    let flush = render_op(&Op::FlushTable {
        table: table.clone(),
    });
    apply_script(&ns, &flush).expect("flush");
    let mut without_rules = after_ops.clone();
    without_rules["nftables"]
        .as_array_mut()
        .expect("array")
        .retain(|o| o.get("rule").is_none());
    let flushed = list_table_json(&ns, t.family, &t.name).expect("list");
    assert_eq!(flushed, without_rules);

    apply_script(&ns, &render_op(&Op::DeleteTable { table })).expect("delete table");
    assert!(list_table_json(&ns, t.family, &t.name).is_err());
}

#[test]
fn a_script_nft_rejects_is_reported_with_nfts_own_message_and_changes_nothing() {
    if !can_run() {
        return;
    }
    let ns = Netns::create("reject").expect("namespace");
    let script = "add table ip kubenft\nadd chain ip kubenft \"quoted names are not accepted\"\n";
    let err = apply_script(&ns, script).expect_err("nft must reject a quoted chain name");
    let message = err.to_string();
    assert!(message.contains("syntax error"), "{message}");
    // nft -f is one transaction: the valid first line was not applied either.
    assert!(list_table_json(&ns, kubenft::nft::model::Family::Ip, "kubenft").is_err());
}
