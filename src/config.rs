//! Command-line flags, spelled and parsed as kube-proxy spells them, and their validation into
//! one `Config`.
//!
//! Guarantees: a `Config` only exists if every flag was valid; a `ConfigError` names the flag,
//! the offending value and the reason, so `main` can print it and exit 64 before touching
//! anything.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ipnet::IpNet;

use crate::proxier::{DetectLocal, NodePortAddresses, ProxyConfig};

/// kubenft: a Kubernetes service proxy that programs nftables over netlink.
#[derive(Debug, Clone, Parser)]
#[command(name = "kubenft", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub log: LogFlags,
    #[command(flatten)]
    pub proxy: ProxyFlags,
    /// Flags given on the command line (by field name), which a --config file does not override.
    #[arg(skip)]
    pub explicit: std::collections::BTreeSet<String>,
}

// Parsed once per process; boxing the daemon's flags would only obscure the clap derive.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Print the nftables tables built from --manifests, in `nft -f` syntax; changes nothing.
    Render,
    /// Build the tables from --manifests and apply them in one atomic transaction.
    Sync {
        /// Apply once and exit (the only mode so far).
        #[arg(long)]
        once: bool,
    },
    /// The daemon: watch the cluster (the API, or --manifests), keep the kernel in sync, serve
    /// health and metrics. Leaves the rules in place when it stops.
    Run(RunFlags),
    /// Delete this proxy's `ip` and `ip6` tables (missing ones are fine) and nothing else.
    Cleanup,
    /// Build a throw-away cluster of network namespaces, program the example Services and send
    /// real requests through them (root; removes everything afterwards).
    Demo,
    /// Where a new connection to DST:PORT goes, read from the tables the kernel holds now:
    /// its Service and frontend, source ranges, endpoints with their probabilities,
    /// masquerading and why, or why it is dropped or rejected. Changes nothing.
    Explain(crate::explain::ExplainFlags),
}

/// The daemon's own flags, spelled as kube-proxy's.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct RunFlags {
    /// A KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1); flags given on the
    /// command line take precedence over its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// kubeconfig file for the API server; without it (and without --manifests) the pod's
    /// in-cluster service account is used.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Proxy only Services labelled `service.kubernetes.io/service-proxy-name=NAME` (by default,
    /// Services without that label, like kube-proxy).
    #[arg(long, value_name = "NAME")]
    pub service_proxy_name: Option<String>,
    /// Minimum time between two syncs; bursts of changes are coalesced (e.g. 100ms, 1s).
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub min_sync_period: String,
    /// Retry delay after a failed sync, and the longest time without any sync.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub sync_period: String,
    /// Longest time without a full sync (one that reads the kernel's tables back).
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub full_sync_period: String,
    /// host:port for /healthz and /livez; empty disables.
    #[arg(long, default_value = "0.0.0.0:10256", value_name = "HOST:PORT")]
    pub healthz_bind_address: String,
    /// host:port for /metrics; empty disables.
    #[arg(long, default_value = "127.0.0.1:10249", value_name = "HOST:PORT")]
    pub metrics_bind_address: String,
    /// How often --manifests is checked for changes.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub manifests_poll_period: String,
    /// Apply the node settings (the conntrack sysctls), then exit: for an init container that
    /// has the privileges the daemon then does without.
    #[arg(long)]
    pub init_only: bool,
    /// Conntrack entries to allow per CPU (nf_conntrack_max = this × CPUs, at least
    /// --conntrack-min); 0 leaves the limit as it is.
    #[arg(long, default_value_t = 32 * 1024, value_name = "N")]
    pub conntrack_max_per_core: u32,
    /// The least nf_conntrack_max is raised to (with a non-zero --conntrack-max-per-core).
    #[arg(long, default_value_t = 128 * 1024, value_name = "N")]
    pub conntrack_min: u32,
    /// Idle timeout of established TCP connections; 0 leaves it as it is.
    #[arg(long, default_value = "24h0m0s", value_name = "DURATION")]
    pub conntrack_tcp_timeout_established: String,
    /// Timeout of TCP connections in CLOSE_WAIT; 0 leaves it as it is.
    #[arg(long, default_value = "1h0m0s", value_name = "DURATION")]
    pub conntrack_tcp_timeout_close_wait: String,
    /// Set nf_conntrack_tcp_be_liberal to 1: out-of-window TCP packets are not marked invalid.
    #[arg(long)]
    pub conntrack_tcp_be_liberal: bool,
    /// Idle timeout of UDP flows that saw no reply; 0 leaves it as it is.
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub conntrack_udp_timeout: String,
    /// Idle timeout of UDP flows that saw replies; 0 leaves it as it is.
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub conntrack_udp_timeout_stream: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct LogFlags {
    /// Log line format (logs go to stderr).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// More detail: -v debug, -vv trace (kubenft's own logs), -vvv trace everything. RUST_LOG,
    /// when set, takes precedence.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// kube-proxy's `--detect-local-mode` values, spelled exactly as kube-proxy accepts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DetectLocalMode {
    #[default]
    #[value(name = "ClusterCIDR")]
    ClusterCidr,
    #[value(name = "NodeCIDR")]
    NodeCidr,
    #[value(name = "BridgeInterface")]
    BridgeInterface,
    #[value(name = "InterfaceNamePrefix")]
    InterfaceNamePrefix,
}

