//! The planner: Kubernetes Service semantics → desired nftables tables. Pure: no I/O, no clock.

mod build;
pub mod config;
mod endpoints;
pub mod names;

pub use build::{CASCADE_MAX_ENDPOINTS, IpFamily, build_family, families};
pub use config::{DetectLocal, NodePortAddresses, ProxyConfig};
pub use endpoints::{cluster_endpoints, local_endpoints};

use crate::model::ClusterState;
use crate::nft::model::Table;

/// One table per IP family this node serves (`ip` and/or `ip6`, named `config.table_name`).
pub fn build(state: &ClusterState, config: &ProxyConfig) -> Vec<Table> {
    families(state, config)
        .into_iter()
        .map(|f| build_family(state, config, f))
        .collect()
}

#[cfg(test)]
mod tests;
