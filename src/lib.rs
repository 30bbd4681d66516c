//! kubenft: a Kubernetes service proxy that programs nftables over netlink.
#![warn(unreachable_pub)]
// Without the daemon (the fuzz targets' build) the code only the daemon calls is unused, and
// the kept forms the daemon's store exports are not exported; the default build still reports
// both.
#![cfg_attr(
    not(feature = "daemon"),
    allow(dead_code, unused_imports, unreachable_pub)
)]

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
mod metrics;
pub mod netlink;
pub mod netns;
pub mod nft;
pub mod node_inputs;
mod nodeport_conflicts;
pub mod proxier;
mod serve;
pub mod source;
pub mod sync;
mod takeover;
