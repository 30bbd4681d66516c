//! An EndpointSlice read into its kept form: its service label, its address type, its
//! endpoints (first address, conditions, node, zone and hints) and its ports.
//!
//! Guarantees: a slice decodes to the same kept form as through k8s-openapi's
//! `EndpointSlice`; a field the proxy reads with the wrong JSON type refuses it as there.

use std::fmt;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::cluster::kept::{Address, EndpointFields, KeptEndpoint, KeptSlice, KeptSlicePort, Text};
use crate::cluster::shared_name;

use super::fields::{Fields, Object, Str, expect_value, skip, word};
use super::metadata::{Meta, ServiceNameLabel, TriggerTimeAnnotation};
use super::{Decoded, DecodedSlice};

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
