//! An object's metadata as the kept forms read it: its names and resourceVersion, and the one
//! label (`L`) and annotation (`A`) its kind keeps, picked out as they are read.
//!
//! Guarantees: a label or annotation value of the wrong JSON type is an error, as with
//! k8s-openapi; of them only the picked ones are kept, parsed as their kind keeps them.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use crate::cluster::kept::{LAST_CHANGE_TRIGGER_TIME, Names, Text, parse_trigger_time};
use crate::cluster::{CONSISTENT_ENDPOINT_ANNOTATION, SERVICE_NAME_LABEL, shared_name};

use super::fields::{Fields, Object, Str, skip, text, word};

/// What the kept forms read of an object's metadata: its names, its resourceVersion, the
/// label `L` and the annotation `A`.
pub(super) struct Meta<L: Pick, A: Pick> {
    pub(super) names: Names,
    pub(super) resource_version: Option<String>,
    pub(super) label: Option<L::Value>,
    pub(super) annotation: Option<A::Value>,
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
    pub(super) fn read<'de, M: MapAccess<'de>>(map: &mut M) -> Result<Self, M::Error> {
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
pub(super) struct MetaFields<'de, L: Pick, A: Pick> {
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
pub(super) struct Picked<P: Pick>(pub(super) Option<P::Value>);

/// Which entry `Picked` keeps, and in what form.
pub(super) trait Pick {
    const KEY: &'static str;
    type Value;

    fn value(text: &str) -> Option<Self::Value>;
}

pub(super) struct ServiceNameLabel;

impl Pick for ServiceNameLabel {
    const KEY: &'static str = SERVICE_NAME_LABEL;
    type Value = Text;

    fn value(text: &str) -> Option<Text> {
        Some(text.into())
    }
}

/// A label or annotation the kept form does not read: its map's values are only checked.
pub(super) struct NoEntry;

impl Pick for NoEntry {
    const KEY: &'static str = "";
    type Value = std::convert::Infallible;

    fn value(_: &str) -> Option<std::convert::Infallible> {
        None
    }
}

pub(super) struct ConsistentEndpointAnnotation;

impl Pick for ConsistentEndpointAnnotation {
    const KEY: &'static str = CONSISTENT_ENDPOINT_ANNOTATION;
    type Value = Text;

    fn value(text: &str) -> Option<Text> {
        Some(shared_name(text))
    }
}

pub(super) struct TriggerTimeAnnotation;

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
