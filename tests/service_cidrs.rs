//! The cluster's ServiceCIDR objects drive the drop of traffic to unallocated ClusterIPs, end to
//! end: the real daemon watches them on the test API server and the kernel's table follows
//! every create, change and delete, with partial syncs; a bad CIDR is skipped, logged and
//! counted; `--service-cidr` overrides them; and real traffic to an unallocated address in a
//! service CIDR, which the node would otherwise route on, is dropped.

use crate::common;
use crate::explain_harness;
use crate::harness;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Outcome, Topology, serve, sh, try_request};
use harness::*;
use kubenft::access::API_ACCESS;
use kubenft_testkit::{Kind, RecordedRequest};
use serde_json::{Value, json};

fn service_cidr(name: &str, cidrs: &[&str]) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
           "metadata": {"name": name}, "spec": {"cidrs": cidrs}})
}

/// The ranges the kernel's `cluster-ips-check` chain of `ip kubenft` drops, in rule order, read
/// with `nft -j`.
fn dropped_ranges(topo: &Topology) -> Vec<String> {
    let out = topo
        .node
        .exec(&[
            "nft",
            "-j",
            "list",
            "chain",
            "ip",
            "kubenft",
            "cluster-ips-check",
        ])
        .unwrap();
    let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rules = listing["nftables"].as_array().unwrap().iter();
    rules
        .filter_map(|item| item.get("rule"))
        .filter(|rule| {
            let exprs = rule["expr"].as_array().unwrap();
            exprs.iter().any(|e| e.get("drop").is_some())
        })
        .map(|rule| {
            let exprs = rule["expr"].as_array().unwrap();
            let prefix = exprs
                .iter()
                .find_map(|e| e["match"]["right"].get("prefix"))
                .unwrap_or_else(|| panic!("a drop rule without a prefix match: {rule}"));
            format!("{}/{}", prefix["addr"].as_str().unwrap(), prefix["len"])
        })
        .collect()
}

fn wait_for_ranges(topo: &Topology, expected: &[&str]) {
    eventually(
        Duration::from_secs(10),
        &format!("the kernel drops {expected:?}"),
        || (dropped_ranges(topo) == expected).then_some(()),
    );
}

fn metrics(topo: &Topology) -> String {
    let (status, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics").unwrap();
    assert_eq!(status, 200);
    page
}

fn full_syncs(topo: &Topology) -> f64 {
    metric(
        &metrics(topo),
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
    )
    .unwrap()
}

/// (API group, resource, verb) of a request as RBAC names it.
fn rbac_of(request: &RecordedRequest) -> (String, String, String) {
    let parts: Vec<&str> = request.path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts[..] {
        ["api", _version, ref rest @ ..] => ("", rest),
        ["apis", group, _version, ref rest @ ..] => (group, rest),
        _ => panic!("not an API path: {}", request.path),
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] => rest,
        rest => rest,
    };
    let verb = match (request.method.as_str(), rest.len(), request.is_watch()) {
        ("POST", _, _) => "create",
        ("PATCH", _, _) => "patch",
        ("PUT", _, _) => "update",
        ("DELETE", 1, _) => "deletecollection",
        ("DELETE", _, _) => "delete",
        (_, _, true) => "watch",
        (_, 1, false) => "list",
        _ => "get",
    };
    (group.into(), rest[0].into(), verb.into())
}

