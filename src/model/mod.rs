//! The cluster as the proxy sees it: service ports with their endpoints, and this node's facts,
//! converted from Kubernetes objects and validated, and the cluster's ClusterIP ranges. An
//! invalid object is rejected with a reason and never affects another; headless and
//! ExternalName Services are not proxied at all.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Transport protocol of a service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn as_str(self) -> &'static str {
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
    pub name: ServicePortName,
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
pub const CONSISTENT_ENDPOINT_ANNOTATION: &str = "kubenft.io/consistent-endpoint";

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
    pub fn of(svc: &Service) -> Result<Option<ConsistentEndpoint>, String> {
        let value = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONSISTENT_ENDPOINT_ANNOTATION));
        match value.map(|v| v.trim()) {
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
    pub fn has_external(&self) -> bool {
        self.node_port.is_some()
            || !self.external_ips.is_empty()
            || !self.load_balancer_ips.is_empty()
    }
}

/// One endpoint address of a service port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node_name: Option<String>,
    pub zone: Option<String>,
    pub hint_zones: Vec<String>,
    pub hint_nodes: Vec<String>,
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
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// Everything the planner reads; ordered maps make the output deterministic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterState {
    pub services: BTreeMap<ServicePortName, ServicePort>,
    pub endpoints: BTreeMap<ServicePortName, Vec<Endpoint>>,
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
    /// Converts API objects; returns what was skipped and why.
    pub fn from_objects(
        services: &[Service],
        slices: &[EndpointSlice],
        node: Option<&Node>,
    ) -> (ClusterState, Vec<Rejected>) {
        let mut groups: BTreeMap<ServiceRef, (Vec<&Service>, Vec<&EndpointSlice>)> =
            BTreeMap::new();
        for svc in services {
            groups.entry(service_ref(svc)).or_default().0.push(svc);
        }
        for slice in slices {
            groups
                .entry(slice_service_ref(slice))
                .or_default()
                .1
                .push(slice);
        }
        let mut state = ClusterState::default();
        let mut rejected = Vec::new();
        for (service, (services, slices)) in &groups {
            rejected.extend(state.update_service(service, services, slices));
        }
        state.node = node.map(NodeInfo::of);
        (state, rejected)
    }

    /// Replaces the ports and endpoints of `service` with what its objects say now: `services`
    /// are the Service objects of that name (one, or none once deleted) and `slices` the
    /// EndpointSlices labelled with it. Returns what was skipped and why. Converting every
    /// service this way gives what `from_objects` gives.
    pub fn update_service(
        &mut self,
        service: &ServiceRef,
        services: &[&Service],
        slices: &[&EndpointSlice],
    ) -> Vec<Rejected> {
        let lowest = ServicePortName::lowest_of(service);
        let of_service = |n: &ServicePortName| n.namespace == service.0 && n.name == service.1;
        let stale: Vec<ServicePortName> = self
            .services
            .range(&lowest..)
            .map(|(n, _)| n)
            .take_while(|n| of_service(n))
            .chain(
                self.endpoints
                    .range(&lowest..)
                    .map(|(n, _)| n)
                    .take_while(|n| of_service(n)),
            )
            .cloned()
            .collect();
        for name in &stale {
            self.services.remove(name);
            self.endpoints.remove(name);
        }

        let mut rejected = Vec::new();
        // The API keeps names unique; a manifests directory may not. Picking one of several
        // would depend on file order, so none is proxied.
        let copies = services.len();
        for svc in services {
            let reason = if copies > 1 {
                format!("{copies} Services share this name; none is proxied")
            } else {
                match service_ports(svc) {
                    Ok(ports) => {
                        for p in ports {
                            self.services.insert(p.name.clone(), p);
                        }
                        // A bad value costs the opt-in only: the Service is still proxied.
                        match ConsistentEndpoint::of(svc) {
                            Err(reason) => reason,
                            Ok(_) => continue,
                        }
                    }
                    Err(reason) => reason,
                }
            };
            rejected.push(Rejected {
                kind: "Service",
                namespace: svc.metadata.namespace.clone().unwrap_or_default(),
                name: svc.metadata.name.clone().unwrap_or_default(),
                reason,
            });
        }
        for slice in slices {
            for reason in add_slice(self, slice) {
                rejected.push(Rejected {
                    kind: "EndpointSlice",
                    namespace: slice.metadata.namespace.clone().unwrap_or_default(),
                    name: slice.metadata.name.clone().unwrap_or_default(),
                    reason,
                });
            }
        }
        for (_, eps) in self
            .endpoints
            .range_mut(&lowest..)
            .take_while(|(n, _)| of_service(n))
        {
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
        rejected
    }

    /// Replaces the service CIDRs with those `objects` (every ServiceCIDR object) declare;
    /// returns the CIDRs skipped and why. As kube-proxy does, every object counts whatever its
    /// status: one being deleted keeps its range until it is gone, as the API server keeps
    /// allocated ClusterIPs in it until then. A CIDR that does not parse costs only itself.
    pub fn update_service_cidrs(&mut self, objects: &[ServiceCIDR]) -> Vec<Rejected> {
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
    /// Re-converts `service` from its objects now (see `ClusterState::update_service`).
    pub fn update_service(
        &mut self,
        service: &ServiceRef,
        services: &[&Service],
        slices: &[&EndpointSlice],
    ) {
        let rejected = self.state.update_service(service, services, slices);
        if rejected.is_empty() {
            self.rejected.remove(service);
        } else {
            self.rejected.insert(service.clone(), rejected);
        }
    }

    /// Re-reads the service CIDRs from every ServiceCIDR object (see
    /// `ClusterState::update_service_cidrs`).
    pub fn update_service_cidrs(&mut self, objects: &[ServiceCIDR]) {
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
    pub fn lowest_of(service: &ServiceRef) -> ServicePortName {
        ServicePortName {
            namespace: service.0.clone(),
            name: service.1.clone(),
            port: String::new(),
            protocol: Protocol::Tcp,
        }
    }

    pub fn is_port_of(&self, service: &ServiceRef) -> bool {
        self.namespace == service.0 && self.name == service.1
    }
}

/// The service a Service object defines (no namespace means `default`, as the API does).
pub fn service_ref(svc: &Service) -> ServiceRef {
    (
        namespace_of(&svc.metadata),
        svc.metadata.name.clone().unwrap_or_default(),
    )
}

/// The service an EndpointSlice belongs to, by its `kubernetes.io/service-name` label. A slice
/// without the label belongs to no service: it is grouped under the empty name, which no
/// Service can have, and rejected when converted.
pub fn slice_service_ref(slice: &EndpointSlice) -> ServiceRef {
    (
        namespace_of(&slice.metadata),
        slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .cloned()
            .unwrap_or_default(),
    )
}

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

fn namespace_of(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".into())
}

fn service_ports(svc: &Service) -> Result<Vec<ServicePort>, String> {
    let namespace = namespace_of(&svc.metadata);
    let name = svc.metadata.name.clone().ok_or("no metadata.name")?;
    let Some(spec) = &svc.spec else {
        return Ok(Vec::new());
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(Vec::new());
    }
    let mut cluster_ips = Vec::new();
    let listed: Vec<String> = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(ips), _) if !ips.is_empty() => ips.clone(),
        (_, Some(ip)) => vec![ip.clone()],
        _ => Vec::new(),
    };
    for ip in &listed {
        if ip == "None" {
            return Ok(Vec::new()); // headless
        }
        if ip.is_empty() {
            continue;
        }
        cluster_ips.push(parse_ip(ip).ok_or_else(|| format!("invalid clusterIP {ip:?}"))?);
    }
    if cluster_ips.is_empty() {
        return Err("no clusterIP allocated".into());
    }
    let mut external_ips = Vec::new();
    for ip in spec.external_ips.iter().flatten() {
        external_ips.push(parse_ip(ip).ok_or_else(|| format!("invalid externalIP {ip:?}"))?);
    }
    let mut load_balancer_ips = Vec::new();
    if spec.type_.as_deref() == Some("LoadBalancer") {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref());
        for ing in ingress.into_iter().flatten() {
            if ing.ip_mode.as_deref() == Some("Proxy") {
                continue;
            }
            if let Some(ip) = &ing.ip {
                load_balancer_ips
                    .push(parse_ip(ip).ok_or_else(|| format!("invalid load balancer IP {ip:?}"))?);
            }
        }
    }
    let mut source_ranges = Vec::new();
    for r in spec.load_balancer_source_ranges.iter().flatten() {
        let r = r.trim();
        let net = parse_net(r).ok_or_else(|| format!("invalid loadBalancerSourceRange {r:?}"))?;
        source_ranges.push(net);
    }
    let policy = |p: &Option<String>| {
        if p.as_deref() == Some("Local") {
            TrafficPolicy::Local
        } else {
            TrafficPolicy::Cluster
        }
    };
    let external_policy = if matches!(
        spec.type_.as_deref(),
        Some("NodePort") | Some("LoadBalancer")
    ) || !external_ips.is_empty()
    {
        policy(&spec.external_traffic_policy)
    } else {
        TrafficPolicy::Cluster
    };
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .filter(|t| *t > 0)
            .map_or(10800, |t| t as u32)
    });
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let protocol = Protocol::parse(p.protocol.as_deref())
            .ok_or_else(|| format!("unknown protocol {:?}", p.protocol))?;
        let port = u16::try_from(p.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("invalid port {}", p.port))?;
        let node_port = match p.node_port {
            None | Some(0) => None,
            Some(n) => Some(u16::try_from(n).map_err(|_| format!("invalid nodePort {n}"))?),
        };
        let node_port = node_port.filter(|_| {
            matches!(
                spec.type_.as_deref(),
                Some("NodePort") | Some("LoadBalancer")
            )
        });
        out.push(ServicePort {
            name: ServicePortName {
                namespace: namespace.clone(),
                name: name.clone(),
                port: p.name.clone().unwrap_or_default(),
                protocol,
            },
            cluster_ips: cluster_ips.clone(),
            port,
            node_port,
            external_ips: external_ips.clone(),
            load_balancer_ips: load_balancer_ips.clone(),
            source_ranges: source_ranges.clone(),
            external_policy,
            internal_policy: policy(&spec.internal_traffic_policy),
            affinity_timeout,
            health_check_node_port: spec
                .health_check_node_port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0),
            traffic_distribution: spec.traffic_distribution.clone(),
            consistent: ConsistentEndpoint::of(svc).ok().flatten(),
        });
    }
    Ok(out)
}

