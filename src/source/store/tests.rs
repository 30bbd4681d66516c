use super::*;
use crate::cluster::SERVICE_NAME_LABEL;
use crate::cluster::kept::LAST_CHANGE_TRIGGER_TIME;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn svc(name: &str, port: i32) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn names<K: Kept<Object = Service> + kube::Resource>(store: &KindStore<K>) -> Vec<String> {
    store
        .objects()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect()
}

#[test]
fn member_keys_stay_sorted_and_unique_whatever_their_text() {
    let mut keys = Keys::default();
    let long = format!("demo/{}", "x".repeat(250));
    for key in [
        "demo/web-2",
        "12:demo/odd",
        &long,
        "demo/web-1",
        "",
        "demo/web-2",
    ] {
        keys.insert(key);
    }
    let all: Vec<&str> = keys.iter().collect();
    assert_eq!(all, ["", "12:demo/odd", "demo/web-1", "demo/web-2", &long]);
    keys.remove(&long);
    keys.remove("demo/web-1");
    keys.remove("demo/absent");
    let all: Vec<&str> = keys.iter().collect();
    assert_eq!(all, ["", "12:demo/odd", "demo/web-2"]);
    let owned: Vec<String> = all.iter().map(|k| k.to_string()).collect();
    for key in &owned {
        keys.remove(key);
    }
    assert!(keys.is_empty());
}

#[test]
fn a_relist_in_progress_keeps_the_previous_objects_live() {
    let mut store = KindStore::default();
    store.apply(Event::Init);
    store.apply(Event::InitApply(svc("a", 80)));
    store.apply(Event::InitApply(svc("b", 80)));
    assert!(!store.synced(), "not synced before InitDone");
    assert!(store.is_empty(), "nothing live before the first InitDone");
    assert_eq!(store.apply(Event::InitDone), Change::Changed);
    assert_eq!(names(&store), ["a", "b"]);

    // A watch restart: the old objects stay until the new list is complete.
    assert_eq!(store.apply(Event::Init), Change::Buffered);
    assert_eq!(
        store.apply(Event::InitApply(svc("b", 81))),
        Change::Buffered
    );
    assert_eq!(names(&store), ["a", "b"]);
    store.apply(Event::InitDone);
    assert_eq!(names(&store), ["b"], "a vanished during the outage");
    assert_eq!(
        store
            .objects()
            .next()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()[0]
            .port,
        81
    );
}

#[test]
fn objects_come_back_with_what_the_model_reads_as_received_and_nothing_else() {
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "demo", "uid": "7c8a0f2e", "resourceVersion": "12345",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                            "kubenft.io/consistent-endpoint": " client"},
            "managedFields": [{"manager": "kubectl"}]},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.010", "clusterIPs": ["10.96.0.010"],
            "selector": {"app": "web"}, "externalIPs": ["not an address"],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080,
                       "targetPort": 8080}],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "hostname": "lb"},
                                                 {"ip": "192.0.2.2", "ipMode": "Proxy"}]}}
    }))
    .unwrap();
    let expected: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "demo",
            "annotations": {"kubenft.io/consistent-endpoint": " client"}},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.010", "clusterIPs": ["10.96.0.010"],
            "externalIPs": ["not an address"],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"},
                                                 {"ip": "192.0.2.2", "ipMode": "Proxy"}]}}
    }))
    .unwrap();
    let mut services = KindStore::default();
    services.apply(Event::Apply(service));
    assert_eq!(services.get("demo/web"), Some(expected));
    assert_eq!(services.get("demo/other"), None::<Service>);

    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-abc", "namespace": "demo", "uid": "1",
            "labels": {"kubernetes.io/service-name": "web", "app": "web"},
            "annotations": {LAST_CHANGE_TRIGGER_TIME: "2026-11-22T10:00:00Z"}},
        "addressType": "IPv6",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}],
        "endpoints": [
            {"addresses": ["FD00::1", "fd00::2"], "nodeName": "node-a", "zone": "z1",
             "conditions": {"ready": false}, "hostname": "web-0",
             "targetRef": {"kind": "Pod", "name": "web-0"},
             "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "node-a"}]}},
            {"addresses": ["fd00::3"]},
            {"addresses": []}
        ]
    }))
    .unwrap();
    let expected: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-abc", "namespace": "demo",
            "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv6",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["FD00::1"], "nodeName": "node-a", "zone": "z1",
             "conditions": {"ready": false},
             "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "node-a"}]}},
            {"addresses": ["fd00::3"], "conditions": {}},
            {"addresses": [], "conditions": {}}
        ]
    }))
    .unwrap();
    let mut slices = KindStore::default();
    slices.apply(Event::Apply(slice));
    assert_eq!(slices.get("demo/web-abc"), Some(expected));
    let kept = slices.kept("demo/web-abc").unwrap();
    assert_eq!(
        kept.trigger_time()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs()),
        Some(1_795_341_600)
    );
}

