//! What the store keeps of each object: only the fields the cluster model reads, in compact
//! typed form. The model is converted from this form, whether the objects came from a watch
//! or from manifests.
//!
//! A k8s-openapi object reserves room for every optional field (350 bytes per endpoint of a
//! slice before its strings), and the JSON of one repeats every key; at 30,000 Services of 10
//! endpoints either costs tens of MiB the proxy never reads. Values are kept as the API sent
//! them (an invalid address stays the text it was), so the model accepts and rejects exactly
//! what it would from the full object; `expand` gives back an object with just those fields.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

#[cfg(feature = "daemon")]
use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, ServicePort, ServiceSpec,
    ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
#[cfg(feature = "daemon")]
use k8s_openapi::api::discovery::v1::{
    EndpointConditions, EndpointHints, EndpointPort, ForNode, ForZone,
};
use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    CONSISTENT_ENDPOINT_ANNOTATION, SERVICE_NAME_LABEL, ServiceRef, service_names, shared,
    shared_name,
};

/// A text value as the API sent it. Values many objects repeat (namespaces, types, policies,
/// protocols, port names) share one allocation (`word`); the others have their own (`text`).
pub(crate) type Text = Arc<str>;

/// An object kind the store keeps, as it is received, and what it keeps of one.
// Exported by `source::store`, which only the daemon build has.
#[cfg_attr(not(feature = "daemon"), allow(unreachable_pub))]
pub trait Kept: Sized {
    /// The fields of the object the model reads.
    type Compact: Clone + PartialEq + std::fmt::Debug;

    /// The Kubernetes object a compact form stands for.
    type Object;

    fn compact(self) -> Self::Compact;

    /// The object back from its compact form: every field the model reads, as received; no
    /// other. (The model reads Services and EndpointSlices compact; Nodes and ServiceCIDRs it
    /// reads as objects.)
    #[cfg(feature = "daemon")]
    fn expand(compact: &Self::Compact) -> Self::Object;

    /// The service the object is part of.
    #[cfg(feature = "daemon")]
    fn service(compact: &Self::Compact) -> Option<ServiceRef>;
}

fn text(s: String) -> Text {
    s.into()
}

fn word(s: String) -> Text {
    shared_name(&s)
}

fn texts(list: Option<Vec<String>>) -> Box<[Text]> {
    list.into_iter().flatten().map(text).collect()
}

#[cfg(feature = "daemon")]
fn strings(list: &[Text]) -> Option<Vec<String>> {
    (!list.is_empty()).then(|| list.iter().map(|s| s.to_string()).collect())
}

fn string(s: &Option<Text>) -> Option<String> {
    s.as_deref().map(str::to_string)
}

/// The metadata every kept object has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    pub(crate) namespace: Option<Text>,
    pub(crate) name: Option<Text>,
}

impl Names {
    fn of(meta: &mut ObjectMeta) -> Names {
        Names {
            namespace: meta.namespace.take().map(word),
            name: meta.name.take().map(text),
        }
    }

    fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            namespace: string(&self.namespace),
            name: string(&self.name),
            ..ObjectMeta::default()
        }
    }
}

/// A map of one entry, `key` → `value`, when there is a value.
#[cfg(feature = "daemon")]
fn single(key: &str, value: &Option<Text>) -> Option<BTreeMap<String, String>> {
    value
        .as_ref()
        .map(|v| BTreeMap::from([(key.to_string(), v.to_string())]))
}

fn annotation(meta: &mut ObjectMeta, key: &str) -> Option<String> {
    meta.annotations.as_mut()?.remove(key)
}

/// `clusterIP`, which is most often the first of `clusterIPs`: one copy for both.
pub(crate) fn cluster_ip(ip: &str, cluster_ips: &[Text]) -> Text {
    match cluster_ips.first() {
        Some(first) if **first == *ip => first.clone(),
        _ => ip.into(),
    }
}

