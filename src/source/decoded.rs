//! EndpointSlices decoded from the API's JSON straight into the form the store keeps.
//!
//! Decoded as k8s-openapi objects first, a list page of 1,000 slices makes every field of every
//! endpoint, a dozen allocations each, only for the store to keep a few of them and drop the
//! rest; at 30,000 slices that was the largest part of the daemon's listing. This decoder reads
//! the fields the proxy reads and skips the others unread. Every slice that k8s-openapi accepts
//! decodes to the same kept form as through it; a value of the wrong JSON type in a field the
//! proxy reads (or in the slice's labels or annotations) is an error as there. The values of
//! fields the proxy never reads (an endpoint's `targetRef`, `metadata.managedFields`, …) are not
//! checked: the API server has validated them, and the proxy would not look at them anyway.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::kept::{
    Address, EndpointFields, Kept, KeptEndpoint, KeptSlice, KeptSlicePort, Names, Text,
};
use super::store::{LAST_CHANGE_TRIGGER_TIME, parse_trigger_time};
use crate::cluster::{SERVICE_NAME_LABEL, ServiceRef, shared_name};

/// An EndpointSlice as the watch receives it, already in the store's kept form.
#[derive(Debug, Clone)]
pub struct DecodedSlice {
    /// Namespace, name and resourceVersion: what the watcher and the store's keys read.
    metadata: ObjectMeta,
    kept: KeptSlice,
}

impl k8s_openapi::Resource for DecodedSlice {
    const API_VERSION: &'static str = <EndpointSlice as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <EndpointSlice as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <EndpointSlice as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <EndpointSlice as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str =
        <EndpointSlice as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <EndpointSlice as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for DecodedSlice {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Kept for DecodedSlice {
    type Compact = KeptSlice;
    type Object = EndpointSlice;

    fn compact(self) -> KeptSlice {
        self.kept
    }

    fn expand(kept: &KeptSlice) -> EndpointSlice {
        EndpointSlice::expand(kept)
    }

    fn service(kept: &KeptSlice) -> Option<ServiceRef> {
        EndpointSlice::service(kept)
    }
}

impl From<EndpointSlice> for DecodedSlice {
    fn from(slice: EndpointSlice) -> DecodedSlice {
        let meta = &slice.metadata;
        let metadata = ObjectMeta {
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            resource_version: meta.resource_version.clone(),
            ..ObjectMeta::default()
        };
        DecodedSlice {
            metadata,
            kept: slice.compact(),
        }
    }
}

impl DecodedSlice {
    pub(crate) fn kept(&self) -> &KeptSlice {
        &self.kept
    }
}

/// A JSON string, borrowed from the input where it has no escapes.
struct Str<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_string(StrVisitor)
    }
}

/// A JSON object read one field at a time into `Self`; fields it does not know are skipped.
trait Fields<'de>: Default {
    /// What the object is, for error messages.
    const WHAT: &'static str;

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Skips the value of a field the proxy does not read.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

/// `T` decoded from a JSON object by its `Fields`.
struct Object<T>(T);

impl<'de, T: Fields<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::WHAT)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object<T>, A::Error> {
                let mut fields = T::default();
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    fields.field(&key.0, &mut map)?;
                }
                Ok(Object(fields))
            }
        }
        d.deserialize_map(ObjectVisitor(PhantomData))
    }
}

/// A string that many objects repeat (a namespace, a node, a protocol), shared.
fn word(s: Option<Str<'_>>) -> Option<Text> {
    s.map(|s| shared_name(&s.0))
}

/// A string of its own (a name, an address).
fn text(s: Option<Str<'_>>) -> Option<Text> {
    s.map(|s| s.0.as_ref().into())
}

/// A string field whose value must be `expected`, as k8s-openapi checks `apiVersion` and `kind`.
fn expect_value<'de, A: MapAccess<'de>>(map: &mut A, expected: &str) -> Result<(), A::Error> {
    let value: Str<'de> = map.next_value()?;
    if value.0 != expected {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(&value.0),
            &expected,
        ));
    }
    Ok(())
}

#[derive(Default)]
struct SliceFields {
    names: (Option<Text>, Option<Text>),
    resource_version: Option<String>,
    service_name: Option<Text>,
    trigger_time: Option<std::time::SystemTime>,
    address_type: Option<Text>,
    endpoints: Vec<KeptEndpoint>,
    ports: Vec<KeptSlicePort>,
}

