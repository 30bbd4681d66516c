//! Property tests over hostile cluster objects: whatever Services and EndpointSlices the API
//! holds (invalid addresses, out-of-range ports, long and unicode names, duplicate ports,
//! colliding ClusterIPs, mixed families, unknown protocols, odd affinity timeouts, conflicting
//! slices), the pipeline objects → model → planner never panics, is deterministic whatever the
//! input order, yields tables the kernel accepts, and leaves the rules of well-formed Services
//! exactly as they would be without the junk.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::Event;
use kubenft::cluster::{ClusterState, LiveState};
use kubenft::daemon::after_sync::{AfterSyncFacts, local_endpoint_facts, udp_frontends};
use kubenft::nft::diff::TableChange;
use kubenft::nft::digest::SetDigest;
use kubenft::nft::fake::FakeKernel;
use kubenft::nft::kernel::apply::batch_bytes;
use kubenft::nft::model::{Chain, Element, MapData, Table, Value as NftValue};
use kubenft::nft::transaction::{ElementStream, Op, SetElements, TableRef, Transaction};
use kubenft::proxier::names::is_pick_slots;
use kubenft::proxier::{Planner, ProxyConfig, ServiceRef, build, build_after};
use kubenft::source::store::{Change, ClusterStore};
use kubenft::sync::creation_transaction;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Generators. Addresses come from small pools so that collisions (two Services on one
// ClusterIP, one endpoint in several slices) are common, mixed with malformed text.

fn ip_text() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => (1u8..6).prop_map(|i| format!("10.96.0.{i}")),
        6 => (1u8..4).prop_map(|i| format!("fd00:96::{i}")),
        1 => Just("None".to_string()),
        1 => Just(String::new()),
        1 => Just("300.1.1.1".to_string()),
        1 => Just("10.96.0.1/24".to_string()),
        1 => "\\PC{0,12}",
    ]
}

fn endpoint_ip_text() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => (1u8..6).prop_map(|i| format!("10.244.1.{i}")),
        3 => (1u8..4).prop_map(|i| format!("fd00:244::{i}")),
        1 => Just("127.0.0.1".to_string()),
        1 => Just("0.0.0.0".to_string()),
        1 => "\\PC{0,12}",
    ]
}

fn port_number() -> impl Strategy<Value = i32> {
    prop_oneof![
        80 => 1i32..=65535,
        1 => Just(0),
        1 => Just(65536),
        1 => Just(-1),
        1 => any::<i32>(),
    ]
}

fn protocol() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        20 => Just(None),
        20 => Just(Some("TCP".to_string())),
        10 => Just(Some("UDP".to_string())),
        3 => Just(Some("SCTP".to_string())),
        1 => Just(Some("tcp".to_string())),
        1 => Just(Some("ICMP".to_string())),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z][a-z0-9-]{0,10}",
        1 => "a{63}",
        1 => "b{64,80}",
        1 => "\\PC{1,20}",
        1 => Just(String::new()),
    ]
}

fn policy() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("Cluster".to_string())),
        Just(Some("Local".to_string())),
        Just(Some("local".to_string())),
    ]
}

/// Port names come mostly from a small pool, so that slices' ports match services' ports.
fn port_name() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        3 => Just(Some("http".to_string())),
        2 => Just(Some("dns".to_string())),
        1 => proptest::option::of(name()),
    ]
}

fn service_port() -> impl Strategy<Value = Value> {
    (
        port_name(),
        port_number(),
        protocol(),
        prop_oneof![3 => Just(None), 1 => proptest::option::of(port_number())],
    )
        .prop_map(|(name, port, protocol, node_port)| {
            json!({"name": name, "port": port, "protocol": protocol, "nodePort": node_port,
                   "targetPort": 8080})
        })
}

/// Empty most of the time: one bad entry rejects its whole object, which would otherwise
/// hide every other path from the properties.
fn sometimes(list: impl Strategy<Value = Vec<String>>) -> impl Strategy<Value = Vec<String>> {
    prop_oneof![3 => Just(Vec::new()), 1 => list]
}

fn service(name: impl Strategy<Value = String>) -> impl Strategy<Value = Value> {
    (
        (
            name,
            prop_oneof![6 => Just("demo".to_string()), 1 => "[a-z]{1,4}", 1 => "\\PC{1,8}"],
        ),
        prop_oneof![
            Just(None),
            Just(Some("ClusterIP")),
            Just(Some("NodePort")),
            Just(Some("LoadBalancer")),
            Just(Some("ExternalName")),
        ],
        proptest::collection::vec(ip_text(), 1..3),
        proptest::collection::vec(service_port(), 1..4),
        sometimes(proptest::collection::vec(ip_text(), 0..3)),
        sometimes(proptest::collection::vec(ip_text(), 0..2)),
        sometimes(proptest::collection::vec(
            prop_oneof![
                4 => Just("192.0.2.0/24".to_string()),
                4 => Just("10.0.0.0/8".to_string()),
                1 => "\\PC{0,10}",
            ],
            0..3,
        )),
        (policy(), policy()),
        (
            prop_oneof![Just(None), Just(Some("ClientIP")), Just(Some("None"))],
            proptest::option::of(any::<i32>()),
            proptest::option::of(port_number()),
        ),
    )
        .prop_map(
            |(
                (name, namespace),
                type_,
                ips,
                ports,
                external,
                ingress,
                ranges,
                (etp, itp),
                (aff, timeout, hc),
            )| {
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "type": type_, "clusterIP": ips.first(), "clusterIPs": ips,
                        "ports": ports, "externalIPs": external,
                        "loadBalancerSourceRanges": ranges,
                        "externalTrafficPolicy": etp, "internalTrafficPolicy": itp,
                        "sessionAffinity": aff,
                        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": timeout}},
                        "healthCheckNodePort": hc,
                    },
                    "status": {"loadBalancer": {"ingress":
                        ingress.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()}},
                })
            },
        )
}