/// Adds a slice's endpoints to `state`; returns what of it was skipped and why. A bad endpoint
/// or port is skipped on its own, as kube-proxy does: the slice's other endpoints still serve.
fn add_slice(state: &mut ClusterState, slice: &EndpointSlice) -> Vec<String> {
    let (namespace, service) = slice_service_ref(slice);
    if service.is_empty() {
        return vec![format!(
            "no {SERVICE_NAME_LABEL} label; the slice is skipped"
        )];
    }
    let v6 = match slice.address_type.as_str() {
        "IPv4" => false,
        "IPv6" => true,
        _ => return Vec::new(), // FQDN slices are not proxied
    };
    let mut skipped = Vec::new();
    // kube-proxy uses the first address of an endpoint.
    let endpoints: Vec<(IpAddr, &k8s_openapi::api::discovery::v1::Endpoint)> = slice
        .endpoints
        .iter()
        .filter_map(|ep| {
            let first = ep.addresses.first();
            match first.and_then(|a| parse_ip(a)) {
                Some(ip) if ip.is_ipv6() == v6 => Some((ip, ep)),
                Some(ip) => {
                    skipped.push(format!(
                        "endpoint {ip} skipped: it does not match addressType {}",
                        slice.address_type
                    ));
                    None
                }
                None => {
                    skipped.push(match first {
                        Some(a) => format!("endpoint skipped: invalid address {a:?}"),
                        None => "endpoint skipped: it has no address".to_string(),
                    });
                    None
                }
            }
        })
        .collect();
    for port in slice.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
            skipped.push(format!(
                "port {:?} skipped: unknown protocol {:?}",
                port.name.as_deref().unwrap_or_default(),
                port.protocol
            ));
            continue;
        };
        let Some(number) = port
            .port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            continue; // a port the service doesn't resolve on these endpoints
        };
        let key = ServicePortName {
            namespace: namespace.clone(),
            name: service.clone(),
            port: port.name.clone().unwrap_or_default(),
            protocol,
        };
        let list = state.endpoints.entry(key).or_default();
        for &(ip, ep) in &endpoints {
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            // As kube-proxy reads them: an unset ready or serving means true, an unset
            // terminating false.
            let serving = c.and_then(|c| c.serving).unwrap_or(true);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let hints = ep.hints.as_ref();
            list.push(Endpoint {
                ip,
                port: number,
                ready,
                serving,
                terminating,
                node_name: ep.node_name.clone(),
                zone: ep.zone.clone(),
                hint_zones: hints
                    .and_then(|h| h.for_zones.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|z| z.name.clone())
                    .collect(),
                hint_nodes: hints
                    .and_then(|h| h.for_nodes.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|n| n.name.clone())
                    .collect(),
            });
        }
    }
    skipped
}