#[test]
fn applies_and_deletes_change_live_objects_at_once() {
    let mut store = KindStore::default();
    store.apply(Event::Init);
    store.apply(Event::InitDone);
    assert!(store.synced());
    store.apply(Event::Apply(svc("a", 80)));
    store.apply(Event::Apply(svc("a", 81)));
    assert_eq!(store.len(), 1);
    store.apply(Event::Delete(svc("a", 81)));
    assert!(store.is_empty());
}

#[test]
fn the_cluster_is_synced_only_when_every_kind_was_listed() {
    let mut store = ClusterStore::default();
    store.apply_service(Event::Init);
    store.apply_service(Event::InitDone);
    store.apply_endpoint_slice(Event::Init);
    store.apply_endpoint_slice(Event::InitDone);
    assert!(!store.synced(), "the Node was not listed yet");
    store.apply_node(Event::Init);
    store.apply_node(Event::InitDone);
    assert!(store.synced());
}

fn service_cidr(name: &str, cidrs: &[&str]) -> ServiceCIDR {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name}, "spec": {"cidrs": cidrs}
    }))
    .unwrap()
}

#[test]
fn service_cidrs_reach_the_model_as_they_change_and_never_hold_back_the_first_sync() {
    let mut store = ClusterStore::default();
    store.apply_service(Event::Init);
    store.apply_service(Event::InitDone);
    store.apply_endpoint_slice(Event::Init);
    store.apply_endpoint_slice(Event::InitDone);
    store.apply_node(Event::Init);
    store.apply_node(Event::InitDone);
    assert!(store.synced(), "ServiceCIDRs are not waited for");

    let mut live = LiveState::default();
    let kubernetes = service_cidr("kubernetes", &["fd00:96::/112", "10.96.0.0/16"]);
    store.apply_service_cidr(Event::Init);
    store.apply_service_cidr(Event::InitApply(kubernetes.clone()));
    store.update_model(&mut live, "node-a");
    assert!(live.state.service_cidrs.is_empty(), "a list in progress");
    assert_eq!(store.apply_service_cidr(Event::InitDone), Change::Changed);
    store.update_model(&mut live, "node-a");
    let shown = |live: &LiveState| -> Vec<String> {
        live.state
            .service_cidrs
            .iter()
            .map(|c| c.to_string())
            .collect()
    };
    assert_eq!(shown(&live), ["10.96.0.0/16", "fd00:96::/112"]);

    let bad = service_cidr("bad", &["not-a-cidr", "10.96.0.0/16", "10.97.0.0/16"]);
    store.apply_service_cidr(Event::Apply(bad.clone()));
    store.update_model(&mut live, "node-a");
    assert_eq!(
        shown(&live),
        ["10.96.0.0/16", "10.97.0.0/16", "fd00:96::/112"]
    );
    let rejected: Vec<_> = live.rejected().map(|r| (r.kind, r.name.as_str())).collect();
    assert_eq!(rejected, [("ServiceCIDR", "bad")]);

    // A range two objects list stays while one of them does.
    store.apply_service_cidr(Event::Delete(kubernetes));
    store.update_model(&mut live, "node-a");
    assert_eq!(shown(&live), ["10.96.0.0/16", "10.97.0.0/16"]);
    store.apply_service_cidr(Event::Delete(bad));
    store.update_model(&mut live, "node-a");
    assert!(live.state.service_cidrs.is_empty());
    assert_eq!(live.rejected().count(), 0);
}

