use super::unreachable::Unreachable;
use super::watch::{Say, Watch};
use super::*;
use crate::nft::fake::FakeKernel;
use crate::nft::model::{Chain, ChainType, Hook, Rule, Stmt};
use crate::nft::transaction::Transaction;

fn table_ref(family: Family, name: &str) -> TableRef {
    TableRef {
        family,
        name: name.into(),
    }
}

/// Adds table `name` with `chains` (built-in ones, as iptables-nft names them, become base
/// chains) and `rules` (chain, jump target) in that order, through the fake kernel so rules
/// get handles.
fn add(
    kernel: &mut FakeKernel,
    family: Family,
    name: &str,
    chains: &[&str],
    rules: &[(&str, &str)],
) {
    let table = table_ref(family, name);
    let mut ops = vec![Op::AddTable {
        table: table.clone(),
        comment: None,
    }];
    for c in chains {
        let chain = match *c {
            "PREROUTING" => Chain::base(*c, ChainType::Nat, Hook::Prerouting, -100),
            "POSTROUTING" => Chain::base(*c, ChainType::Nat, Hook::Postrouting, 100),
            "INPUT" => Chain::base(*c, ChainType::Filter, Hook::Input, 0),
            "FORWARD" => Chain::base(*c, ChainType::Filter, Hook::Forward, 0),
            _ => Chain::new(*c),
        };
        ops.push(Op::AddChain {
            table: table.clone(),
            chain,
        });
    }
    for (chain, to) in rules {
        ops.push(Op::AddRule {
            table: table.clone(),
            chain: chain.to_string(),
            rule: Rule::new(vec![Stmt::jump(*to)]),
        });
    }
    kernel
        .apply(&Transaction {
            ops,
            expected_generation: None,
        })
        .unwrap();
}

/// A node kube-proxy ran on in iptables mode (IPv4) and nftables mode (IPv6), beside kubelet's
/// chains, a Docker-style chain and a host firewall.
fn node() -> FakeKernel {
    let mut k = FakeKernel::new();
    add(
        &mut k,
        Family::Ip,
        "nat",
        &[
            "PREROUTING",
            "POSTROUTING",
            "KUBE-SERVICES",
            "KUBE-SVC-AAAA",
            "KUBE-SEP-BBBB",
            "KUBE-MARK-MASQ",
            "KUBE-POSTROUTING",
            "KUBE-PROXY-CANARY",
            "KUBE-KUBELET-CANARY",
            "DOCKER",
        ],
        &[
            ("PREROUTING", "KUBE-SERVICES"),
            ("PREROUTING", "DOCKER"),
            ("POSTROUTING", "KUBE-POSTROUTING"),
            ("KUBE-SERVICES", "KUBE-SVC-AAAA"),
            ("KUBE-SVC-AAAA", "KUBE-SEP-BBBB"),
            ("KUBE-SEP-BBBB", "KUBE-MARK-MASQ"),
        ],
    );
    add(
        &mut k,
        Family::Ip,
        "filter",
        &[
            "INPUT",
            "FORWARD",
            "KUBE-FIREWALL",
            "KUBE-FORWARD",
            "KUBE-KUBELET-CANARY",
        ],
        &[("INPUT", "KUBE-FIREWALL"), ("FORWARD", "KUBE-FORWARD")],
    );
    add(&mut k, Family::Ip6, "kube-proxy", &["services"], &[]);
    add(&mut k, Family::Inet, "filter", &["INPUT"], &[]);
    add(&mut k, Family::Ip, "kubenft", &["services"], &[]);
    k
}

fn chains(k: &FakeKernel, family: Family, table: &str) -> Vec<String> {
    k.table(&table_ref(family, table))
        .map(|t| t.chains.keys().cloned().collect())
        .unwrap_or_default()
}

fn jumps(k: &FakeKernel, family: Family, table: &str) -> Vec<(String, String)> {
    let t = k.table(&table_ref(family, table)).unwrap();
    t.chains
        .values()
        .flat_map(|c| {
            c.rules.iter().flat_map(move |r| {
                r.referenced_chains()
                    .into_iter()
                    .map(move |to| (c.name.clone(), to.to_owned()))
            })
        })
        .collect()
}

fn remove(k: &mut FakeKernel, found: &Leftovers) {
    k.apply(&Transaction {
        ops: found.removal(),
        expected_generation: None,
    })
    .unwrap();
}

#[test]
fn kube_proxys_tables_chains_and_jumps_go_and_everything_else_stays() {
    let mut k = node();
    let found = survey(&mut k, "kubenft").unwrap();
    assert_eq!(found.tables, [table_ref(Family::Ip6, "kube-proxy")]);
    assert_eq!(found.iptables_chains(), 7);
    assert!(found.removable() && found.held.is_empty());
    remove(&mut k, &found);

    assert_eq!(
        chains(&k, Family::Ip, "nat"),
        ["DOCKER", "KUBE-KUBELET-CANARY", "POSTROUTING", "PREROUTING"]
    );
    assert_eq!(
        jumps(&k, Family::Ip, "nat"),
        [("PREROUTING".into(), "DOCKER".into())]
    );
    assert_eq!(
        chains(&k, Family::Ip, "filter"),
        ["FORWARD", "INPUT", "KUBE-FIREWALL", "KUBE-KUBELET-CANARY"],
        "kubelet's chains are kubelet's"
    );
    assert_eq!(
        jumps(&k, Family::Ip, "filter"),
        [("INPUT".into(), "KUBE-FIREWALL".into())]
    );
    assert!(k.table(&table_ref(Family::Ip6, "kube-proxy")).is_none());
    assert!(k.table(&table_ref(Family::Inet, "filter")).is_some());
    assert!(k.table(&table_ref(Family::Ip, "kubenft")).is_some());

    let again = survey(&mut k, "kubenft").unwrap();
    assert!(again.is_empty(), "a second start finds nothing: {again}");
    assert!(again.removal().is_empty());
}

