use std::collections::BTreeSet;
use std::path::Path;

use super::report::{errno_name, meaning};
use super::*;
use crate::netns::{Netns, can_create};
use crate::nft::model::{
    Chain, ChainType, DataType, Element, Family, Hook, MapData, MapRef, Rule, Selector, Set, Stmt,
    Value, Verdict,
};
use crate::nft::transaction::{Op, TableRef};
use crate::proxier::{DetectLocal, NodePortAddresses};

const BOTH: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

fn ip(name: &str) -> TableRef {
    TableRef {
        family: Family::Ip,
        name: name.into(),
    }
}

fn rule_op(family: Family, stmts: Vec<Stmt>) -> Op {
    Op::AddRule {
        table: TableRef {
            family,
            name: "kubenft".into(),
        },
        chain: "c".into(),
        rule: Rule::new(stmts),
    }
}

fn no_maps(_: Family, _: &str) -> bool {
    false
}

#[test]
fn the_probe_cluster_is_read_whole() {
    let (state, rejected) = probe_cluster();
    assert!(rejected.is_empty(), "{rejected:?}");
    assert!(state.node.is_some());
    assert_eq!(state.services.len(), 9, "every Service of cluster.yaml");
}

#[test]
fn a_missing_module_is_named_with_the_construct_that_needs_it() {
    let slot_dnat = rule_op(
        Family::Ip,
        vec![Stmt::DnatSlotMap {
            key: vec![Selector::IpDaddr],
            modulus: 4,
            map: "pick-4-slots".into(),
        }],
    );
    assert_eq!(
        meaning(&slot_dnat, libc::ENOENT, &no_maps),
        "module missing or not loadable: nft_nat (dnat), nft_numgen (numgen)"
    );
    let fib6 = rule_op(
        Family::Ip6,
        vec![
            Stmt::match_eq(
                Selector::FibDaddrType,
                Value::AddrType(crate::nft::model::AddrType::Local),
            ),
            Stmt::ct_new(),
        ],
    );
    assert_eq!(
        meaning(&fib6, libc::EOPNOTSUPP, &no_maps),
        "module missing or not loadable: nft_ct + nf_conntrack (ct), nft_fib_ipv6 (fib)"
    );
    let nat_chain = Op::AddChain {
        table: ip("kubenft"),
        chain: Chain::base("nat-prerouting", ChainType::Nat, Hook::Prerouting, -100),
    };
    assert_eq!(
        meaning(&nat_chain, libc::ENOENT, &no_maps),
        "module missing or not loadable: nft_chain_nat (a nat chain)"
    );
    let reject = rule_op(
        Family::Ip,
        vec![Stmt::Reject(crate::nft::model::RejectKind::Default)],
    );
    assert!(meaning(&reject, libc::ENOENT, &no_maps).contains("nft_reject_ipv4 (reject)"));
}

#[test]
fn an_invalid_construct_is_named_as_one_this_kernel_does_not_accept() {
    // Debian 12's 6.1 refuses a plain membership lookup on a map.
    let lookup = rule_op(
        Family::Ip,
        vec![
            Stmt::in_set(
                vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
                "pick-fallback",
            ),
            Stmt::goto("pick-retry"),
        ],
    );
    let is_map = |_: Family, set: &str| set == "pick-fallback";
    assert_eq!(
        meaning(&lookup, libc::EINVAL, &is_map),
        "this kernel's nf_tables does not accept a plain membership lookup on a map"
    );
    // Without a construct of its own to blame, and for errors that are neither.
    let plain = rule_op(Family::Ip, vec![Stmt::Counter]);
    assert_eq!(
        meaning(&plain, libc::EINVAL, &no_maps),
        "this kernel's nf_tables does not accept it"
    );
    assert_eq!(
        meaning(&plain, libc::ENOENT, &no_maps),
        "it names a chain, set or type this kernel does not have"
    );
    assert_eq!(errno_name(libc::EOPNOTSUPP), "EOPNOTSUPP");
    assert_eq!(errno_name(4095), "errno 4095");
}

#[test]
fn the_message_names_the_kernel_each_refused_operation_and_counts_what_follows_from_them() {
    let set = Set::map(
        "pick-fallback",
        vec![DataType::Ipv4Addr],
        vec![DataType::Verdict],
    );
    let tables = vec![crate::nft::model::Table {
        sets: [(set.name.clone(), set.clone())].into(),
        ..crate::nft::model::Table::new(Family::Ip, "kubenft")
    }];
    let lookup = rule_op(
        Family::Ip,
        vec![Stmt::in_set(vec![Selector::IpDaddr], "pick-fallback")],
    );
    let numgen = Op::AddChain {
        table: ip("kubenft"),
        chain: Chain::new("pick-2"),
    };
    let jump = rule_op(Family::Ip, vec![Stmt::jump("pick-2")]);
    let refusal = |op_index, op: Op, errno| crate::nft::kernel::Refusal {
        op_index,
        rendered: crate::nft::render::render_op(&op),
        op,
        errno,
        kernel_message: None,
    };
    let u = Unsupported::new(
        "6.1.0-28-amd64".into(),
        &tables,
        412,
        vec![
            refusal(7, lookup, libc::EINVAL),
            refusal(9, numgen, libc::ENOMEM),
            refusal(30, jump, libc::ENOENT),
        ],
    );
    assert_eq!(u.dependent, 1, "the jump to the refused chain: {u:?}");
    let text = u.to_string();
    assert_eq!(
        text,
        "kernel 6.1.0-28-amd64 cannot run kubenft's ruleset (kubenft needs Linux 5.10 or later \
         with nf_tables; nothing was changed): it refused 3 of the 412 operations of a probe \
         that builds every construct of the ruleset in a scratch table and never commits it: \
         `add rule ip kubenft c ip daddr @pick-fallback` → EINVAL (Invalid argument): this \
         kernel's nf_tables does not accept a plain membership lookup on a map; `add chain ip \
         kubenft pick-2` → ENOMEM (Cannot allocate memory): the kernel refused it; 1 more \
         operation(s) refused only because they use what was refused"
    );
}