fn slice(services: Vec<String>) -> impl Strategy<Value = Value> {
    (
        name(),
        proptest::sample::select(services),
        prop_oneof![
            8 => Just("IPv4"),
            1 => Just("IPv6"),
            1 => Just("FQDN"),
            1 => Just("bogus"),
        ],
        proptest::collection::vec(
            (port_name(), proptest::option::of(port_number()), protocol()),
            0..3,
        ),
        proptest::collection::vec(
            (
                proptest::collection::vec(endpoint_ip_text(), 1..2),
                proptest::option::of(any::<bool>()),
                proptest::option::of(any::<bool>()),
                proptest::option::of(any::<bool>()),
                prop_oneof![Just(None), Just(Some("node-a")), Just(Some("node-b"))],
                prop_oneof![Just(None), Just(Some("z1")), Just(Some("z2"))],
            ),
            0..6,
        ),
    )
        .prop_map(|(name, service, address_type, ports, endpoints)| {
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "demo",
                             "labels": {"kubernetes.io/service-name": service}},
                "addressType": address_type,
                "ports": ports.iter().map(|(n, p, proto)| json!({"name": n, "port": p, "protocol": proto})).collect::<Vec<_>>(),
                "endpoints": endpoints.iter().map(|(a, ready, serving, term, node, zone)| json!({
                    "addresses": a, "nodeName": node, "zone": zone,
                    "conditions": {"ready": ready, "serving": serving, "terminating": term},
                    "hints": {"forZones": zone.map(|z| vec![json!({"name": z})]).unwrap_or_default()},
                })).collect::<Vec<_>>(),
            })
        })
}

/// A whole cluster: services named from a small pool and slices, most of which are made to
/// belong to one of the services (same name, namespace, port name and protocol), so that the
/// hostile parts meet the happy path instead of replacing it.
fn cluster() -> impl Strategy<Value = (Vec<Value>, Vec<Value>)> {
    let names = || {
        prop_oneof![
            3 => proptest::sample::select(vec!["web", "dns", "api", "db", "cache", "auth"])
                .prop_map(str::to_string),
            1 => name(),
        ]
    };
    (
        proptest::collection::vec(service(names()), 0..6),
        proptest::collection::vec(
            slice(vec![
                "web".into(),
                "dns".into(),
                "api".into(),
                "gone".into(),
            ]),
            0..8,
        ),
        any::<u8>(),
    )
        .prop_map(|(services, mut slices, pick)| {
            for (i, slice) in slices.iter_mut().enumerate() {
                let Some(svc) = services.get((i + pick as usize) % services.len().max(1)) else {
                    break;
                };
                if i % 4 == 3 {
                    continue; // left as generated: an orphan or a mismatch
                }
                slice["metadata"]["namespace"] = svc["metadata"]["namespace"].clone();
                slice["metadata"]["labels"]["kubernetes.io/service-name"] =
                    svc["metadata"]["name"].clone();
                if let (Some(ports), Some(first)) = (
                    slice["ports"].as_array_mut(),
                    svc["spec"]["ports"].as_array().and_then(|p| p.first()),
                ) && let Some(p) = ports.first_mut()
                {
                    p["name"] = first["name"].clone();
                    p["protocol"] = first["protocol"].clone();
                }
            }
            (services, slices)
        })
}

// ---------------------------------------------------------------------------------------------
// The pipeline under test.

fn node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {"podCIDRs": ["10.244.1.0/24", "fd00:244::/64"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                 {"type": "InternalIP", "address": "fd00::1"}]}
    }))
    .unwrap()
}

fn config() -> ProxyConfig {
    ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/48".parse().unwrap(),
        ],
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        ..ProxyConfig::default()
    }
}

/// Objects that the typed API would refuse to deserialize never reach the proxy (the watch
/// decodes them first), so they are dropped here too.
fn typed<T: serde::de::DeserializeOwned>(values: &[Value]) -> Vec<T> {
    values
        .iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .collect()
}

fn plan(services: &[Service], slices: &[EndpointSlice]) -> Vec<Table> {
    let node = node();
    let (state, _rejected) = ClusterState::from_objects(services, slices, Some(&node));
    build(&state, &config())
}

/// Each set's digest as the planner finds it without sorting, against the digest of the set's
/// elements in `tables` (which must be the planner's last plan): the set's name where one
/// differs.
fn planned_digests_differ(planner: &Planner, tables: &[Table]) -> Option<String> {
    tables.iter().find_map(|t| {
        t.sets
            .values()
            .find(|s| planner.digest(t.family, &s.name) != SetDigest::of(&s.elements))
            .map(|s| format!("{:?} {}", t.family, s.name))
    })
}

