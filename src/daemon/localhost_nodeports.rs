//! Loopback NodePorts after each sync (KubeProxyNFTablesLocalhostNodePorts): the userspace
//! proxy's listeners follow the cluster, and the reject rules' counters become
//! `kubeproxy_nftables_localhost_nodeport_rejected_packets_total`.

use crate::cluster::{ClusterState, Protocol};
use crate::metrics::Metrics;
use crate::nft::kernel::Nftables;
use crate::proxier::names::{LOCALHOST_NODEPORTS_CHECK, localhost_reject_comment};
use crate::proxier::{ProxyConfig, families, localhost_listeners};
use crate::serve::LocalhostProxy;

pub(super) struct LocalhostNodePorts {
    proxy: LocalhostProxy,
    /// Opened at the first reading: only a daemon with the gate reads counters.
    counters: Option<Nftables>,
    metrics: Metrics,
}

impl LocalhostNodePorts {
    pub(super) fn new(metrics: Metrics) -> Self {
        LocalhostNodePorts {
            proxy: LocalhostProxy::new(metrics.clone()),
            counters: None,
            metrics,
        }
    }

    /// Brings the listeners to `state` and reads the rejections counted so far; nothing
    /// without the gate.
    pub(super) fn after_sync(&mut self, state: &ClusterState, config: &ProxyConfig) {
        if !config.localhost_nodeports {
            return;
        }
        self.proxy.sync(localhost_listeners(state, config));
        self.read_rejections(state, config);
    }

    /// One small dump per family: the check chain's three rules, one per protocol, found by
    /// their comments.
    fn read_rejections(&mut self, state: &ClusterState, config: &ProxyConfig) {
        let nft = match &mut self.counters {
            Some(nft) => nft,
            None => match Nftables::open() {
                Ok(nft) => self.counters.insert(nft),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the loopback NodePort counters");
                    return;
                }
            },
        };
        for family in families(state, config) {
            let counted = match nft.rule_counters(
                family.table_family(),
                &config.table_name,
                LOCALHOST_NODEPORTS_CHECK,
            ) {
                Ok(counted) => counted,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the loopback NodePort counters");
                    continue;
                }
            };
            for protocol in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
                let comment = localhost_reject_comment(protocol);
                if let Some((_, packets)) = counted
                    .iter()
                    .find(|(c, _)| c.as_deref() == Some(comment.as_str()))
                {
                    self.metrics.set_localhost_nodeport_rejected(
                        family.label(),
                        &protocol.as_str().to_ascii_uppercase(),
                        *packets,
                    );
                }
            }
        }
    }
}