#[test]
fn a_kube_proxy_chain_another_programs_chain_jumps_into_holds_its_table_whole() {
    let mut k = node();
    add(
        &mut k,
        Family::Ip,
        "nat",
        &["CNI-HOOK"],
        &[("CNI-HOOK", "KUBE-SERVICES")],
    );
    let found = survey(&mut k, "kubenft").unwrap();
    assert_eq!(found.held.len(), 1);
    assert_eq!(found.held[0].from, "CNI-HOOK");
    let before = chains(&k, Family::Ip, "nat");
    remove(&mut k, &found);
    assert_eq!(chains(&k, Family::Ip, "nat"), before, "ip nat untouched");
    assert!(!chains(&k, Family::Ip, "filter").contains(&"KUBE-FORWARD".to_string()));
    assert!(found.to_string().contains("held"), "{found}");
}

#[test]
fn our_own_table_is_never_kube_proxys_even_when_named_so() {
    let mut k = node();
    let found = survey(&mut k, "kube-proxy").unwrap();
    assert!(found.tables.is_empty());
}

#[test]
fn names_follow_upstream_not_the_kube_prefix() {
    for (table, chain) in [
        ("nat", "KUBE-SERVICES"),
        ("nat", "KUBE-SEP-ABCDEFGHIJKLMNOP"),
        ("nat", "KUBE-EXT-X27LE4BHSL4DOUIK"),
        ("filter", "KUBE-PROXY-FIREWALL"),
        ("filter", "KUBE-NODE-PORT"),
        ("mangle", "KUBE-PROXY-CANARY"),
    ] {
        assert!(is_kube_proxy_chain(table, chain), "{table} {chain}");
    }
    for (table, chain) in [
        ("filter", "KUBE-FIREWALL"),
        ("nat", "KUBE-KUBELET-CANARY"),
        ("mangle", "KUBE-IPTABLES-HINT"),
        ("nat", "KUBE-MARK-DROP"),
        ("filter", "KUBE-SVC-ABCDEFGHIJKLMNOP"),
        ("nat", "KUBE-SOMETHING-ELSE"),
    ] {
        assert!(!is_kube_proxy_chain(table, chain), "{table} {chain}");
    }
    assert!(!is_kube_proxy_table(&table_ref(Family::Inet, "kube-proxy")));
}

/// A takeover outcome as the syncer leaves it once the first sync committed.
fn done(removed: Leftovers) -> TakeoverOutcome {
    let t = Takeover::new("kubenft");
    t.set(Outcome::Done { removed });
    t.outcome()
}

#[test]
fn the_takeover_is_announced_once_and_rules_written_again_are_reported_once_and_left() {
    let mut k = node();
    let found = survey(&mut k, "kubenft").unwrap();
    remove(&mut k, &found);
    let mut watch = Watch::new(Some(done(found)));
    let nothing = Unreachable::default();

    let first = watch.observe(&survey(&mut k, "kubenft").unwrap(), &nothing);
    assert_eq!(first.counts, [0, 0, 0, 0]);
    assert!(
        matches!(first.say[..], [Say::Replaced(_)]),
        "{:?}",
        first.say
    );

    // kube-proxy, still running, writes its table again.
    add(&mut k, Family::Ip, "kube-proxy", &["services"], &[]);
    let back = watch.observe(&survey(&mut k, "kubenft").unwrap(), &nothing);
    assert_eq!(back.counts, [1, 0, 0, 0]);
    assert!(
        matches!(&back.say[..], [Say::Warn(note)] if note.contains("again")),
        "{:?}",
        back.say
    );
    let later = watch.observe(&survey(&mut k, "kubenft").unwrap(), &nothing);
    assert_eq!(later.counts, [1, 0, 0, 0], "still counted");
    assert!(later.say.is_empty(), "said once: {:?}", later.say);
}

#[test]
fn without_the_takeover_kube_proxys_rules_are_only_counted_and_logged_once() {
    let mut k = node();
    let mut watch = Watch::new(None);
    let ipvs = Unreachable {
        kube_ipvs0: true,
        ipvs_services: 3,
        legacy_tables: vec!["ip nat".into()],
    };
    let f = watch.observe(&survey(&mut k, "kubenft").unwrap(), &ipvs);
    assert_eq!(f.counts, [1, 7, 4, 1]);
    assert!(matches!(f.say[..], [Say::Beside(_)]), "{:?}", f.say);
    assert!(
        watch
            .observe(&survey(&mut k, "kubenft").unwrap(), &ipvs)
            .say
            .is_empty()
    );
}

#[test]
fn what_nf_tables_cannot_reach_is_warned_about_once_with_the_way_to_remove_it() {
    let mut k = FakeKernel::new();
    let mut watch = Watch::new(Some(done(Leftovers::default())));
    let ipvs = Unreachable {
        kube_ipvs0: true,
        ipvs_services: 2,
        legacy_tables: Vec::new(),
    };
    let f = watch.observe(&survey(&mut k, "kubenft").unwrap(), &ipvs);
    assert_eq!(f.counts, [0, 0, 3, 0]);
    assert!(
        matches!(&f.say[..], [Say::Warn(note)] if note.contains("kube-proxy --cleanup")),
        "{:?}",
        f.say
    );
    assert!(
        watch
            .observe(&survey(&mut k, "kubenft").unwrap(), &ipvs)
            .say
            .is_empty()
    );
}
