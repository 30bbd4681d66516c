//! What the planner's test modules share.

use super::ProxyConfig;

/// The configuration of node `node-a` in a dual-stack cluster whose pods are in
/// 10.244.0.0/16 and fd00:244::/48.
pub(super) fn dual_stack_config() -> ProxyConfig {
    ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/48".parse().unwrap(),
        ],
        ..ProxyConfig::default()
    }
}