/// A namespace's `nft -j list ruleset` and ruleset generation.
type RulesetState = (String, u32);

/// Runs `f` in a fresh namespace; returns its result with `nft -j list ruleset` and the
/// ruleset generation before and after; None when not root.
fn in_namespace<T: Send + 'static>(
    tag: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<(T, RulesetState, RulesetState)> {
    if !can_create() {
        eprintln!("skipped: creating network namespaces needs root");
        return None;
    }
    let ns = Netns::create(tag).unwrap();
    let state = |ns: &Netns| {
        let list = ns.exec(&["nft", "-j", "list", "ruleset"]).unwrap().stdout;
        let generation = ns
            .run(|| Nftables::open().unwrap().generation().unwrap())
            .unwrap();
        (String::from_utf8(list).unwrap(), generation)
    };
    let before = state(&ns);
    let out = ns.run(f).unwrap();
    Some((out, before, state(&ns)))
}

#[test]
fn on_this_kernel_the_probe_passes_quickly_and_leaves_nothing_behind() {
    let Some((passed, before, after)) = in_namespace("probeok", || {
        // The first probe may load modules; the second is what every later start costs.
        probe(&ProxyConfig::default(), &BOTH).unwrap();
        probe(&ProxyConfig::default(), &BOTH).unwrap()
    }) else {
        return;
    };
    assert_eq!(
        before, after,
        "the ruleset and its generation are unchanged"
    );
    eprintln!(
        "probe: {} operations in {:?}",
        passed.operations, passed.elapsed
    );
    assert!(passed.operations > 100, "{passed:?}");
}

#[test]
fn a_refused_operation_is_reported_from_the_real_kernel_naming_it() {
    let tables = probe_tables(&ProxyConfig::default(), &BOTH, "kubenft-probe-test");
    let mut tx = probe_transaction(&tables);
    let operations = tx.ops.len() + 1;
    let chain = tables[0].chains.keys().next().unwrap().clone();
    tx.ops.push(Op::AddRule {
        table: ip("kubenft-probe-test"),
        chain,
        rule: Rule::new(vec![Stmt::NumgenIs {
            modulus: 0,
            value: 0,
        }]),
    });
    let Some((refusals, before, after)) =
        in_namespace("proberef", move || Nftables::open().unwrap().check(&tx))
    else {
        return;
    };
    let refusals = refusals.unwrap();
    assert_eq!(before, after, "nothing was committed");
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].op_index, operations - 1);
    let u = Unsupported::new(kernel_release(), &tables, operations, refusals);
    let text = u.to_string();
    assert!(
        text.starts_with(&format!("kernel {} ", kernel_release())),
        "{text}"
    );
    assert!(
        text.contains("numgen random mod 0 0` → ERANGE (Numerical result out of range): this kernel's nf_tables does not accept numgen"),
        "{text}"
    );
}