/// The proxy's flags as typed. Lists stay strings here so that validation, not clap, explains
/// what is wrong with them, in one style.
#[derive(Debug, Clone, Default, Args)]
pub struct ProxyFlags {
    /// Use this name instead of the host name to find this node's Node object and endpoints.
    #[arg(long, global = true, value_name = "NAME")]
    pub hostname_override: Option<String>,
    /// Primary node IP(s): one IPv4 and/or one IPv6 address, comma-separated.
    #[arg(long, global = true, value_name = "IP[,IP]")]
    pub node_ip: Option<String>,
    /// Pod network CIDR(s): one, or a dual-stack pair, comma-separated.
    #[arg(long, global = true, value_name = "CIDR[,CIDR]")]
    pub cluster_cidr: Option<String>,
    /// Service ClusterIP range(s), comma-separated.
    #[arg(long, global = true, value_name = "CIDR[,...]")]
    pub service_cidr: Option<String>,
    /// Addresses that accept NodePort traffic: `primary` (the node IPs) or comma-separated CIDRs.
    #[arg(long, global = true, value_name = "primary|CIDR[,...]")]
    pub nodeport_addresses: Option<String>,
    /// Masquerade all traffic sent to ClusterIPs.
    #[arg(long, global = true)]
    pub masquerade_all: bool,
    /// Bit of the packet mark that requests masquerading (0..=31).
    #[arg(
        long,
        global = true,
        alias = "iptables-masquerade-bit",
        default_value_t = 14
    )]
    pub masquerade_bit: u32,
    /// How traffic from local pods is recognised.
    #[arg(long, global = true, value_enum, default_value_t = DetectLocalMode::ClusterCidr)]
    pub detect_local_mode: DetectLocalMode,
    /// Pod bridge interface (with --detect-local-mode BridgeInterface).
    #[arg(long, global = true, value_name = "IFNAME")]
    pub pod_bridge_interface: Option<String>,
    /// Pod interface name prefix (with --detect-local-mode InterfaceNamePrefix).
    #[arg(long, global = true, value_name = "PREFIX")]
    pub pod_interface_name_prefix: Option<String>,
    /// nftables table name, used for both the `ip` and the `ip6` table.
    #[arg(long, global = true, default_value = "kubenft")]
    pub table_name: String,
    /// A YAML file or a directory of YAML files (`kubectl get -o yaml` output) to read
    /// Services, EndpointSlices and Nodes from.
    #[arg(long, global = true, value_name = "PATH")]
    pub manifests: Option<PathBuf>,
}

/// Everything a subcommand needs, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub command: Command,
    pub proxy: ProxyConfig,
    /// Set for `render` and `sync`, which read their objects from it.
    pub manifests: Option<PathBuf>,
    /// Accepted but probably not what the operator meant (logged once tracing is up).
    pub warnings: Vec<String>,
    /// Set for `run`.
    pub run: Option<RunSettings>,
}

/// The daemon's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSettings {
    pub kubeconfig: Option<PathBuf>,
    pub service_proxy_name: Option<String>,
    pub periods: crate::sync::Periods,
    /// `None`: the server is disabled.
    pub healthz_bind_address: Option<SocketAddr>,
    pub metrics_bind_address: Option<SocketAddr>,
    pub manifests_poll_period: Duration,
    /// Apply the node settings and exit.
    pub init_only: bool,
    pub conntrack: crate::conntrack::tuning::ConntrackSettings,
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
    #[error("--nodeport-addresses: {value:?}: `primary` cannot be combined with CIDRs")]
    PrimaryWithCidrs { value: String },
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
    ConfigFile(#[source] crate::config_file::FileConfigError),
    #[error("--config: {field}: {value:?} is not one of {expected}")]
    ConfigFileValue {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("--{flag}: {source}")]
    BindAddress {
        flag: &'static str,
        #[source]
        source: crate::serve::ServeError,
    },
}

impl Cli {
    /// Parses `args` (program name first), remembering which flags were given explicitly.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        let mut levels = vec![&matches];
        if let Some((_, sub)) = matches.subcommand() {
            levels.push(sub);
        }
        for m in levels {
            for id in m.ids() {
                if m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine) {
                    cli.explicit.insert(id.as_str().to_string());
                }
            }
        }
        Ok(cli)
    }

    /// Validates flags, taking the host name from the system when not overridden.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        self.validate_with(system_hostname)
    }

    /// Validates flags; `hostname` is asked only when `--hostname-override` is absent.
    pub fn validate_with(
        &self,
        hostname: impl FnOnce() -> std::io::Result<String>,
    ) -> Result<Config, ConfigError> {
        let needs_manifests = match self.command {
            Command::Render => Some("render"),
            Command::Sync { once: true } => Some("sync"),
            Command::Sync { once: false } => return Err(ConfigError::SyncNeedsOnce),
            Command::Cleanup | Command::Demo | Command::Run(_) | Command::Explain(_) => None,
        };
        if let Some(command) = needs_manifests
            && self.proxy.manifests.is_none()
        {
            return Err(ConfigError::ManifestsRequired { command });
        }
        let mut proxy_flags = self.proxy.clone();
        let mut file_warnings = Vec::new();
        let run_flags = match &self.command {
            Command::Run(flags) => {
                let mut flags = flags.clone();
                if let Some(path) = &flags.config {
                    let file = crate::config_file::load(path).map_err(ConfigError::ConfigFile)?;
                    apply_file(&file, &self.explicit, &mut proxy_flags, &mut flags)?;
                    file_warnings = file
                        .warnings
                        .iter()
                        .map(|w| format!("--config: {w}"))
                        .collect();
                }
                Some(flags)
            }
            _ => None,
        };
        let (proxy, mut warnings) = proxy_flags.validate_with(hostname)?;
        warnings.extend(file_warnings);
        let run = run_flags.as_ref().map(RunFlags::validate).transpose()?;
        Ok(Config {
            command: self.command.clone(),
            proxy,
            manifests: proxy_flags.manifests.clone(),
            warnings,
            run,
        })
    }
}

