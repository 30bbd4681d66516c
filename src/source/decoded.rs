//! Services and EndpointSlices decoded from the API's JSON straight into the form the store
//! keeps.
//!
//! Decoded as k8s-openapi objects first, a list page of 1,000 slices makes every field of every
//! endpoint, a dozen allocations each, only for the store to keep a few of them and drop the
//! rest; at 30,000 slices that was the largest part of the daemon's listing. This decoder reads
//! the fields the proxy reads and skips the others unread. Every object that k8s-openapi accepts
//! decodes to the same kept form as through it; a value of the wrong JSON type in a field the
//! proxy reads (or in the object's labels or annotations) is an error as there. The values of
//! fields the proxy never reads (an endpoint's `targetRef`, a port's `targetPort`,
//! `metadata.managedFields`, …) are not checked: the API server has validated them, and the
//! proxy would not look at them anyway.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::cluster::kept::{
    Address, EndpointFields, Kept, KeptEndpoint, KeptService, KeptServicePort, KeptServiceSpec,
    KeptSlice, KeptSlicePort, LAST_CHANGE_TRIGGER_TIME, Names, Text, cluster_ip,
    parse_trigger_time,
};
use crate::cluster::{CONSISTENT_ENDPOINT_ANNOTATION, SERVICE_NAME_LABEL, ServiceRef, shared_name};

/// An object of kind `K` as the watch receives it, already in the store's kept form.
#[derive(Debug, Clone)]
pub struct Decoded<K: Kept> {
    /// Namespace, name and resourceVersion: what the watcher and the store's keys read.
    metadata: ObjectMeta,
    kept: K::Compact,
}

/// An EndpointSlice decoded into its kept form.
pub type DecodedSlice = Decoded<EndpointSlice>;

/// A Service decoded into its kept form.
pub type DecodedService = Decoded<Service>;

impl<K: Kept + k8s_openapi::Resource> k8s_openapi::Resource for Decoded<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = <K as k8s_openapi::Resource>::Scope;
}

impl<K: Kept + k8s_openapi::Resource> k8s_openapi::Metadata for Decoded<K> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K> Kept for Decoded<K>
where
    K: Kept + k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + Clone,
    K::Compact: Send + Sync,
{
    type Compact = K::Compact;
    type Object = K::Object;

    fn compact(self) -> K::Compact {
        self.kept
    }

    fn expand(kept: &K::Compact) -> K::Object {
        K::expand(kept)
    }

    fn service(kept: &K::Compact) -> Option<ServiceRef> {
        K::service(kept)
    }
}

impl<K> From<K> for Decoded<K>
where
    K: Kept + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    fn from(object: K) -> Decoded<K> {
        let meta = object.metadata();
        let metadata = ObjectMeta {
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            resource_version: meta.resource_version.clone(),
            ..ObjectMeta::default()
        };
        Decoded {
            metadata,
            kept: object.compact(),
        }
    }
}

impl<K: Kept> Decoded<K> {
    pub(crate) fn kept(&self) -> &K::Compact {
        &self.kept
    }

    /// The metadata the watcher reads, from the kept names and the resourceVersion.
    fn of(names: &Names, resource_version: Option<String>, kept: K::Compact) -> Decoded<K> {
        let metadata = ObjectMeta {
            namespace: names.namespace.as_deref().map(str::to_string),
            name: names.name.as_deref().map(str::to_string),
            resource_version,
            ..ObjectMeta::default()
        };
        Decoded { metadata, kept }
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
    meta: Meta<ServiceNameLabel, TriggerTimeAnnotation>,
    address_type: Option<Text>,
    endpoints: Vec<KeptEndpoint>,
    ports: Vec<KeptSlicePort>,
}

impl<'de> Fields<'de> for SliceFields {
    const WHAT: &'static str = "EndpointSlice";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "apiVersion" => {
                expect_value(map, <EndpointSlice as k8s_openapi::Resource>::API_VERSION)
            }
            "kind" => expect_value(map, <EndpointSlice as k8s_openapi::Resource>::KIND),
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
                self.meta = Meta::read(map)?;
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
        let Meta {
            names,
            resource_version,
            label,
            annotation,
        } = slice.meta;
        let kept = KeptSlice {
            names: names.clone(),
            service_name: label,
            trigger_time: annotation,
            address_type: slice.address_type.unwrap_or_else(|| shared_name("")),
            endpoints: slice.endpoints.into_boxed_slice(),
            ports: slice.ports.into_boxed_slice(),
        };
        Ok(Decoded::of(&names, resource_version, kept))
    }
}

/// What the kept forms read of an object's metadata: its names, its resourceVersion, the
/// label `L` and the annotation `A`.
struct Meta<L: Pick, A: Pick> {
    names: Names,
    resource_version: Option<String>,
    label: Option<L::Value>,
    annotation: Option<A::Value>,
}

impl<L: Pick, A: Pick> Default for Meta<L, A> {
    fn default() -> Self {
        Meta {
            names: Names {
                namespace: None,
                name: None,
            },
            resource_version: None,
            label: None,
            annotation: None,
        }
    }
}

