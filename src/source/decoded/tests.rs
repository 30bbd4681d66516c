use super::*;
use crate::cluster::kept::LAST_CHANGE_TRIGGER_TIME;
use crate::cluster::{CONSISTENT_ENDPOINT_ANNOTATION, SERVICE_NAME_LABEL};
use kube::core::ObjectList;
use proptest::prelude::*;
use serde_json::{Value, json};

/// A field: absent (`None`), null, or one of `values`.
fn field(values: impl Strategy<Value = Value>) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Value::Null)),
        6 => values.prop_map(Some),
    ]
}

/// An object of the fields given.
fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect(),
    )
}

/// Strings as the API sends them, some needing escapes in JSON (so that they are decoded
/// into a buffer rather than borrowed), and now and then a value of the wrong type.
fn string() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::sample::select(vec!["", "web", "default", "TCP", "UDP", "node-1", "zone-a", "a\"b\\c", "tab\there"])
            .prop_map(|s| json!(s)),
        1 => Just(json!(5)),
    ]
}

fn boolean() -> impl Strategy<Value = Value> {
    prop_oneof![8 => any::<bool>().prop_map(|b| json!(b)), 1 => Just(json!("true"))]
}

fn address() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::sample::select(vec![
            "10.0.0.1", "10.000.0.1", "fd00::1", "FD00::1", "fd00:0::1", "::ffff:10.0.0.1",
            "not an address", "",
        ])
        .prop_map(|s| json!(s)),
        1 => Just(json!(7)),
    ]
}

fn strings_map(picked: &'static str, values: Vec<&'static str>) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(values),
        any::<bool>(),
        prop_oneof![8 => Just(json!("x")), 1 => Just(json!(1)), 1 => Just(Value::Null)],
    )
        .prop_map(move |(value, has, other)| {
            let mut map = serde_json::Map::new();
            map.insert("app".into(), other);
            if has {
                map.insert(picked.into(), json!(value));
            }
            Value::Object(map)
        })
}

fn metadata() -> impl Strategy<Value = Value> {
    (
        field(string()),
        field(string()),
        field(string()),
        field(strings_map(SERVICE_NAME_LABEL, vec!["web", "", "a\"b"])),
        field(strings_map(
            LAST_CHANGE_TRIGGER_TIME,
            vec![
                "2026-11-22T10:00:00Z",
                "2026-11-22T10:00:00.5Z",
                "yesterday",
            ],
        )),
    )
        .prop_map(|(namespace, name, rv, labels, annotations)| {
            object(vec![
                ("namespace", namespace),
                ("name", name),
                ("resourceVersion", rv),
                ("labels", labels),
                ("annotations", annotations),
                ("uid", Some(json!("0a9c"))),
                (
                    "managedFields",
                    Some(json!([{"manager": "x", "fieldsV1": {}}])),
                ),
            ])
        })
}

fn named() -> impl Strategy<Value = Value> {
    field(string()).prop_map(|name| object(vec![("name", name)]))
}

fn endpoint() -> impl Strategy<Value = Value> {
    let conditions = (field(boolean()), field(boolean()), field(boolean()))
        .prop_map(|(r, s, t)| object(vec![("ready", r), ("serving", s), ("terminating", t)]));
    let hints = (
        field(prop::collection::vec(named(), 0..3).prop_map(Value::from)),
        field(prop::collection::vec(named(), 0..3).prop_map(Value::from)),
    )
        .prop_map(|(z, n)| object(vec![("forZones", z), ("forNodes", n)]));
    (
        field(prop::collection::vec(address(), 0..3).prop_map(Value::from)),
        field(conditions),
        field(string()),
        field(string()),
        field(hints),
    )
        .prop_map(|(addresses, conditions, node, zone, hints)| {
            object(vec![
                ("addresses", addresses),
                ("conditions", conditions),
                ("nodeName", node),
                ("zone", zone),
                ("hints", hints),
                ("hostname", Some(json!("pod-1"))),
                ("targetRef", Some(json!({"kind": "Pod", "name": "pod-1"}))),
            ])
        })
}

fn port() -> impl Strategy<Value = Value> {
    let number = prop_oneof![
        8 => (0i64..70000).prop_map(|p| json!(p)),
        1 => Just(json!(3_000_000_000i64)),
        1 => Just(json!("80")),
    ];
    (field(string()), field(string()), field(number)).prop_map(|(name, protocol, port)| {
        object(vec![
            ("name", name),
            ("protocol", protocol),
            ("port", port),
            ("appProtocol", Some(json!("http"))),
        ])
    })
}