fn fake_accepts(tables: &[Table]) -> Result<(), String> {
    let tx = kubenft::sync::reconcile_transaction(&[], tables, None);
    FakeKernel::new().apply(&tx).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    #[test]
    fn any_cluster_plans_without_panicking_into_tables_the_fake_kernel_accepts(
        (services, slices) in cluster()
    ) {
        let tables = plan(&typed(&services), &typed(&slices));
        prop_assert!(fake_accepts(&tables).is_ok(), "{:?}", fake_accepts(&tables));
    }

    #[test]
    fn a_plan_handed_out_set_by_set_is_the_whole_plan_and_is_created_by_the_same_batch(
        (services, slices) in cluster()
    ) {
        let node = node();
        let (state, _rejected) =
            ClusterState::from_objects(&typed(&services), &typed(&slices), Some(&node));
        let mut planner = Planner::new();
        let whole = planner.plan(&state, &config());
        prop_assert_eq!(planned_digests_differ(&planner, &whole), None);
        let heads = planner.plan_without_elements(&state, &config());
        let mut filled = heads.clone();
        for t in &mut filled {
            for s in t.sets.values_mut() {
                prop_assert!(s.elements.is_empty());
                s.elements = planner.elements(t.family, &s.name).collect();
                let mut any_order: Vec<_> =
                    planner.elements_in_any_order(t.family, &s.name).collect();
                any_order.sort_by(|a, b| a.key.cmp(&b.key));
                prop_assert_eq!(&any_order, &s.elements, "{} in any order", s.name);
            }
        }
        prop_assert_eq!(&filled, &whole);
        let unfilled =
            creation_transaction(&heads, |t| planner.sets_with_elements(t.family), None);
        let mut fill =
            |t: &TableRef, set: &str| -> ElementStream<'_> { planner.elements(t.family, set) };
        let streamed = batch_bytes(&unfilled, Some(&mut fill)).map_err(|e| e.to_string());
        let mut created = unfilled;
        for op in &mut created.ops {
            if let Op::AddElements { table, set, elements } = op {
                prop_assert!(elements.is_empty());
                *elements = planner.elements(table.family, set).collect();
            }
        }
        let whole_tx = kubenft::sync::reconcile_transaction(&[], &whole, None);
        let whole_batch = batch_bytes(&whole_tx, None).map_err(|e| e.to_string());
        prop_assert!(streamed == whole_batch, "the streamed batch differs");
        prop_assert_eq!(created, whole_tx);
    }

    #[test]
    fn planning_is_deterministic_whatever_the_order_of_the_objects(
        (services, slices) in cluster(), seed in any::<u64>()
    ) {
        let services: Vec<Service> = typed(&services);
        let slices: Vec<EndpointSlice> = typed(&slices);
        let mut shuffled_services = services.clone();
        let mut shuffled_slices = slices.clone();
        shuffle(&mut shuffled_services, seed);
        shuffle(&mut shuffled_slices, seed.rotate_left(17));
        prop_assert_eq!(plan(&services, &slices), plan(&services, &slices));
        prop_assert_eq!(plan(&services, &slices), plan(&shuffled_services, &shuffled_slices));
    }

    /// Junk objects (any Service whose name is not one of the good ones, any slice that
    /// belongs to such a Service) leave every good Service's rules as they are without the
    /// junk: its chains, and its elements in every map. The one thing junk can take from a
    /// good Service is an address it also claims (two Services on one ClusterIP and port),
    /// which the API server never allows; such collisions are kept out of this property and
    /// covered by `colliding_services_still_yield_an_accepted_ruleset`.
    #[test]
    fn junk_objects_never_change_a_well_formed_services_rules(
        junk_services in proptest::collection::vec(service(name()), 0..8),
        junk_slices in proptest::collection::vec(slice(vec!["junk".into(), "gone".into()]), 0..8),
    ) {
        let good_services: Vec<Service> = typed(&good_objects().0);
        let good_slices: Vec<EndpointSlice> = typed(&good_objects().1);
        let junk_services: Vec<Service> = typed::<Service>(&junk_services)
            .into_iter()
            .filter(|s| !s.metadata.name.as_deref().unwrap_or("").starts_with("good-"))
            .map(|mut s| {
                // Keep junk off the good Services' addresses (see the doc comment).
                if let Some(spec) = s.spec.as_mut() {
                    for ip in spec.cluster_ips.iter_mut().flatten().chain(spec.cluster_ip.iter_mut()) {
                        if GOOD_IPS.contains(&ip.as_str()) {
                            *ip = "10.96.9.9".into();
                        }
                    }
                }
                s
            })
            .collect();
        let junk_slices: Vec<EndpointSlice> = typed(&junk_slices);

        let alone = plan(&good_services, &good_slices);
        let mut services = good_services.clone();
        services.extend(junk_services);
        let mut slices = good_slices.clone();
        slices.extend(junk_slices);
        let with_junk = plan(&services, &slices);
        prop_assert!(fake_accepts(&with_junk).is_ok(), "{:?}", fake_accepts(&with_junk));
        prop_assert_eq!(good_parts(&alone), good_parts(&with_junk));
    }

    #[test]
    fn colliding_services_still_yield_an_accepted_ruleset(
        a in service(Just("one".to_string())), b in service(Just("two".to_string())),
        slices in proptest::collection::vec(slice(vec!["one".into(), "two".into()]), 0..4),
    ) {
        let mut a = a;
        let mut b = b;
        // Same addresses and ports for both: only the names differ.
        a["spec"]["clusterIPs"] = json!(["10.96.0.1"]);
        a["spec"]["clusterIP"] = json!("10.96.0.1");
        b["spec"] = a["spec"].clone();
        let services: Vec<Service> = typed(&[a, b]);
        let slices: Vec<EndpointSlice> = typed(&slices);
        let tables = plan(&services, &slices);
        prop_assert!(fake_accepts(&tables).is_ok(), "{:?}", fake_accepts(&tables));
        // Shared keys: the digest counts the element the table keeps.
        let (state, _) =
            ClusterState::from_objects(&services, &slices, Some(&node()));
        let mut planner = Planner::new();
        let planned = planner.plan(&state, &config());
        prop_assert_eq!(planned_digests_differ(&planner, &planned), None);
    }
}