/// A Service: what `cluster::service` reads.
// Exported by `source::store`, which only the daemon build has.
#[cfg_attr(not(feature = "daemon"), allow(unreachable_pub))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptService {
    pub(crate) names: Names,
    pub(crate) consistent_endpoint: Option<Text>,
    pub(crate) spec: Option<Box<KeptServiceSpec>>,
    /// `status.loadBalancer.ingress`: (ip, ipMode).
    pub(crate) ingress: Box<[(Option<Text>, Option<Text>)]>,
}

/// A Service port: name, protocol, port, nodePort.
pub(crate) type KeptServicePort = (Option<Text>, Option<Text>, i32, Option<i32>);

/// An EndpointSlice port: name, protocol, port.
pub(crate) type KeptSlicePort = (Option<Text>, Option<Text>, Option<i32>);

/// An endpoint's hints: the names of its forZones and of its forNodes.
pub(crate) type HintNames = (Option<Box<[Text]>>, Option<Box<[Text]>>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptServiceSpec {
    pub(crate) type_: Option<Text>,
    pub(crate) cluster_ip: Option<Text>,
    pub(crate) cluster_ips: Box<[Text]>,
    pub(crate) external_ips: Box<[Text]>,
    pub(crate) load_balancer_source_ranges: Box<[Text]>,
    pub(crate) external_traffic_policy: Option<Text>,
    pub(crate) internal_traffic_policy: Option<Text>,
    pub(crate) session_affinity: Option<Text>,
    pub(crate) affinity_timeout_seconds: Option<i32>,
    pub(crate) health_check_node_port: Option<i32>,
    pub(crate) traffic_distribution: Option<Text>,
    pub(crate) ports: Box<[KeptServicePort]>,
}

impl KeptService {
    /// The service the Service defines (no namespace means `default`, as the API does).
    pub(crate) fn service_ref(&self) -> ServiceRef {
        let (namespace, name) = self.service_names();
        (namespace.to_string(), name.to_string())
    }

    /// `service_ref`, borrowed.
    pub(crate) fn service_names(&self) -> (&str, &str) {
        let Names { namespace, name } = &self.names;
        service_names(namespace.as_deref(), name.as_deref())
    }
}

impl Kept for Service {
    type Compact = KeptService;
    type Object = Service;

    fn compact(mut self) -> KeptService {
        let spec = self.spec.map(|s| {
            let cluster_ips = texts(s.cluster_ips);
            Box::new(KeptServiceSpec {
                type_: s.type_.map(word),
                cluster_ip: s.cluster_ip.map(|ip| cluster_ip(&ip, &cluster_ips)),
                cluster_ips,
                external_ips: texts(s.external_ips),
                load_balancer_source_ranges: texts(s.load_balancer_source_ranges),
                external_traffic_policy: s.external_traffic_policy.map(word),
                internal_traffic_policy: s.internal_traffic_policy.map(word),
                session_affinity: s.session_affinity.map(word),
                affinity_timeout_seconds: s
                    .session_affinity_config
                    .and_then(|c| c.client_ip)
                    .and_then(|c| c.timeout_seconds),
                health_check_node_port: s.health_check_node_port,
                traffic_distribution: s.traffic_distribution.map(word),
                ports: s
                    .ports
                    .into_iter()
                    .flatten()
                    .map(|p| (p.name.map(word), p.protocol.map(word), p.port, p.node_port))
                    .collect(),
            })
        });
        let ingress = self
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .into_iter()
            .flatten()
            .map(|i| (i.ip.map(text), i.ip_mode.map(word)))
            .collect();
        KeptService {
            consistent_endpoint: annotation(&mut self.metadata, CONSISTENT_ENDPOINT_ANNOTATION)
                .map(word),
            names: Names::of(&mut self.metadata),
            spec,
            ingress,
        }
    }

    #[cfg(feature = "daemon")]
    fn expand(kept: &KeptService) -> Service {
        let mut metadata = kept.names.meta();
        metadata.annotations = single(CONSISTENT_ENDPOINT_ANNOTATION, &kept.consistent_endpoint);
        let spec = kept.spec.as_ref().map(|s| ServiceSpec {
            type_: string(&s.type_),
            cluster_ip: string(&s.cluster_ip),
            cluster_ips: strings(&s.cluster_ips),
            external_ips: strings(&s.external_ips),
            load_balancer_source_ranges: strings(&s.load_balancer_source_ranges),
            external_traffic_policy: string(&s.external_traffic_policy),
            internal_traffic_policy: string(&s.internal_traffic_policy),
            session_affinity: string(&s.session_affinity),
            session_affinity_config: s.affinity_timeout_seconds.map(|t| SessionAffinityConfig {
                client_ip: Some(ClientIPConfig {
                    timeout_seconds: Some(t),
                }),
            }),
            health_check_node_port: s.health_check_node_port,
            traffic_distribution: string(&s.traffic_distribution),
            ports: Some(
                s.ports
                    .iter()
                    .map(|(name, protocol, port, node_port)| ServicePort {
                        name: string(name),
                        protocol: string(protocol),
                        port: *port,
                        node_port: *node_port,
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        });
        let status = (!kept.ingress.is_empty()).then(|| ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    kept.ingress
                        .iter()
                        .map(|(ip, ip_mode)| LoadBalancerIngress {
                            ip: string(ip),
                            ip_mode: string(ip_mode),
                            ..LoadBalancerIngress::default()
                        })
                        .collect(),
                ),
            }),
            ..ServiceStatus::default()
        });
        Service {
            metadata,
            spec,
            status,
        }
    }

    #[cfg(feature = "daemon")]
    fn service(kept: &KeptService) -> Option<ServiceRef> {
        Some(kept.service_ref())
    }
}