impl NodeInfo {
    /// This node's facts from its Node object.
    pub fn of(node: &Node) -> NodeInfo {
        let status = node.status.as_ref();
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            internal_ips: status
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .filter(|a| a.type_ == "InternalIP")
                .filter_map(|a| parse_ip(&a.address))
                .collect(),
            pod_cidrs: node
                .spec
                .as_ref()
                .and_then(|s| {
                    s.pod_cidrs
                        .clone()
                        .or_else(|| s.pod_cidr.clone().map(|c| vec![c]))
                })
                .into_iter()
                .flatten()
                .filter_map(|c| c.parse().ok())
                .collect(),
            zone: node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("topology.kubernetes.io/zone"))
                .cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-proxy reads "041" as 41 in an IPv4 address or a prefix length, anything else that
    /// is not an address stays invalid.
    #[test]
    fn ipv4_octets_with_leading_zeros_read_as_decimal() {
        let ip = |s: &str| parse_ip(s).map(|ip| ip.to_string());
        assert_eq!(ip("172.30.0.041").as_deref(), Some("172.30.0.41"));
        assert_eq!(ip("010.180.00.001").as_deref(), Some("10.180.0.1"));
        assert_eq!(ip("fd00::0041").as_deref(), Some("fd00::41"));
        for bad in [
            "1.2.3.256",
            "1.2.3",
            "1.2.3.4.5",
            "1.2..4",
            "1.2.3.+4",
            " 1.2.3.4",
            "x",
        ] {
            assert_eq!(ip(bad), None, "{bad:?}");
        }
        let net = |s: &str| parse_net(s).map(|n| n.to_string());
        assert_eq!(net("203.0.113.000/025").as_deref(), Some("203.0.113.0/25"));
        assert_eq!(net("203.0.113.7").as_deref(), Some("203.0.113.7/32"));
        assert_eq!(net("10.1.2.3/8").as_deref(), Some("10.0.0.0/8"));
        for bad in ["203.0.113.0/33", "203.0.113.0/", "203.0.113.0/+8", "/8"] {
            assert_eq!(net(bad), None, "{bad:?}");
        }
    }

