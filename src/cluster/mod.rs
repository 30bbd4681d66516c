//! The cluster as the proxy sees it: service ports with their endpoints, and this node's facts,
//! converted from Kubernetes objects (in the form `kept` keeps them) and validated, and the
//! cluster's ClusterIP ranges. An invalid object is rejected with a reason and never affects
//! another; headless and ExternalName Services are not proxied at all.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;

mod endpoints;
pub(crate) mod kept;
mod node;
mod service;
#[cfg(test)]
mod tests;

use endpoints::add_slice;
use kept::{Kept, KeptService, KeptSlice};
use service::service_ports;

/// Transport protocol of a service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub(crate) fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// IP protocol number.
    pub(crate) fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// `namespace/name:port` plus protocol: the identity of one proxied port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    pub namespace: String,
    pub name: String,
    /// The port's name ("" for an unnamed single port).
    pub port: String,
    pub protocol: Protocol,
}

impl std::fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}:{}", self.namespace, self.name, self.port)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

/// One port of one Service, with everything that decides a packet's fate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServicePort {
    pub name: Arc<ServicePortName>,
    pub cluster_ips: Vec<IpAddr>,
    pub port: u16,
    pub node_port: Option<u16>,
    pub external_ips: Vec<IpAddr>,
    /// LoadBalancer ingress IPs that are proxied (`ipMode: Proxy` ones are left to the LB).
    pub load_balancer_ips: Vec<IpAddr>,
    pub source_ranges: Vec<IpNet>,
    pub external_policy: TrafficPolicy,
    pub internal_policy: TrafficPolicy,
    /// ClientIP session affinity timeout in seconds.
    pub affinity_timeout: Option<u32>,
    pub health_check_node_port: Option<u16>,
    /// `spec.trafficDistribution` (PreferClose, PreferSameZone, PreferSameNode).
    pub traffic_distribution: Option<String>,
    /// The Service's `CONSISTENT_ENDPOINT_ANNOTATION`: endpoints chosen by a hash of the
    /// connection instead of at random.
    pub consistent: Option<ConsistentEndpoint>,
}

/// The Service annotation that opts a Service into consistent endpoint choice: `client` or
/// `connection` (`ConsistentEndpoint`).
pub(crate) const CONSISTENT_ENDPOINT_ANNOTATION: &str = "kubenft.io/consistent-endpoint";

/// What a consistent endpoint choice hashes, so that every node, given the same endpoints,
/// sends it to the same endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsistentEndpoint {
    /// The source address: every connection of a client reaches the same endpoint.
    Client,
    /// Source and destination address and port and the protocol: a connection moved to
    /// another node (ECMP rehashing) reaches the same endpoint there.
    Connection,
}

impl ConsistentEndpoint {
    /// The annotation's value on `svc`: none without the annotation, an error for a value
    /// that is not a mode.
    pub(crate) fn of(svc: &KeptService) -> Result<Option<ConsistentEndpoint>, String> {
        match svc.consistent_endpoint.as_deref().map(str::trim) {
            None => Ok(None),
            Some("client") => Ok(Some(ConsistentEndpoint::Client)),
            Some("connection") => Ok(Some(ConsistentEndpoint::Connection)),
            Some(other) => Err(format!(
                "annotation {CONSISTENT_ENDPOINT_ANNOTATION}: {other:?} is neither \"client\" nor \"connection\"; endpoints are chosen at random"
            )),
        }
    }
}

impl ServicePort {
    /// True when traffic from outside the cluster reaches this port (NodePort, external or
    /// load-balancer IPs).
    pub(crate) fn has_external(&self) -> bool {
        self.node_port.is_some()
            || !self.external_ips.is_empty()
            || !self.load_balancer_ips.is_empty()
    }
}

/// `name` as endpoints and stored objects hold it: one allocation per distinct text, shared by
/// every holder. For texts many objects repeat (node and zone names, namespaces, a port's
/// protocol): a cluster has far more endpoints than nodes, and the daemon holds every endpoint.
pub(crate) fn shared_name(name: &str) -> Arc<str> {
    static NAMES: Mutex<BTreeSet<Arc<str>>> = Mutex::new(BTreeSet::new());
    shared(&NAMES, name, || name.into())
}

