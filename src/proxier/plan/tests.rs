//! The incremental planner and the service CIDRs: a change of the cluster's ServiceCIDRs
//! replans the skeleton's drop rules alone, and `--service-cidr` overrides them.

use std::collections::BTreeSet;

use ipnet::IpNet;

use super::*;
use crate::cluster::{ClusterState, NodeInfo, Protocol, ServicePort, ServicePortName};
use crate::nft::diff::{TableChange, plan as diff};
use crate::nft::model::{Family, Table};
use crate::nft::render::render_op;
use crate::proxier::{ProxyConfig, build, build_after};

fn cidrs(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|c| c.parse().unwrap()).collect()
}

/// A dual-stack node with two ClusterIP services (no endpoints: rejected, which puts them in
/// the same sets as any other service).
fn cluster(service_cidrs: &[&str]) -> ClusterState {
    let mut state = ClusterState {
        node: Some(NodeInfo {
            name: "node-a".into(),
            internal_ips: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            ..NodeInfo::default()
        }),
        service_cidrs: cidrs(service_cidrs),
        ..ClusterState::default()
    };
    for (name, ip) in [("web", "10.96.0.10"), ("api", "fd00:10:96::20")] {
        let port = ServicePort {
            name: ServicePortName {
                namespace: "demo".into(),
                name: name.into(),
                port: "http".into(),
                protocol: Protocol::Tcp,
            }
            .into(),
            cluster_ips: vec![ip.parse().unwrap()],
            port: 80,
            node_port: None,
            external_ips: vec![],
            load_balancer_ips: vec![],
            source_ranges: vec![],
            external_policy: Default::default(),
            internal_policy: Default::default(),
            affinity_timeout: None,
            health_check_node_port: None,
            traffic_distribution: None,
            consistent: None,
        };
        state.services.insert(port.name.clone(), port);
    }
    state
}

fn config() -> ProxyConfig {
    ProxyConfig {
        hostname: "node-a".into(),
        ..ProxyConfig::default()
    }
}

/// The operations each change turns into, rendered, family by family.
fn ops(changes: &[TableChange]) -> Vec<String> {
    changes
        .iter()
        .flat_map(|c| diff(c.before.as_ref(), c.after.as_ref().unwrap()))
        .map(|op| render_op(&op))
        .collect()
}

fn table(tables: &[Table], family: Family) -> &Table {
    tables.iter().find(|t| t.family == family).unwrap()
}

/// The rules of `cluster-ips-check`, rendered.
fn checks(tables: &[Table], family: Family) -> Vec<String> {
    table(tables, family).chains["cluster-ips-check"]
        .rules
        .iter()
        .map(|r| crate::nft::render::render_rule(r, family))
        .collect()
}

const NO_SERVICE: Option<&BTreeSet<ServiceRef>> = Some(&BTreeSet::new());

#[test]
fn a_service_cidr_change_replans_only_the_cluster_ips_check_chain_of_its_family() {
    let mut planner = Planner::new();
    planner.plan(&cluster(&[]), &config());

    // Created: a flush and refill of one chain of the ip table; no service, set or element.
    let state = cluster(&["10.96.0.0/16"]);
    let changes = planner.changes(&state, &config(), NO_SERVICE);
    assert_eq!(changes.len(), 1, "{changes:?}");
    let after = changes[0].after.as_ref().unwrap();
    assert_eq!(changes[0].family, Family::Ip);
    assert_eq!(
        after.chains.keys().collect::<Vec<_>>(),
        ["cluster-ips-check"]
    );
    assert!(after.sets.is_empty(), "{:?}", after.sets.keys());
    let sent = ops(&changes);
    assert_eq!(sent.len(), 3, "flush + 2 rules: {sent:#?}");
    assert!(sent[0].starts_with("flush chain ip kubenft cluster-ips-check"));
    assert!(sent[2].contains("ip daddr 10.96.0.0/16 drop"), "{sent:#?}");
    assert_eq!(
        planner.tables(),
        build_after(&state, &config(), &planner.blocks())
    );

    // Another range of each family: both tables change, each with its own ranges only.
    let state = cluster(&["10.96.0.0/16", "10.100.0.0/16", "fd00:10:96::/112"]);
    let changes = planner.changes(&state, &config(), NO_SERVICE);
    assert_eq!(changes.len(), 2);
    let tables = planner.tables();
    assert_eq!(
        checks(&tables, Family::Ip)[1..],
        [
            "ip daddr 10.96.0.0/16 drop comment \"drop traffic to unallocated ClusterIPs\"",
            "ip daddr 10.100.0.0/16 drop comment \"drop traffic to unallocated ClusterIPs\"",
        ]
    );
    assert_eq!(
        checks(&tables, Family::Ip6)[1..],
        ["ip6 daddr fd00:10:96::/112 drop comment \"drop traffic to unallocated ClusterIPs\""]
    );
    assert_eq!(tables, build_after(&state, &config(), &planner.blocks()));

    // Deleted: the drop goes, the reject of unused ports of active ClusterIPs stays.
    let state = cluster(&["fd00:10:96::/112"]);
    let changes = planner.changes(&state, &config(), NO_SERVICE);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].family, Family::Ip);
    assert_eq!(checks(&planner.tables(), Family::Ip).len(), 1);
    assert_eq!(
        planner.tables(),
        build_after(&state, &config(), &planner.blocks())
    );

    // Unchanged: nothing, even comparing every service.
    assert!(planner.changes(&state, &config(), None).is_empty());
}