    fn web_slice(name: &str, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "demo",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    fn web_endpoints(slices: &[EndpointSlice]) -> Vec<Endpoint> {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"clusterIP": "10.96.0.10",
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))
        .unwrap();
        let (state, rejected) = ClusterState::from_objects(&[service], slices, None);
        assert!(rejected.is_empty(), "{rejected:?}");
        state.endpoints.into_values().next().unwrap_or_default()
    }

    /// kube-proxy reads an unset `serving` as true whatever `ready` says, so a terminating
    /// endpoint that does not say whether it serves is still a fallback.
    #[test]
    fn unset_conditions_read_as_kube_proxy_reads_them() {
        let eps = web_endpoints(&[web_slice(
            "web-1",
            serde_json::json!([
                {"addresses": ["10.244.0.1"]},
                {"addresses": ["10.244.0.2"], "conditions": {"ready": false, "terminating": true}},
            ]),
        )]);
        let flags: Vec<(bool, bool, bool)> = eps
            .iter()
            .map(|e| (e.ready, e.serving, e.terminating))
            .collect();
        assert_eq!(flags, [(true, true, false), (false, true, true)]);
    }

    /// An address in two slices, once terminating and once not (its pod moved, or the address
    /// was reused): the endpoint that is not terminating is kept, whichever slice comes first.
    #[test]
    fn an_address_listed_twice_keeps_the_endpoint_that_is_not_terminating() {
        let old = web_slice(
            "web-old",
            serde_json::json!([{"addresses": ["10.244.0.1"],
                                "conditions": {"ready": false, "serving": true, "terminating": true}}]),
        );
        let new = web_slice(
            "web-new",
            serde_json::json!([{"addresses": ["10.244.0.1"], "conditions": {"ready": true}}]),
        );
        for slices in [[old.clone(), new.clone()], [new, old]] {
            let eps = web_endpoints(&slices);
            assert_eq!(eps.len(), 1);
            assert!(eps[0].ready && !eps[0].terminating, "{eps:?}");
        }
    }

    /// Every ServiceCIDR counts, one being deleted too (its ClusterIPs stay allocated until it
    /// is gone); ranges are canonical, sorted and listed once; a bad CIDR costs only itself.
    #[test]
    fn service_cidrs_are_the_union_of_every_objects_valid_ranges() {
        let objects: Vec<ServiceCIDR> = serde_json::from_value(serde_json::json!([
            {"metadata": {"name": "kubernetes"},
             "spec": {"cidrs": ["10.96.0.0/16", "fd00:10:96::/112"]}},
            {"metadata": {"name": "leaving", "deletionTimestamp": "2026-11-25T10:00:00Z",
                          "finalizers": ["networking.k8s.io/service-cidr-finalizer"]},
             "spec": {"cidrs": ["10.100.0.1/16", "10.96.0.0/16"]}},
            {"metadata": {"name": "typo"}, "spec": {"cidrs": ["10.200.0.0/33", "10.201.0.0/16"]}},
            {"metadata": {"name": "empty"}, "spec": {}},
        ]))
        .unwrap();
        let mut state = ClusterState::default();
        let rejected = state.update_service_cidrs(&objects);
        let ranges: Vec<String> = state.service_cidrs.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            ranges,
            [
                "10.96.0.0/16",
                "10.100.0.0/16",
                "10.201.0.0/16",
                "fd00:10:96::/112"
            ]
        );
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert_eq!(
            (rejected[0].kind, rejected[0].name.as_str()),
            ("ServiceCIDR", "typo")
        );
        assert!(rejected[0].reason.contains("10.200.0.0/33"), "{rejected:?}");

        assert!(state.update_service_cidrs(&[]).is_empty());
        assert!(state.service_cidrs.is_empty(), "replaced, not merged");
    }

    /// A bad endpoint or port costs only itself: the slice's good endpoints are still used, and
    /// each skipped part is reported with its reason.
    #[test]
    fn a_slice_with_a_bad_endpoint_and_a_bad_port_keeps_its_good_endpoints() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))
        .unwrap();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "demo",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "ping", "port": 7, "protocol": "ICMP"}],
            "endpoints": [
                {"addresses": ["10.244.0.1"]},
                {"addresses": ["not-an-address"]},
                {"addresses": ["fd00::1"]},
                {"addresses": []},
                {"addresses": ["10.244.0.2"]},
            ],
        }))
        .unwrap();
        let (state, rejected) = ClusterState::from_objects(&[service], &[slice], None);
        let http = ServicePortName {
            namespace: "demo".into(),
            name: "web".into(),
            port: "http".into(),
            protocol: Protocol::Tcp,
        };
        let ips: Vec<String> = state.endpoints[&http]
            .iter()
            .map(|e| e.ip.to_string())
            .collect();
        assert_eq!(ips, ["10.244.0.1", "10.244.0.2"]);
        let reasons: Vec<&str> = rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(
            reasons.iter().any(|r| r.contains("not-an-address")),
            "{reasons:?}"
        );
        assert!(reasons.iter().any(|r| r.contains("fd00::1")), "{reasons:?}");
        assert!(reasons.iter().any(|r| r.contains("ICMP")), "{reasons:?}");
        assert!(
            reasons.iter().any(|r| r.contains("no address")),
            "{reasons:?}"
        );
        assert!(
            rejected
                .iter()
                .all(|r| r.kind == "EndpointSlice" && r.name == "web-1")
        );
    }
}
