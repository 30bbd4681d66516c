//! kubenft: a Kubernetes service proxy that programs nftables over netlink.

pub mod nft;