/// The one `Arc` in `set` equal to `value` (made with `make` and kept if there is none).
pub(crate) fn shared<T: Ord + ?Sized>(
    set: &Mutex<BTreeSet<Arc<T>>>,
    value: &T,
    make: impl FnOnce() -> Arc<T>,
) -> Arc<T> {
    let mut values = set.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(shared) = values.get(value) {
        return shared.clone();
    }
    // Values nothing holds any more (nodes gone) are dropped as the set doubles.
    if values.len() >= 64 && values.len().is_power_of_two() {
        values.retain(|n| Arc::strong_count(n) > 1);
    }
    let shared = make();
    values.insert(shared.clone());
    shared
}

/// One endpoint address of a service port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// Shared by every endpoint on that node (see `shared_name`).
    pub node_name: Option<Arc<str>>,
    pub zone: Option<String>,
    pub hint_zones: Vec<String>,
    pub hint_nodes: Vec<String>,
}

#[cfg(test)]
impl Endpoint {
    /// A ready endpoint, on no node named, without zone or hints.
    pub(crate) fn ready(ip: IpAddr, port: u16) -> Endpoint {
        Endpoint {
            ip,
            port,
            ready: true,
            serving: true,
            terminating: false,
            node_name: None,
            zone: None,
            hint_zones: Vec::new(),
            hint_nodes: Vec::new(),
        }
    }
}

/// Facts about this node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    pub name: String,
    pub internal_ips: Vec<IpAddr>,
    pub pod_cidrs: Vec<IpNet>,
    pub zone: Option<String>,
}

/// An object (or part of one) that was not proxied, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub(crate) kind: &'static str,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) reason: String,
}

/// Everything the planner reads; ordered maps make the output deterministic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterState {
    pub services: BTreeMap<Arc<ServicePortName>, ServicePort>,
    pub endpoints: BTreeMap<Arc<ServicePortName>, Vec<Endpoint>>,
    pub node: Option<NodeInfo>,
    /// The ClusterIP ranges the cluster's ServiceCIDR objects declare, sorted, each once.
    pub service_cidrs: Vec<IpNet>,
}

/// An address as kube-proxy reads one from a Service or an EndpointSlice: IPv4 octets may
/// carry leading zeros, read as decimal ("172.30.0.041" is 172.30.0.41). Older API servers
/// accepted such addresses and objects written then still hold them.
fn parse_ip(s: &str) -> Option<IpAddr> {
    s.parse().ok().or_else(|| {
        let mut octets = [0u8; 4];
        let mut parts = s.split('.');
        for octet in &mut octets {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *octet = part.parse().ok()?;
        }
        parts.next().is_none().then(|| IpAddr::from(octets))
    })
}

/// A CIDR (or a bare address) as kube-proxy reads a loadBalancerSourceRange: leading zeros
/// allowed in IPv4 octets and in the prefix length, host bits cleared.
fn parse_net(s: &str) -> Option<IpNet> {
    let net = match s.split_once('/') {
        None => IpNet::from(parse_ip(s)?),
        Some((addr, len)) if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) => {
            IpNet::new(parse_ip(addr)?, len.parse().ok()?).ok()?
        }
        Some(_) => return None,
    };
    Some(net.trunc())
}

/// A Service by namespace and name: the unit the API reports changes in. Its ports and their
/// endpoints depend on its own Service object and the EndpointSlices labelled with its name,
/// and on nothing else.
pub type ServiceRef = (String, String);

impl ClusterState {
    /// The endpoints of the service port `name` (none if no slice names it).
    pub(crate) fn endpoints_of(&self, name: &ServicePortName) -> &[Endpoint] {
        self.endpoints.get(name).map_or(&[], Vec::as_slice)
    }