/// An EndpointSlice: what `cluster::endpoints` reads, and the change-trigger time.
// Exported by `source::store`, which only the daemon build has.
#[cfg_attr(not(feature = "daemon"), allow(unreachable_pub))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptSlice {
    pub(crate) names: Names,
    /// The `kubernetes.io/service-name` label.
    pub(crate) service_name: Option<Text>,
    pub(crate) trigger_time: Option<SystemTime>,
    pub(crate) address_type: Text,
    pub(crate) endpoints: Box<[KeptEndpoint]>,
    pub(crate) ports: Box<[KeptSlicePort]>,
}

impl KeptSlice {
    /// The service the slice belongs to, by its `kubernetes.io/service-name` label. A slice
    /// without the label belongs to no service: it is grouped under the empty name, which no
    /// Service can have, and rejected when converted.
    pub(crate) fn service_ref(&self) -> ServiceRef {
        let (namespace, name) = self.service_names();
        (namespace.to_string(), name.to_string())
    }

    /// `service_ref`, borrowed.
    pub(crate) fn service_names(&self) -> (&str, &str) {
        let namespace = self.names.namespace.as_deref();
        service_names(namespace, self.service_name.as_deref())
    }

    #[cfg(feature = "daemon")]
    fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            labels: single(SERVICE_NAME_LABEL, &self.service_name),
            ..self.names.meta()
        }
    }

    /// The slice's well-formed `last-change-trigger-time` annotation.
    #[cfg(feature = "daemon")]
    pub(crate) fn trigger_time(&self) -> Option<SystemTime> {
        self.trigger_time
    }
}

/// One endpoint: its first address (the only one kube-proxy reads), conditions, node, zone and
/// hints, in 40 bytes for the usual endpoint (a k8s-openapi one takes 350 before its strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptEndpoint {
    /// Node and zone, shared by every endpoint on that node.
    placement: Option<Arc<Placement>>,
    /// Hints, and an address that does not print back as received: few endpoints have either.
    rare: Option<Box<Rare>>,
    address: Address,
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Placement {
    node_name: Option<Text>,
    zone: Option<Text>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rare {
    address: Option<Text>,
    hints: Option<HintNames>,
}

/// An endpoint's first address: parsed when its text is exactly how the address prints
/// (nearly always), so that it prints back as received; otherwise its text is in `Rare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Address {
    #[default]
    Absent,
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    Text,
}