#[test]
fn the_clusters_service_cidrs_drive_the_drop_of_unallocated_cluster_ips() {
    let Some((topo, api)) = lab("scidA") else {
        return;
    };
    // Something on the network beyond the node answers at an address of the service range, so
    // a connection there succeeds unless the node drops it.
    sh(&topo.upstream, "ip addr add 10.96.0.99/32 dev lo");
    sh(&topo.upstream, "ip route add 10.0.0.0/24 via 10.255.0.1");
    let _beyond = serve(&topo.upstream, "beyond");
    const UNALLOCATED: &str = "10.96.0.99:8080";

    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    assert_eq!(dropped_ranges(&topo), Vec::<String>::new());
    assert_eq!(
        backend(&topo, UNALLOCATED).as_deref(),
        Some("beyond"),
        "without a service CIDR the node routes the address on"
    );
    // `kubenft explain` says so too, and then that the node drops it.
    let beyond = |ip: &str| match ip {
        "10.96.0.99" => Some("beyond".to_string()),
        other => explain_harness::pod_backend(other),
    };
    let explained_beyond = || {
        explain_harness::assert_explained(
            &topo.node,
            &topo.client,
            "10.0.0.2",
            UNALLOCATED,
            4,
            0.25,
            &beyond,
        )
    };
    assert!(explained_beyond()["untranslated"].is_object());
    let full = full_syncs(&topo);

    // Created: the range is dropped, and traffic to its unallocated address with it.
    api.apply(service_cidr(
        "kubernetes",
        &["10.96.0.0/16", "fd00:10:96::/112"],
    ));
    wait_for_ranges(&topo, &["10.96.0.0/16"]);
    assert_eq!(
        try_request(&topo.client, addr(UNALLOCATED)),
        Outcome::TimedOut
    );
    assert_eq!(
        explained_beyond()["dropped"]["kind"],
        "unallocated-cluster-ip"
    );
    assert_eq!(
        backend(&topo, WEB).as_deref(),
        Some("pod-1"),
        "services still served"
    );

    // A second object adds its range; a changed object replaces its own.
    api.apply(service_cidr("extra", &["10.100.0.0/16"]));
    wait_for_ranges(&topo, &["10.96.0.0/16", "10.100.0.0/16"]);
    api.apply(service_cidr("kubernetes", &["10.97.0.0/16"]));
    wait_for_ranges(&topo, &["10.97.0.0/16", "10.100.0.0/16"]);
    assert_eq!(backend(&topo, UNALLOCATED).as_deref(), Some("beyond"));

    // A CIDR that does not parse is skipped, logged and counted; the object's others count.
    api.apply(service_cidr("broken", &["10.96.0.0/33", "10.96.0.0/16"]));
    wait_for_ranges(&topo, &["10.96.0.0/16", "10.97.0.0/16", "10.100.0.0/16"]);
    let log = daemon.log();
    assert!(
        log.lines().any(|l| l.contains("ServiceCIDR")
            && l.contains("invalid CIDR")
            && l.contains("10.96.0.0/33")),
        "{log}"
    );
    let rejected = metric(
        &metrics(&topo),
        "kubenft_objects_rejected_total{kind=\"ServiceCIDR\"}",
    );
    assert_eq!(rejected, Some(1.0));

    // Deleted: the drops go with their objects.
    for name in ["broken", "kubernetes", "extra"] {
        api.server.delete(Kind::ServiceCIDR, None, name).unwrap();
    }
    wait_for_ranges(&topo, &[]);
    assert_eq!(backend(&topo, UNALLOCATED).as_deref(), Some("beyond"));
    assert_eq!(
        full_syncs(&topo),
        full,
        "every ServiceCIDR change was a partial sync"
    );

    // The daemon used exactly the API access it declares: ServiceCIDRs are listed and watched,
    // and nothing it asked for is missing from the ClusterRole's source.
    let declared: BTreeSet<(String, String, String)> = API_ACCESS
        .iter()
        .flat_map(|a| {
            a.verbs
                .iter()
                .map(|v| (a.group.to_string(), a.resource.to_string(), v.to_string()))
        })
        .collect();
    let used: BTreeSet<_> = api.server.requests().iter().map(rbac_of).collect();
    assert!(used.is_subset(&declared), "{used:?} not in {declared:?}");
    for verb in ["list", "watch"] {
        let wanted = (
            "networking.k8s.io".into(),
            "servicecidrs".into(),
            verb.into(),
        );
        assert!(used.contains(&wanted), "{used:?}");
    }
}

#[test]
fn the_service_cidr_flag_overrides_the_clusters_service_cidrs() {
    let Some((topo, api)) = lab("scidF") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    api.apply(service_cidr("kubernetes", &["10.96.0.0/16"]));
    let _daemon = start_daemon(&topo, &api, &["--service-cidr", "10.96.0.0/12"]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    assert_eq!(dropped_ranges(&topo), ["10.96.0.0/12"]);

    // A change of the cluster's ranges, then a new Service as a marker that the daemon has
    // seen and synced everything before it: the flag's range is still the only one.
    api.apply(service_cidr("kubernetes", &["10.97.0.0/16"]));
    api.apply(service_cidr("extra", &["10.100.0.0/16"]));
    api.apply(service("api", "10.96.0.11", 8081));
    api.apply(slice("api", &[2]));
    wait_for_backends(
        &topo,
        "10.96.0.11:8081",
        &["pod-2"],
        Duration::from_secs(10),
    );
    assert_eq!(dropped_ranges(&topo), ["10.96.0.0/12"]);
}