proptest! {
    #![proptest_config(Config { cases: 128, ..Config::default() })]

    /// A planner fed one cluster after another plans the tables a whole build of each makes
    /// with the same endpoint-map blocks, whether it compares every service or is told which
    /// changed, up to which slot of the shared slot maps each endpoint sits in: the planner
    /// keeps slots across plans, where a build lays endpoints out in address order, but the
    /// same endpoints fill slots 0..n-1 and the fallback names slot 0's. Its changes, applied
    /// to a kernel holding the previous tables, find there what they say was there and leave
    /// exactly the new tables.
    #[test]
    fn incremental_plans_equal_whole_builds_and_their_changes_reach_them(
        steps in proptest::collection::vec(
            (
                (cluster(), any::<u32>(), proptest::bool::weighted(0.15), 0u8..3),
                (0..SERVICE_CIDRS.len(), proptest::bool::weighted(0.2)),
            ),
            1..8,
        )
    ) {
        let mut planner = Planner::new();
        let mut kernel = FakeKernel::new();
        let mut previous = ClusterState::default();
        let (mut services, mut slices) = (Vec::new(), Vec::new());
        for (((new_services, new_slices), edits, masquerade_all, scope_kind), (cidrs, flag)) in steps {
            // Each step edits some objects of the last one, so most services stay as they were.
            edit(&mut services, new_services, edits);
            edit(&mut slices, new_slices, edits.rotate_left(16));
            let (mut state, _) = ClusterState::from_objects(
                &typed::<Service>(&services),
                &typed::<EndpointSlice>(&slices),
                Some(&node()),
            );
            // The cluster's ServiceCIDRs change on their own; the flag, when set, overrides them.
            state.service_cidrs = SERVICE_CIDRS[cidrs].iter().map(|c| c.parse().unwrap()).collect();
            let service_cidrs = if flag { config().service_cidrs } else { Vec::new() };
            let config = ProxyConfig { masquerade_all, service_cidrs, ..config() };
            let blocks = planner.blocks();
            let changes = if planner.has_plan() {
                let scope = match scope_kind {
                    0 => None,
                    1 => Some(changed_services(&previous, &state)),
                    _ => Some(every_service(&previous, &state)),
                };
                planner.changes(&state, &config, scope.as_ref())
            } else {
                planner
                    .plan(&state, &config)
                    .into_iter()
                    .map(|t| TableChange { family: t.family, before: None, after: Some(t) })
                    .collect()
            };
            let planned = planner.tables();
            prop_assert_eq!(planned_digests_differ(&planner, &planned), None);
            // Every set the planner fills declares a size its elements fit in.
            for s in planned.iter().flat_map(|t| t.sets.values()) {
                prop_assert_eq!(s.size.is_some(), !s.interval, "{}: {:?}", s.name, s.size);
                let fits = s.size.is_none_or(|n| s.elements.len() <= n as usize);
                prop_assert!(fits || planner.outgrown(), "{} outgrew {:?}", s.name, s.size);
            }
            // The stream a creating sync takes rests on the key owners the partial plans keep.
            for t in &planned {
                for s in t.sets.values() {
                    let mut any_order: Vec<Element> =
                        planner.elements_in_any_order(t.family, &s.name).collect();
                    any_order.sort_by(|a, b| a.key.cmp(&b.key));
                    prop_assert_eq!(&any_order, &s.elements, "{} in any order", s.name);
                }
            }
            let whole = build_after(&state, &config, &blocks);
            let contested = Contested::of(&state);
            prop_assert_eq!(
                in_address_order(&planned, &contested),
                in_address_order(&whole, &contested)
            );
            if let Err(e) = valid_layouts(&planned, &contested) {
                return Err(TestCaseError::fail(e));
            }

            let mut ops = Vec::new();
            for c in &changes {
                if let Some(before) = &c.before {
                    let held = kernel.table(&before.table_ref());
                    prop_assert!(held.is_some_and(|t| holds(t, before)), "{:?} not in the kernel", c.before);
                }
                match (&c.before, &c.after) {
                    (before, Some(after)) => ops.extend(kubenft::nft::diff::plan(before.as_ref(), after)),
                    (Some(before), None) => ops.push(Op::DeleteTable { table: before.table_ref() }),
                    (None, None) => {}
                }
            }
            let applied = kernel.apply(&Transaction { ops, expected_generation: None });
            prop_assert!(applied.is_ok(), "{:?}", applied);
            let held: Vec<Table> = kernel.tables.values().map(|t| {
                let mut t = t.without_handles();
                t.normalize();
                t
            }).collect();
            prop_assert_eq!(held, planned);
            previous = state;
        }
    }
}

/// Frontends (`address . port`, any protocol) more than one service port is reached at (the
/// node's addresses with each NodePort included): there the table holds slots of several
/// layouts, the first owner's where they overlap, so only which slots are filled can be
/// compared with a build.
struct Contested(BTreeSet<(std::net::IpAddr, u16)>);

impl Contested {
    fn of(state: &ClusterState) -> Self {
        let node_ips = state.node.iter().flat_map(|n| &n.internal_ips);
        let mut frontends: BTreeMap<(std::net::IpAddr, u16), usize> = BTreeMap::new();
        for sp in state.services.values() {
            let addresses = sp
                .cluster_ips
                .iter()
                .chain(&sp.external_ips)
                .chain(&sp.load_balancer_ips);
            let node_ports = sp
                .node_port
                .into_iter()
                .flat_map(|np| node_ips.clone().map(move |ip| (*ip, np)));
            for frontend in addresses.map(|ip| (*ip, sp.port)).chain(node_ports) {
                *frontends.entry(frontend).or_default() += 1;
            }
        }
        Contested(
            frontends
                .into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(f, _)| f)
                .collect(),
        )
    }

    /// Whether the frontend `key` starts with (`address . protocol . port`) is contested.
    fn has(&self, key: &[NftValue]) -> bool {
        let ip = match &key[0] {
            NftValue::Ipv4(a) => std::net::IpAddr::V4(*a),
            NftValue::Ipv6(a) => std::net::IpAddr::V6(*a),
            other => panic!("a frontend address: {other:?}"),
        };
        let NftValue::Port(port) = key[2] else {
            panic!("a frontend port: {:?}", key[2]);
        };
        self.0.contains(&(ip, port))
    }
}