    /// Each service port with its endpoints (`endpoints_of`), in name order: found by walking
    /// the endpoints beside the ports rather than searching for each.
    pub(crate) fn ports_with_endpoints(
        &self,
    ) -> impl Iterator<Item = (&Arc<ServicePortName>, &ServicePort, &[Endpoint])> {
        let mut endpoints = self.endpoints.iter().peekable();
        self.services.iter().map(move |(name, sp)| {
            // A port's endpoints share its name: most steps compare no text.
            let same = |n: &Arc<ServicePortName>| Arc::ptr_eq(n, name) || n == name;
            while endpoints.next_if(|(n, _)| !same(n) && *n < name).is_some() {}
            let eps = endpoints.next_if(|(n, _)| same(n));
            (name, sp, eps.map_or(&[][..], |(_, eps)| eps.as_slice()))
        })
    }

    /// Converts API objects; returns what was skipped and why.
    pub fn from_objects(
        services: &[Service],
        slices: &[EndpointSlice],
        node: Option<&Node>,
    ) -> (ClusterState, Vec<Rejected>) {
        let services: Vec<KeptService> = services.iter().cloned().map(Kept::compact).collect();
        let slices: Vec<KeptSlice> = slices.iter().cloned().map(Kept::compact).collect();
        let mut groups: BTreeMap<ServiceRef, (Vec<&KeptService>, Vec<&KeptSlice>)> =
            BTreeMap::new();
        for svc in &services {
            groups.entry(svc.service_ref()).or_default().0.push(svc);
        }
        for slice in &slices {
            groups.entry(slice.service_ref()).or_default().1.push(slice);
        }
        let mut state = ClusterState::default();
        let mut rejected = Vec::new();
        state.update_services(
            groups
                .into_iter()
                .map(|(service, (services, slices))| (service, services, slices)),
            |_, r| rejected.extend(r),
        );
        state.node = node.map(NodeInfo::of);
        (state, rejected)
    }

    /// Replaces the ports and endpoints of `service` with what its objects say now: `services`
    /// are the Service objects of that name (one, or none once deleted) and `slices` the
    /// EndpointSlices labelled with it. Returns what was skipped and why. Converting every
    /// service this way gives what `from_objects` gives.
    fn update_service(
        &mut self,
        service: &ServiceRef,
        services: &[&KeptService],
        slices: &[&KeptSlice],
    ) -> Vec<Rejected> {
        let lowest = ServicePortName::lowest_of(service);
        let of_service = |n: &ServicePortName| n.namespace == service.0 && n.name == service.1;
        let stale: Vec<Arc<ServicePortName>> = self
            .services
            .range::<ServicePortName, _>(&lowest..)
            .map(|(n, _)| n)
            .take_while(|n| of_service(n))
            .chain(
                self.endpoints
                    .range::<ServicePortName, _>(&lowest..)
                    .map(|(n, _)| n)
                    .take_while(|n| of_service(n)),
            )
            .cloned()
            .collect();
        for name in &stale {
            self.services.remove(name);
            self.endpoints.remove(name);
        }
        let converted = Converted::of(service, services, slices);
        for port in converted.ports {
            self.services.insert(port.name.clone(), port);
        }
        self.endpoints.extend(converted.endpoints);
        converted.rejected
    }