/// What a table uses, as far as a kernel could lack it: each statement's kind with the
/// selectors and values it reads, each chain type, each set's type and flags, and each kind of
/// element. Exhaustive over `Stmt`: a new statement does not compile until it is classified.
fn constructs(t: &crate::nft::model::Table) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let is_map = |set: &str| t.sets.get(set).is_some_and(|s| !s.data.is_empty());
    for chain in t.chains.values() {
        if let Some(b) = chain.base {
            out.insert(format!("chain {:?} {:?}", b.kind, b.hook));
        }
        for rule in &chain.rules {
            for stmt in &rule.stmts {
                out.insert(match stmt {
                    Stmt::Match {
                        left,
                        mask,
                        op,
                        right,
                    } => format!(
                        "match {left:?} mask:{} {op:?} {}",
                        mask.is_some(),
                        value_kind(right)
                    ),
                    Stmt::Lookup { key, set, negate } => {
                        format!("lookup {key:?} negate:{negate} on-map:{}", is_map(set))
                    }
                    Stmt::VMap { key, map } => format!("vmap {key:?} {}", map_kind(map)),
                    Stmt::NumgenVMap { map, .. } => format!("numgen vmap {}", map_kind(map)),
                    Stmt::NumgenIs { .. } => "numgen is".into(),
                    Stmt::DnatNumgenMap { .. } => "dnat numgen map".into(),
                    Stmt::DnatHashMap { fields, .. } => format!("dnat jhash {fields:?} map"),
                    Stmt::DnatSlotMap { key, .. } => format!("dnat {key:?} . numgen map"),
                    Stmt::DnatMap { key, .. } => format!("dnat {key:?} map"),
                    Stmt::Update { key, .. } => format!("update {key:?}"),
                    Stmt::SetMark(op) => {
                        format!("mark {}", format!("{op:?}").split('(').next().unwrap())
                    }
                    Stmt::Dnat { port, .. } => format!("dnat to addr port:{}", port.is_some()),
                    Stmt::Masquerade { fully_random } => format!("masquerade {fully_random}"),
                    Stmt::Reject(kind) => format!("reject {kind:?}"),
                    Stmt::Limit { .. } => "limit".into(),
                    Stmt::Counter => "counter".into(),
                    Stmt::Verdict(v) => format!("verdict {}", verdict_kind(v)),
                });
            }
        }
    }
    for set in t.sets.values() {
        out.insert(format!(
            "set {:?} : {:?} interval:{} dynamic:{} timeout:{} size:{}",
            set.key,
            set.data,
            set.interval,
            set.dynamic,
            set.timeout.is_some(),
            set.size.is_some()
        ));
        for e in &set.elements {
            out.insert(element_kind(set, e));
        }
    }
    out
}

fn value_kind(v: &Value) -> String {
    format!("{v:?}")
        .split(['(', ' ', '{'])
        .next()
        .unwrap()
        .to_string()
}

fn map_kind(m: &MapRef) -> &'static str {
    match m {
        MapRef::Named(_) => "named",
        MapRef::Anonymous(_) => "anonymous",
    }
}

fn verdict_kind(v: &Verdict) -> String {
    format!("{v:?}").split('(').next().unwrap().to_string()
}

fn element_kind(set: &Set, e: &Element) -> String {
    let keys: Vec<String> = e.key.iter().map(value_kind).collect();
    let data = match &e.data {
        None => "-".to_string(),
        Some(MapData::Verdict(v)) => verdict_kind(v),
        Some(MapData::Values(vs)) => vs.iter().map(value_kind).collect::<Vec<_>>().join("."),
    };
    format!(
        "element of {}: {} : {data}",
        set.name.split('-').next().unwrap(),
        keys.join(".")
    )
}

/// The example clusters and test manifests in the repository, each as (name, state).
fn repository_clusters() -> Vec<(String, ClusterState)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    ["examples/basic", "examples/demo/cluster.yaml"]
        .into_iter()
        .map(|p| {
            let inputs = crate::node_inputs::load_inputs(&root.join(p), "node-a").unwrap();
            let (mut state, _) = ClusterState::from_objects(
                &inputs.services,
                &inputs.endpoint_slices,
                inputs.node.as_ref(),
            );
            let _ = state.update_service_cidrs(&inputs.service_cidrs);
            (p.to_string(), state)
        })
        .collect()
}

/// The configurations that change what the planner emits.
fn configurations() -> Vec<(&'static str, ProxyConfig)> {
    let base = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/48".parse().unwrap(),
        ],
        local_addresses: vec!["10.0.0.10".parse().unwrap()],
        ..ProxyConfig::default()
    };
    vec![
        ("defaults", ProxyConfig::default()),
        ("cluster CIDRs", base.clone()),
        (
            "masquerade all",
            ProxyConfig {
                masquerade_all: true,
                ..base.clone()
            },
        ),
        (
            "bridge interface",
            ProxyConfig {
                detect_local: DetectLocal::BridgeInterface("cbr0".into()),
                ..base.clone()
            },
        ),
        (
            "interface prefix and NodePort CIDRs",
            ProxyConfig {
                detect_local: DetectLocal::InterfaceNamePrefix("veth".into()),
                nodeport_addresses: NodePortAddresses::cidrs(vec!["10.0.0.0/8".parse().unwrap()]),
                service_cidrs: vec!["10.96.0.0/12".parse().unwrap()],
                ..base.clone()
            },
        ),
        (
            "node CIDR",
            ProxyConfig {
                detect_local: DetectLocal::NodeCidr,
                ..base
            },
        ),
    ]
}

#[test]
fn the_probe_uses_every_construct_the_planner_emits_for_the_repositorys_clusters() {
    for (config_name, config) in configurations() {
        let probed: BTreeSet<String> = probe_tables(&config, &BOTH, "probe")
            .iter()
            .flat_map(constructs)
            .collect();
        for (cluster, state) in repository_clusters() {
            for table in crate::proxier::build(&state, &config) {
                let missing: Vec<String> =
                    constructs(&table).difference(&probed).cloned().collect();
                assert!(
                    missing.is_empty(),
                    "{cluster} with {config_name} ({:?}) uses what the probe does not: {missing:#?}",
                    table.family
                );
            }
        }
    }
}