/// The frontend part (`address . protocol . port`) of a slot element's key.
fn frontend_of(e: &Element) -> Vec<NftValue> {
    e.key[..3].to_vec()
}

/// `tables` with each frontend's endpoints in the shared slot maps sorted over its slots and
/// its `pick-fallback` element naming the first: the same for any two layouts of the same
/// endpoints. At contested frontends, only the keys are kept.
fn in_address_order(tables: &[Table], contested: &Contested) -> Vec<Table> {
    tables
        .iter()
        .map(|t| {
            let mut t = t.clone();
            let mut firsts: BTreeMap<Vec<NftValue>, Option<MapData>> = BTreeMap::new();
            for set in t.sets.values_mut().filter(|s| is_pick_slots(&s.name)) {
                // Sorted by key: each frontend's slots are adjacent and in slot order.
                let mut start = 0;
                while start < set.elements.len() {
                    let frontend = frontend_of(&set.elements[start]);
                    let end = start
                        + set.elements[start..]
                            .iter()
                            .take_while(|e| frontend_of(e) == frontend)
                            .count();
                    let slots = &mut set.elements[start..end];
                    let mut data: Vec<Option<MapData>> =
                        slots.iter().map(|e| e.data.clone()).collect();
                    if contested.has(&frontend) {
                        data.iter_mut().for_each(|d| *d = None);
                    }
                    data.sort();
                    for (e, d) in slots.iter_mut().zip(data) {
                        e.data = d;
                    }
                    firsts.insert(frontend, slots[0].data.clone());
                    start = end;
                }
            }
            if let Some(fallback) = t.sets.get_mut("pick-fallback") {
                for e in &mut fallback.elements {
                    if let Some(first) = firsts.get(&e.key) {
                        e.data = first.clone();
                    }
                }
            }
            t
        })
        .collect()
}