#[test]
fn a_service_cidr_change_and_a_service_change_plan_together() {
    let mut planner = Planner::new();
    planner.plan(&cluster(&[]), &config());
    let mut state = cluster(&["10.96.0.0/16"]);
    let web = state
        .services
        .keys()
        .find(|n| n.name == "web")
        .unwrap()
        .clone();
    state.services.get_mut(&web).unwrap().port = 8080;
    let scope = BTreeSet::from([("demo".to_string(), "web".to_string())]);
    let changes = planner.changes(&state, &config(), Some(&scope));
    assert_eq!(changes.len(), 1);
    let after = changes[0].after.as_ref().unwrap();
    assert!(after.chains.contains_key("cluster-ips-check"));
    assert!(
        after.sets.contains_key("no-endpoint-services"),
        "the service's part too"
    );
    assert_eq!(
        planner.tables(),
        build_after(&state, &config(), &planner.blocks())
    );
}

#[test]
fn the_service_cidr_flag_overrides_the_clusters_service_cidrs() {
    let flagged = ProxyConfig {
        service_cidrs: cidrs(&["10.0.0.0/8"]),
        ..config()
    };
    let tables = build(&cluster(&["10.96.0.0/16", "fd00:10:96::/112"]), &flagged);
    assert_eq!(
        checks(&tables, Family::Ip)[1..],
        ["ip daddr 10.0.0.0/8 drop comment \"drop traffic to unallocated ClusterIPs\""]
    );
    assert_eq!(
        checks(&tables, Family::Ip6).len(),
        1,
        "the flag has no IPv6 range"
    );

    // What the cluster says changes nothing while the flag is set.
    let mut planner = Planner::new();
    planner.plan(&cluster(&["10.96.0.0/16"]), &flagged);
    let changes = planner.changes(&cluster(&["10.97.0.0/16"]), &flagged, NO_SERVICE);
    assert!(changes.is_empty(), "{changes:?}");

    // Without the flag, the cluster's ranges are dropped.
    let tables = build(&cluster(&["10.96.0.0/16"]), &config());
    assert_eq!(checks(&tables, Family::Ip).len(), 2);
}

#[test]
fn the_planned_base_chains_are_those_of_the_planned_tables_with_their_rules() {
    let mut planner = Planner::new();
    assert!(planner.base_chains().is_empty(), "nothing planned yet");
    let tables = planner.plan(&cluster(&["10.96.0.0/16"]), &config());
    let in_tables: Vec<(Family, String, String, usize)> = tables
        .iter()
        .flat_map(|t| {
            t.chains
                .values()
                .filter(|c| c.base.is_some())
                .map(|c| (t.family, t.name.clone(), c.name.clone(), c.rules.len()))
        })
        .collect();
    let mut planned: Vec<(Family, String, String, usize)> = planner
        .base_chains()
        .iter()
        .map(|c| (c.family, c.table.into(), c.chain.into(), c.rules))
        .collect();
    planned.sort();
    let mut expected = in_tables;
    expected.sort();
    assert_eq!(planned, expected);
    assert_eq!(
        planned.len(),
        16,
        "eight base chains in each family's table"
    );
    assert!(planned.iter().all(|c| c.3 > 0), "each jumps somewhere");
}