impl<L: Pick, A: Pick> Meta<L, A> {
    /// The value of a `metadata` field (null: as if absent).
    fn read<'de, M: MapAccess<'de>>(map: &mut M) -> Result<Self, M::Error> {
        let meta: Option<Object<MetaFields<'de, L, A>>> = map.next_value()?;
        let meta = meta.map(|m| m.0).unwrap_or_default();
        Ok(Meta {
            names: Names {
                namespace: word(meta.namespace),
                name: text(meta.name),
            },
            resource_version: meta.resource_version.map(|v| v.0.into_owned()),
            label: meta.labels.and_then(|l| l.0),
            annotation: meta.annotations.and_then(|a| a.0),
        })
    }
}

/// The metadata fields the kept forms read, as decoded.
struct MetaFields<'de, L: Pick, A: Pick> {
    namespace: Option<Str<'de>>,
    name: Option<Str<'de>>,
    resource_version: Option<Str<'de>>,
    labels: Option<Picked<L>>,
    annotations: Option<Picked<A>>,
}

impl<L: Pick, A: Pick> Default for MetaFields<'_, L, A> {
    fn default() -> Self {
        MetaFields {
            namespace: None,
            name: None,
            resource_version: None,
            labels: None,
            annotations: None,
        }
    }
}

impl<'de, L: Pick, A: Pick> Fields<'de> for MetaFields<'de, L, A> {
    const WHAT: &'static str = "ObjectMeta";

    fn field<M: MapAccess<'de>>(&mut self, key: &str, map: &mut M) -> Result<(), M::Error> {
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

/// A label or annotation the kept form does not read: its map's values are only checked.
struct NoEntry;

impl Pick for NoEntry {
    const KEY: &'static str = "";
    type Value = std::convert::Infallible;

    fn value(_: &str) -> Option<std::convert::Infallible> {
        None
    }
}

struct ConsistentEndpointAnnotation;

impl Pick for ConsistentEndpointAnnotation {
    const KEY: &'static str = CONSISTENT_ENDPOINT_ANNOTATION;
    type Value = Text;

    fn value(text: &str) -> Option<Text> {
        Some(shared_name(text))
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

/// A list of strings, each kept as its own text (`None`: null or absent).
fn texts(list: Option<Vec<Str<'_>>>) -> Box<[Text]> {
    list.into_iter()
        .flatten()
        .map(|s| s.0.as_ref().into())
        .collect()
}

#[derive(Default)]
struct ServiceFields {
    meta: Meta<NoEntry, ConsistentEndpointAnnotation>,
    spec: Option<Box<KeptServiceSpec>>,
    ingress: Box<[(Option<Text>, Option<Text>)]>,
}

impl<'de> Fields<'de> for ServiceFields {
    const WHAT: &'static str = "Service";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "apiVersion" => expect_value(map, <Service as k8s_openapi::Resource>::API_VERSION)?,
            "kind" => expect_value(map, <Service as k8s_openapi::Resource>::KIND)?,
            "metadata" => self.meta = Meta::read(map)?,
            "spec" => {
                let spec: Option<Object<SpecFields<'de>>> = map.next_value()?;
                self.spec = spec.map(|s| Box::new(s.0.kept()));
            }
            "status" => {
                let status: Option<Object<Only<LoadBalancerOf>>> = map.next_value()?;
                self.ingress = status
                    .and_then(|s| s.0.value())
                    .and_then(|lb| lb.0.value())
                    .into_iter()
                    .flatten()
                    .map(|i| (i.0.ip, i.0.ip_mode))
                    .collect();
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for DecodedService {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Object(service) = Object::<ServiceFields>::deserialize(d)?;
        let Meta {
            names,
            resource_version,
            annotation,
            ..
        } = service.meta;
        let kept = KeptService {
            names: names.clone(),
            consistent_endpoint: annotation,
            spec: service.spec,
            ingress: service.ingress,
        };
        Ok(Decoded::of(&names, resource_version, kept))
    }
}

/// A Service's spec as decoded; `clusterIP` is kept once its `clusterIPs` are known.
#[derive(Default)]
struct SpecFields<'de> {
    type_: Option<Text>,
    cluster_ip: Option<Str<'de>>,
    cluster_ips: Box<[Text]>,
    external_ips: Box<[Text]>,
    load_balancer_source_ranges: Box<[Text]>,
    external_traffic_policy: Option<Text>,
    internal_traffic_policy: Option<Text>,
    session_affinity: Option<Text>,
    affinity_timeout_seconds: Option<i32>,
    health_check_node_port: Option<i32>,
    traffic_distribution: Option<Text>,
    ports: Box<[KeptServicePort]>,
}

impl SpecFields<'_> {
    fn kept(self) -> KeptServiceSpec {
        KeptServiceSpec {
            type_: self.type_,
            cluster_ip: self
                .cluster_ip
                .map(|ip| cluster_ip(&ip.0, &self.cluster_ips)),
            cluster_ips: self.cluster_ips,
            external_ips: self.external_ips,
            load_balancer_source_ranges: self.load_balancer_source_ranges,
            external_traffic_policy: self.external_traffic_policy,
            internal_traffic_policy: self.internal_traffic_policy,
            session_affinity: self.session_affinity,
            affinity_timeout_seconds: self.affinity_timeout_seconds,
            health_check_node_port: self.health_check_node_port,
            traffic_distribution: self.traffic_distribution,
            ports: self.ports,
        }
    }
}

impl<'de> Fields<'de> for SpecFields<'de> {
    const WHAT: &'static str = "ServiceSpec";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.type_ = word(map.next_value()?),
            "clusterIP" => self.cluster_ip = map.next_value()?,
            "clusterIPs" => self.cluster_ips = texts(map.next_value()?),
            "externalIPs" => self.external_ips = texts(map.next_value()?),
            "loadBalancerSourceRanges" => {
                self.load_balancer_source_ranges = texts(map.next_value()?);
            }
            "externalTrafficPolicy" => self.external_traffic_policy = word(map.next_value()?),
            "internalTrafficPolicy" => self.internal_traffic_policy = word(map.next_value()?),
            "sessionAffinity" => self.session_affinity = word(map.next_value()?),
            "sessionAffinityConfig" => {
                let config: Option<Object<Only<ClientIpOf>>> = map.next_value()?;
                self.affinity_timeout_seconds =
                    config.and_then(|c| c.0.value()).and_then(|c| c.0.value());
            }
            "healthCheckNodePort" => self.health_check_node_port = map.next_value()?,
            "trafficDistribution" => self.traffic_distribution = word(map.next_value()?),
            "ports" => {
                let ports: Option<Vec<Object<ServicePortFields>>> = map.next_value()?;
                self.ports = ports
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        (
                            p.0.name,
                            p.0.protocol,
                            p.0.port.unwrap_or_default(),
                            p.0.node_port,
                        )
                    })
                    .collect();
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// A Service port: `port` is 0 when null or absent, as k8s-openapi reads it.
#[derive(Default)]
struct ServicePortFields {
    name: Option<Text>,
    protocol: Option<Text>,
    port: Option<i32>,
    node_port: Option<i32>,
}