fn slice() -> impl Strategy<Value = Value> {
    (
        field(prop_oneof![
            8 => Just(json!("discovery.k8s.io/v1")),
            1 => Just(json!("v1")),
        ]),
        field(prop_oneof![8 => Just(json!("EndpointSlice")), 1 => Just(json!("Service"))]),
        field(string()),
        field(metadata()),
        field(prop::collection::vec(endpoint(), 0..4).prop_map(Value::from)),
        field(prop::collection::vec(port(), 0..3).prop_map(Value::from)),
    )
        .prop_map(
            |(api_version, kind, address_type, metadata, endpoints, ports)| {
                object(vec![
                    ("apiVersion", api_version.filter(|v| !v.is_null())),
                    ("kind", kind.filter(|v| !v.is_null())),
                    ("addressType", address_type),
                    ("metadata", metadata),
                    ("endpoints", endpoints),
                    ("ports", ports),
                    ("extra", Some(json!({"unknown": [1, 2]}))),
                ])
            },
        )
}

/// What the store keeps of an object k8s-openapi decoded, and its metadata as the watcher
/// reads it; `None`: refused.
fn through_k8s_openapi<K>(object: Result<K, serde_json::Error>) -> Option<(K::Compact, ObjectMeta)>
where
    K: Kept + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    object.ok().map(|o| {
        let decoded = Decoded::from(o);
        (decoded.kept, decoded.metadata)
    })
}

fn decoded<K: Kept>(
    object: Result<Decoded<K>, serde_json::Error>,
) -> Option<(K::Compact, ObjectMeta)> {
    object.ok().map(|d| (d.kept, d.metadata))
}

/// Decodes `value` both ways, from text, inside a list page (buffered by kube's list type
/// first) and from an already parsed value (every string owned), and compares.
fn same_both_ways<K>(value: Value) -> Result<(), TestCaseError>
where
    K: Kept + k8s_openapi::Metadata<Ty = ObjectMeta> + serde::de::DeserializeOwned + Clone,
    Decoded<K>: serde::de::DeserializeOwned,
{
    let text = value.to_string();
    prop_assert_eq!(
        decoded::<K>(serde_json::from_str(&text)),
        through_k8s_openapi::<K>(serde_json::from_str(&text)),
        "{}",
        text
    );
    prop_assert_eq!(
        decoded::<K>(serde_json::from_value(value.clone())),
        through_k8s_openapi::<K>(serde_json::from_value(value.clone())),
        "{}",
        text
    );
    let page = json!({"metadata": {"resourceVersion": "9"}, "items": [value]}).to_string();
    let ours = serde_json::from_str::<ObjectList<Decoded<K>>>(&page).map(|l| {
        l.items
            .into_iter()
            .map(|d| (d.kept, d.metadata))
            .collect::<Vec<_>>()
    });
    let theirs = serde_json::from_str::<ObjectList<K>>(&page).map(|l| {
        l.items
            .into_iter()
            .map(|o| {
                let d = Decoded::from(o);
                (d.kept, d.metadata)
            })
            .collect::<Vec<_>>()
    });
    prop_assert_eq!(ours.ok(), theirs.ok(), "{}", page);
    Ok(())
}

fn strings() -> impl Strategy<Value = Value> {
    prop::collection::vec(prop_oneof![8 => address(), 1 => Just(Value::Null)], 0..3)
        .prop_map(Value::from)
}

fn integer() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => (0i64..70000).prop_map(|p| json!(p)),
        1 => Just(json!(3_000_000_000i64)),
        1 => Just(json!("80")),
    ]
}

fn service_port() -> impl Strategy<Value = Value> {
    (
        field(string()),
        field(string()),
        field(integer()),
        field(integer()),
    )
        .prop_map(|(name, protocol, port, node_port)| {
            object(vec![
                ("name", name),
                ("protocol", protocol),
                ("port", port),
                ("nodePort", node_port),
                ("targetPort", Some(json!("http"))),
            ])
        })
}

