//! kubenft: a Kubernetes service proxy that programs nftables over netlink.

pub mod access;
pub mod after_sync;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod conntrack;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod demo;
#[cfg(feature = "daemon")]
pub mod events;
pub mod explain;
pub mod family;
pub mod lab;
pub mod netlink;
pub mod netns;
pub mod nft;
pub mod nodeport_conflicts;
pub mod proxier;
pub mod serve;
pub mod source;
pub mod sync;
