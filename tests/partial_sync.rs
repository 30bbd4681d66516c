//! The size of a sync follows the size of the change, not of the cluster: planning the
//! difference after one endpoint appears costs a handful of operations at 100 and at 1,000
//! Services alike; the fake kernel (ENOENT/EEXIST/EBUSY rules) accepts the plan, and the
//! daemon's sync engine sends the same handful to the real kernel. A restart reads back only
//! the large sets whose planned elements differ from the digests recorded with them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubenft::cluster::ClusterState;
use kubenft::nft::fake::FakeKernel;
use kubenft::nft::model::Table;
use kubenft::nft::transaction::Transaction;
use kubenft::proxier::{ProxyConfig, build};

fn objects(services: usize, extra_endpoint: bool) -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut svcs = Vec::new();
    let mut slices = Vec::new();
    for i in 0..services {
        let (hi, lo) = (i / 250, i % 250);
        svcs.push(
            serde_saphyr::from_str(&format!(
                "metadata: {{name: svc-{i}, namespace: bench}}\nspec: {{clusterIP: 10.96.{hi}.{}, ports: [{{name: http, port: 80, protocol: TCP}}]}}",
                lo + 1
            ))
            .unwrap(),
        );
        let mut eps = vec![format!(
            "{{addresses: [10.244.{hi}.{}], nodeName: node-a, conditions: {{ready: true}}}}",
            lo + 1
        )];
        eps.push(format!(
            "{{addresses: [10.245.{hi}.{}], nodeName: node-b, conditions: {{ready: true}}}}",
            lo + 1
        ));
        if extra_endpoint && i == services / 2 {
            eps.push(
                "{addresses: [10.246.0.1], nodeName: node-b, conditions: {ready: true}}".into(),
            );
        }
        slices.push(
            serde_saphyr::from_str(&format!(
                "metadata: {{name: svc-{i}-x, namespace: bench, labels: {{kubernetes.io/service-name: svc-{i}}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints: [{}]",
                eps.join(", ")
            ))
            .unwrap(),
        );
    }
    (svcs, slices)
}

fn cluster(services: usize, extra: bool) -> (ClusterState, ProxyConfig) {
    let node: Node = serde_saphyr::from_str(
        "metadata: {name: node-a}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}]}",
    )
    .unwrap();
    let (svcs, slices) = objects(services, extra);
    let (state, rejected) = ClusterState::from_objects(&svcs, &slices, Some(&node));
    assert!(rejected.is_empty());
    let config = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec!["10.244.0.0/14".parse().unwrap()],
        ..ProxyConfig::default()
    };
    (state, config)
}

fn tables(services: usize, extra: bool) -> Vec<Table> {
    let (state, config) = cluster(services, extra);
    build(&state, &config)
}

fn ops_for_one_new_endpoint(services: usize) -> usize {
    let before = tables(services, false);
    let after = tables(services, true);
    let mut kernel = FakeKernel::new();
    kernel
        .apply(&kubenft::sync::full_sync_transaction(&before))
        .unwrap();
    let observed: Vec<_> = before
        .iter()
        .map(|t| {
            (
                t.table_ref(),
                kubenft::sync::Observed::Read(kernel.table(&t.table_ref()).unwrap().clone()),
            )
        })
        .collect();
    let tx: Transaction = kubenft::sync::reconcile_transaction(&observed, &after, None);
    kernel
        .apply(&tx)
        .expect("the fake kernel accepts the partial plan");
    let mut got: BTreeMap<_, _> = BTreeMap::new();
    for t in &after {
        got.insert(
            t.table_ref(),
            kernel.table(&t.table_ref()).unwrap().without_handles(),
        );
    }
    for t in &after {
        assert_eq!(
            &got[&t.table_ref()],
            t,
            "the kernel ends up with exactly the new table"
        );
    }
    tx.ops.len()
}

