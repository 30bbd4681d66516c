//! The size of a sync follows the size of the change, not of the cluster: planning the
//! difference after one endpoint appears costs a handful of operations at 100 and at 1,000
//! Services alike; the fake kernel (ENOENT/EEXIST/EBUSY rules) accepts the plan, and the
//! daemon's sync engine sends the same handful to the real kernel.

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

fn tables(services: usize, extra: bool) -> Vec<Table> {
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
    use kubenft::nft::netlink::{Nftables, canonical};
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