impl ProxyFlags {
    /// Turns the flags into the planner's configuration, plus warnings for settings that are
    /// valid but probably unintended. `local_addresses` is left empty: the caller reads them.
    pub fn validate_with(
        &self,
        hostname: impl FnOnce() -> std::io::Result<String>,
    ) -> Result<(ProxyConfig, Vec<String>), ConfigError> {
        let mut warnings = Vec::new();
        let table_name = validate_table_name(&self.table_name)?;
        let raw_hostname = match &self.hostname_override {
            Some(h) => h.clone(),
            None => hostname().map_err(ConfigError::Hostname)?,
        };
        // kube-proxy's GetHostname: trimmed and lowercased, because Node names are.
        let hostname = raw_hostname.trim().to_lowercase();
        if hostname.is_empty() {
            return Err(ConfigError::EmptyHostname {
                value: raw_hostname,
            });
        }

        let node_ips = match &self.node_ip {
            Some(v) => parse_node_ips(v)?,
            None => Vec::new(),
        };
        let cluster_cidrs = match &self.cluster_cidr {
            Some(v) => one_per_family("cluster-cidr", parse_cidrs("cluster-cidr", v)?)?,
            None => Vec::new(),
        };
        let service_cidrs = match &self.service_cidr {
            Some(v) => parse_cidrs("service-cidr", v)?,
            None => Vec::new(),
        };
        let nodeport_addresses = match &self.nodeport_addresses {
            Some(v) => parse_nodeport_addresses(v)?,
            None => NodePortAddresses::Primary,
        };
        if self.masquerade_bit > 31 {
            return Err(ConfigError::MasqueradeBit {
                value: self.masquerade_bit,
            });
        }

        let detect_local = match self.detect_local_mode {
            DetectLocalMode::ClusterCidr => {
                if cluster_cidrs.is_empty() {
                    // kube-proxy accepts this too (it is the default) and simply cannot tell
                    // local pods apart, so it is a warning rather than an error.
                    warnings.push(
                        "--detect-local-mode ClusterCIDR without --cluster-cidr: \
                         traffic from local pods cannot be recognised"
                            .to_string(),
                    );
                }
                DetectLocal::ClusterCidr
            }
            DetectLocalMode::NodeCidr => DetectLocal::NodeCidr,
            DetectLocalMode::BridgeInterface => DetectLocal::BridgeInterface(interface_flag(
                "BridgeInterface",
                "pod-bridge-interface",
                &self.pod_bridge_interface,
            )?),
            DetectLocalMode::InterfaceNamePrefix => {
                DetectLocal::InterfaceNamePrefix(interface_flag(
                    "InterfaceNamePrefix",
                    "pod-interface-name-prefix",
                    &self.pod_interface_name_prefix,
                )?)
            }
        };
        if self.pod_bridge_interface.is_some()
            && self.detect_local_mode != DetectLocalMode::BridgeInterface
        {
            warnings.push(
                "--pod-bridge-interface is ignored unless --detect-local-mode BridgeInterface"
                    .to_string(),
            );
        }
        if self.pod_interface_name_prefix.is_some()
            && self.detect_local_mode != DetectLocalMode::InterfaceNamePrefix
        {
            warnings.push(
                "--pod-interface-name-prefix is ignored unless --detect-local-mode \
                 InterfaceNamePrefix"
                    .to_string(),
            );
        }

        let config = ProxyConfig {
            table_name,
            hostname,
            node_ips,
            cluster_cidrs,
            service_cidrs,
            nodeport_addresses,
            local_addresses: Vec::new(),
            masquerade_all: self.masquerade_all,
            masquerade_bit: self.masquerade_bit as u8,
            detect_local,
            // Probed by the commands that program the kernel; both until then.
            ..ProxyConfig::default()
        };
        Ok((config, warnings))
    }
}

/// Fills the flags not given on the command line from a --config file.
fn apply_file(
    file: &crate::config_file::FileConfig,
    explicit: &std::collections::BTreeSet<String>,
    proxy: &mut ProxyFlags,
    run: &mut RunFlags,
) -> Result<(), ConfigError> {
    let unset = |id: &str| !explicit.contains(id);
    fn set<T: Clone>(target: &mut T, value: &Option<T>, unset: bool) {
        if let (Some(v), true) = (value, unset) {
            *target = v.clone();
        }
    }
    fn set_some<T: Clone>(target: &mut Option<T>, value: &Option<T>, unset: bool) {
        if let (Some(v), true) = (value, unset) {
            *target = Some(v.clone());
        }
    }
    set_some(
        &mut proxy.hostname_override,
        &file.hostname_override,
        unset("hostname_override"),
    );
    set_some(&mut proxy.node_ip, &file.node_ip, unset("node_ip"));
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
    set(
        &mut run.healthz_bind_address,
        &file.healthz_bind_address,
        unset("healthz_bind_address"),
    );
    set(
        &mut run.metrics_bind_address,
        &file.metrics_bind_address,
        unset("metrics_bind_address"),
    );
    let ct = &file.conntrack;
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
    Ok(())
}