#[test]
fn one_new_endpoint_costs_a_handful_of_operations_whatever_the_cluster_size() {
    let small = ops_for_one_new_endpoint(100);
    let large = ops_for_one_new_endpoint(1_000);
    assert_eq!(
        small, large,
        "operations must not grow with the number of services"
    );
    assert!(
        large <= 8,
        "a one-endpoint change is a handful of operations, got {large}"
    );
}

/// The daemon's engine on the real kernel: a partial sync after one new endpoint, in a
/// namespace holding 100 or 1,000 Services, and what the kernel holds afterwards.
fn kernel_ops_for_one_new_endpoint(services: usize) -> (kubenft::sync::SyncReport, bool) {
    use kubenft::nft::kernel::{Nftables, canonical};
    let ns = kubenft::netns::Netns::create("partial").unwrap();
    let before = tables(services, false);
    let after = tables(services, true);
    ns.run(move || {
        let mut syncer = kubenft::sync::Syncer::new(Nftables::open().unwrap(), "kubenft");
        let first = syncer.sync(before.clone(), false).unwrap();
        assert_eq!(first.kind, kubenft::sync::SyncKind::Full);
        let report = syncer.sync(after.clone(), false).unwrap();
        let mut nft = Nftables::open().unwrap();
        let held = after.iter().all(|t| {
            nft.dump_table(t.family, &t.name)
                .unwrap()
                .map(|t| t.without_handles())
                == Some(canonical(t))
        });
        (report, held)
    })
    .unwrap()
}

#[test]
fn the_daemons_partial_sync_of_one_endpoint_is_the_same_handful_in_the_kernel_at_any_size() {
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let (small, held_small) = kernel_ops_for_one_new_endpoint(100);
    let (large, held_large) = kernel_ops_for_one_new_endpoint(1_000);
    assert_eq!(large.kind, kubenft::sync::SyncKind::Partial);
    assert!(
        held_small && held_large,
        "the kernel holds exactly the new tables"
    );
    assert_eq!(
        small.ops, large.ops,
        "operations do not grow with the cluster"
    );
    assert!(large.ops <= 8, "a handful of operations, got {}", large.ops);
    assert!(
        large.bytes < 4096,
        "the batch is small too: {} bytes",
        large.bytes
    );
}

/// Our tables as the kernel holds them, without the engine's `element-digests` records.
fn held_tables(nft: &mut kubenft::nft::kernel::Nftables, like: &[Table]) -> Vec<Table> {
    like.iter()
        .map(|t| {
            let mut held = nft.dump_table(t.family, &t.name).unwrap().unwrap();
            held.sets.remove(kubenft::sync::DIGEST_SET);
            held.without_handles()
        })
        .collect()
}

/// 2,100 Services of two endpoints: `pick-2-slots` and `hairpin-endpoints` hold 4,200
/// elements each, enough for records in `element-digests`.
const RECORDED_SERVICES: usize = 2_100;

#[test]
fn a_restart_on_an_unchanged_kernel_reads_no_large_set_back_and_sends_nothing() {
    use kubenft::nft::kernel::{Nftables, canonical};
    use kubenft::sync::Syncer;
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = kubenft::netns::Netns::create("rdigest").unwrap();
    let desired = tables(RECORDED_SERVICES, false);
    ns.run(move || {
        let mut first = Syncer::new(Nftables::open().unwrap(), "kubenft");
        first.sync(desired.clone(), false).unwrap();
        let mut nft = Nftables::open().unwrap();
        let records = nft
            .dump_set(desired[0].family, "kubenft", kubenft::sync::DIGEST_SET)
            .unwrap()
            .expect("large sets are recorded");
        let recorded: Vec<_> = records
            .elements
            .iter()
            .filter_map(|e| e.comment.as_deref()?.split(' ').next())
            .collect();
        assert!(
            recorded.contains(&"pick-2-slots") && recorded.contains(&"hairpin-endpoints"),
            "{recorded:?}"
        );

        let mut restarted = Syncer::new(Nftables::open().unwrap(), "kubenft");
        restarted.read_back().unwrap();
        let read = &restarted.applied_tables().unwrap()[0];
        assert!(
            read.sets["pick-2-slots"].elements.is_empty()
                && read.sets["hairpin-endpoints"].elements.is_empty(),
            "the records vouch for the large sets: not read"
        );
        assert!(
            !read.sets["pick-2-services"].elements.is_empty(),
            "small sets are read"
        );
        let report = restarted.sync(desired.clone(), false).unwrap();
        assert_eq!(report.ops, 0, "nothing to change");
        let held = held_tables(&mut nft, &desired);
        let want: Vec<Table> = desired.iter().map(canonical).collect();
        assert!(held == want, "the kernel holds the plan");
        assert_eq!(
            restarted.applied_tables().unwrap(),
            want.as_slice(),
            "what it remembers is the whole plan"
        );
    })
    .unwrap();
}