fn service() -> impl Strategy<Value = Value> {
    let affinity = field(field(integer()).prop_map(|t| object(vec![("timeoutSeconds", t)])))
        .prop_map(|client_ip| object(vec![("clientIP", client_ip)]));
    let spec = (
        (
            field(string()),
            field(address()),
            field(strings()),
            field(strings()),
        ),
        (
            field(strings()),
            field(string()),
            field(string()),
            field(string()),
        ),
        (
            field(affinity),
            field(integer()),
            field(string()),
            field(prop::collection::vec(service_port(), 0..3).prop_map(Value::from)),
        ),
    )
        .prop_map(
            |((t, ip, ips, ext), (lbsr, etp, itp, sa), (sac, hc, td, ports))| {
                object(vec![
                    ("type", t),
                    ("clusterIP", ip),
                    ("clusterIPs", ips),
                    ("externalIPs", ext),
                    ("loadBalancerSourceRanges", lbsr),
                    ("externalTrafficPolicy", etp),
                    ("internalTrafficPolicy", itp),
                    ("sessionAffinity", sa),
                    ("sessionAffinityConfig", sac),
                    ("healthCheckNodePort", hc),
                    ("trafficDistribution", td),
                    ("ports", ports),
                    ("selector", Some(json!({"app": "web"}))),
                ])
            },
        );
    let ingress = (field(address()), field(string())).prop_map(|(ip, mode)| {
        object(vec![
            ("ip", ip),
            ("ipMode", mode),
            ("hostname", Some(json!("lb"))),
        ])
    });
    let status = field(
        field(prop::collection::vec(ingress, 0..3).prop_map(Value::from))
            .prop_map(|ingress| object(vec![("ingress", ingress)])),
    )
    .prop_map(|lb| object(vec![("loadBalancer", lb)]));
    (
        field(prop_oneof![8 => Just(json!("v1")), 1 => Just(json!("discovery.k8s.io/v1"))]),
        field(prop_oneof![8 => Just(json!("Service")), 1 => Just(json!("EndpointSlice"))]),
        field(service_metadata()),
        field(spec),
        field(status),
    )
        .prop_map(|(api_version, kind, metadata, spec, status)| {
            object(vec![
                ("apiVersion", api_version.filter(|v| !v.is_null())),
                ("kind", kind.filter(|v| !v.is_null())),
                ("metadata", metadata),
                ("spec", spec),
                ("status", status),
            ])
        })
}

fn service_metadata() -> impl Strategy<Value = Value> {
    (
        field(string()),
        field(string()),
        field(string()),
        field(strings_map("app", vec!["web"])),
        field(strings_map(
            CONSISTENT_ENDPOINT_ANNOTATION,
            vec!["client", "connection", "", "a\"b"],
        )),
    )
        .prop_map(|(namespace, name, rv, labels, annotations)| {
            object(vec![
                ("namespace", namespace),
                ("name", name),
                ("resourceVersion", rv),
                ("labels", labels),
                ("annotations", annotations),
            ])
        })
}

proptest! {
    /// Whatever k8s-openapi accepts decodes to the same kept slice (and the same names and
    /// resourceVersion); whatever it rejects is rejected.
    #[test]
    fn a_slice_decodes_as_through_k8s_openapi(value in slice()) {
        same_both_ways::<EndpointSlice>(value)?;
    }

    /// The same for Services.
    #[test]
    fn a_service_decodes_as_through_k8s_openapi(value in service()) {
        same_both_ways::<Service>(value)?;
    }
}

#[test]
fn a_service_port_without_a_number_keeps_port_0_as_k8s_openapi_reads_it() {
    let service = json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"ports": [{"name": "a", "port": null}, {"name": "b"}]},
    });
    same_both_ways::<Service>(service).unwrap();
}

#[test]
fn a_watch_event_keeps_the_resource_version_the_watcher_resumes_from() {
    let event = json!({
        "type": "MODIFIED",
        "object": {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-abc", "namespace": "default", "resourceVersion": "42",
                         "labels": {SERVICE_NAME_LABEL: "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"port": 8080}],
        },
    });
    let kube::core::WatchEvent::Modified(slice) =
        serde_json::from_value::<kube::core::WatchEvent<DecodedSlice>>(event.clone()).unwrap()
    else {
        panic!("a MODIFIED event");
    };
    let expected: EndpointSlice = serde_json::from_value(event["object"].clone()).unwrap();
    assert_eq!(
        kube::ResourceExt::resource_version(&slice).as_deref(),
        Some("42")
    );
    assert_eq!(slice.kept, expected.compact());
    assert_eq!(
        DecodedSlice::service(&slice.kept),
        Some(("default".to_string(), "web".to_string()))
    );
}

#[test]
fn fields_the_proxy_never_reads_are_not_checked() {
    let slice = json!({
        "metadata": {"name": "web-abc", "creationTimestamp": "not a time"},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "targetRef": 5}],
    });
    assert!(serde_json::from_value::<EndpointSlice>(slice.clone()).is_err());
    let decoded: DecodedSlice = serde_json::from_value(slice).unwrap();
    assert_eq!(decoded.kept.endpoints.len(), 1);
}
