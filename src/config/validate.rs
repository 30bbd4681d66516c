//! Validation of the flags (after a --config file filled in those not given) into the typed
//! settings: each error names the flag, the value and the reason.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

use super::duration::parse_go_duration;
use super::flags::{DetectLocalMode, ProxyFlags, RunFlags};
use super::{ConfigError, RunSettings};
use crate::proxier::{DetectLocal, NodePortAddresses, ProxyConfig};

impl ProxyFlags {
    /// Turns the flags into the planner's configuration, plus warnings for settings that are
    /// valid but probably unintended. `local_addresses` is left empty: the caller reads them.
    pub(crate) fn validate_with(
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
            None => NodePortAddresses::primary(),
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

impl RunFlags {
    /// The daemon's settings; `manifests` and `feature_gates` come from elsewhere (the global
    /// flags, the file and flag merged).
    pub(crate) fn validate(
        &self,
        manifests: Option<PathBuf>,
        feature_gates: BTreeMap<String, bool>,
    ) -> Result<RunSettings, ConfigError> {
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
        let bind = |flag: &'static str,
                    value: &Option<String>|
         -> Result<Option<SocketAddr>, ConfigError> {
            let Some(value) = value.as_deref().filter(|v| !v.is_empty()) else {
                return Ok(None);
            };
            crate::serve::parse_bind_address(value)
                .map(Some)
                .map_err(|source| ConfigError::BindAddress { flag, source })
        };
        Ok(RunSettings {
            manifests,
            feature_gates,
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
            replace_kube_proxy: self.replace_kube_proxy,
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

/// `--nodeport-addresses` as kube-proxy 1.37 reads it: CIDRs and the keywords `primary`,
/// `localhost` and `all`, in any combination, each keyword at most once.
fn parse_nodeport_addresses(value: &str) -> Result<NodePortAddresses, ConfigError> {
    const FLAG: &str = "nodeport-addresses";
    let mut addresses = NodePortAddresses::cidrs(Vec::new());
    let mut keywords = Vec::new();
    for entry in entries(FLAG, value)? {
        let expanded: &[&str] = match entry {
            "primary" => &[],
            "localhost" => &["127.0.0.0/8", "::1/128"],
            "all" => &["0.0.0.0/0", "::/0"],
            cidr => {
                let net = cidr
                    .parse::<IpNet>()
                    .map_err(|_| ConfigError::NodePortAddress {
                        entry: cidr.to_string(),
                    })?;
                addresses.cidrs.push(net.trunc());
                continue;
            }
        };
        if keywords.contains(&entry) {
            return Err(ConfigError::NodePortKeywordTwice {
                keyword: entry.to_string(),
            });
        }
        keywords.push(entry);
        addresses.primary |= entry == "primary";
        addresses.cidrs.extend(
            expanded
                .iter()
                .map(|c| c.parse::<IpNet>().expect("a valid CIDR")),
        );
    }
    Ok(addresses)
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
pub(crate) fn system_hostname() -> std::io::Result<String> {
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