#[test]
fn a_large_set_changed_behind_our_back_is_repaired_by_a_read_of_it() {
    use kubenft::nft::kernel::{Nftables, canonical};
    use kubenft::nft::transaction::Op;
    use kubenft::sync::Syncer;
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = kubenft::netns::Netns::create("rdigest").unwrap();
    let before = tables(RECORDED_SERVICES, false);
    let after = tables(RECORDED_SERVICES, true);
    ns.run(move || {
        let mut nft = Nftables::open().unwrap();
        // An operator deletes one element of a recorded set by hand.
        let hand_edit = |nft: &mut Nftables, desired: &[Table]| {
            let t = &desired[0];
            let element = t.sets["pick-2-slots"].elements[7].clone();
            let tx = Transaction {
                ops: vec![Op::DeleteElements {
                    table: t.table_ref(),
                    set: "pick-2-slots".into(),
                    elements: vec![element],
                }],
                expected_generation: None,
            };
            nft.apply(&tx).unwrap();
        };
        let want = |desired: &[Table]| desired.iter().map(canonical).collect::<Vec<_>>();

        Syncer::new(Nftables::open().unwrap(), "kubenft")
            .sync(before.clone(), false)
            .unwrap();
        hand_edit(&mut nft, &before);
        // The cluster changed while the daemon was down: the plan's pick-2-slots differs
        // from its record, so it is read back, and the hand edit is seen with it.
        let mut restarted = Syncer::new(Nftables::open().unwrap(), "kubenft");
        restarted.read_back().unwrap();
        let report = restarted.sync(after.clone(), false).unwrap();
        assert!(report.ops > 0);
        assert!(held_tables(&mut nft, &after) == want(&after), "repaired");

        hand_edit(&mut nft, &after);
        let mut restarted = Syncer::new(Nftables::open().unwrap(), "kubenft");
        restarted.read_back().unwrap();
        let report = restarted.sync(after.clone(), false).unwrap();
        assert_eq!(
            report.ops, 0,
            "trusting its record, the restart does not see the edit"
        );
        assert!(held_tables(&mut nft, &after) != want(&after));
        // The daemon's periodic full sync: after its first sync the engine reads everything.
        restarted.read_back().unwrap();
        let report = restarted.sync(after.clone(), false).unwrap();
        assert!(report.ops > 0, "reading every element sees it");
        assert!(held_tables(&mut nft, &after) == want(&after), "repaired");

        // An edit while the daemon runs moves the generation: the next sync reads everything.
        hand_edit(&mut nft, &after);
        let report = restarted.sync(after.clone(), false).unwrap();
        assert!(report.ops > 0);
        assert!(held_tables(&mut nft, &after) == want(&after), "repaired");

        let mut restarted = Syncer::new(Nftables::open().unwrap(), "kubenft");
        restarted.read_back().unwrap();
        let report = restarted.sync(after.clone(), false).unwrap();
        assert_eq!(report.ops, 0, "and the records match again");
    })
    .unwrap();
}