impl<'de> Fields<'de> for SliceFields {
    const WHAT: &'static str = "EndpointSlice";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "apiVersion" => expect_value(map, <DecodedSlice as k8s_openapi::Resource>::API_VERSION),
            "kind" => expect_value(map, <DecodedSlice as k8s_openapi::Resource>::KIND),
            "addressType" => {
                self.address_type = word(map.next_value()?);
                Ok(())
            }
            "endpoints" => {
                let endpoints: Option<Vec<Object<EndpointFields>>> = map.next_value()?;
                self.endpoints = endpoints
                    .into_iter()
                    .flatten()
                    .map(|e| KeptEndpoint::new(e.0))
                    .collect();
                Ok(())
            }
            "metadata" => {
                let meta: Option<Object<MetaFields>> = map.next_value()?;
                let meta = meta.map(|m| m.0).unwrap_or_default();
                self.names = (word(meta.namespace), text(meta.name));
                self.resource_version = meta.resource_version.map(|v| v.0.into_owned());
                self.service_name = meta.labels.and_then(|l| l.0);
                self.trigger_time = meta.annotations.and_then(|a| a.0);
                Ok(())
            }
            "ports" => {
                let ports: Option<Vec<Object<PortFields>>> = map.next_value()?;
                self.ports = ports.into_iter().flatten().map(|p| p.0.kept()).collect();
                Ok(())
            }
            _ => skip(map),
        }
    }
}

impl<'de> Deserialize<'de> for DecodedSlice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Object(slice) = Object::<SliceFields>::deserialize(d)?;
        let (namespace, name) = slice.names;
        let metadata = ObjectMeta {
            namespace: namespace.as_deref().map(str::to_string),
            name: name.as_deref().map(str::to_string),
            resource_version: slice.resource_version,
            ..ObjectMeta::default()
        };
        let kept = KeptSlice {
            names: Names { namespace, name },
            service_name: slice.service_name,
            trigger_time: slice.trigger_time,
            address_type: slice.address_type.unwrap_or_else(|| shared_name("")),
            endpoints: slice.endpoints.into_boxed_slice(),
            ports: slice.ports.into_boxed_slice(),
        };
        Ok(DecodedSlice { metadata, kept })
    }
}

/// The metadata fields a slice's kept form reads.
#[derive(Default)]
struct MetaFields<'de> {
    namespace: Option<Str<'de>>,
    name: Option<Str<'de>>,
    resource_version: Option<Str<'de>>,
    labels: Option<Picked<ServiceNameLabel>>,
    annotations: Option<Picked<TriggerTimeAnnotation>>,
}

impl<'de> Fields<'de> for MetaFields<'de> {
    const WHAT: &'static str = "ObjectMeta";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "namespace" => self.namespace = map.next_value()?,
            "name" => self.name = map.next_value()?,
            "resourceVersion" => self.resource_version = map.next_value()?,
            "labels" => self.labels = map.next_value()?,
            "annotations" => self.annotations = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// One entry of a map of strings (labels, annotations), kept as `P` makes it; every value is
/// still checked to be a string.
struct Picked<P: Pick>(Option<P::Value>);

/// Which entry `Picked` keeps, and in what form.
trait Pick {
    const KEY: &'static str;
    type Value;

    fn value(text: &str) -> Option<Self::Value>;
}

struct ServiceNameLabel;

impl Pick for ServiceNameLabel {
    const KEY: &'static str = SERVICE_NAME_LABEL;
    type Value = Text;

    fn value(text: &str) -> Option<Text> {
        Some(text.into())
    }
}

struct TriggerTimeAnnotation;

impl Pick for TriggerTimeAnnotation {
    const KEY: &'static str = LAST_CHANGE_TRIGGER_TIME;
    type Value = std::time::SystemTime;

    fn value(text: &str) -> Option<std::time::SystemTime> {
        parse_trigger_time(text)
    }
}

impl<'de, P: Pick> Deserialize<'de> for Picked<P> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PickVisitor<P>(PhantomData<P>);
        impl<'de, P: Pick> Visitor<'de> for PickVisitor<P> {
            type Value = Picked<P>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Picked<P>, A::Error> {
                // Of a key given twice, the last value counts, as in a map.
                let mut picked = None;
                while let Some((key, value)) = map.next_entry::<Str<'de>, Str<'de>>()? {
                    if key.0 == P::KEY {
                        picked = Some(P::value(&value.0));
                    }
                }
                Ok(Picked(picked.flatten()))
            }
        }
        d.deserialize_map(PickVisitor(PhantomData))
    }
}