/// Whether every uncontested frontend of the shared slot maps `pick-M-slots` fills slots
/// 0..n-1 with n distinct endpoints, M/2 < n <= M, and its `pick-fallback` element names the
/// endpoint of slot 0.
fn valid_layouts(tables: &[Table], contested: &Contested) -> Result<(), String> {
    for t in tables {
        let fallback: BTreeMap<&[NftValue], &Option<MapData>> = t
            .sets
            .get("pick-fallback")
            .into_iter()
            .flat_map(|s| &s.elements)
            .map(|e| (e.key.as_slice(), &e.data))
            .collect();
        for set in t.sets.values().filter(|s| is_pick_slots(&s.name)) {
            let m: u32 = set.name["pick-".len()..set.name.len() - "-slots".len()]
                .parse()
                .unwrap();
            let mut by_frontend: BTreeMap<Vec<NftValue>, Vec<&Element>> = BTreeMap::new();
            for e in &set.elements {
                by_frontend.entry(frontend_of(e)).or_default().push(e);
            }
            for (frontend, slots) in by_frontend.iter().filter(|(f, _)| !contested.has(f)) {
                let n = slots.len() as u32;
                let numbers: Vec<&NftValue> = slots.iter().map(|e| &e.key[3]).collect();
                let expected: Vec<NftValue> = (0..n).map(NftValue::Mark).collect();
                let distinct: BTreeSet<&Option<MapData>> = slots.iter().map(|e| &e.data).collect();
                let fits = n <= m && (m == 1 || n > m / 2);
                if !numbers.iter().copied().eq(&expected) || distinct.len() != slots.len() || !fits
                {
                    return Err(format!(
                        "{} {frontend:?}: slots {numbers:?} of {m}",
                        set.name
                    ));
                }
                if fallback.get(frontend.as_slice()) != Some(&&slots[0].data) {
                    return Err(format!(
                        "{frontend:?}: the fallback is not slot 0's endpoint"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Element operations (elements added or deleted) of `ops`.
fn element_operations(ops: &[Op]) -> usize {
    ops.iter()
        .map(|op| match op {
            Op::AddElements { elements, .. } | Op::DeleteElements { elements, .. } => {
                elements.len()
            }
            _ => 0,
        })
        .sum()
}

proptest! {
    #![proptest_config(Config { cases: 48, ..Config::default() })]

    /// Replacing one endpoint of a Service in a shared pick chain by a new one whose address
    /// sorts last (as a rolling update's new pod's often does) costs a bounded number of
    /// element operations, whatever the Service's size: a delete and an add of the replaced
    /// slot at each frontend, of the fallback where the slot was 0, and of its hairpin element.
    #[test]
    fn replacing_one_endpoint_costs_the_same_few_element_operations_at_any_size(
        n in 2usize..400,
        replaced in proptest::collection::vec(any::<prop::sample::Index>(), 1..6),
    ) {
        let svc = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "externalIPs": ["192.0.2.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP",
                                "targetPort": 8080, "nodePort": 30080}]}});
        let slice = |ips: &[String]| json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "demo",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
                .collect::<Vec<_>>()});
        let state_of = |ips: &[String]| {
            ClusterState::from_objects(
                &typed::<Service>(std::slice::from_ref(&svc)),
                &typed::<EndpointSlice>(&[slice(ips)]),
                Some(&node()),
            )
            .0
        };
        let mut ips: Vec<String> = (0..n).map(|i| format!("10.244.{}.{}", i / 200, i % 200 + 1)).collect();
        let mut planner = Planner::new();
        let tables = planner.plan(&state_of(&ips), &config());
        let frontends = tables.iter().filter_map(|t| t.sets.get("pick-fallback")).map(|s| s.elements.len()).sum::<usize>();
        prop_assert!(frontends >= 3, "ClusterIP, external IP, NodePort: {frontends}");
        for (round, i) in replaced.iter().enumerate() {
            ips[i.index(n)] = format!("10.250.0.{}", round + 1);
            let state = state_of(&ips);
            let ops: Vec<Op> = planner
                .changes(&state, &config(), None)
                .iter()
                .flat_map(|c| kubenft::nft::diff::plan(c.before.as_ref(), c.after.as_ref().unwrap()))
                .collect();
            let elements = element_operations(&ops);
            prop_assert!(
                elements <= 4 * frontends + 2,
                "{elements} element operations at {n} endpoints and {frontends} frontends"
            );
            let contested = Contested::of(&state);
            if let Err(e) = valid_layouts(&planner.tables(), &contested) {
                return Err(TestCaseError::fail(e));
            }
        }
    }
}

/// Service CIDRs a cluster's ServiceCIDR objects may declare, one choice per plan.
const SERVICE_CIDRS: [&[&str]; 4] = [
    &[],
    &["10.96.0.0/16"],
    &["10.96.0.0/16", "fd00:96::/112"],
    &["10.97.0.0/16", "10.100.0.0/16"],
];

/// Keeps, replaces, deletes or adds objects of `current`, two bits of `edits` choosing for each
/// object of `new`.
fn edit(current: &mut Vec<Value>, new: Vec<Value>, edits: u32) {
    for (i, object) in new.into_iter().enumerate().take(16) {
        match (edits >> (2 * i)) & 3 {
            0 => {}
            1 if i < current.len() => current[i] = object,
            2 if i < current.len() => {
                current.remove(i);
            }
            _ => current.push(object),
        }
    }
}

/// Whether `table` holds every chain of `part` as it is and every element of its sets.
fn holds(table: &Table, part: &Table) -> bool {
    part.chains.iter().all(|(n, c)| {
        table.chains.get(n).is_some_and(|t| {
            t.rules
                .iter()
                .map(|r| (&r.stmts, &r.comment))
                .eq(c.rules.iter().map(|r| (&r.stmts, &r.comment)))
        })
    }) && part.sets.iter().all(|(n, s)| {
        table
            .sets
            .get(n)
            .is_some_and(|t| s.elements.iter().all(|e| t.elements.contains(e)))
    })
}

/// Services (namespace, name) with a port or endpoints that differ between `a` and `b`.
fn changed_services(a: &ClusterState, b: &ClusterState) -> BTreeSet<ServiceRef> {
    a.services
        .keys()
        .chain(b.services.keys())
        .filter(|n| {
            a.services.get(*n) != b.services.get(*n) || a.endpoints.get(*n) != b.endpoints.get(*n)
        })
        .map(|n| (n.namespace.clone(), n.name.clone()))
        .collect()
}

fn every_service(a: &ClusterState, b: &ClusterState) -> BTreeSet<ServiceRef> {
    a.services
        .keys()
        .chain(b.services.keys())
        .map(|n| (n.namespace.clone(), n.name.clone()))
        .collect()
}

const GOOD_IPS: [&str; 2] = ["10.96.0.1", "10.96.0.2"];

fn good_objects() -> (Vec<Value>, Vec<Value>) {
    let svc = |name: &str, ip: &str, port: u16| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": "demo"},
               "spec": {"type": "NodePort", "clusterIP": ip, "clusterIPs": [ip],
                        "ports": [{"name": "http", "port": port, "protocol": "TCP",
                                   "targetPort": 8080, "nodePort": 30000 + port}]}})
    };
    let slice = |name: &str, ips: &[&str]| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{name}-1"), "namespace": "demo",
                            "labels": {"kubernetes.io/service-name": name}},
               "addressType": "IPv4",
               "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
               "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "nodeName": "node-a",
                                                         "conditions": {"ready": true}}))
                   .collect::<Vec<_>>()})
    };
    (
        vec![
            svc("good-a", GOOD_IPS[0], 80),
            svc("good-b", GOOD_IPS[1], 443),
        ],
        vec![
            slice("good-a", &["10.244.7.1", "10.244.7.2"]),
            slice("good-b", &["10.244.7.3"]),
        ],
    )
}

/// What belongs to the good Services: their chains, and every map element that names them.
fn good_parts(tables: &[Table]) -> BTreeMap<String, (Vec<Chain>, Vec<Element>)> {
    let mut parts = BTreeMap::new();
    for t in tables {
        let chains: Vec<Chain> = t
            .chains
            .values()
            .filter(|c| c.name.contains("demo/good-"))
            .cloned()
            .collect();
        let elements: Vec<Element> = t
            .sets
            .values()
            .flat_map(|s| s.elements.iter())
            .filter(|e| {
                e.comment
                    .as_deref()
                    .is_some_and(|c| c.contains("demo/good-"))
                    || e.data
                        .as_ref()
                        .is_some_and(|d| format!("{d:?}").contains("demo/good-"))
            })
            .cloned()
            .collect();
        parts.insert(format!("{:?}", t.family), (chains, elements));
    }
    parts
}

fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

/// The real kernel accepts every generated cluster's tables: one namespace for the whole run,
/// each case synced from the previous case's tables by the daemon's engine (a diff), so both
/// cold additions and arbitrary transitions are exercised.
#[test]
fn the_kernel_accepts_every_generated_ruleset_and_every_transition_between_them() {
    if !kubenft::netns::can_create() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let ns = kubenft::netns::Netns::create("props").unwrap();
    ns.run(|| {
        let nft = kubenft::nft::kernel::Nftables::open().unwrap();
        let syncer = std::cell::RefCell::new(kubenft::sync::Syncer::new(nft, "kubenft"));
        let mut runner = TestRunner::new(Config {
            cases: 64,
            ..Config::default()
        });
        runner
            .run(&cluster(), |(services, slices)| {
                let tables = plan(&typed(&services), &typed(&slices));
                let mut s = syncer.borrow_mut();
                let report = s.sync(tables.clone(), false);
                prop_assert!(report.is_ok(), "kernel refused: {}", report.unwrap_err());
                // And a full sync right after reads back exactly what was committed.
                let again = s.sync(tables.clone(), true).unwrap();
                prop_assert_eq!(again.ops, 0, "the kernel holds exactly the planned tables");
                Ok(())
            })
            .unwrap();
    })
    .unwrap();
}

