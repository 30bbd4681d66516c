//! The planner: Kubernetes Service semantics → desired nftables tables. Pure: no I/O, no clock.

pub mod config;

pub use config::{DetectLocal, NodePortAddresses, ProxyConfig};