#[test]
fn every_event_is_counted_as_kube_proxy_counts_it_and_pending_until_a_sync_takes_it() {
    let mut store = ClusterStore::default();
    store.apply_service(Event::Apply(svc("a", 80)));
    store.apply_service(Event::Apply(svc("a", 81)));
    store.apply_service(Event::Apply(svc("b", 80)));
    // Rewriting an identical object is an update kube-proxy counts, with nothing to program.
    assert_eq!(
        store.apply_service(Event::Apply(svc("b", 80))),
        Change::Unchanged
    );
    let c = store.change_counts();
    assert_eq!(c.service_changes_total, 4);
    assert_eq!(c.service_changes_pending, 2, "two services wait");
    assert_eq!(c.endpoint_changes_total, 0);
    store.take_changed();
    store.apply_service(Event::Delete(svc("a", 81)));
    // A delete of an object never seen changes nothing, but is an event all the same.
    assert_eq!(
        store.apply_service(Event::Delete(svc("c", 80))),
        Change::Unchanged
    );
    let c = store.change_counts();
    assert_eq!(c.service_changes_total, 6);
    assert_eq!(c.service_changes_pending, 1);
    assert_eq!(c.endpoint_changes_pending, 0);

    store.apply_endpoint_slice(Event::Apply(slice("s", "a", &[])));
    store.take_changed();
    // A slice relabelled: both services are converted again, the one it belongs to now
    // is the one pending; deleted, it is pending for the one it belonged to.
    store.apply_endpoint_slice(Event::Apply(slice("s", "b", &[])));
    let c = store.change_counts();
    assert_eq!(
        (c.service_changes_pending, c.endpoint_changes_pending),
        (0, 1)
    );
    store.apply_endpoint_slice(Event::Delete(slice("s", "b", &[])));
    assert_eq!(store.change_counts().endpoint_changes_pending, 1);
    let service = |name: &str| ("default".to_string(), name.to_string());
    assert_eq!(store.take_changed(), [service("a"), service("b")].into());
    let c = store.change_counts();
    assert_eq!(
        (c.service_changes_pending, c.endpoint_changes_pending),
        (0, 0)
    );
}

fn slice(name: &str, service: &str, labels: &[(&str, &str)]) -> EndpointSlice {
    let mut slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {LAST_CHANGE_TRIGGER_TIME: "2026-11-22T10:00:00Z"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"port": 8080, "protocol": "TCP"}]
    }))
    .unwrap();
    let mut all: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    all.insert(SERVICE_NAME_LABEL.into(), service.into());
    slice.metadata.labels = Some(all);
    slice
}