#[test]
fn one_service_with_a_thousand_ports_and_a_slice_of_ten_thousand_endpoints_is_planned() {
    let ports: Vec<Value> = (1..=1000)
        .map(|p| json!({"name": format!("p{p}"), "port": p, "protocol": "TCP", "targetPort": p}))
        .collect();
    let svc = json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "big", "namespace": "demo"},
                     "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "ports": ports}});
    let endpoints: Vec<Value> = (0..10_000u32)
        .map(|i| {
            json!({"addresses": [format!("10.{}.{}.{}", 100 + (i >> 16), (i >> 8) & 255, i & 255)],
                        "conditions": {"ready": true}})
        })
        .collect();
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                       "metadata": {"name": "big-1", "namespace": "demo",
                                    "labels": {"kubernetes.io/service-name": "big"}},
                       "addressType": "IPv4",
                       "ports": [{"name": "p1", "port": 1, "protocol": "TCP"}],
                       "endpoints": endpoints});
    let tables = plan(&typed(&[svc]), &typed(&[slice]));
    assert!(fake_accepts(&tables).is_ok());
    let t = &tables[0];
    let slots: usize = t
        .sets
        .values()
        .filter(|s| kubenft::proxier::names::is_endpoint_map(&s.name))
        .map(|s| s.elements.len())
        .sum();
    assert_eq!(slots, 10_000);
}

/// Guards the generators themselves: hostile input must not crowd out the happy path, or the
/// properties above would only ever see rejected objects.
#[test]
fn a_fair_share_of_generated_clusters_proxy_services_with_endpoints() {
    // A fixed seed: this measures the generators, it must not flake.
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 200,
            ..Config::default()
        },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let proxied = std::cell::Cell::new(0usize);
    runner
        .run(&cluster(), |(services, slices)| {
            let tables = plan(&typed(&services), &typed(&slices));
            // An endpoint chain (ClientIP affinity) or a slot in an endpoint or slot map.
            let with_endpoints = tables.iter().any(|t| {
                t.chains.keys().any(|c| c.starts_with("endpoint-"))
                    || t.sets.values().any(|s| {
                        (kubenft::proxier::names::is_endpoint_map(&s.name)
                            || kubenft::proxier::names::is_pick_slots(&s.name))
                            && !s.elements.is_empty()
                    })
            });
            proxied.set(proxied.get() + with_endpoints as usize);
            Ok(())
        })
        .unwrap();
    // 26 of 200 with this seed; far fewer would mean a generator change starved the happy path.
    assert!(
        proxied.get() >= 20,
        "only {} of 200 clusters proxy anything",
        proxied.get()
    );
}

proptest! {
    #![proptest_config(Config { cases: 128, ..Config::default() })]

    /// A store fed watch events (applies, deletes, re-lists; slices moving between services;
    /// one name with and without a namespace) keeps a model, converted service by service as
    /// objects change, equal to converting every object it holds: same ports, endpoints and
    /// rejections. This is what lets the daemon convert only changed services.
    #[test]
    fn a_model_kept_up_to_date_by_store_events_equals_converting_every_object(
        steps in proptest::collection::vec((cluster(), any::<u32>(), 0u8..4), 1..10)
    ) {
        let mut store = ClusterStore::default();
        let mut live = LiveState::default();
        // What the API holds after each step, kept here as the API would: by namespace and
        // name as written (no namespace is a name of its own), the last object written.
        let mut api_services: BTreeMap<String, Service> = BTreeMap::new();
        let mut api_slices: BTreeMap<String, EndpointSlice> = BTreeMap::new();
        for ((services, slices), bits, mode) in steps {
            let mut services: Vec<Service> = typed(&services);
            let mut slices: Vec<EndpointSlice> = typed(&slices);
            // Few names, so events meet objects already stored and slices change service.
            for (i, s) in services.iter_mut().enumerate() {
                if (bits >> i) & 1 == 1 {
                    s.metadata.namespace = None;
                }
            }
            for (i, s) in slices.iter_mut().enumerate() {
                s.metadata.name = Some(format!("slice-{}", (i as u32 + bits) % 4));
            }
            match mode {
                // A re-list of one kind.
                0 => {
                    api_services = by_key(services.clone());
                    relist(&mut store, ClusterStore::apply_service, services);
                }
                1 => {
                    api_slices = by_key(slices.clone());
                    relist(&mut store, ClusterStore::apply_endpoint_slice, slices);
                }
                // Watch events: each object applied, or deleted by its key.
                _ => {
                    for (i, s) in services.into_iter().enumerate() {
                        let delete = bits >> (i + 8) & 1 == 1;
                        write(&mut api_services, &s, delete);
                        store.apply_service(watch_event(s, delete));
                    }
                    for (i, s) in slices.into_iter().enumerate() {
                        let delete = bits >> (i + 16) & 1 == 1;
                        write(&mut api_slices, &s, delete);
                        store.apply_endpoint_slice(watch_event(s, delete));
                    }
                }
            }
            store.update_model(&mut live, "node-a");
            let (whole, rejected) = ClusterState::from_objects(
                &api_services.values().cloned().collect::<Vec<_>>(),
                &api_slices.values().cloned().collect::<Vec<_>>(),
                None,
            );
            prop_assert_eq!(&live.state, &whole);
            let mut kept: Vec<String> = live.rejected().map(|r| format!("{r:?}")).collect();
            let mut all: Vec<String> = rejected.iter().map(|r| format!("{r:?}")).collect();
            kept.sort();
            all.sort();
            prop_assert_eq!(kept, all);
        }
    }
}