impl Address {
    /// The address, and its text when it does not print back as received.
    pub(crate) fn of(s: Option<&str>) -> (Address, Option<Text>) {
        let Some(s) = s else {
            return (Address::Absent, None);
        };
        match s.parse::<IpAddr>() {
            // The parser takes only four decimal octets without leading zeros, which is how
            // an address prints: no need to print it to compare (300,000 times at a start).
            Ok(IpAddr::V4(ip)) => (Address::V4(ip), None),
            Ok(IpAddr::V6(ip)) if ip.to_string() == s => (Address::V6(ip), None),
            _ => (Address::Text, Some(s.into())),
        }
    }
}

/// An endpoint's first address as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListedAddress<'a> {
    Absent,
    /// Received exactly as the address prints.
    Ip(IpAddr),
    /// Received in another form (leading zeros, upper case, not an address at all).
    Text(&'a str),
}

/// The fields of an endpoint the model reads, each as kept.
#[derive(Debug, Default)]
pub(crate) struct EndpointFields {
    /// The first address: what `Address::of` makes of it.
    pub(crate) address: (Address, Option<Text>),
    pub(crate) ready: Option<bool>,
    pub(crate) serving: Option<bool>,
    pub(crate) terminating: Option<bool>,
    pub(crate) node_name: Option<Text>,
    pub(crate) zone: Option<Text>,
    pub(crate) hints: Option<HintNames>,
}

impl KeptEndpoint {
    fn of(ep: Endpoint) -> KeptEndpoint {
        let conditions = ep.conditions.unwrap_or_default();
        let words = |list: Option<Vec<String>>| list.map(|l| l.into_iter().map(word).collect());
        KeptEndpoint::new(EndpointFields {
            address: Address::of(ep.addresses.first().map(String::as_str)),
            ready: conditions.ready,
            serving: conditions.serving,
            terminating: conditions.terminating,
            node_name: ep.node_name.map(word),
            zone: ep.zone.map(word),
            hints: ep.hints.map(|h| {
                (
                    words(h.for_zones.map(|z| z.into_iter().map(|z| z.name).collect())),
                    words(h.for_nodes.map(|n| n.into_iter().map(|n| n.name).collect())),
                )
            }),
        })
    }

    pub(crate) fn new(fields: EndpointFields) -> KeptEndpoint {
        let EndpointFields {
            address: (address, text_address),
            ready,
            serving,
            terminating,
            node_name,
            zone,
            hints,
        } = fields;
        let placement = (node_name.is_some() || zone.is_some()).then(|| {
            static PLACEMENTS: Mutex<BTreeSet<Arc<Placement>>> = Mutex::new(BTreeSet::new());
            let placement = Placement { node_name, zone };
            shared(&PLACEMENTS, &placement, || {
                Arc::new(Placement {
                    node_name: placement.node_name.clone(),
                    zone: placement.zone.clone(),
                })
            })
        });
        let rare = (text_address.is_some() || hints.is_some()).then(|| {
            Box::new(Rare {
                address: text_address,
                hints,
            })
        });
        KeptEndpoint {
            placement,
            rare,
            address,
            ready,
            serving,
            terminating,
        }
    }

