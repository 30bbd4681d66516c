//! `run --write-config-to`: the effective configuration as a KubeProxyConfiguration that
//! `--config` reads back to the same settings.
//!
//! What the format cannot say is left out: kubenft's own flags (`--table-name`,
//! `--service-cidr`, `--service-proxy-name`, `--full-sync-period`, `--manifests`, a second
//! `--node-ip`), and a disabled health or metrics server (an empty address there means
//! "the default").

use std::collections::BTreeMap;

use serde::Serialize;

use super::duration::format_go_duration;
use super::file::{API_VERSION, KIND};
use super::{LogFormat, LogSettings, RunSettings, to_klog};
use crate::proxier::{DetectLocal, NodePortAddresses, ProxyConfig};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KubeProxyConfiguration<'a> {
    api_version: &'a str,
    kind: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    feature_gates: &'a BTreeMap<String, bool>,
    client_connection: ClientConnection,
    logging: Logging,
    hostname_override: &'a str,
    bind_address: String,
    healthz_bind_address: String,
    metrics_bind_address: String,
    mode: &'a str,
    nftables: Nftables,
    detect_local_mode: &'a str,
    detect_local: DetectLocalSection<'a>,
    #[serde(rename = "clusterCIDR")]
    cluster_cidr: String,
    node_port_addresses: Vec<String>,
    conntrack: Conntrack,
}

#[derive(Serialize)]
struct ClientConnection {
    kubeconfig: String,
}

#[derive(Serialize)]
struct Logging {
    format: &'static str,
    verbosity: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Nftables {
    masquerade_bit: u8,
    masquerade_all: bool,
    sync_period: String,
    min_sync_period: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DetectLocalSection<'a> {
    bridge_interface: &'a str,
    interface_name_prefix: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Conntrack {
    max_per_core: u32,
    min: u32,
    tcp_established_timeout: String,
    tcp_close_wait_timeout: String,
    tcp_be_liberal: bool,
    udp_timeout: String,
    udp_stream_timeout: String,
}

/// The YAML text of the KubeProxyConfiguration standing for `proxy`, `run` and `log`.
pub(super) fn kube_proxy_configuration(
    proxy: &ProxyConfig,
    run: &RunSettings,
    log: LogSettings,
) -> String {
    let (mode, bridge, prefix) = match &proxy.detect_local {
        DetectLocal::ClusterCidr => ("ClusterCIDR", "", ""),
        DetectLocal::NodeCidr => ("NodeCIDR", "", ""),
        DetectLocal::BridgeInterface(b) => ("BridgeInterface", b.as_str(), ""),
        DetectLocal::InterfaceNamePrefix(p) => ("InterfaceNamePrefix", "", p.as_str()),
    };
    let address = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    let ct = &run.conntrack;
    let doc = KubeProxyConfiguration {
        api_version: API_VERSION,
        kind: KIND,
        feature_gates: &run.feature_gates,
        client_connection: ClientConnection {
            kubeconfig: run
                .kubeconfig
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        },
        logging: Logging {
            format: match log.format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            },
            verbosity: to_klog(log.verbosity),
        },
        hostname_override: &proxy.hostname,
        bind_address: proxy
            .node_ips
            .first()
            .map_or_else(|| "0.0.0.0".to_string(), |ip| ip.to_string()),
        healthz_bind_address: address(run.healthz_bind_address),
        metrics_bind_address: address(run.metrics_bind_address),
        mode: "nftables",
        nftables: Nftables {
            masquerade_bit: proxy.masquerade_bit,
            masquerade_all: proxy.masquerade_all,
            sync_period: format_go_duration(run.periods.sync_period),
            min_sync_period: format_go_duration(run.periods.min_sync_period),
        },
        detect_local_mode: mode,
        detect_local: DetectLocalSection {
            bridge_interface: bridge,
            interface_name_prefix: prefix,
        },
        cluster_cidr: proxy
            .cluster_cidrs
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(","),
        node_port_addresses: node_port_addresses(&proxy.nodeport_addresses),
        conntrack: Conntrack {
            max_per_core: ct.max_per_core,
            min: ct.min,
            tcp_established_timeout: format_go_duration(ct.tcp_established_timeout),
            tcp_close_wait_timeout: format_go_duration(ct.tcp_close_wait_timeout),
            tcp_be_liberal: ct.tcp_be_liberal,
            udp_timeout: format_go_duration(ct.udp_timeout),
            udp_stream_timeout: format_go_duration(ct.udp_stream_timeout),
        },
    };
    let yaml =
        serde_saphyr::to_string(&doc).expect("plain structs of strings and numbers serialize");
    format!(
        "# The effective configuration of `kubenft run`, as a KubeProxyConfiguration. kubenft's \
         own flags\n# (--table-name, --service-cidr, --service-proxy-name, --full-sync-period, \
         --manifests) are not part of it.\n{yaml}"
    )
}

/// `nodePortAddresses` as written: `primary` first, then the CIDRs (keywords expanded).
fn node_port_addresses(addresses: &NodePortAddresses) -> Vec<String> {
    let primary = addresses.primary.then(|| "primary".to_string());
    primary
        .into_iter()
        .chain(addresses.cidrs.iter().map(|c| c.to_string()))
        .collect()
}