    /// `update_service` for each of `services` (each service once), with `rejected` told what
    /// each one's objects had skipped. Into a state without services (the first sync, a
    /// manifests directory) the ports are gathered and the maps built at once from them, not
    /// searched port by port.
    pub(crate) fn update_services<'a, S: std::borrow::Borrow<ServiceRef>>(
        &mut self,
        services: impl IntoIterator<Item = (S, Vec<&'a KeptService>, Vec<&'a KeptSlice>)>,
        mut rejected: impl FnMut(&ServiceRef, Vec<Rejected>),
    ) {
        if !(self.services.is_empty() && self.endpoints.is_empty()) {
            for (service, objects, slices) in services {
                let service = service.borrow();
                rejected(service, self.update_service(service, &objects, &slices));
            }
            return;
        }
        let services = services.into_iter();
        // About one port and one port's endpoints per service.
        let mut ports = Vec::with_capacity(services.size_hint().0);
        let mut endpoints = Vec::with_capacity(services.size_hint().0);
        for (service, objects, slices) in services {
            let service = service.borrow();
            let converted = Converted::of(service, &objects, &slices);
            ports.extend(converted.ports.into_iter().map(|p| (p.name.clone(), p)));
            endpoints.extend(converted.endpoints);
            rejected(service, converted.rejected);
        }
        // Sorted runs (services come in name order, a service's ports in spec order) sort in
        // about one pass; a name given twice keeps the last, as inserting one by one does.
        self.services = ports.into_iter().collect();
        self.endpoints = endpoints.into_iter().collect();
    }

    /// Drops the external IPs of every port of `services`, as kube-proxy's service ports hold
    /// none with the AllowServiceExternalIPs gate off: no rule, no conntrack cleanup and no
    /// traffic-policy choice sees them. The policies stay as converted (kube-proxy reads
    /// `externalTrafficPolicy` from the spec), but a port without NodePort or load-balancer
    /// IPs is no longer reachable from outside (`ServicePort::has_external`).
    pub(crate) fn withhold_external_ips<'a>(
        &mut self,
        services: impl IntoIterator<Item = &'a ServiceRef>,
    ) {
        for service in services {
            let lowest = ServicePortName::lowest_of(service);
            for (_, port) in self
                .services
                .range_mut::<ServicePortName, _>(&lowest..)
                .take_while(|(name, _)| name.is_port_of(service))
            {
                port.external_ips.clear();
            }
        }
    }

    /// Replaces the service CIDRs with those `objects` (every ServiceCIDR object) declare;
    /// returns the CIDRs skipped and why. As kube-proxy does, every object counts whatever its
    /// status: one being deleted keeps its range until it is gone, as the API server keeps
    /// allocated ClusterIPs in it until then. A CIDR that does not parse costs only itself.
    pub(crate) fn update_service_cidrs(&mut self, objects: &[ServiceCIDR]) -> Vec<Rejected> {
        let mut cidrs = Vec::new();
        let mut rejected = Vec::new();
        for object in objects {
            let listed = object.spec.as_ref().and_then(|s| s.cidrs.as_ref());
            for text in listed.into_iter().flatten() {
                match text.trim().parse::<IpNet>() {
                    // A range written with host bits set means the same range.
                    Ok(net) => cidrs.push(net.trunc()),
                    Err(_) => rejected.push(Rejected {
                        kind: "ServiceCIDR",
                        namespace: String::new(),
                        name: object.metadata.name.clone().unwrap_or_default(),
                        reason: format!("invalid CIDR {text:?}; the object's other CIDRs count"),
                    }),
                }
            }
        }
        cidrs.sort();
        cidrs.dedup();
        self.service_cidrs = cidrs;
        rejected
    }
}

/// One service's ports and the endpoints of each port its slices name, converted from its
/// objects, and what they had skipped and why.
struct Converted {
    ports: Vec<ServicePort>,
    /// Each port name once (shared with the port of that name), its endpoints sorted and
    /// each address once.
    endpoints: Vec<(Arc<ServicePortName>, Vec<Endpoint>)>,
    rejected: Vec<Rejected>,
}