    /// The first address as received: parsed when it prints back as received, else its text.
    pub(crate) fn address(&self) -> ListedAddress<'_> {
        match self.address {
            Address::Absent => ListedAddress::Absent,
            Address::V4(ip) => ListedAddress::Ip(IpAddr::V4(ip)),
            Address::V6(ip) => ListedAddress::Ip(IpAddr::V6(ip)),
            Address::Text => match self.rare.as_deref().and_then(|r| r.address.as_deref()) {
                Some(text) => ListedAddress::Text(text),
                None => ListedAddress::Absent,
            },
        }
    }

    pub(crate) fn conditions(&self) -> (Option<bool>, Option<bool>, Option<bool>) {
        (self.ready, self.serving, self.terminating)
    }

    pub(crate) fn node_name(&self) -> Option<&Text> {
        self.placement.as_deref()?.node_name.as_ref()
    }

    pub(crate) fn zone(&self) -> Option<&str> {
        self.placement.as_deref()?.zone.as_deref()
    }

    /// The names of the endpoint's forZones and forNodes hints.
    pub(crate) fn hints(&self) -> (&[Text], &[Text]) {
        match self.rare.as_deref().and_then(|r| r.hints.as_ref()) {
            Some((zones, nodes)) => (
                zones.as_deref().unwrap_or_default(),
                nodes.as_deref().unwrap_or_default(),
            ),
            None => (&[], &[]),
        }
    }

    #[cfg(feature = "daemon")]
    fn expand(&self) -> Endpoint {
        let address = match self.address() {
            ListedAddress::Absent => None,
            ListedAddress::Ip(ip) => Some(ip.to_string()),
            ListedAddress::Text(text) => Some(text.to_string()),
        };
        let names = |list: &Option<Box<[Text]>>| {
            list.as_ref()
                .map(|l| l.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        };
        Endpoint {
            addresses: address.into_iter().collect(),
            conditions: Some(EndpointConditions {
                ready: self.ready,
                serving: self.serving,
                terminating: self.terminating,
            }),
            node_name: self.node_name().map(|n| n.to_string()),
            zone: self.zone().map(str::to_string),
            hints: self
                .rare
                .as_deref()
                .and_then(|r| r.hints.as_ref())
                .map(|(zones, nodes)| EndpointHints {
                    for_zones: names(zones)
                        .map(|z| z.into_iter().map(|name| ForZone { name }).collect()),
                    for_nodes: names(nodes)
                        .map(|n| n.into_iter().map(|name| ForNode { name }).collect()),
                }),
            ..Endpoint::default()
        }
    }
}

impl Kept for EndpointSlice {
    type Compact = KeptSlice;
    type Object = EndpointSlice;

    fn compact(mut self) -> KeptSlice {
        let trigger_time = trigger_time(&self);
        let endpoints = self.endpoints.into_iter().map(KeptEndpoint::of).collect();
        KeptSlice {
            service_name: self
                .metadata
                .labels
                .as_mut()
                .and_then(|l| l.remove(SERVICE_NAME_LABEL))
                .map(text),
            names: Names::of(&mut self.metadata),
            trigger_time,
            address_type: word(self.address_type),
            endpoints,
            ports: self
                .ports
                .into_iter()
                .flatten()
                .map(|p| (p.name.map(word), p.protocol.map(word), p.port))
                .collect(),
        }
    }

    #[cfg(feature = "daemon")]
    fn expand(kept: &KeptSlice) -> EndpointSlice {
        EndpointSlice {
            metadata: kept.meta(),
            address_type: kept.address_type.to_string(),
            endpoints: kept.endpoints.iter().map(KeptEndpoint::expand).collect(),
            ports: Some(
                kept.ports
                    .iter()
                    .map(|(name, protocol, port)| EndpointPort {
                        name: string(name),
                        protocol: string(protocol),
                        port: *port,
                        ..EndpointPort::default()
                    })
                    .collect(),
            ),
        }
    }

    #[cfg(feature = "daemon")]
    fn service(kept: &KeptSlice) -> Option<ServiceRef> {
        Some(kept.service_ref())
    }
}