fn relist<K>(
    store: &mut ClusterStore,
    apply: fn(&mut ClusterStore, Event<K>) -> Change,
    objects: Vec<K>,
) {
    apply(store, Event::Init);
    for o in objects {
        apply(store, Event::InitApply(o));
    }
    apply(store, Event::InitDone);
}

/// An object's key in the API: its namespace as written (none is its own) and its name.
fn api_key<K: kube::Resource>(object: &K) -> String {
    let meta = object.meta();
    let namespace = meta.namespace.as_deref().unwrap_or("");
    format!("{namespace}/{}", meta.name.as_deref().unwrap_or(""))
}

/// `objects` as the API holds them after they were written in turn: the last one of each key.
fn by_key<K: kube::Resource>(objects: Vec<K>) -> BTreeMap<String, K> {
    objects.into_iter().map(|o| (api_key(&o), o)).collect()
}

/// `object` written to (or deleted from) `api`.
fn write<K: kube::Resource + Clone>(api: &mut BTreeMap<String, K>, object: &K, delete: bool) {
    if delete {
        api.remove(&api_key(object));
    } else {
        api.insert(api_key(object), object.clone());
    }
}

fn watch_event<K>(object: K, delete: bool) -> Event<K> {
    if delete {
        Event::Delete(object)
    } else {
        Event::Apply(object)
    }
}

/// The slices with a zone hint on every endpoint (z2 where there was none), so that topology
/// routing applies and a node moving zones changes which endpoints are used.
fn zone_hinted(slices: &[Value]) -> Vec<Value> {
    let mut slices = slices.to_vec();
    for slice in &mut slices {
        for endpoint in slice["endpoints"].as_array_mut().into_iter().flatten() {
            if endpoint["hints"]["forZones"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                endpoint["hints"] = json!({"forZones": [{"name": "z2"}]});
            }
        }
    }
    slices
}

fn node_in(zone: Option<&str>) -> Node {
    let mut node = node();
    if let Some(labels) = node.metadata.labels.as_mut() {
        labels.clear();
        if let Some(zone) = zone {
            labels.insert("topology.kubernetes.io/zone".into(), zone.into());
        }
    }
    node
}

proptest! {
    #![proptest_config(Config { cases: 128, ..Config::default() })]

    /// The after-sync facts, told after each sync which services changed (and after a failed
    /// sync told nothing new until the next success), hold the same UDP frontends,
    /// healthCheckNodePorts and no-local-endpoint counts as deriving them from every service
    /// again; also when the node moves to another zone.
    #[test]
    fn after_sync_facts_kept_service_by_service_equal_deriving_them_from_scratch(
        steps in proptest::collection::vec(
            (cluster(), any::<u32>(), proptest::bool::weighted(0.25), 0u8..4),
            1..8,
        )
    ) {
        let hostname = config().hostname;
        let mut facts = AfterSyncFacts::new(&hostname);
        let mut previous = ClusterState::default();
        let (mut services, mut slices) = (Vec::new(), Vec::new());
        for ((new_services, new_slices), edits, sync_fails, zone) in steps {
            edit(&mut services, new_services, edits);
            edit(&mut slices, new_slices, edits.rotate_left(16));
            let zone = match zone { 0 => None, 1 => Some("z2"), _ => Some("z1") };
            let (state, _) = ClusterState::from_objects(
                &typed::<Service>(&services),
                &typed::<EndpointSlice>(&zone_hinted(&slices)),
                Some(&node_in(zone)),
            );
            facts.changed(&changed_services(&previous, &state));
            previous = state.clone();
            if sync_fails {
                continue;
            }
            facts.update(&state);
            prop_assert_eq!(facts.frontends(), &udp_frontends(&state));
            let (checks, counts) = local_endpoint_facts(&state, &hostname);
            prop_assert_eq!(facts.health_checks(), checks);
            prop_assert_eq!(facts.no_local_endpoints(), counts);
        }
    }
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    /// The store keeps objects compactly, with only the fields the model reads: converting
    /// what it holds gives the model, rejections included, that converting the objects as the
    /// API sent them gives (one object per name, the last one, as the API holds them).
    #[test]
    fn the_store_keeps_every_field_the_model_reads(objects in cluster()) {
        let (services, slices): (Vec<Service>, Vec<EndpointSlice>) =
            (typed(&objects.0), typed(&objects.1));
        let mut store = ClusterStore::default();
        for s in &services {
            store.apply_service(Event::Apply(s.clone()));
        }
        for s in &slices {
            store.apply_endpoint_slice(Event::Apply(s.clone()));
        }
        let mut live = LiveState::default();
        store.update_model(&mut live, "node-a");
        let (as_sent, sent_rejected) = ClusterState::from_objects(
            &last_of_each_name(services),
            &last_of_each_name(slices),
            None,
        );
        prop_assert_eq!(&live.state, &as_sent);
        let texts = |r: Vec<&kubenft::cluster::Rejected>| {
            let mut t: Vec<String> = r.iter().map(|r| format!("{r:?}")).collect();
            t.sort();
            t
        };
        prop_assert_eq!(
            texts(live.rejected().collect()),
            texts(sent_rejected.iter().collect())
        );
    }
}

/// The objects as the API would hold them: one per namespace and name, the last one written.
fn last_of_each_name<K: kube::Resource>(objects: Vec<K>) -> Vec<K> {
    by_key(objects).into_values().collect()
}
