//! The configuration: kube-proxy's flags and KubeProxyConfiguration file, merged (flags given
//! on the command line win) and validated into one `Config` that says what to do.
//!
//! Guarantees: a `Config` only exists if every flag and field was valid, and carries each
//! setting in the type its user needs (no "validation fills this" options); a `ConfigError`
//! names the flag or field, the offending value and the reason, so `main` can print it and
//! exit 64 before touching anything.

mod duration;
pub(crate) mod fields;
pub mod file;
mod flags;
mod gates;
mod validate;
mod write;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

pub use flags::{Cli, LogFormat};
pub(crate) use flags::{Command, DetectLocalMode, ProxyFlags, RunFlags};
pub(crate) use validate::system_hostname;

use crate::proxier::{IpFamily, ProxyConfig};

/// Everything a subcommand needs, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub task: Task,
    pub proxy: ProxyConfig,
    pub log: LogSettings,
    /// Accepted but probably not what the operator meant (logged once tracing is up).
    pub warnings: Vec<String>,
}

/// What to do, with what only that needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// Print the tables built from these manifests.
    Render {
        manifests: PathBuf,
    },
    /// Apply the tables built from these manifests, once.
    Sync {
        manifests: PathBuf,
        /// Remove kube-proxy's rules in the same transaction.
        replace_kube_proxy: bool,
    },
    /// The daemon.
    Run(RunSettings),
    /// Delete our tables (`cleanup`, or `run --cleanup`).
    Cleanup,
    Demo,
    Explain(crate::explain::ExplainFlags),
    /// `run --write-config-to`: write this KubeProxyConfiguration and exit.
    WriteConfig {
        path: PathBuf,
        yaml: String,
    },
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogSettings {
    pub format: LogFormat,
    /// 0 info, 1 kubenft's debug, 2 kubenft's trace, 3 everything's trace.
    pub verbosity: u8,
}