/// EndpointSlice annotation: when the change that this slice reflects happened (kube-proxy's
/// source for network programming latency).
pub(crate) const LAST_CHANGE_TRIGGER_TIME: &str =
    "endpoints.kubernetes.io/last-change-trigger-time";

/// The slice's `last-change-trigger-time` annotation, when present and well-formed.
pub(crate) fn trigger_time(slice: &EndpointSlice) -> Option<SystemTime> {
    let text = slice
        .metadata
        .annotations
        .as_ref()?
        .get(LAST_CHANGE_TRIGGER_TIME)?;
    parse_trigger_time(text)
}

/// A `last-change-trigger-time` annotation's value, when well-formed.
pub(crate) fn parse_trigger_time(text: &str) -> Option<SystemTime> {
    let ts: k8s_openapi::jiff::Timestamp = text.parse().ok()?;
    // By hand: the `From` conversion needs jiff's `std` feature, which k8s-openapi does not ask
    // for (the build without the daemon has it off).
    let since_epoch = ts.as_duration();
    let magnitude = std::time::Duration::try_from(since_epoch.abs()).ok()?;
    if since_epoch.is_negative() {
        SystemTime::UNIX_EPOCH.checked_sub(magnitude)
    } else {
        SystemTime::UNIX_EPOCH.checked_add(magnitude)
    }
}

/// The zone label, the one label of its Node the proxy reads.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// One object per node (the watch selects only ours): it keeps its own type, with only the
/// fields `NodeInfo` and the health check read.
impl Kept for Node {
    type Compact = Node;
    type Object = Node;

    fn compact(mut self) -> Node {
        let zone = self
            .metadata
            .labels
            .as_mut()
            .and_then(|l| l.remove_entry(ZONE_LABEL));
        let mut metadata = Names::of(&mut self.metadata).meta();
        metadata.labels = zone.map(|z| BTreeMap::from([z]));
        metadata.deletion_timestamp = self.metadata.deletion_timestamp;
        Node {
            metadata,
            spec: self.spec.map(|s| NodeSpec {
                pod_cidr: s.pod_cidr,
                pod_cidrs: s.pod_cidrs,
                taints: s.taints,
                ..NodeSpec::default()
            }),
            status: self.status.map(|s| NodeStatus {
                addresses: s.addresses,
                ..NodeStatus::default()
            }),
        }
    }

    #[cfg(feature = "daemon")]
    fn expand(kept: &Node) -> Node {
        kept.clone()
    }

    #[cfg(feature = "daemon")]
    fn service(_: &Node) -> Option<ServiceRef> {
        None
    }
}

/// A few objects per cluster: they keep their own type, with only their CIDRs.
impl Kept for ServiceCIDR {
    type Compact = ServiceCIDR;
    type Object = ServiceCIDR;

    fn compact(mut self) -> ServiceCIDR {
        ServiceCIDR {
            metadata: Names::of(&mut self.metadata).meta(),
            spec: self.spec.map(|s| ServiceCIDRSpec { cidrs: s.cidrs }),
            status: None,
        }
    }

    #[cfg(feature = "daemon")]
    fn expand(kept: &ServiceCIDR) -> ServiceCIDR {
        kept.clone()
    }

    #[cfg(feature = "daemon")]
    fn service(_: &ServiceCIDR) -> Option<ServiceRef> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn trigger_times_read_as_the_instants_they_name() {
        let at = |secs: u64, nanos: u32| SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
        assert_eq!(
            parse_trigger_time("2026-11-22T10:00:00Z"),
            Some(at(1_795_341_600, 0))
        );
        assert_eq!(
            parse_trigger_time("2026-11-22T11:00:00.25+01:00"),
            Some(at(1_795_341_600, 250_000_000))
        );
        assert_eq!(
            parse_trigger_time("1969-12-31T23:59:58Z"),
            SystemTime::UNIX_EPOCH.checked_sub(Duration::from_secs(2))
        );
        assert_eq!(parse_trigger_time("yesterday"), None);
    }
}