/// `services` ClusterIP and NodePort Services of `endpoints[i]` endpoints each, on node-a.
fn churn_state(endpoints: &[Vec<String>]) -> ClusterState {
    let mut svcs: Vec<Service> = Vec::new();
    let mut slices: Vec<EndpointSlice> = Vec::new();
    for (i, ips) in endpoints.iter().enumerate() {
        svcs.push(
            serde_saphyr::from_str(&format!(
                "metadata: {{name: svc-{i}, namespace: churn}}\nspec: {{type: NodePort, clusterIP: 10.96.{}.{}, ports: [{{name: http, port: 80, protocol: TCP, nodePort: {}}}]}}",
                i / 250,
                i % 250 + 1,
                30000 + i
            ))
            .unwrap(),
        );
        let eps: Vec<String> = ips
            .iter()
            .map(|ip| {
                format!("{{addresses: [{ip}], nodeName: node-b, conditions: {{ready: true}}}}")
            })
            .collect();
        slices.push(
            serde_saphyr::from_str(&format!(
                "metadata: {{name: svc-{i}-x, namespace: churn, labels: {{kubernetes.io/service-name: svc-{i}}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints: [{}]",
                eps.join(", ")
            ))
            .unwrap(),
        );
    }
    let node: Node = serde_saphyr::from_str(
        "metadata: {name: node-a}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}]}",
    )
    .unwrap();
    let (state, rejected) = ClusterState::from_objects(&svcs, &slices, Some(&node));
    assert!(rejected.is_empty());
    state
}

fn churn_config() -> ProxyConfig {
    ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec!["10.244.0.0/14".parse().unwrap()],
        ..ProxyConfig::default()
    }
}

/// Churn leaves endpoints in other slots than address order would give them; a restarted
/// daemon (a new planner and engine, reading the kernel back as the daemon's full sync does)
/// keeps those slots, so an unchanged cluster's restart sends nothing. A from-scratch plan
/// would rewrite them.
#[test]
fn a_restart_after_churn_keeps_the_slots_the_kernel_holds_and_sends_nothing() {
    restart_after_churn("slotrestart", 0);
}

/// As above, with `pick-16-slots` large enough to be vouched for by its digest record: the
/// restart does not read it, plans it in address order, finds the digest differs, reads it and
/// plans again keeping its slots.
#[test]
fn a_restart_after_churn_reads_a_large_slot_map_once_and_sends_nothing() {
    restart_after_churn("slotdigest", 420);
}

