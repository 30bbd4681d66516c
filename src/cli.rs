//! The subcommands' glue: read the inputs, build the desired tables, then print or apply them.
//!
//! Guarantees: every skipped manifest and every rejected object is logged as a warning naming
//! it; `sync --once` and `cleanup` change the kernel in exactly one transaction; `cleanup`
//! touches only our `ip` and `ip6` tables; `sync --once` on a kernel that refuses the
//! start-up probe (`kernel_support`) changes nothing and exits `EX_UNAVAILABLE`.

use std::path::Path;

use crate::cluster::{ClusterState, NodeInfo};
use crate::config::Config;
use crate::proxier::{IpFamily, ProxyConfig, families};
use crate::source::Inputs;
use crate::source::local_addrs::{self, LocalAddrError};
use crate::source::manifests::{self, ManifestError};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("loading manifests: {0}")]
    Manifests(#[source] ManifestError),
    #[error("reading local addresses for --nodeport-addresses: {0}")]
    LocalAddresses(#[source] LocalAddrError),
    #[error("writing the configuration to {path}: {source}")]
    WriteConfig {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the rendered tables: {0}")]
    Output(#[source] std::io::Error),
    #[error("opening the nf_tables netlink socket: {0}")]
    Open(#[source] BoxError),
    #[error("{command}: applying the transaction ({ops} operations): {source}")]
    Apply {
        command: &'static str,
        ops: usize,
        #[source]
        source: BoxError,
    },
    #[error("explain: {0}")]
    Explain(#[source] Box<crate::explain::ExplainError>),
    #[error("demo: {0}")]
    Demo(#[source] Box<crate::demo::DemoError>),
    #[error("sync: {0}")]
    Sync(#[source] Box<crate::sync::SyncError>),
    /// The kernel refused the start-up probe: nothing was changed.
    #[error("{0}")]
    KernelUnsupported(Box<crate::kernel_support::Unsupported>),
    #[cfg(feature = "daemon")]
    #[error("run: {0}")]
    Run(#[source] Box<crate::daemon::DaemonError>),
    #[cfg(not(feature = "daemon"))]
    #[error("run: this kubenft was built without the daemon (feature `daemon`)")]
    NoDaemon,
}

/// sysexits.h EX_UNAVAILABLE: this kernel lacks what the ruleset needs.
pub const EX_UNAVAILABLE: u8 = 69;

impl CliError {
    /// The process's exit status for this error: `EX_UNAVAILABLE` when the kernel refused the
    /// start-up probe (`sync --once` or `run`), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::KernelUnsupported(_) => EX_UNAVAILABLE,
            #[cfg(feature = "daemon")]
            CliError::Run(e) if e.is_kernel_unsupported() => EX_UNAVAILABLE,
            _ => 1,
        }
    }
}

/// Loads `path`, logs each skipped document as a warning, and picks this node's Node object.
pub fn load_inputs(path: &Path, hostname: &str) -> Result<Inputs, CliError> {
    let (m, warnings) = manifests::load(path).map_err(CliError::Manifests)?;
    for w in &warnings {
        tracing::warn!(
            file = %w.file.display(),
            document = w.document,
            item = ?w.item,
            kind = w.kind.as_deref().unwrap_or(""),
            name = w.name.as_deref().unwrap_or(""),
            reason = %w.reason,
            "skipped a manifest document"
        );
    }
    let mut named_here = m
        .nodes
        .into_iter()
        .filter(|n| n.metadata.name.as_deref() == Some(hostname));
    let node = named_here.next();
    if named_here.next().is_some() {
        tracing::warn!(
            node = hostname,
            "several Nodes with this name; using the first"
        );
    }
    if node.is_none() {
        tracing::warn!(
            node = hostname,
            "no Node with this name in the manifests: node addresses and podCIDRs are unknown"
        );
    }
    Ok(Inputs {
        services: m.services,
        endpoint_slices: m.endpoint_slices,
        node,
        service_cidrs: m.service_cidrs,
    })
}

/// Fills `config.local_addresses` when the planner needs them: `--nodeport-addresses` lists
/// CIDRs, or a family has no node IP on `node` (its NodePorts are then accepted on every local
/// address of the family). Loopback never serves NodePorts, so it is left out.
pub(crate) fn add_local_addresses(
    config: &mut ProxyConfig,
    node: Option<&NodeInfo>,
) -> Result<(), CliError> {
    if config.needs_local_addresses(node) {
        let addrs = local_addrs::local_addresses().map_err(CliError::LocalAddresses)?;
        config.local_addresses = addrs
            .into_iter()
            .map(|(ip, _)| ip)
            .filter(|ip| !ip.is_loopback())
            .collect();
        // In a fixed order: the planner replans everything when its configuration differs, and
        // a dump listing the same addresses in another order is no change.
        config.local_addresses.sort();
        config.local_addresses.dedup();
    }
    Ok(())
}

/// The IP families this kernel can filter, probed once: IPv4 always, IPv6 unless it is off
/// here (no `/proc/sys/net/ipv6`, as with `ipv6.disable=1`, or `disable_ipv6` set for all
/// interfaces of this network namespace), in which case no IPv6 packet can arrive to proxy.
pub(crate) fn kernel_families() -> Vec<IpFamily> {
    let ipv6 = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6")
        .is_ok_and(|v| v.trim() == "0");
    if !ipv6 {
        tracing::info!(
            "IPv6 is off in this kernel or network namespace: only the ip table is programmed"
        );
        return vec![IpFamily::V4];
    }
    vec![IpFamily::V4, IpFamily::V6]
}

/// For each planned family whose NodePorts are accepted on every local address of the family,
/// why: kube-proxy's behaviour, which the operator should know of.
pub(crate) fn nodeport_fallbacks(
    state: &ClusterState,
    config: &ProxyConfig,
) -> Vec<(IpFamily, &'static str)> {
    families(state, config)
        .into_iter()
        .filter_map(|f| Some((f, config.nodeport_fallback(f, state.node.as_ref())?)))
        .collect()
}

/// Logs each of `fallbacks`: a warning when the cluster looks dual-stack (its CIDRs or the
/// node's podCIDRs have both families), as kube-proxy warns, else for information.
pub(crate) fn log_nodeport_fallbacks(
    fallbacks: &[(IpFamily, &'static str)],
    state: &ClusterState,
    config: &ProxyConfig,
) {
    let nets = config
        .cluster_cidrs
        .iter()
        .chain(&config.service_cidrs)
        .chain(state.node.iter().flat_map(|n| &n.pod_cidrs));
    let (mut v4, mut v6) = (false, false);
    for n in nets {
        match n {
            ipnet::IpNet::V4(_) => v4 = true,
            ipnet::IpNet::V6(_) => v6 = true,
        }
    }
    for (family, reason) in fallbacks {
        let family = match family {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        };
        let message = "NodePorts of this family are accepted on every local address of the family, \
                       as kube-proxy does; set --node-ip or --nodeport-addresses to narrow them";
        if v4 && v6 {
            tracing::warn!(family, reason, "{message}");
        } else {
            tracing::info!(family, reason, "{message}");
        }
    }
}

pub use glue::run;

mod glue {
    use std::io::Write;

    use super::*;
    use crate::config::Task;
    use crate::nft::model::Table;
    use crate::nft::netlink::Nftables;
    use crate::nft::transaction::Transaction;

    /// Runs the validated subcommand.
    pub fn run(config: &Config) -> Result<(), CliError> {
        match &config.task {
            // `render` is for reading, on any machine: it shows both families, as on a node
            // whose kernel has both.
            Task::Render { manifests } => {
                let tables = build_tables(manifests, config.proxy.clone())?;
                let mut out = std::io::stdout().lock();
                for table in &tables {
                    write!(out, "{}", crate::nft::render::render_table(table))
                        .map_err(CliError::Output)?;
                }
                out.flush().map_err(CliError::Output)
            }
            Task::Sync {
                manifests,
                replace_kube_proxy,
            } => {
                let proxy = ProxyConfig {
                    supported_families: kernel_families(),
                    ..config.proxy.clone()
                };
                // Before reading anything: a kernel that cannot run the ruleset is told apart
                // from a bad input, and nothing is changed.
                crate::kernel_support::check_at_start(&proxy, &proxy.supported_families)
                    .map_err(CliError::KernelUnsupported)?;
                sync_once(&config.proxy.table_name, *replace_kube_proxy, || {
                    build_tables(manifests, proxy.clone())
                })
            }
            Task::Demo => crate::demo::run().map_err(|e| CliError::Demo(Box::new(e))),
            Task::Explain(flags) => {
                let answer = crate::explain::run(flags, &config.proxy.table_name)
                    .map_err(|e| CliError::Explain(Box::new(e)))?;
                let text = match flags.output {
                    crate::explain::OutputFormat::Text => answer.to_text(),
                    crate::explain::OutputFormat::Json => {
                        let mut json = serde_json::to_string_pretty(&answer)
                            .expect("an explanation serializes");
                        json.push('\n');
                        json
                    }
                };
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes()).map_err(CliError::Output)?;
                out.flush().map_err(CliError::Output)
            }
            #[cfg(feature = "daemon")]
            Task::Run(settings) => crate::daemon::run(&config.proxy, settings.clone())
                .map_err(|e| CliError::Run(Box::new(e))),
            #[cfg(not(feature = "daemon"))]
            Task::Run(_) => Err(CliError::NoDaemon),
            Task::WriteConfig { path, yaml } => {
                std::fs::write(path, yaml).map_err(|source| CliError::WriteConfig {
                    path: path.display().to_string(),
                    source,
                })?;
                tracing::info!(path = %path.display(), "configuration written");
                Ok(())
            }
            Task::Cleanup => apply(
                "cleanup",
                &crate::sync::cleanup_transaction(&config.proxy.table_name),
            ),
        }
    }

    /// Manifests → cluster state → desired tables, warning about every rejected object.
    fn build_tables(path: &Path, mut proxy: ProxyConfig) -> Result<Vec<Table>, CliError> {
        let inputs = load_inputs(path, &proxy.hostname)?;
        let (mut state, mut rejected) = crate::cluster::ClusterState::from_objects(
            &inputs.services,
            &inputs.endpoint_slices,
            inputs.node.as_ref(),
        );
        rejected.extend(state.update_service_cidrs(&inputs.service_cidrs));
        for r in &rejected {
            tracing::warn!(
                kind = ?r.kind,
                namespace = ?r.namespace,
                name = ?r.name,
                reason = %r.reason,
                "rejected an object"
            );
        }
        add_local_addresses(&mut proxy, state.node.as_ref())?;
        log_nodeport_fallbacks(&nodeport_fallbacks(&state, &proxy), &state, &proxy);
        // Fresh endpoint-map blocks: the same manifests give the same blocks, so re-running
        // `sync --once` on unchanged input sends nothing.
        Ok(crate::proxier::build(&state, &proxy))
    }

    /// Reads our tables back, plans the difference and applies it in one transaction guarded by
    /// the generation it read (the daemon's full sync, once); with `replace_kube_proxy`, what
    /// kube-proxy left goes in that transaction. If the kernel refuses the removal, the sync is
    /// made again without it: kube-proxy's rules never keep ours out.
    fn sync_once(
        table_name: &str,
        replace_kube_proxy: bool,
        desired: impl Fn() -> Result<Vec<Table>, CliError>,
    ) -> Result<(), CliError> {
        let nft = Nftables::open().map_err(|e| CliError::Open(e.into()))?;
        let mut syncer = crate::sync::Syncer::new(nft, table_name);
        let takeover = replace_kube_proxy.then(|| crate::takeover::Takeover::new(table_name));
        let outcome = takeover.as_ref().map(|t| t.outcome());
        if let Some(t) = takeover {
            syncer.lead_next_commit_with(Box::new(t));
        }
        let mut result = syncer.sync(desired()?, true);
        let abandoned = |o: &Option<crate::takeover::TakeoverOutcome>| {
            matches!(
                o.as_ref().map(|o| o.get()),
                Some(crate::takeover::Outcome::Abandoned { .. })
            )
        };
        if result.is_err() && abandoned(&outcome) {
            result = syncer.sync(desired()?, true);
        }
        let report = result.map_err(|e| CliError::Sync(Box::new(e)))?;
        tracing::info!(
            command = "sync",
            ops = report.ops,
            bytes = report.bytes,
            "transaction applied"
        );
        if replace_kube_proxy {
            crate::takeover::report_unreachable();
        }
        Ok(())
    }

    fn apply(command: &'static str, tx: &Transaction) -> Result<(), CliError> {
        let mut nft = Nftables::open().map_err(|e| CliError::Open(e.into()))?;
        nft.apply(tx).map_err(|e| CliError::Apply {
            command,
            ops: tx.ops.len(),
            source: e.into(),
        })?;
        tracing::info!(command, ops = tx.ops.len(), "transaction applied");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxier::NodePortAddresses;

    const NODES: &str = "\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: other}}
- {apiVersion: v1, kind: Node, metadata: {name: node-a}, spec: {podCIDRs: [10.244.1.0/24]}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
";

    #[test]
    fn inputs_pick_the_node_named_like_this_host() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.yaml"), NODES).unwrap();
        let inputs = load_inputs(dir.path(), "node-a").unwrap();
        let node = inputs.node.expect("node-a is in the manifests");
        assert_eq!(node.metadata.name.as_deref(), Some("node-a"));
        assert_eq!(inputs.services.len(), 1);
        let none = load_inputs(dir.path(), "node-z").unwrap();
        assert!(none.node.is_none());
    }

    #[test]
    fn a_missing_manifests_path_is_reported_as_a_loading_error() {
        let err = load_inputs(Path::new("/nonexistent/kubenft"), "n").unwrap_err();
        assert!(err.to_string().starts_with("loading manifests: "), "{err}");
    }

    #[test]
    fn local_addresses_are_read_only_when_nodeports_need_them() {
        // `primary` on a node with an IP of each family: the node IPs are the NodePort addresses.
        let dual = NodeInfo {
            internal_ips: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            ..NodeInfo::default()
        };
        let mut primary = ProxyConfig::default();
        add_local_addresses(&mut primary, Some(&dual)).unwrap();
        assert!(primary.local_addresses.is_empty());
        // Without an IPv6 node IP, IPv6 NodePorts take every local IPv6 address.
        let v4_only = NodeInfo {
            internal_ips: vec!["10.0.0.1".parse().unwrap()],
            ..NodeInfo::default()
        };
        assert!(primary.needs_local_addresses(Some(&v4_only)));
        if !crate::netns::can_create() {
            eprintln!("skipped the CIDR half: creating network namespaces needs root");
            return;
        }
        let ns = crate::netns::Netns::create("cliaddrs").unwrap();
        ns.exec(&[
            "ip", "link", "add", "kveth0", "type", "veth", "peer", "name", "kveth1",
        ])
        .unwrap();
        ns.exec(&["ip", "addr", "add", "192.0.2.9/24", "dev", "kveth0"])
            .unwrap();
        let got = ns
            .run(|| {
                let mut c = ProxyConfig {
                    nodeport_addresses: NodePortAddresses::Cidrs(vec![
                        "0.0.0.0/0".parse().unwrap(),
                    ]),
                    ..ProxyConfig::default()
                };
                add_local_addresses(&mut c, None).map(|()| c.local_addresses)
            })
            .unwrap()
            .unwrap();
        assert_eq!(got, vec!["192.0.2.9".parse::<std::net::IpAddr>().unwrap()]);
    }
}
