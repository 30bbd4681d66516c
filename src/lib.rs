//! kubenft: a Kubernetes service proxy that programs nftables over netlink.
#![warn(unreachable_pub)]
// Code only the daemon calls is compiled only with the `daemon` feature, so the build without
// it (the fuzz targets') reports dead code like the default build does.

pub mod access;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod conntrack;
#[cfg(feature = "daemon")]
pub mod daemon;
mod demo;
mod explain;
mod family;
pub mod kernel_support;
pub mod lab;
#[cfg(feature = "daemon")]
mod metrics;
pub mod netlink;
pub mod netns;
pub mod nft;
pub mod node_inputs;
#[cfg(feature = "daemon")]
mod nodeport_conflicts;
pub mod proxier;
mod serve;
pub mod source;
pub mod sync;
mod takeover;