impl<'de> Fields<'de> for EndpointFields {
    const WHAT: &'static str = "Endpoint";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "addresses" => {
                let first: Option<FirstAddress> = map.next_value()?;
                self.address = first.map_or_else(|| Address::of(None), |f| f.0);
            }
            "conditions" => {
                let conditions: Option<Object<Conditions>> = map.next_value()?;
                let Conditions {
                    ready,
                    serving,
                    terminating,
                } = conditions.map(|c| c.0).unwrap_or_default();
                (self.ready, self.serving, self.terminating) = (ready, serving, terminating);
            }
            "nodeName" => self.node_name = word(map.next_value()?),
            "zone" => self.zone = word(map.next_value()?),
            "hints" => {
                let hints: Option<Object<Hints>> = map.next_value()?;
                self.hints = hints.map(|h| (h.0.for_zones, h.0.for_nodes));
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// The first of an endpoint's addresses, as `Address::of` keeps it (the only one kube-proxy
/// reads); the others are checked to be strings and dropped.
struct FirstAddress((Address, Option<Text>));

impl<'de> Deserialize<'de> for FirstAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FirstVisitor;
        impl<'de> Visitor<'de> for FirstVisitor {
            type Value = FirstAddress;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FirstAddress, A::Error> {
                let first = seq.next_element::<Str<'de>>()?;
                let address = Address::of(first.as_ref().map(|s| &*s.0));
                while seq.next_element::<Str<'de>>()?.is_some() {}
                Ok(FirstAddress(address))
            }
        }
        d.deserialize_seq(FirstVisitor)
    }
}

#[derive(Default)]
struct Conditions {
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

impl<'de> Fields<'de> for Conditions {
    const WHAT: &'static str = "EndpointConditions";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "ready" => self.ready = map.next_value()?,
            "serving" => self.serving = map.next_value()?,
            "terminating" => self.terminating = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct Hints {
    for_zones: Option<Box<[Text]>>,
    for_nodes: Option<Box<[Text]>>,
}

impl<'de> Fields<'de> for Hints {
    const WHAT: &'static str = "EndpointHints";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let names = |list: Option<Vec<Object<Named>>>| {
            list.map(|l| {
                l.into_iter()
                    .map(|n| n.0.0.unwrap_or_else(|| shared_name("")))
                    .collect()
            })
        };
        match key {
            "forZones" => self.for_zones = names(map.next_value()?),
            "forNodes" => self.for_nodes = names(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// A hint's zone or node: its name ("" when absent, as k8s-openapi reads it).
#[derive(Default)]
struct Named(Option<Text>);

impl<'de> Fields<'de> for Named {
    const WHAT: &'static str = "ForZone or ForNode";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.0 = word(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct PortFields {
    name: Option<Text>,
    protocol: Option<Text>,
    port: Option<i32>,
}

impl PortFields {
    fn kept(self) -> KeptSlicePort {
        (self.name, self.protocol, self.port)
    }
}

impl<'de> Fields<'de> for PortFields {
    const WHAT: &'static str = "EndpointPort";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = word(map.next_value()?),
            "protocol" => self.protocol = word(map.next_value()?),
            "port" => self.port = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn strings_map(
        picked: &'static str,
        values: Vec<&'static str>,
    ) -> impl Strategy<Value = Value> {
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

    /// What the store would keep of `text` decoded by k8s-openapi, and its metadata's names.
    fn through_k8s_openapi(
        slice: Result<EndpointSlice, serde_json::Error>,
    ) -> Option<(KeptSlice, ObjectMeta)> {
        slice.ok().map(|s| {
            let decoded = DecodedSlice::from(s);
            (decoded.kept, decoded.metadata)
        })
    }

    fn decoded(slice: Result<DecodedSlice, serde_json::Error>) -> Option<(KeptSlice, ObjectMeta)> {
        slice.ok().map(|s| (s.kept, s.metadata))
    }

    proptest! {
        /// Whatever k8s-openapi accepts decodes to the same kept slice (and the same names and
        /// resourceVersion); whatever it rejects is rejected: from text (strings borrowed where
        /// they can be), inside a list page (buffered by kube's list type first), and from an
        /// already parsed value (every string owned).
        #[test]
        fn decodes_what_k8s_openapi_decodes_into_the_same_kept_form(value in slice()) {
            let text = value.to_string();
            prop_assert_eq!(
                decoded(serde_json::from_str(&text)),
                through_k8s_openapi(serde_json::from_str(&text)),
                "{}", text
            );
            prop_assert_eq!(
                decoded(serde_json::from_value(value.clone())),
                through_k8s_openapi(serde_json::from_value(value.clone())),
                "{}", text
            );
            let page = json!({"metadata": {"resourceVersion": "9"}, "items": [value]}).to_string();
            let ours = serde_json::from_str::<ObjectList<DecodedSlice>>(&page)
                .map(|l| l.items.into_iter().map(|s| (s.kept, s.metadata)).collect::<Vec<_>>());
            let theirs = serde_json::from_str::<ObjectList<EndpointSlice>>(&page).map(|l| {
                l.items
                    .into_iter()
                    .map(|s| {
                        let d = DecodedSlice::from(s);
                        (d.kept, d.metadata)
                    })
                    .collect::<Vec<_>>()
            });
            prop_assert_eq!(ours.ok(), theirs.ok(), "{}", page);
        }
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
            Some(crate::cluster::service_ref_named(
                Some("default"),
                Some("web")
            ))
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
}