#[test]
fn walking_every_object_finds_what_searching_finds_for_each_service() {
    let mut store = ClusterStore::default();
    let in_namespace = |mut object: Service, namespace: Option<&str>| {
        object.metadata.namespace = namespace.map(str::to_string);
        object
    };
    // Namespaces and names where `namespace/name` keys sort otherwise than services do
    // ("a-b/…" before "a/…"; "web-1" before "web-abc"), a Service without namespace (the
    // default one), a Service without slices, slices without a Service or a label.
    for (name, namespace) in [
        ("web", Some("a")),
        ("web-1", Some("a")),
        ("web", Some("a-b")),
        ("solo", Some("a")),
        ("web", None),
    ] {
        store.apply_service(Event::Apply(in_namespace(svc(name, 80), namespace)));
    }
    for (name, service, namespace) in [
        ("web-zz", "web", "a"),
        ("web-abc", "web", "a"),
        ("web-1-x", "web-1", "a"),
        ("web-q", "web", "a-b"),
        ("ghost-1", "ghost", "a"),
        ("web-d", "web", "default"),
    ] {
        let mut object = slice(name, service, &[]);
        object.metadata.namespace = Some(namespace.into());
        store.apply_endpoint_slice(Event::Apply(object));
    }
    let mut unlabelled = slice("loose", "", &[]);
    unlabelled.metadata.labels = None;
    unlabelled.metadata.namespace = Some("a".into());
    store.apply_endpoint_slice(Event::Apply(unlabelled));

    let mut services: BTreeSet<ServiceRef> = store.members.keys().cloned().collect();
    // Services with no object left (deleted since) are asked for too.
    services.insert(("a".into(), "gone".into()));
    services.insert(("zz".into(), "gone".into()));
    let walked: Vec<_> = store.kept_of_each(&services).collect();
    assert_eq!(walked.len(), services.len());
    for ((service, objects, slices), expected) in walked.into_iter().zip(&services) {
        assert_eq!(service, expected);
        let (want_objects, want_slices) = store.kept_of(service);
        assert_eq!(objects, want_objects, "{service:?}");
        assert_eq!(slices, want_slices, "{service:?}");
    }
    let (_, slices) = store.kept_of(&("a".into(), "web".into()));
    let found: Vec<_> = slices.iter().map(|s| s.names.name.as_deref()).collect();
    assert_eq!(
        found,
        [Some("web-abc"), Some("web-zz")],
        "the test's premise: several slices of one service"
    );
}

#[test]
fn an_update_of_fields_no_proxy_reads_is_counted_and_programs_nothing() {
    let metrics = Metrics::new();
    let mut store = ClusterStore::publishing_to(metrics.clone());
    store.apply_service(Event::Apply(svc("web", 80)));
    store.apply_endpoint_slice(Event::Apply(slice("web-1", "web", &[])));
    store.take_changed();
    store.take_triggers();

    let mut labelled = svc("web", 80);
    labelled.metadata.labels = Some([("team".to_string(), "blue".to_string())].into());
    labelled.metadata.annotations =
        Some([("example.com/owner".to_string(), "ops".to_string())].into());
    assert_eq!(
        store.apply_service(Event::Apply(labelled)),
        Change::Unchanged,
        "no sync is due"
    );
    assert_eq!(
        store.apply_endpoint_slice(Event::Apply(slice("web-1", "web", &[("app", "web")]))),
        Change::Unchanged
    );
    let c = store.change_counts();
    assert_eq!(
        (c.service_changes_total, c.endpoint_changes_total),
        (2, 2),
        "both updates counted"
    );
    assert_eq!(
        (c.service_changes_pending, c.endpoint_changes_pending),
        (0, 0),
        "nothing waits for a sync"
    );
    assert!(store.take_changed().is_empty());
    assert!(
        store.take_triggers().is_empty(),
        "no trigger time without a change to program"
    );
    let page = metrics.render();
    assert!(
        page.contains("kubeproxy_sync_proxy_rules_service_changes_total 2\n")
            && page.contains("kubeproxy_sync_proxy_rules_endpoint_changes_total 2\n"),
        "published without a sync:\n{page}"
    );
}

#[test]
fn a_completed_relist_counts_every_object_listed_and_every_one_gone() {
    let mut store = ClusterStore::default();
    for name in ["a", "b", "c"] {
        store.apply_service(Event::Apply(svc(name, 80)));
    }
    store.take_changed();
    store.apply_service(Event::Init);
    store.apply_service(Event::InitApply(svc("a", 80)));
    store.apply_service(Event::InitApply(svc("b", 81)));
    store.apply_service(Event::InitApply(svc("d", 80)));
    assert_eq!(
        store.change_counts().service_changes_total,
        3,
        "not before InitDone"
    );
    store.apply_service(Event::InitDone);
    let c = store.change_counts();
    assert_eq!(c.service_changes_total, 3 + 3 + 1, "three listed, c gone");
    assert_eq!(
        c.service_changes_pending, 3,
        "b, c and d changed; a did not"
    );
}