impl RunFlags {
    pub fn validate(&self) -> Result<RunSettings, ConfigError> {
        let periods = crate::sync::Periods {
            // kube-proxy accepts 0 here: sync on every change.
            min_sync_period: parse_go_duration(&self.min_sync_period).map_err(|reason| {
                ConfigError::Duration {
                    flag: "min-sync-period",
                    value: self.min_sync_period.clone(),
                    reason,
                }
            })?,
            sync_period: positive_duration("sync-period", &self.sync_period)?,
            full_sync_period: positive_duration("full-sync-period", &self.full_sync_period)?,
        };
        let bind = |flag: &'static str, value: &str| -> Result<Option<SocketAddr>, ConfigError> {
            if value.is_empty() {
                return Ok(None);
            }
            crate::serve::parse_bind_address(value)
                .map(Some)
                .map_err(|source| ConfigError::BindAddress { flag, source })
        };
        Ok(RunSettings {
            kubeconfig: self.kubeconfig.clone(),
            service_proxy_name: self.service_proxy_name.clone().filter(|n| !n.is_empty()),
            periods,
            healthz_bind_address: bind("healthz-bind-address", &self.healthz_bind_address)?,
            metrics_bind_address: bind("metrics-bind-address", &self.metrics_bind_address)?,
            manifests_poll_period: positive_duration(
                "manifests-poll-period",
                &self.manifests_poll_period,
            )?,
            init_only: self.init_only,
            conntrack: crate::conntrack::tuning::ConntrackSettings {
                max_per_core: self.conntrack_max_per_core,
                min: self.conntrack_min,
                tcp_established_timeout: timeout(
                    "conntrack-tcp-timeout-established",
                    &self.conntrack_tcp_timeout_established,
                )?,
                tcp_close_wait_timeout: timeout(
                    "conntrack-tcp-timeout-close-wait",
                    &self.conntrack_tcp_timeout_close_wait,
                )?,
                tcp_be_liberal: self.conntrack_tcp_be_liberal,
                udp_timeout: timeout("conntrack-udp-timeout", &self.conntrack_udp_timeout)?,
                udp_stream_timeout: timeout(
                    "conntrack-udp-timeout-stream",
                    &self.conntrack_udp_timeout_stream,
                )?,
            },
        })
    }
}

/// A conntrack timeout: whole seconds reach the kernel, so a non-zero value under a second
/// (which kube-proxy would write as 0) is refused.
fn timeout(flag: &'static str, value: &str) -> Result<Duration, ConfigError> {
    let d = parse_go_duration(value).map_err(|reason| ConfigError::Duration {
        flag,
        value: value.to_string(),
        reason,
    })?;
    if !d.is_zero() && d.as_secs() == 0 {
        return Err(ConfigError::SubSecondTimeout {
            flag,
            value: value.to_string(),
        });
    }
    Ok(d)
}

fn positive_duration(flag: &'static str, value: &str) -> Result<Duration, ConfigError> {
    let d = parse_go_duration(value).map_err(|reason| ConfigError::Duration {
        flag,
        value: value.to_string(),
        reason,
    })?;
    if d.is_zero() {
        return Err(ConfigError::ZeroDuration {
            flag,
            value: value.to_string(),
        });
    }
    Ok(d)
}

/// Parses a duration as Go's `time.ParseDuration` (and so kube-proxy's flags) writes them:
/// a sequence of decimal numbers with units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`, e.g. `1h30m`,
/// `1.5s`, `100ms`; `0` alone is zero. Negative durations are refused.
pub fn parse_go_duration(text: &str) -> Result<Duration, &'static str> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty");
    }
    if text.starts_with('-') {
        return Err("negative");
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("a number without a unit")?;
        if number_len == 0 {
            return Err("expected a number");
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| "a malformed number")?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err("an unknown unit"),
        };
        rest = &rest[unit_len..];
        total += number * nanos_per_unit;
    }
    if total > u64::MAX as f64 {
        return Err("too large");
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

/// Splits a comma-separated flag value; surrounding blanks are tolerated, empty entries are not.
fn entries<'v>(flag: &'static str, value: &'v str) -> Result<Vec<&'v str>, ConfigError> {
    value
        .split(',')
        .map(str::trim)
        .map(|e| {
            if e.is_empty() {
                Err(ConfigError::EmptyEntry {
                    flag,
                    value: value.to_string(),
                })
            } else {
                Ok(e)
            }
        })
        .collect()
}

/// Parses CIDRs; host bits are cleared (`10.0.0.1/8` is `10.0.0.0/8`) as Go's ParseCIDR does
/// for kube-proxy.
fn parse_cidrs(flag: &'static str, value: &str) -> Result<Vec<IpNet>, ConfigError> {
    entries(flag, value)?
        .into_iter()
        .map(|e| {
            e.parse::<IpNet>()
                .map(|n| n.trunc())
                .map_err(|source| ConfigError::Cidr {
                    flag,
                    entry: e.to_string(),
                    source,
                })
        })
        .collect()
}

fn family_name(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn one_per_family(flag: &'static str, cidrs: Vec<IpNet>) -> Result<Vec<IpNet>, ConfigError> {
    for (i, a) in cidrs.iter().enumerate() {
        if let Some(b) = cidrs[i + 1..]
            .iter()
            .find(|b| b.addr().is_ipv4() == a.addr().is_ipv4())
        {
            return Err(ConfigError::TwoOfAFamily {
                flag,
                family: family_name(&a.addr()),
                what: "CIDRs",
                first: a.to_string(),
                second: b.to_string(),
            });
        }
    }
    Ok(cidrs)
}

fn parse_node_ips(value: &str) -> Result<Vec<IpAddr>, ConfigError> {
    const FLAG: &str = "node-ip";
    let mut ips: Vec<IpAddr> = Vec::new();
    for e in entries(FLAG, value)? {
        let ip: IpAddr = e.parse().map_err(|source| ConfigError::Ip {
            flag: FLAG,
            entry: e.to_string(),
            source,
        })?;
        if ip.is_unspecified() {
            return Err(ConfigError::UnspecifiedIp {
                flag: FLAG,
                entry: e.to_string(),
            });
        }
        if let Some(first) = ips.iter().find(|i| i.is_ipv4() == ip.is_ipv4()) {
            return Err(ConfigError::TwoOfAFamily {
                flag: FLAG,
                family: family_name(&ip),
                what: "addresses",
                first: first.to_string(),
                second: ip.to_string(),
            });
        }
        ips.push(ip);
    }
    Ok(ips)
}

fn parse_nodeport_addresses(value: &str) -> Result<NodePortAddresses, ConfigError> {
    const FLAG: &str = "nodeport-addresses";
    let list = entries(FLAG, value)?;
    if list.contains(&"primary") {
        return if list.len() == 1 {
            Ok(NodePortAddresses::Primary)
        } else {
            Err(ConfigError::PrimaryWithCidrs {
                value: value.to_string(),
            })
        };
    }
    Ok(NodePortAddresses::Cidrs(parse_cidrs(FLAG, value)?))
}

/// The interface name a detect-local mode requires, checked like the kernel checks names
/// (`dev_valid_name`): 1..=15 bytes, no `/`, `:` or whitespace, not `.` or `..`.
fn interface_flag(
    mode: &'static str,
    flag: &'static str,
    value: &Option<String>,
) -> Result<String, ConfigError> {
    let Some(name) = value.as_deref().filter(|v| !v.is_empty()) else {
        return Err(ConfigError::DetectLocalNeeds { mode, flag });
    };
    let reason = if name.len() > 15 {
        Some("longer than 15 bytes (IFNAMSIZ)")
    } else if name == "." || name == ".." {
        Some("`.` and `..` are not interface names")
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        Some("contains `/`, `:` or whitespace")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ConfigError::InterfaceName {
            flag,
            value: name.to_string(),
            reason,
        }),
        None => Ok(name.to_string()),
    }
}

/// nft's identifier grammar (scanner.l `string`): a letter, `_` or `.`, then letters, digits,
/// `/`, `-`, `_` or `.`; at most 255 bytes (the kernel's NFT_NAME_MAXLEN minus the NUL).
fn validate_table_name(name: &str) -> Result<String, ConfigError> {
    let err = |reason: String| ConfigError::TableName {
        value: name.to_string(),
        reason,
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return Err(err("empty".into())),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_' || c == '.') => {
            return Err(err(format!(
                "must start with a letter, `_` or `.`, not {c:?}"
            )));
        }
        Some(_) => {}
    }
    if let Some(c) = chars.find(|&c| !(c.is_ascii_alphanumeric() || "/-_.".contains(c))) {
        return Err(err(format!(
            "{c:?} is not allowed (letters, digits, `/`, `-`, `_`, `.`)"
        )));
    }
    if name.len() > 255 {
        return Err(err(format!("{} bytes, at most 255", name.len())));
    }
    Ok(name.to_string())
}

