//! The planner: Kubernetes Service semantics → desired nftables tables. Pure: no I/O, no clock.

pub(crate) mod config;
pub(crate) mod consistent;
mod endpoints;
mod key_owners;
mod layout;
mod localhost;
pub mod names;
mod packed;
mod plan;
mod set_sizes;

pub use config::{DetectLocal, NodePortAddresses, ProxyConfig};
#[cfg(feature = "daemon")]
pub(crate) use endpoints::local_endpoints;
pub use layout::{EndpointBlocks, IpFamily, SlotLayouts};
pub(crate) use layout::{build_family, families};
pub use localhost::{LocalhostListener, localhost_listeners};
pub use plan::{PlannedChain, Planner, ServiceRef};

use crate::cluster::ClusterState;
use crate::nft::model::Table;

/// One table per IP family this node serves (`ip` and/or `ip6`, named `config.table_name`),
/// with endpoint-map blocks handed out afresh.
pub fn build(state: &ClusterState, config: &ProxyConfig) -> Vec<Table> {
    build_after(state, config, &EndpointBlocks::default())
}

/// Like `build`, keeping the endpoint-map blocks of `previous` (read from what the kernel
/// holds), so that a service whose endpoints change keeps its rules and only map elements move.
pub fn build_after(
    state: &ClusterState,
    config: &ProxyConfig,
    previous: &EndpointBlocks,
) -> Vec<Table> {
    families(state, config)
        .into_iter()
        .map(|f| build_family(state, config, f, previous))
        .collect()
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
