//! The command line as typed: subcommands and flags, spelled as kube-proxy spells them. Values
//! stay as typed (strings for lists and durations) so that validation, not clap, explains what is
//! wrong with them, in one style.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// kubenft: a Kubernetes service proxy that programs nftables over netlink.
#[derive(Debug, Clone, Parser)]
#[command(name = "kubenft", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    #[command(flatten)]
    pub(crate) log: LogFlags,
    #[command(flatten)]
    pub(crate) proxy: ProxyFlags,
    /// Flags given on the command line (by field name), which a --config file does not override.
    #[arg(skip)]
    pub(crate) explicit: BTreeSet<String>,
}

// Parsed once per process; boxing the daemon's flags would only obscure the clap derive.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub(crate) enum Command {
    /// Print the nftables tables built from --manifests, in `nft -f` syntax; changes nothing.
    Render,
    /// Build the tables from --manifests and apply them in one atomic transaction.
    Sync {
        /// Apply once and exit (the only mode so far).
        #[arg(long)]
        once: bool,
        /// Remove kube-proxy's rules (its nftables tables, its iptables-nft chains) in the same
        /// transaction.
        #[arg(long)]
        replace_kube_proxy: bool,
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
pub(crate) struct RunFlags {
    /// A KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1); flags given on the
    /// command line take precedence over its values.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// kubeconfig file for the API server; without it (and without --manifests) the pod's
    /// in-cluster service account is used.
    #[arg(long, value_name = "PATH")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Proxy only Services labelled `service.kubernetes.io/service-proxy-name=NAME` (by default,
    /// Services without that label, like kube-proxy).
    #[arg(long, value_name = "NAME")]
    pub(crate) service_proxy_name: Option<String>,
    /// kube-proxy's mode: `nftables` (the default) is the only one kubenft implements.
    #[arg(long, value_name = "MODE")]
    pub(crate) proxy_mode: Option<String>,
    /// The node's primary IP, as kube-proxy's --bind-address (which binds nothing despite its
    /// name); 0.0.0.0 and :: mean "take it from the Node object".
    #[arg(long, value_name = "IP")]
    pub(crate) bind_address: Option<String>,
    /// Feature gates as kube-proxy takes them (`A=true,B=false`); the ones that change proxy
    /// behaviour are honoured, the rest are warned about once.
    #[arg(long, value_name = "GATE=BOOL[,...]")]
    pub(crate) feature_gates: Option<String>,
    /// Delete kubenft's tables and exit, as kube-proxy's --cleanup does for its own rules.
    #[arg(long)]
    pub(crate) cleanup: bool,
    /// Take the node over from kube-proxy: its nftables tables and iptables-nft chains go in
    /// the same transaction as the first sync; rules it writes again later are reported, not
    /// removed. What nf_tables cannot reach (IPVS, legacy iptables) is reported.
    #[arg(long)]
    pub(crate) replace_kube_proxy: bool,
    /// Write the effective configuration (file and flags merged) as a KubeProxyConfiguration
    /// to FILE and exit.
    #[arg(long, value_name = "FILE")]
    pub(crate) write_config_to: Option<PathBuf>,
    /// Minimum time between two syncs; bursts of changes are coalesced (e.g. 100ms, 1s).
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub(crate) min_sync_period: String,
    /// Retry delay after a failed sync, and the longest time without any sync.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub(crate) sync_period: String,
    /// Longest time without a full sync (one that reads the kernel's tables back).
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub(crate) full_sync_period: String,
    /// host:port for /healthz and /livez (default 0.0.0.0:10256, [::]:10256 with an IPv6
    /// --bind-address); empty disables.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) healthz_bind_address: Option<String>,
    /// host:port for /metrics (default 127.0.0.1:10249, [::1]:10249 with an IPv6
    /// --bind-address); empty disables.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics_bind_address: Option<String>,
    /// How often --manifests is checked for changes.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub(crate) manifests_poll_period: String,
    /// Apply the node settings (the conntrack sysctls), then exit: for an init container that
    /// has the privileges the daemon then does without.
    #[arg(long)]
    pub(crate) init_only: bool,
    /// Conntrack entries to allow per CPU (nf_conntrack_max = this × CPUs, at least
    /// --conntrack-min); 0 leaves the limit as it is.
    #[arg(long, default_value_t = 32 * 1024, value_name = "N")]
    pub(crate) conntrack_max_per_core: u32,
    /// The least nf_conntrack_max is raised to (with a non-zero --conntrack-max-per-core).
    #[arg(long, default_value_t = 128 * 1024, value_name = "N")]
    pub(crate) conntrack_min: u32,
    /// Idle timeout of established TCP connections; 0 leaves it as it is.
    #[arg(long, default_value = "24h0m0s", value_name = "DURATION")]
    pub(crate) conntrack_tcp_timeout_established: String,
    /// Timeout of TCP connections in CLOSE_WAIT; 0 leaves it as it is.
    #[arg(long, default_value = "1h0m0s", value_name = "DURATION")]
    pub(crate) conntrack_tcp_timeout_close_wait: String,
    /// Set nf_conntrack_tcp_be_liberal to 1: out-of-window TCP packets are not marked invalid.
    #[arg(long)]
    pub(crate) conntrack_tcp_be_liberal: bool,
    /// Idle timeout of UDP flows that saw no reply; 0 leaves it as it is.
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub(crate) conntrack_udp_timeout: String,
    /// Idle timeout of UDP flows that saw replies; 0 leaves it as it is.
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub(crate) conntrack_udp_timeout_stream: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct LogFlags {
    /// Log line format (logs go to stderr).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// More detail: -v debug, -vv trace (kubenft's own logs), -vvv trace everything. RUST_LOG,
    /// when set, takes precedence.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// kube-proxy's (klog's) verbosity 0..: up to 2 is -v's default, 3-4 is -v, 5-7 -vv,
    /// 8 and more -vvv.
    #[arg(long = "v", global = true, value_name = "LEVEL")]
    pub(crate) klog_verbosity: Option<u32>,
}

/// kube-proxy's `--detect-local-mode` values, spelled exactly as kube-proxy accepts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum DetectLocalMode {
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
pub(crate) struct ProxyFlags {
    /// Use this name instead of the host name to find this node's Node object and endpoints.
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) hostname_override: Option<String>,
    /// Primary node IP(s): one IPv4 and/or one IPv6 address, comma-separated.
    #[arg(long, global = true, value_name = "IP[,IP]")]
    pub(crate) node_ip: Option<String>,
    /// Pod network CIDR(s): one, or a dual-stack pair, comma-separated.
    #[arg(long, global = true, value_name = "CIDR[,CIDR]")]
    pub(crate) cluster_cidr: Option<String>,
    /// Service ClusterIP range(s), comma-separated.
    #[arg(long, global = true, value_name = "CIDR[,...]")]
    pub(crate) service_cidr: Option<String>,
    /// Addresses that accept NodePort traffic, comma-separated: CIDRs and the keywords
    /// `primary` (the node IPs), `localhost` (loopback, served with the
    /// KubeProxyNFTablesLocalhostNodePorts gate) and `all`, in any combination.
    #[arg(long, global = true, value_name = "primary|localhost|all|CIDR[,...]")]
    pub(crate) nodeport_addresses: Option<String>,
    /// Masquerade all traffic sent to ClusterIPs.
    #[arg(long, global = true)]
    pub(crate) masquerade_all: bool,
    /// Bit of the packet mark that requests masquerading (0..=31).
    #[arg(
        long,
        global = true,
        alias = "iptables-masquerade-bit",
        default_value_t = 14
    )]
    pub(crate) masquerade_bit: u32,
    /// How traffic from local pods is recognised.
    #[arg(long, global = true, value_enum, default_value_t = DetectLocalMode::ClusterCidr)]
    pub(crate) detect_local_mode: DetectLocalMode,
    /// Pod bridge interface (with --detect-local-mode BridgeInterface).
    #[arg(long, global = true, value_name = "IFNAME")]
    pub(crate) pod_bridge_interface: Option<String>,
    /// Pod interface name prefix (with --detect-local-mode InterfaceNamePrefix).
    #[arg(long, global = true, value_name = "PREFIX")]
    pub(crate) pod_interface_name_prefix: Option<String>,
    /// nftables table name, used for both the `ip` and the `ip6` table.
    #[arg(long, global = true, default_value = "kubenft")]
    pub(crate) table_name: String,
    /// A YAML file or a directory of YAML files (`kubectl get -o yaml` output) to read
    /// Services, EndpointSlices and Nodes from.
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) manifests: Option<PathBuf>,
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
}