/// The machine's host name (gethostname(2)), as kube-proxy's default node name.
pub fn system_hostname() -> std::io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // POSIX leaves truncation unterminated; the last byte stays 0 because Linux names are <= 64.
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..len].to_vec())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        let mut argv = vec!["kubenft"];
        argv.extend_from_slice(args);
        Cli::parse_args(argv).unwrap()
    }

    fn host() -> std::io::Result<String> {
        Ok("Node-A.Example\n".into())
    }

    fn validate(args: &[&str]) -> Result<Config, ConfigError> {
        parse(args).validate_with(host)
    }

    fn error(args: &[&str]) -> String {
        validate(args).unwrap_err().to_string()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn defaults_match_kube_proxy() {
        let c = validate(&["cleanup"]).unwrap();
        let p = &c.proxy;
        assert_eq!(p.table_name, "kubenft");
        assert_eq!(p.hostname, "node-a.example");
        assert_eq!(p.masquerade_bit, 14);
        assert_eq!(p.masquerade_mark(), 0x4000);
        assert!(!p.masquerade_all);
        assert_eq!(p.nodeport_addresses, NodePortAddresses::Primary);
        assert_eq!(p.detect_local, DetectLocal::ClusterCidr);
        assert!(p.node_ips.is_empty() && p.cluster_cidrs.is_empty() && p.service_cidrs.is_empty());
        assert_eq!(c.manifests, None);
        assert_eq!(
            c.warnings.len(),
            1,
            "ClusterCIDR without a CIDR warns: {:?}",
            c.warnings
        );
    }

    #[test]
    fn every_flag_is_parsed_into_the_proxy_config() {
        let c = validate(&[
            "render",
            "--manifests",
            "/tmp/m",
            "--hostname-override",
            " Worker-1 ",
            "--node-ip",
            "192.168.1.10, fd00::10",
            "--cluster-cidr",
            "10.244.0.0/16,fd00:10:244::/56",
            "--service-cidr",
            "10.96.0.0/12,10.100.0.0/16,fd00:10:96::/112",
            "--nodeport-addresses",
            "192.168.1.0/24,fd00::/64",
            "--masquerade-all",
            "--masquerade-bit",
            "5",
            "--detect-local-mode",
            "InterfaceNamePrefix",
            "--pod-interface-name-prefix",
            "veth",
            "--table-name",
            "kube_proxy.2",
        ])
        .unwrap();
        assert_eq!(c.command, Command::Render);
        assert_eq!(c.manifests, Some(PathBuf::from("/tmp/m")));
        assert_eq!(c.warnings, Vec::<String>::new());
        let want = ProxyConfig {
            table_name: "kube_proxy.2".into(),
            hostname: "worker-1".into(),
            node_ips: vec![ip("192.168.1.10"), ip("fd00::10")],
            cluster_cidrs: vec![net("10.244.0.0/16"), net("fd00:10:244::/56")],
            service_cidrs: vec![
                net("10.96.0.0/12"),
                net("10.100.0.0/16"),
                net("fd00:10:96::/112"),
            ],
            nodeport_addresses: NodePortAddresses::Cidrs(vec![
                net("192.168.1.0/24"),
                net("fd00::/64"),
            ]),
            local_addresses: vec![],
            masquerade_all: true,
            masquerade_bit: 5,
            detect_local: DetectLocal::InterfaceNamePrefix("veth".into()),
            ..ProxyConfig::default()
        };
        assert_eq!(c.proxy, want);
    }

    #[test]
    fn flags_may_come_before_the_subcommand_too() {
        let c = parse(&[
            "--table-name",
            "t1",
            "-vv",
            "--log-format",
            "json",
            "cleanup",
        ]);
        assert_eq!(c.proxy.table_name, "t1");
        assert_eq!(c.log.verbose, 2);
        assert_eq!(c.log.log_format, LogFormat::Json);
    }

    #[test]
    fn the_iptables_spelling_of_the_masquerade_bit_is_accepted() {
        let c = validate(&["cleanup", "--iptables-masquerade-bit", "0"]).unwrap();
        assert_eq!(c.proxy.masquerade_mark(), 1);
    }

    #[test]
    fn host_bits_of_a_cidr_are_cleared_like_go_parse_cidr() {
        let c = validate(&["cleanup", "--cluster-cidr", "10.244.3.7/16"]).unwrap();
        assert_eq!(c.proxy.cluster_cidrs, vec![net("10.244.0.0/16")]);
    }

    #[test]
    fn the_host_name_is_read_only_without_an_override() {
        let c = parse(&["cleanup", "--hostname-override", "n1"])
            .validate_with(|| panic!("host name must not be read"))
            .unwrap();
        assert_eq!(c.proxy.hostname, "n1");
    }

    #[test]
    fn the_system_host_name_is_readable_and_not_empty() {
        let name = system_hostname().unwrap();
        assert!(!name.is_empty() && !name.contains('\0'), "{name:?}");
    }

    #[test]
    fn detect_local_modes_carry_their_interface() {
        let c = validate(&[
            "cleanup",
            "--detect-local-mode",
            "BridgeInterface",
            "--pod-bridge-interface",
            "cni0",
        ])
        .unwrap();
        assert_eq!(
            c.proxy.detect_local,
            DetectLocal::BridgeInterface("cni0".into())
        );
        let c = validate(&["cleanup", "--detect-local-mode", "NodeCIDR"]).unwrap();
        assert_eq!(c.proxy.detect_local, DetectLocal::NodeCidr);
        assert_eq!(c.warnings, Vec::<String>::new());
    }

    #[test]
    fn an_unknown_detect_local_mode_is_refused_by_the_parser() {
        let argv = ["kubenft", "cleanup", "--detect-local-mode", "clustercidr"];
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn an_interface_flag_for_another_mode_is_a_warning() {
        let c = validate(&[
            "cleanup",
            "--cluster-cidr",
            "10.0.0.0/8",
            "--pod-bridge-interface",
            "cni0",
            "--pod-interface-name-prefix",
            "veth",
        ])
        .unwrap();
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("--pod-bridge-interface is ignored"));
        assert!(c.warnings[1].starts_with("--pod-interface-name-prefix is ignored"));
    }

    #[test]
    fn every_invalid_value_is_explained_with_its_flag() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--cluster-cidr", "10.0.0.0/8,10.1.0.0/16"],
                "--cluster-cidr: two IPv4 CIDRs given (10.0.0.0/8, 10.1.0.0/16), at most one per family",
            ),
            (
                &["--cluster-cidr", "fd00::/48,10.0.0.0/8,fd01::/48"],
                "--cluster-cidr: two IPv6 CIDRs given (fd00::/48, fd01::/48), at most one per family",
            ),
            (
                &["--cluster-cidr", "10.0.0.0"],
                "--cluster-cidr: \"10.0.0.0\" is not a CIDR: ",
            ),
            (
                &["--service-cidr", "10.96.0.0/33"],
                "--service-cidr: \"10.96.0.0/33\" is not a CIDR: ",
            ),
            (
                &["--service-cidr", "10.96.0.0/12,"],
                "--service-cidr: empty entry in \"10.96.0.0/12,\"",
            ),
            (
                &["--node-ip", "10.0.0.1,10.0.0.2"],
                "--node-ip: two IPv4 addresses given (10.0.0.1, 10.0.0.2), at most one per family",
            ),
            (
                &["--node-ip", "node-a"],
                "--node-ip: \"node-a\" is not an IP address: ",
            ),
            (
                &["--node-ip", "::"],
                "--node-ip: :: is an unspecified address, not a node IP",
            ),
            (
                &["--nodeport-addresses", "primary,10.0.0.0/8"],
                "--nodeport-addresses: \"primary,10.0.0.0/8\": `primary` cannot be combined with CIDRs",
            ),
            (
                &["--nodeport-addresses", "eth0"],
                "--nodeport-addresses: \"eth0\" is not a CIDR: ",
            ),
            (
                &["--masquerade-bit", "32"],
                "--masquerade-bit: 32 is out of range, must be 0..=31",
            ),
            (
                &["--detect-local-mode", "BridgeInterface"],
                "--detect-local-mode BridgeInterface: needs --pod-bridge-interface",
            ),
            (
                &[
                    "--detect-local-mode",
                    "InterfaceNamePrefix",
                    "--pod-interface-name-prefix",
                    "",
                ],
                "--detect-local-mode InterfaceNamePrefix: needs --pod-interface-name-prefix",
            ),
            (
                &[
                    "--detect-local-mode",
                    "BridgeInterface",
                    "--pod-bridge-interface",
                    "a-very-long-bridge",
                ],
                "--pod-bridge-interface: \"a-very-long-bridge\" is not a usable interface name: longer than 15 bytes (IFNAMSIZ)",
            ),
            (
                &[
                    "--detect-local-mode",
                    "InterfaceNamePrefix",
                    "--pod-interface-name-prefix",
                    "ve/th",
                ],
                "--pod-interface-name-prefix: \"ve/th\" is not a usable interface name: contains `/`, `:` or whitespace",
            ),
            (
                &[
                    "--detect-local-mode",
                    "BridgeInterface",
                    "--pod-bridge-interface",
                    "..",
                ],
                "--pod-bridge-interface: \"..\" is not a usable interface name: `.` and `..` are not interface names",
            ),
            (
                &["--table-name", ""],
                "--table-name: \"\" is not an nftables identifier: empty",
            ),
            (
                &["--table-name", "9lives"],
                "--table-name: \"9lives\" is not an nftables identifier: must start with a letter, `_` or `.`, not '9'",
            ),
            (
                &["--table-name", "kube proxy"],
                "--table-name: \"kube proxy\" is not an nftables identifier: ' ' is not allowed",
            ),
            (
                &["--hostname-override", "  "],
                "the node name is empty (--hostname-override \"  \"",
            ),
        ];
        for (args, want) in cases {
            let mut argv = vec!["cleanup"];
            argv.extend_from_slice(args);
            let got = error(&argv);
            assert!(
                got.starts_with(want),
                "{args:?}:\n got: {got}\nwant: {want}"
            );
        }
        let long = "t".repeat(256);
        let got = error(&["cleanup", "--table-name", &long]);
        assert!(got.ends_with("256 bytes, at most 255"), "{got}");
        assert!(validate(&["cleanup", "--table-name", &long[..255]]).is_ok());
    }

    #[test]
    fn an_unreadable_host_name_is_an_error() {
        let err = parse(&["cleanup"])
            .validate_with(|| Err(std::io::Error::other("no uts")))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--hostname-override not given and the host name could not be read: no uts"
        );
    }

    #[test]
    fn render_and_sync_need_manifests_and_sync_needs_once() {
        assert_eq!(
            error(&["render"]),
            "render: --manifests PATH is required (only `run` reads the Kubernetes API)"
        );
        assert_eq!(
            error(&["sync", "--once"]),
            "sync: --manifests PATH is required (only `run` reads the Kubernetes API)"
        );
        assert_eq!(
            error(&["sync", "--manifests", "d"]),
            "sync: only `sync --once` is available; `run` is the daemon"
        );
        let c = validate(&["sync", "--once", "--manifests", "d"]).unwrap();
        assert_eq!(c.command, Command::Sync { once: true });
    }

    #[test]
    fn run_takes_kube_proxys_defaults_and_durations() {
        let c = validate(&["run"]).unwrap();
        let run = c.run.unwrap();
        assert_eq!(run.periods, crate::sync::Periods::default());
        assert_eq!(
            run.healthz_bind_address,
            Some("0.0.0.0:10256".parse().unwrap())
        );
        assert_eq!(
            run.metrics_bind_address,
            Some("127.0.0.1:10249".parse().unwrap())
        );
        assert_eq!(run.kubeconfig, None);

        let c = validate(&[
            "run",
            "--min-sync-period=100ms",
            "--sync-period=1m30s",
            "--full-sync-period=2h",
            "--metrics-bind-address=",
            "--healthz-bind-address=:10256",
        ])
        .unwrap();
        let run = c.run.unwrap();
        assert_eq!(run.periods.min_sync_period, Duration::from_millis(100));
        assert_eq!(run.periods.sync_period, Duration::from_secs(90));
        assert_eq!(run.periods.full_sync_period, Duration::from_secs(7200));
        assert_eq!(run.metrics_bind_address, None, "empty disables");
        assert_eq!(
            run.healthz_bind_address,
            Some("0.0.0.0:10256".parse().unwrap())
        );
    }

    #[test]
    fn bad_run_durations_and_addresses_are_explained() {
        assert_eq!(
            error(&["run", "--sync-period=30"]),
            "--sync-period: \"30\" is not a duration: a number without a unit \
             (write it like 100ms, 1s, 1m30s, 1h)"
        );
        assert_eq!(
            error(&["run", "--min-sync-period=1d"]),
            "--min-sync-period: \"1d\" is not a duration: an unknown unit \
             (write it like 100ms, 1s, 1m30s, 1h)"
        );
        assert_eq!(
            error(&["run", "--sync-period=0s"]),
            "--sync-period: \"0s\" must be greater than zero"
        );
        assert!(
            error(&["run", "--metrics-bind-address=localhost"])
                .starts_with("--metrics-bind-address: bind address \"localhost\" is not host:port")
        );
    }

    #[test]
    fn go_durations_parse_like_go() {
        for (text, nanos) in [
            ("0", 0u64),
            ("1ns", 1),
            ("1.5s", 1_500_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("2µs", 2_000),
            ("+1m", 60_000_000_000),
        ] {
            assert_eq!(
                parse_go_duration(text),
                Ok(Duration::from_nanos(nanos)),
                "{text}"
            );
        }
        for bad in ["", "-1s", "s", "1", "1..2s", "1sec"] {
            assert!(parse_go_duration(bad).is_err(), "{bad} is refused");
        }
    }

    fn config_file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    const FILE: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clusterCIDR: 10.244.0.0/16
metricsBindAddress: 0.0.0.0:10249
clientConnection: {kubeconfig: /etc/k/kubeconfig}
detectLocalMode: NodeCIDR
nftables: {masqueradeBit: 13, syncPeriod: 45s, minSyncPeriod: 2s}
iptables: {masqueradeBit: 14}
";

    #[test]
    fn a_config_file_fills_in_what_the_command_line_did_not_say() {
        let f = config_file(FILE);
        let c = validate(&["run", "--config", f.path().to_str().unwrap()]).unwrap();
        assert_eq!(c.proxy.cluster_cidrs, vec![net("10.244.0.0/16")]);
        assert_eq!(c.proxy.masquerade_bit, 13);
        assert_eq!(c.proxy.detect_local, DetectLocal::NodeCidr);
        let run = c.run.unwrap();
        assert_eq!(run.kubeconfig, Some(PathBuf::from("/etc/k/kubeconfig")));
        assert_eq!(run.periods.sync_period, Duration::from_secs(45));
        assert_eq!(run.periods.min_sync_period, Duration::from_secs(2));
        assert_eq!(
            run.metrics_bind_address,
            Some("0.0.0.0:10249".parse().unwrap())
        );
        assert_eq!(
            c.warnings,
            ["--config: iptables.masqueradeBit belongs to another proxy mode; ignored"]
        );
    }

    #[test]
    fn flags_on_the_command_line_win_over_the_config_file_wherever_they_are_written() {
        let f = config_file(FILE);
        let path = f.path().to_str().unwrap();
        let c = validate(&[
            "--cluster-cidr",
            "10.8.0.0/16",
            "run",
            "--config",
            path,
            "--sync-period=5s",
            "--masquerade-bit=14",
        ])
        .unwrap();
        assert_eq!(c.proxy.cluster_cidrs, vec![net("10.8.0.0/16")]);
        assert_eq!(c.proxy.masquerade_bit, 14, "even when equal to the default");
        let run = c.run.unwrap();
        assert_eq!(run.periods.sync_period, Duration::from_secs(5));
        assert_eq!(
            run.periods.min_sync_period,
            Duration::from_secs(2),
            "from the file"
        );
    }

    #[test]
    fn a_bad_config_file_is_a_configuration_error_naming_the_problem() {
        let f = config_file(&FILE.replace("NodeCIDR", "PodCIDR"));
        assert_eq!(
            error(&["run", "--config", f.path().to_str().unwrap()]),
            "--config: detectLocalMode: \"PodCIDR\" is not one of ClusterCIDR, NodeCIDR, \
             BridgeInterface, InterfaceNamePrefix"
        );
        let f = config_file(&FILE.replace("syncPeriod: 45s", "syncPeriod: 45"));
        assert_eq!(
            error(&["run", "--config", f.path().to_str().unwrap()]),
            format!(
                "--config: {}: nftables.syncPeriod: expected a string, found the number 45",
                f.path().display()
            )
        );
        assert!(
            error(&["run", "--config", "/nonexistent/kubenft.yaml"])
                .starts_with("--config: reading /nonexistent/kubenft.yaml")
        );
    }

    #[test]
    fn conntrack_settings_take_kube_proxys_defaults_flags_and_file_values_flags_first() {
        use crate::conntrack::tuning::ConntrackSettings;
        let run = validate(&["run"]).unwrap().run.unwrap();
        assert_eq!(run.conntrack, ConntrackSettings::default());
        assert_eq!(run.conntrack.max_per_core, 32768);
        assert_eq!(run.conntrack.min, 131072);
        assert_eq!(
            run.conntrack.tcp_established_timeout,
            Duration::from_secs(86400)
        );
        assert_eq!(
            run.conntrack.tcp_close_wait_timeout,
            Duration::from_secs(3600)
        );
        assert!(!run.init_only);

        let f = config_file(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
  min: 1000
  tcpEstablishedTimeout: null
  tcpCloseWaitTimeout: 0s
  tcpBeLiberal: true
  udpTimeout: 10s
  udpStreamTimeout: 0s
",
        );
        let path = f.path().to_str().unwrap();
        let run = validate(&["run", "--config", path]).unwrap().run.unwrap();
        assert_eq!(
            run.conntrack,
            ConntrackSettings {
                max_per_core: 0,
                min: 1000,
                tcp_established_timeout: Duration::from_secs(86400),
                tcp_close_wait_timeout: Duration::ZERO,
                tcp_be_liberal: true,
                udp_timeout: Duration::from_secs(10),
                udp_stream_timeout: Duration::ZERO,
            }
        );
        let run = validate(&[
            "run",
            "--config",
            path,
            "--conntrack-max-per-core=32768",
            "--conntrack-udp-timeout",
            "0",
            "--conntrack-udp-timeout-stream=2m",
            "--conntrack-tcp-timeout-close-wait=1h",
            "--init-only",
        ])
        .unwrap()
        .run
        .unwrap();
        assert_eq!(run.conntrack.max_per_core, 32768, "even when the default");
        assert_eq!(run.conntrack.min, 1000, "from the file");
        assert_eq!(run.conntrack.udp_timeout, Duration::ZERO);
        assert_eq!(run.conntrack.udp_stream_timeout, Duration::from_secs(120));
        assert_eq!(
            run.conntrack.tcp_close_wait_timeout,
            Duration::from_secs(3600)
        );
        assert!(run.init_only);

        assert_eq!(
            error(&["run", "--conntrack-udp-timeout=500ms"]),
            "--conntrack-udp-timeout: \"500ms\" must be 0 (leave the kernel's value) or at least 1s"
        );
        assert!(
            error(&["run", "--conntrack-tcp-timeout-established=1d"])
                .starts_with("--conntrack-tcp-timeout-established: \"1d\" is not a duration")
        );
    }
}