impl Converted {
    fn of(service: &ServiceRef, services: &[&KeptService], slices: &[&KeptSlice]) -> Converted {
        let mut converted = Converted {
            ports: Vec::new(),
            endpoints: Vec::new(),
            rejected: Vec::new(),
        };
        // The API keeps names unique; a manifests directory may not. Picking one of several
        // would depend on file order, so none is proxied.
        let copies = services.len();
        for svc in services {
            let reason = if copies > 1 {
                format!("{copies} Services share this name; none is proxied")
            } else {
                match service_ports(svc) {
                    Ok(ports) => {
                        converted.ports = ports;
                        // A bad value costs the opt-in only: the Service is still proxied.
                        match ConsistentEndpoint::of(svc) {
                            Err(reason) => reason,
                            Ok(_) => continue,
                        }
                    }
                    Err(reason) => reason,
                }
            };
            converted.rejected.push(Rejected {
                kind: "Service",
                namespace: svc.names.namespace.as_deref().unwrap_or_default().into(),
                name: svc.names.name.as_deref().unwrap_or_default().into(),
                reason,
            });
        }
        for slice in slices {
            for reason in add_slice(service, slice, &converted.ports, &mut converted.endpoints) {
                converted.rejected.push(Rejected {
                    kind: "EndpointSlice",
                    namespace: slice.names.namespace.as_deref().unwrap_or_default().into(),
                    name: slice.names.name.as_deref().unwrap_or_default().into(),
                    reason,
                });
            }
        }
        for (_, eps) in &mut converted.endpoints {
            // One address listed twice (a pod moving between slices, or an address reused
            // while the old pod terminates): the one not terminating is kept, as kube-proxy
            // keeps it.
            eps.sort_by(|a, b| {
                (a.ip, a.port, a.terminating)
                    .cmp(&(b.ip, b.port, b.terminating))
                    .then_with(|| a.cmp(b))
            });
            eps.dedup_by(|a, b| a.ip == b.ip && a.port == b.port);
            // Held until the service changes again; pushing left up to twice the room needed
            // (a fifth of the daemon's settled memory at 10,000 services of 10 endpoints).
            eps.shrink_to_fit();
        }
        converted
    }
}

/// A `ClusterState` kept up to date service by service, with what each service's objects had
/// rejected.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    pub state: ClusterState,
    rejected: BTreeMap<ServiceRef, Vec<Rejected>>,
    /// What the ServiceCIDR objects had rejected.
    rejected_cidrs: Vec<Rejected>,
}

impl LiveState {
    /// Re-converts each of `services` (each once) from its objects now (see
    /// `ClusterState::update_services`).
    #[cfg(feature = "daemon")]
    pub(crate) fn update_services<'a>(
        &mut self,
        services: impl IntoIterator<Item = (&'a ServiceRef, Vec<&'a KeptService>, Vec<&'a KeptSlice>)>,
    ) {
        let kept = &mut self.rejected;
        self.state.update_services(services, |service, rejected| {
            if rejected.is_empty() {
                kept.remove(service);
            } else {
                kept.insert(service.clone(), rejected);
            }
        });
    }

    /// Re-reads the service CIDRs from every ServiceCIDR object (see
    /// `ClusterState::update_service_cidrs`).
    #[cfg(feature = "daemon")]
    pub(crate) fn update_service_cidrs(&mut self, objects: &[ServiceCIDR]) {
        self.rejected_cidrs = self.state.update_service_cidrs(objects);
    }

    /// Everything the current objects had rejected.
    pub fn rejected(&self) -> impl Iterator<Item = &Rejected> {
        self.rejected.values().flatten().chain(&self.rejected_cidrs)
    }
}

impl ServicePortName {
    /// The first name any port of `service` can have: names sort by namespace, name, port name
    /// ("" first) and protocol, so the ports of one service follow it, adjacent.
    pub(crate) fn lowest_of(service: &ServiceRef) -> ServicePortName {
        ServicePortName {
            namespace: service.0.clone(),
            name: service.1.clone(),
            port: String::new(),
            protocol: Protocol::Tcp,
        }
    }

    pub(crate) fn is_port_of(&self, service: &ServiceRef) -> bool {
        self.namespace == service.0 && self.name == service.1
    }
}

/// The namespace and name of the service named `name` in `namespace` (none means `default`,
/// as the API does; no name is the empty name, which no Service can have).
pub(crate) fn service_names<'a>(
    namespace: Option<&'a str>,
    name: Option<&'a str>,
) -> (&'a str, &'a str) {
    (namespace_or_default(namespace), name.unwrap_or_default())
}

/// The label that ties an EndpointSlice to its Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// An object's namespace, `default` when it names none, as the API does.
fn namespace_or_default(namespace: Option<&str>) -> &str {
    namespace.unwrap_or("default")
}