/// Four services churned, and `unchanged` more of ten endpoints each.
fn restart_after_churn(ns_name: &str, unchanged: usize) {
    use kubenft::daemon::full_sync::{plan_as_held, read_differing_sets};
    use kubenft::nft::kernel::{Nftables, canonical};
    use kubenft::proxier::Planner;
    use kubenft::sync::{Observed, Syncer, reconcile_transaction};
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = kubenft::netns::Netns::create(ns_name).unwrap();
    ns.run(move || {
        // 5, 6, 10 and 12 endpoints: pick-8 and pick-16 maps.
        let mut endpoints: Vec<Vec<String>> = [5, 6, 10, 12]
            .iter()
            .enumerate()
            .map(|(s, n)| (0..*n).map(|e| format!("10.244.{s}.{}", e + 1)).collect())
            .collect();
        endpoints.extend((0..unchanged).map(|k| {
            (0..10)
                .map(|e| {
                    let i = k * 10 + e;
                    format!("10.246.{}.{}", i / 250, i % 250 + 1)
                })
                .collect()
        }));
        let config = churn_config();
        let mut planner = Planner::new();
        let mut syncer = Syncer::new(Nftables::open().unwrap(), "kubenft");
        syncer
            .sync(planner.plan(&churn_state(&endpoints), &config), false)
            .unwrap();
        syncer.release_tables();
        // Rounds of churn: one endpoint of each service replaced by one whose address sorts
        // last, as the daemon's partial syncs apply them.
        for round in 0..3 {
            for (s, ips) in endpoints.iter_mut().enumerate().take(4) {
                let i = (2 * round + s) % ips.len();
                ips[i] = format!("10.247.{s}.{}", round + 1);
            }
            let changes = planner.changes(&churn_state(&endpoints), &config, None);
            let report = syncer.sync_changes(changes).unwrap().expect("applied");
            assert!(report.ops > 0);
        }
        let state = churn_state(&endpoints);
        let mut nft = Nftables::open().unwrap();
        let held: Vec<_> = planner
            .tables()
            .iter()
            .map(|t| {
                let mut held = nft.dump_table(t.family, &t.name).unwrap().unwrap();
                // The engine's records, not the plan's.
                held.sets.remove(kubenft::sync::DIGEST_SET);
                held
            })
            .collect();
        for (held, planned) in held.iter().zip(planner.tables()) {
            assert_eq!(held.without_handles(), canonical(&planned));
        }

        // A plan from scratch lays endpoints out in address order: it would rewrite slots.
        let observed: Vec<_> = held
            .iter()
            .map(|t| (t.table_ref(), Observed::Read(t.clone())))
            .collect();
        let from_scratch = Planner::new().plan(&state, &config);
        let rewrites = reconcile_transaction(&observed, &from_scratch, None);
        assert!(
            !rewrites.ops.is_empty(),
            "churn moved endpoints off address order"
        );

        // The restart, step by step as `full_sync` takes it: a new engine reads the kernel
        // back, a new planner keeps what it holds.
        let slots_read = |syncer: &Syncer<Nftables>| {
            syncer.applied_tables().unwrap()[0].sets["pick-16-slots"]
                .elements
                .len()
        };
        let mut restarted = Syncer::new(Nftables::open().unwrap(), "kubenft");
        restarted.read_back().unwrap();
        let large = unchanged > 0;
        assert_eq!(
            slots_read(&restarted) == 0,
            large,
            "a record vouches for a large map"
        );
        let mut planner = Planner::new();
        let mut tables = plan_as_held(&restarted, &mut planner, &state, &config);
        read_differing_sets(&mut restarted, &mut planner, &mut tables, &state, &config).unwrap();
        assert!(
            slots_read(&restarted) > 0,
            "churn moved slots: the map differs, and is read"
        );
        let report = restarted.sync_filling(tables, &planner, false).unwrap();
        assert_eq!(
            report.ops, 0,
            "an unchanged cluster's restart sends nothing"
        );
    })
    .unwrap();
}