impl<'de> Fields<'de> for ServicePortFields {
    const WHAT: &'static str = "ServicePort";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = word(map.next_value()?),
            "protocol" => self.protocol = word(map.next_value()?),
            "port" => self.port = map.next_value()?,
            "nodePort" => self.node_port = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// An object of which the proxy reads one field, `F::KEY` (null or absent: `None`).
struct Only<F: OnlyField>(Option<F::Value>);

/// The one field `Only` reads, and the object it is read from.
trait OnlyField {
    const WHAT: &'static str;
    const KEY: &'static str;
    type Value;
}

impl<F: OnlyField> Default for Only<F> {
    fn default() -> Self {
        Only(None)
    }
}

impl<F: OnlyField> Only<F> {
    fn value(self) -> Option<F::Value> {
        self.0
    }
}

impl<'de, F: OnlyField> Fields<'de> for Only<F>
where
    F::Value: Deserialize<'de>,
{
    const WHAT: &'static str = F::WHAT;

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        if key == F::KEY {
            self.0 = map.next_value()?;
            Ok(())
        } else {
            skip(map)
        }
    }
}

/// `sessionAffinityConfig.clientIP`.
struct ClientIpOf;

impl OnlyField for ClientIpOf {
    const WHAT: &'static str = "SessionAffinityConfig";
    const KEY: &'static str = "clientIP";
    type Value = Object<Only<TimeoutOf>>;
}

/// `clientIP.timeoutSeconds`.
struct TimeoutOf;

impl OnlyField for TimeoutOf {
    const WHAT: &'static str = "ClientIPConfig";
    const KEY: &'static str = "timeoutSeconds";
    type Value = i32;
}

/// `status.loadBalancer`.
struct LoadBalancerOf;

impl OnlyField for LoadBalancerOf {
    const WHAT: &'static str = "ServiceStatus";
    const KEY: &'static str = "loadBalancer";
    type Value = Object<Only<IngressOf>>;
}

/// `loadBalancer.ingress`.
struct IngressOf;

impl OnlyField for IngressOf {
    const WHAT: &'static str = "LoadBalancerStatus";
    const KEY: &'static str = "ingress";
    type Value = Vec<Object<Ingress>>;
}

#[derive(Default)]
struct Ingress {
    ip: Option<Text>,
    ip_mode: Option<Text>,
}

impl<'de> Fields<'de> for Ingress {
    const WHAT: &'static str = "LoadBalancerIngress";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "ip" => self.ip = text(map.next_value()?),
            "ipMode" => self.ip_mode = word(map.next_value()?),
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

    /// What the store keeps of an object k8s-openapi decoded, and its metadata as the watcher
    /// reads it; `None`: refused.
    fn through_k8s_openapi<K>(
        object: Result<K, serde_json::Error>,
    ) -> Option<(K::Compact, ObjectMeta)>
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
}