/// The daemon's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSettings {
    /// Read the cluster from these manifests instead of the API.
    pub(crate) manifests: Option<PathBuf>,
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) service_proxy_name: Option<String>,
    pub(crate) periods: crate::sync::Periods,
    /// `None`: the server is disabled.
    pub healthz_bind_address: Option<SocketAddr>,
    pub metrics_bind_address: Option<SocketAddr>,
    pub(crate) manifests_poll_period: Duration,
    /// Apply the node settings and exit.
    pub(crate) init_only: bool,
    /// Remove kube-proxy's rules with the first sync (`--replace-kube-proxy`).
    pub(crate) replace_kube_proxy: bool,
    pub(crate) conntrack: crate::conntrack::tuning::ConntrackSettings,
    /// Every gate given (file and flag merged), as given.
    pub(crate) feature_gates: BTreeMap<String, bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--{flag}: empty entry in {value:?}")]
    EmptyEntry { flag: &'static str, value: String },
    #[error("--{flag}: {entry:?} is not a CIDR: {source}")]
    Cidr {
        flag: &'static str,
        entry: String,
        #[source]
        source: ipnet::AddrParseError,
    },
    #[error("--{flag}: {entry:?} is not an IP address: {source}")]
    Ip {
        flag: &'static str,
        entry: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("--{flag}: {entry} is an unspecified address, not a node IP")]
    UnspecifiedIp { flag: &'static str, entry: String },
    #[error("--{flag}: two {family} {what} given ({first}, {second}), at most one per family")]
    TwoOfAFamily {
        flag: &'static str,
        family: &'static str,
        what: &'static str,
        first: String,
        second: String,
    },
    #[error(
        "--nodeport-addresses: {entry:?} is neither a CIDR nor one of the keywords primary, \
         localhost, all"
    )]
    NodePortAddress { entry: String },
    #[error("--nodeport-addresses: the keyword {keyword} is given twice")]
    NodePortKeywordTwice { keyword: String },
    #[error("--masquerade-bit: {value} is out of range, must be 0..=31")]
    MasqueradeBit { value: u32 },
    #[error("--detect-local-mode {mode}: needs --{flag}")]
    DetectLocalNeeds {
        mode: &'static str,
        flag: &'static str,
    },
    #[error("--{flag}: {value:?} is not a usable interface name: {reason}")]
    InterfaceName {
        flag: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("--table-name: {value:?} is not an nftables identifier: {reason}")]
    TableName { value: String, reason: String },
    #[error("--hostname-override not given and the host name could not be read: {0}")]
    Hostname(#[source] std::io::Error),
    #[error("the node name is empty (--hostname-override {value:?}, or the host name)")]
    EmptyHostname { value: String },
    #[error("{command}: --manifests PATH is required (only `run` reads the Kubernetes API)")]
    ManifestsRequired { command: &'static str },
    #[error("sync: only `sync --once` is available; `run` is the daemon")]
    SyncNeedsOnce,
    #[error("--{flag}: {value:?} is not a duration: {reason} (write it like 100ms, 1s, 1m30s, 1h)")]
    Duration {
        flag: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("--{flag}: {value:?} must be greater than zero")]
    ZeroDuration { flag: &'static str, value: String },
    #[error("--{flag}: {value:?} must be 0 (leave the kernel's value) or at least 1s")]
    SubSecondTimeout { flag: &'static str, value: String },
    #[error("--config: {0}")]
    ConfigFile(#[source] file::FileConfigError),
    #[error("--config: {field}: {value:?} is not one of {expected}")]
    ConfigFileValue {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(
        "--proxy-mode {mode:?}: kubenft is a Kubernetes service proxy that implements \
             kube-proxy's nftables mode only; leave the mode empty or write \"nftables\" (for \
             {mode:?}, run kube-proxy)"
    )]
    ProxyMode { mode: String },
    #[error("--bind-address: {value:?} is not an IP address: {source}")]
    BindIp {
        value: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("--feature-gates: {0}")]
    FeatureGates(String),
    #[error("--config: logging.format: {0:?} is not one of text, json")]
    LogFormat(String),
    #[error("--{flag}: {source}")]
    BindAddress {
        flag: &'static str,
        #[source]
        source: crate::serve::ServeError,
    },
}

/// klog's verbosity (`--v`, `logging.verbosity`) on kubenft's scale: klog's levels up to 2 are
/// what a production kube-proxy logs, 4 is debugging and 6 and more tracing.
fn from_klog(level: u32) -> u8 {
    match level {
        0..=2 => 0,
        3..=4 => 1,
        5..=7 => 2,
        _ => 3,
    }
}

/// The klog level that reads back as `verbosity`.
fn to_klog(verbosity: u8) -> u32 {
    match verbosity {
        0 => 0,
        1 => 4,
        2 => 6,
        _ => 9,
    }
}

impl Cli {
    /// Validates flags, taking the host name from the system when not overridden.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        self.validate_with(system_hostname)
    }

    /// Validates flags (and the --config file of `run`); `hostname` is asked only when no
    /// host name is configured.
    pub(crate) fn validate_with(
        &self,
        hostname: impl FnOnce() -> std::io::Result<String>,
    ) -> Result<Config, ConfigError> {
        let manifests = |command: &'static str| {
            self.proxy
                .manifests
                .clone()
                .ok_or(ConfigError::ManifestsRequired { command })
        };
        let mut log = LogSettings {
            format: self.log.log_format,
            verbosity: self.log.verbose,
        };
        let Command::Run(run_flags) = &self.command else {
            let task = match &self.command {
                Command::Render => Task::Render {
                    manifests: manifests("render")?,
                },
                Command::Sync {
                    once: true,
                    replace_kube_proxy,
                } => Task::Sync {
                    manifests: manifests("sync")?,
                    replace_kube_proxy: *replace_kube_proxy,
                },
                Command::Sync { once: false, .. } => return Err(ConfigError::SyncNeedsOnce),
                Command::Cleanup => Task::Cleanup,
                Command::Demo => Task::Demo,
                Command::Explain(flags) => Task::Explain(flags.clone()),
                Command::Run(_) => unreachable!("matched above"),
            };
            log.verbosity = log
                .verbosity
                .max(self.log.klog_verbosity.map_or(0, from_klog));
            let (proxy, warnings) = self.proxy.validate_with(hostname)?;
            return Ok(Config {
                task,
                proxy,
                log,
                warnings,
            });
        };

        let mut proxy_flags = self.proxy.clone();
        let mut flags = run_flags.clone();
        let mut warnings = Vec::new();
        let mut gate_settings = BTreeMap::new();
        let mut klog = self.log.klog_verbosity;
        if let Some(path) = &flags.config {
            let file = file::load(path).map_err(ConfigError::ConfigFile)?;
            apply_file(&file, &self.explicit, &mut proxy_flags, &mut flags)?;
            if let (Some(format), false) = (&file.log_format, self.explicit.contains("log_format"))
            {
                log.format = LogFormat::from_str(format, false)
                    .map_err(|_| ConfigError::LogFormat(format.clone()))?;
            }
            klog = klog.or(file.verbosity);
            gate_settings = file.feature_gates.clone();
            warnings.extend(file.warning.map(|w| format!("--config: {w}")));
        }
        log.verbosity = log.verbosity.max(klog.map_or(0, from_klog));
        if let Some(mode) = flags.proxy_mode.as_deref().filter(|m| !m.is_empty())
            && mode != "nftables"
        {
            return Err(ConfigError::ProxyMode {
                mode: mode.to_string(),
            });
        }
        if let Some(value) = &flags.feature_gates {
            gate_settings.extend(gates::parse_flag(value).map_err(ConfigError::FeatureGates)?);
        }
        let (feature_gates, gate_warnings) = gates::resolve(&gate_settings);
        warnings.extend(gate_warnings);

        apply_bind_address(&mut flags, &mut proxy_flags)?;

        let (mut proxy, proxy_warnings) = proxy_flags.validate_with(hostname)?;
        proxy.use_node_hints = feature_gates.prefer_same_traffic_distribution;
        proxy.localhost_nodeports = feature_gates.localhost_nodeports;
        warnings.extend(localhost_nodeports_warning(&proxy));
        proxy.serve_external_ips = feature_gates.allow_service_external_ips;
        warnings.splice(0..0, proxy_warnings);
        let run = flags.validate(proxy_flags.manifests.clone(), gate_settings)?;
        let task = if flags.cleanup {
            Task::Cleanup
        } else if let Some(path) = &flags.write_config_to {
            Task::WriteConfig {
                path: path.clone(),
                yaml: write::kube_proxy_configuration(&proxy, &run, log),
            }
        } else {
            Task::Run(run)
        };
        Ok(Config {
            task,
            proxy,
            log,
            warnings,
        })
    }
}

/// --bind-address as kube-proxy takes it: the primary node IP (kept as the node IP when none
/// is given), an unspecified address meaning "ask the Node", and an IPv6 one moving the
/// servers' default addresses to IPv6.
fn apply_bind_address(
    flags: &mut RunFlags,
    proxy_flags: &mut ProxyFlags,
) -> Result<(), ConfigError> {
    let bind_ip = match flags.bind_address.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => Some(a.parse::<IpAddr>().map_err(|source| ConfigError::BindIp {
            value: a.to_string(),
            source,
        })?),
        None => None,
    };
    if let Some(ip) = bind_ip.filter(|ip| !ip.is_unspecified())
        && proxy_flags.node_ip.is_none()
    {
        proxy_flags.node_ip = Some(ip.to_string());
    }
    let ipv6 = bind_ip.is_some_and(|ip| ip.is_ipv6());
    flags
        .healthz_bind_address
        .get_or_insert_with(|| if ipv6 { "[::]:10256" } else { "0.0.0.0:10256" }.to_string());
    flags.metrics_bind_address.get_or_insert_with(|| {
        if ipv6 {
            "[::1]:10249"
        } else {
            "127.0.0.1:10249"
        }
        .to_string()
    });
    Ok(())
}

/// Fills the flags not given on the command line from a --config file.
fn apply_file(
    file: &file::FileConfig,
    explicit: &std::collections::BTreeSet<String>,
    proxy: &mut ProxyFlags,
    run: &mut RunFlags,
) -> Result<(), ConfigError> {
    let unset = |id: &str| !explicit.contains(id);
    set_some(
        &mut proxy.hostname_override,
        &file.hostname_override,
        unset("hostname_override"),
    );
    set_some(
        &mut run.bind_address,
        &file.bind_address,
        unset("bind_address"),
    );
    set_some(&mut run.proxy_mode, &file.mode, unset("proxy_mode"));
    set_some(
        &mut proxy.cluster_cidr,
        &file.cluster_cidr,
        unset("cluster_cidr"),
    );
    set_some(
        &mut proxy.nodeport_addresses,
        &file.nodeport_addresses,
        unset("nodeport_addresses"),
    );
    set(
        &mut proxy.masquerade_all,
        &file.masquerade_all,
        unset("masquerade_all"),
    );
    set(
        &mut proxy.masquerade_bit,
        &file.masquerade_bit,
        unset("masquerade_bit"),
    );
    set_some(
        &mut proxy.pod_bridge_interface,
        &file.pod_bridge_interface,
        unset("pod_bridge_interface"),
    );
    set_some(
        &mut proxy.pod_interface_name_prefix,
        &file.pod_interface_name_prefix,
        unset("pod_interface_name_prefix"),
    );
    if let (Some(mode), true) = (&file.detect_local_mode, unset("detect_local_mode")) {
        proxy.detect_local_mode =
            DetectLocalMode::from_str(mode, false).map_err(|_| ConfigError::ConfigFileValue {
                field: "detectLocalMode",
                value: mode.clone(),
                expected: "ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix",
            })?;
    }
    set_some(&mut run.kubeconfig, &file.kubeconfig, unset("kubeconfig"));
    set(
        &mut run.sync_period,
        &file.sync_period,
        unset("sync_period"),
    );
    set(
        &mut run.min_sync_period,
        &file.min_sync_period,
        unset("min_sync_period"),
    );
    set_some(
        &mut run.healthz_bind_address,
        &file.healthz_bind_address,
        unset("healthz_bind_address"),
    );
    set_some(
        &mut run.metrics_bind_address,
        &file.metrics_bind_address,
        unset("metrics_bind_address"),
    );
    apply_file_conntrack(&file.conntrack, &unset, run);
    Ok(())
}

/// The file's `conntrack` section, each field where no flag set it (`unset`).
fn apply_file_conntrack(
    ct: &file::FileConntrack,
    unset: &dyn Fn(&str) -> bool,
    run: &mut RunFlags,
) {
    set(
        &mut run.conntrack_max_per_core,
        &ct.max_per_core,
        unset("conntrack_max_per_core"),
    );
    set(&mut run.conntrack_min, &ct.min, unset("conntrack_min"));
    set(
        &mut run.conntrack_tcp_timeout_established,
        &ct.tcp_established_timeout,
        unset("conntrack_tcp_timeout_established"),
    );
    set(
        &mut run.conntrack_tcp_timeout_close_wait,
        &ct.tcp_close_wait_timeout,
        unset("conntrack_tcp_timeout_close_wait"),
    );
    set(
        &mut run.conntrack_tcp_be_liberal,
        &ct.tcp_be_liberal,
        unset("conntrack_tcp_be_liberal"),
    );
    set(
        &mut run.conntrack_udp_timeout,
        &ct.udp_timeout,
        unset("conntrack_udp_timeout"),
    );
    set(
        &mut run.conntrack_udp_timeout_stream,
        &ct.udp_stream_timeout,
        unset("conntrack_udp_timeout_stream"),
    );
}

/// `target` takes the file's `value` if it has one and no flag set it (`unset`).
fn set<T: Clone>(target: &mut T, value: &Option<T>, unset: bool) {
    if let (Some(v), true) = (value, unset) {
        *target = v.clone();
    }
}

/// [`set`] for a setting that is optional itself.
fn set_some<T: Clone>(target: &mut Option<T>, value: &Option<T>, unset: bool) {
    if let (Some(v), true) = (value, unset) {
        *target = Some(v.clone());
    }
}

#[cfg(test)]
mod tests;

/// What an operator asking for loopback NodePorts without the gate should be told.
fn localhost_nodeports_warning(proxy: &ProxyConfig) -> Option<String> {
    let addresses = &proxy.nodeport_addresses;
    let names_loopback = IpFamily::BOTH.iter().any(|f| addresses.names_loopback(*f));
    (names_loopback && !proxy.localhost_nodeports).then(|| {
        "--nodeport-addresses names loopback addresses, which accept NodePorts only with the \
         KubeProxyNFTablesLocalhostNodePorts feature gate; they stay closed"
            .to_string()
    })
}
