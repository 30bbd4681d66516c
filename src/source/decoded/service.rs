//! A Service read into its kept form: the fields of its spec the proxy reads (type, cluster
//! and external IPs, ports, traffic policies, session affinity, …) and its load-balancer
//! ingress from its status.
//!
//! Guarantees: a Service decodes to the same kept form as through k8s-openapi's `Service`; a
//! field the proxy reads with the wrong JSON type refuses it as there.

use k8s_openapi::api::core::v1::Service;
use serde::de::{Deserialize, Deserializer, MapAccess};

use crate::cluster::kept::{KeptService, KeptServicePort, KeptServiceSpec, Text, cluster_ip};

use super::fields::{Fields, Object, Only, OnlyField, Str, expect_value, skip, text, word};
use super::metadata::{ConsistentEndpointAnnotation, Meta, NoEntry};
use super::{Decoded, DecodedService};

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
