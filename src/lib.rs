//! kubenft: a Kubernetes service proxy that programs nftables over netlink.

pub mod access;
pub mod model;
pub mod netns;
pub mod nft;
pub mod proxier;