/// Sets are declared with room to grow by half. A change that needs more is found by the
/// planner (`outgrown`) before it is sent: as a partial sync the kernel would refuse it whole,
/// and the daemon's full sync instead recreates the set larger, every element in it, in one
/// transaction.
#[test]
fn a_set_outgrowing_its_declared_size_is_recreated_larger_by_a_full_sync() {
    use kubenft::daemon::full_sync::full_sync;
    use kubenft::nft::kernel::{Nftables, canonical};
    use kubenft::proxier::Planner;
    use kubenft::sync::Syncer;
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = kubenft::netns::Netns::create("outgrow").unwrap();
    ns.run(|| {
        let mut nft = Nftables::open().unwrap();
        let cluster_ips = |nft: &mut Nftables| {
            let set = nft.dump_set(kubenft::nft::model::Family::Ip, "kubenft", "cluster-ips");
            let set = set.unwrap().expect("cluster-ips exists");
            (set.size, set.elements.len())
        };
        let mut planner = Planner::new();
        let mut syncer = Syncer::new(Nftables::open().unwrap(), "kubenft");
        let (state, config) = cluster(400, false);
        full_sync(&mut syncer, &mut planner, &state, &config, || {}).unwrap();
        assert_eq!(
            cluster_ips(&mut nft),
            (Some(768), 400),
            "400 and half as many again, at least 768"
        );

        // Growing within the size is an ordinary partial sync.
        let (state, config) = cluster(680, false);
        let changes = planner.changes(&state, &config, None);
        assert!(!planner.outgrown());
        let report = syncer.sync_changes(changes).unwrap().expect("partial");
        assert_eq!(report.kind, kubenft::sync::SyncKind::Partial);
        assert_eq!(cluster_ips(&mut nft), (Some(768), 680));

        // Beyond it, the partial changes would be refused whole.
        let (state, config) = cluster(1_100, false);
        let changes = planner.changes(&state, &config, None);
        assert!(planner.outgrown(), "1,100 elements do not fit in 768");
        let refused = syncer.sync_changes(changes);
        assert!(
            refused.is_err(),
            "the kernel refuses a full set: {refused:?}"
        );
        assert_eq!(
            cluster_ips(&mut nft),
            (Some(768), 680),
            "nothing was applied"
        );

        // The full sync declares it larger: recreated, filled, and the rest of the table kept.
        let report = full_sync(&mut syncer, &mut planner, &state, &config, || {}).unwrap();
        assert!(!planner.outgrown());
        assert_eq!(cluster_ips(&mut nft), (Some(3072), 1_100));
        let want: Vec<Table> = planner.tables().iter().map(canonical).collect();
        assert!(
            held_tables(&mut nft, &want) == want,
            "the kernel holds the plan"
        );
        assert!(report.ops > 0);

        // A restart keeps the size the kernel holds while the elements fit.
        let (state, config) = cluster(700, false);
        let mut restarted = Planner::new();
        let mut syncer = Syncer::new(Nftables::open().unwrap(), "kubenft");
        full_sync(&mut syncer, &mut restarted, &state, &config, || {}).unwrap();
        assert_eq!(
            cluster_ips(&mut nft),
            (Some(3072), 700),
            "not recreated as 1,536: 700 fit in 3,072"
        );
    })
    .unwrap();
}

/// Tables written before sets declared sizes (by an older kubenft) hold the same sets without
/// one: the first full sync after the upgrade recreates them sized, in one transaction, and
/// the next sync finds nothing to change.
#[test]
fn tables_from_before_declared_sizes_are_recreated_sized_by_one_full_sync() {
    use kubenft::daemon::full_sync::full_sync;
    use kubenft::nft::kernel::{Nftables, canonical};
    use kubenft::proxier::Planner;
    use kubenft::sync::Syncer;
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = kubenft::netns::Netns::create("unsized").unwrap();
    ns.run(|| {
        let (state, config) = cluster(RECORDED_SERVICES, false);
        let mut without_sizes = kubenft::proxier::build(&state, &config);
        for s in without_sizes.iter_mut().flat_map(|t| t.sets.values_mut()) {
            if !s.dynamic {
                s.size = None;
            }
        }
        let mut old = Syncer::new(Nftables::open().unwrap(), "kubenft");
        old.sync(without_sizes, false).unwrap();

        let mut planner = Planner::new();
        let mut syncer = Syncer::new(Nftables::open().unwrap(), "kubenft");
        let report = full_sync(&mut syncer, &mut planner, &state, &config, || {}).unwrap();
        assert!(report.ops > 0, "the sets are recreated");
        let mut nft = Nftables::open().unwrap();
        let want: Vec<Table> = planner.tables().iter().map(canonical).collect();
        assert!(
            held_tables(&mut nft, &want) == want,
            "the kernel holds the plan"
        );
        let held = &held_tables(&mut nft, &want)[0];
        assert_eq!(
            held.sets["pick-2-slots"].size,
            Some(12288),
            "4,200 elements"
        );

        let again = full_sync(&mut syncer, &mut planner, &state, &config, || {}).unwrap();
        assert_eq!(again.ops, 0, "nothing left to change");
    })
    .unwrap();
}