#[test]
fn a_relist_naming_an_object_twice_keeps_the_last_and_counts_it_once() {
    let mut store = ClusterStore::default();
    store.apply_service(Event::Init);
    store.apply_service(Event::InitApply(svc("b", 80)));
    store.apply_service(Event::InitApply(svc("a", 80)));
    store.apply_service(Event::InitApply(svc("b", 81)));
    store.apply_service(Event::InitDone);
    assert_eq!(names(&store.services), ["a", "b"]);
    let ports = |s: Service| s.spec.and_then(|s| s.ports).unwrap()[0].port;
    assert_eq!(store.services.get("default/b").map(ports), Some(81));
    assert_eq!(store.change_counts().service_changes_total, 2);
    assert_eq!(store.change_counts().service_changes_pending, 2);
}

#[test]
fn endpoint_addresses_come_back_as_received_even_when_they_do_not_print_back() {
    let texts = [
        "10.1.2.3",
        "10.1.2.03",
        "010.1.2.3",
        "10.1.2.3 ",
        "10.1.2",
        "fd00::1",
        "FD00::1",
        "fd00:0::1",
    ];
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            name: Some("web-1".into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: texts
            .iter()
            .map(|a| k8s_openapi::api::discovery::v1::Endpoint {
                addresses: vec![a.to_string()],
                ..Default::default()
            })
            .collect(),
        ports: None,
    };
    let mut slices = KindStore::default();
    slices.apply(Event::Apply(slice));
    let back: Vec<String> = slices
        .get("demo/web-1")
        .unwrap()
        .endpoints
        .into_iter()
        .map(|e| e.addresses[0].clone())
        .collect();
    assert_eq!(back, texts);
}

#[test]
fn slice_trigger_times_are_collected_until_taken() {
    let mut store = ClusterStore::default();
    let mut slice = EndpointSlice {
        address_type: "IPv4".into(),
        endpoints: vec![],
        metadata: ObjectMeta {
            name: Some("web-abc".into()),
            namespace: Some("default".into()),
            annotations: Some(
                [(
                    LAST_CHANGE_TRIGGER_TIME.to_string(),
                    "2026-11-22T10:00:00Z".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ports: None,
    };
    store.apply_endpoint_slice(Event::Apply(slice.clone()));
    slice.metadata.annotations = Some(
        [(
            LAST_CHANGE_TRIGGER_TIME.to_string(),
            "not a time".to_string(),
        )]
        .into(),
    );
    store.apply_endpoint_slice(Event::Apply(slice));
    let taken = store.take_triggers();
    assert_eq!(taken.len(), 1, "the malformed annotation is ignored");
    let secs = taken[0]
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(secs, 1_795_341_600);
    assert!(store.take_triggers().is_empty());
}

#[test]
fn rereading_unchanged_manifests_observes_no_trigger_time_again() {
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-abc", "namespace": "default",
                     "annotations": {LAST_CHANGE_TRIGGER_TIME: "2026-11-22T10:00:00Z"}},
        "addressType": "IPv4", "endpoints": []
    }))
    .unwrap();
    let inputs = Inputs {
        endpoint_slices: vec![slice.clone()],
        ..Inputs::default()
    };
    let mut store = ClusterStore::default();
    store.replace_all(inputs.clone());
    assert_eq!(store.take_triggers().len(), 1, "first read");
    store.replace_all(inputs);
    assert!(store.take_triggers().is_empty(), "same slice read again");
    let mut changed = slice;
    changed.metadata.annotations = Some(
        [(
            LAST_CHANGE_TRIGGER_TIME.to_string(),
            "2026-11-22T10:05:00Z".to_string(),
        )]
        .into(),
    );
    store.replace_all(Inputs {
        endpoint_slices: vec![changed],
        ..Inputs::default()
    });
    assert_eq!(store.take_triggers().len(), 1, "a new trigger time");
}
