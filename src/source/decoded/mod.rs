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
//!
//! By concept: this file holds `Decoded`, the object as the store receives it; `fields` reads
//! a JSON object field by field, skipping what the proxy does not read; `metadata` reads the
//! names, resourceVersion and the one label or annotation a kind keeps; `slice` and `service`
//! read an EndpointSlice and a Service.

mod fields;
mod metadata;
mod service;
mod slice;
#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::ServiceRef;
use crate::cluster::kept::{Kept, Names};

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
