//! `--config FILE`: a kube-proxy `KubeProxyConfiguration` (kubeproxy.config.k8s.io/v1alpha1),
//! as kubeadm writes it, read into the values of the flags it stands for.
//!
//! Guarantees: every key of the file is known — a typo anywhere is an error naming its full path;
//! the fields that apply to nftables mode are returned as flag values (zero values, which is
//! how kubeadm writes "unset", are left unset); fields of other modes and settings kubenft does
//! not apply are accepted and produce one warning each when set to something other than their
//! zero value; `mode` must be empty or `nftables`.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub const KIND: &str = "KubeProxyConfiguration";

#[derive(Debug, thiserror::Error)]
pub enum FileConfigError {
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: not YAML: {source}")]
    Parse {
        origin: String,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// The file's settings, as the flags they stand for would carry them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileConfig {
    pub hostname_override: Option<String>,
    /// From `bindAddress` (kube-proxy's "primary node IP", despite the name), unless unspecified.
    pub node_ip: Option<String>,
    pub cluster_cidr: Option<String>,
    pub nodeport_addresses: Option<String>,
    pub masquerade_all: Option<bool>,
    pub masquerade_bit: Option<u32>,
    pub detect_local_mode: Option<String>,
    pub pod_bridge_interface: Option<String>,
    pub pod_interface_name_prefix: Option<String>,
    pub healthz_bind_address: Option<String>,
    pub metrics_bind_address: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub sync_period: Option<String>,
    pub min_sync_period: Option<String>,
    pub conntrack: FileConntrack,
    /// Settings accepted but not applied, one line each.
    pub warnings: Vec<String>,
}

/// The `conntrack` section. Unlike most fields, a zero here is a setting ("leave the kernel's
/// value"), so only absent or null fields are unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileConntrack {
    pub max_per_core: Option<u32>,
    pub min: Option<u32>,
    pub tcp_established_timeout: Option<String>,
    pub tcp_close_wait_timeout: Option<String>,
    pub tcp_be_liberal: Option<bool>,
    pub udp_timeout: Option<String>,
    pub udp_stream_timeout: Option<String>,
}

/// What kubenft does with a key.
#[derive(Clone, Copy)]
enum Key {
    /// Applied: handled by `honour`.
    Honoured,
    /// Accepted; a non-zero value gets a warning with this reason.
    Ignored(&'static str),
    /// A section whose keys are listed here.
    Section(&'static [(&'static str, Key)]),
    /// Accepted with anything inside (maps of free-form keys).
    Free,
}

const OTHER_MODE: &str = "belongs to another proxy mode";
const NOT_APPLIED: &str = "is not applied by kubenft";

const CLIENT_CONNECTION: &[(&str, Key)] = &[
    ("kubeconfig", Key::Honoured),
    ("acceptContentTypes", Key::Ignored(NOT_APPLIED)),
    ("contentType", Key::Ignored(NOT_APPLIED)),
    ("qps", Key::Ignored(NOT_APPLIED)),
    ("burst", Key::Ignored(NOT_APPLIED)),
];
const IPTABLES: &[(&str, Key)] = &[
    ("masqueradeBit", Key::Ignored(OTHER_MODE)),
    ("masqueradeAll", Key::Ignored(OTHER_MODE)),
    ("localhostNodePorts", Key::Ignored(OTHER_MODE)),
    ("snatNodeInternalIP", Key::Ignored(OTHER_MODE)),
    ("syncPeriod", Key::Ignored(OTHER_MODE)),
    ("minSyncPeriod", Key::Ignored(OTHER_MODE)),
];
const IPVS: &[(&str, Key)] = &[
    ("syncPeriod", Key::Ignored(OTHER_MODE)),
    ("minSyncPeriod", Key::Ignored(OTHER_MODE)),
    ("scheduler", Key::Ignored(OTHER_MODE)),
    ("excludeCIDRs", Key::Ignored(OTHER_MODE)),
    ("strictARP", Key::Ignored(OTHER_MODE)),
    ("tcpTimeout", Key::Ignored(OTHER_MODE)),
    ("tcpFinTimeout", Key::Ignored(OTHER_MODE)),
    ("udpTimeout", Key::Ignored(OTHER_MODE)),
];
const NFTABLES: &[(&str, Key)] = &[
    ("masqueradeBit", Key::Honoured),
    ("masqueradeAll", Key::Honoured),
    ("syncPeriod", Key::Honoured),
    ("minSyncPeriod", Key::Honoured),
];
const WINKERNEL: &[(&str, Key)] = &[
    ("networkName", Key::Ignored(OTHER_MODE)),
    ("sourceVip", Key::Ignored(OTHER_MODE)),
    ("enableDSR", Key::Ignored(OTHER_MODE)),
    ("rootHnsEndpointName", Key::Ignored(OTHER_MODE)),
    ("forwardHealthCheckVip", Key::Ignored(OTHER_MODE)),
];
const CONNTRACK: &[(&str, Key)] = &[
    ("maxPerCore", Key::Honoured),
    ("min", Key::Honoured),
    ("tcpEstablishedTimeout", Key::Honoured),
    ("tcpCloseWaitTimeout", Key::Honoured),
    ("tcpBeLiberal", Key::Honoured),
    ("udpTimeout", Key::Honoured),
    ("udpStreamTimeout", Key::Honoured),
];
const DETECT_LOCAL: &[(&str, Key)] = &[
    ("bridgeInterface", Key::Honoured),
    ("interfaceNamePrefix", Key::Honoured),
];
const LOGGING: &[(&str, Key)] = &[
    ("format", Key::Ignored("use --log-format")),
    ("flushFrequency", Key::Ignored(NOT_APPLIED)),
    ("verbosity", Key::Ignored("use -v")),
    ("vmodule", Key::Ignored(NOT_APPLIED)),
    ("options", Key::Free),
];
const TOP: &[(&str, Key)] = &[
    ("apiVersion", Key::Honoured),
    ("kind", Key::Honoured),
    ("featureGates", Key::Free),
    ("clientConnection", Key::Section(CLIENT_CONNECTION)),
    ("logging", Key::Section(LOGGING)),
    ("hostnameOverride", Key::Honoured),
    ("bindAddress", Key::Honoured),
    ("healthzBindAddress", Key::Honoured),
    ("metricsBindAddress", Key::Honoured),
    (
        "bindAddressHardFail",
        Key::Ignored("a port that cannot be bound always stops kubenft"),
    ),
    ("enableProfiling", Key::Ignored(NOT_APPLIED)),
    ("showHiddenMetricsForVersion", Key::Ignored(NOT_APPLIED)),
    ("mode", Key::Honoured),
    ("iptables", Key::Section(IPTABLES)),
    ("ipvs", Key::Section(IPVS)),
    ("nftables", Key::Section(NFTABLES)),
    ("winkernel", Key::Section(WINKERNEL)),
    ("detectLocalMode", Key::Honoured),
    ("detectLocal", Key::Section(DETECT_LOCAL)),
    ("clusterCIDR", Key::Honoured),
    ("nodePortAddresses", Key::Honoured),
    ("oomScoreAdj", Key::Ignored("set it in the pod spec")),
    ("conntrack", Key::Section(CONNTRACK)),
    (
        "configSyncPeriod",
        Key::Ignored("watches need no periodic re-list"),
    ),
    ("portRange", Key::Ignored(NOT_APPLIED)),
    ("windowsRunAsService", Key::Ignored(OTHER_MODE)),
];

/// Reads and checks `path`.
pub fn load(path: &Path) -> Result<FileConfig, FileConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// Checks `text`; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<FileConfig, FileConfigError> {
    let invalid = |message: String| FileConfigError::Invalid {
        origin: origin.to_string(),
        message,
    };
    let doc: Value = serde_yaml::from_str(text).map_err(|source| FileConfigError::Parse {
        origin: origin.to_string(),
        source,
    })?;
    let Value::Mapping(_) = doc else {
        return Err(invalid(format!(
            "expected a {KIND} mapping, found {}",
            describe(&doc)
        )));
    };
    let text_at = |path: &str| string_at(&doc, path).map_err(&invalid);
    match text_at("apiVersion")?.as_deref() {
        Some(API_VERSION) => {}
        other => {
            return Err(invalid(format!(
                "apiVersion is {other:?}, expected {API_VERSION:?}"
            )));
        }
    }
    match text_at("kind")?.as_deref() {
        Some(KIND) => {}
        other => return Err(invalid(format!("kind is {other:?}, expected {KIND:?}"))),
    }
    let mut config = FileConfig::default();
    check_keys(&doc, TOP, "", &mut config.warnings).map_err(&invalid)?;

    match text_at("mode")?.as_deref() {
        None | Some("nftables") => {}
        Some(other) => {
            return Err(invalid(format!(
                "mode {other:?}: kubenft implements the nftables mode only (leave mode empty or \
                 write \"nftables\")"
            )));
        }
    }
    config.hostname_override = text_at("hostnameOverride")?;
    config.node_ip = text_at("bindAddress")?.filter(|a| {
        a.parse::<std::net::IpAddr>()
            .map_or(true, |ip| !ip.is_unspecified())
    });
    config.cluster_cidr = text_at("clusterCIDR")?;
    config.healthz_bind_address = text_at("healthzBindAddress")?;
    config.metrics_bind_address = text_at("metricsBindAddress")?;
    config.kubeconfig = text_at("clientConnection.kubeconfig")?.map(PathBuf::from);
    config.detect_local_mode = text_at("detectLocalMode")?;
    config.pod_bridge_interface = text_at("detectLocal.bridgeInterface")?;
    config.pod_interface_name_prefix = text_at("detectLocal.interfaceNamePrefix")?;
    config.sync_period = text_at("nftables.syncPeriod")?.filter(|d| !is_zero_duration(d));
    config.min_sync_period = text_at("nftables.minSyncPeriod")?.filter(|d| !is_zero_duration(d));
    config.masquerade_all = match at(&doc, "nftables.masqueradeAll") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(true),
        Some(v) => {
            return Err(invalid(format!(
                "nftables.masqueradeAll: expected true or false, found {}",
                describe(v)
            )));
        }
    };
    config.masquerade_bit = match at(&doc, "nftables.masqueradeBit") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|b| b <= 31) => {
            n.as_u64().map(|b| b as u32)
        }
        Some(v) => {
            return Err(invalid(format!(
                "nftables.masqueradeBit: expected a bit number 0..=31, found {}",
                describe(v)
            )));
        }
    };
    config.nodeport_addresses = nodeport_addresses(&doc, &mut config.warnings).map_err(&invalid)?;
    config.conntrack = conntrack(&doc).map_err(&invalid)?;
    Ok(config)
}

/// The `conntrack` section, as kube-proxy reads it: null or absent fields take the defaults,
/// zero ones mean "leave the kernel's value".
fn conntrack(doc: &Value) -> Result<FileConntrack, String> {
    let count = |field: &str| -> Result<Option<u32>, String> {
        let path = format!("conntrack.{field}");
        match at(doc, &path) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v <= i32::MAX as u64) => {
                Ok(n.as_u64().map(|v| v as u32))
            }
            Some(v) => Err(format!(
                "{path}: expected a number 0..=2147483647, found {}",
                describe(v)
            )),
        }
    };
    let duration = |field: &str| -> Result<Option<String>, String> {
        let path = format!("conntrack.{field}");
        let text = string_at(doc, &path)?;
        if let Some(d) = &text {
            crate::config::parse_go_duration(d)
                .map_err(|reason| format!("{path}: {d:?} is not a duration: {reason}"))?;
        }
        Ok(text)
    };
    let tcp_be_liberal = match at(doc, "conntrack.tcpBeLiberal") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            return Err(format!(
                "conntrack.tcpBeLiberal: expected true or false, found {}",
                describe(v)
            ));
        }
    };
    Ok(FileConntrack {
        max_per_core: count("maxPerCore")?,
        min: count("min")?,
        tcp_established_timeout: duration("tcpEstablishedTimeout")?,
        tcp_close_wait_timeout: duration("tcpCloseWaitTimeout")?,
        tcp_be_liberal,
        udp_timeout: duration("udpTimeout")?,
        udp_stream_timeout: duration("udpStreamTimeout")?,
    })
}

/// Walks `value` against `schema`: unknown keys are errors; ignored keys set to a non-zero
/// value are warnings.
fn check_keys(
    value: &Value,
    schema: &[(&str, Key)],
    prefix: &str,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    let Value::Mapping(map) = value else {
        return Err(format!(
            "{}: expected a mapping, found {}",
            prefix.trim_end_matches('.'),
            describe(value)
        ));
    };
    for (k, v) in map {
        let Some(name) = k.as_str() else {
            return Err(format!("{prefix}{k:?}: keys must be strings"));
        };
        let path = format!("{prefix}{name}");
        let Some((_, key)) = schema.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = schema.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "{path}: unknown field (known here: {})",
                known.join(", ")
            ));
        };
        match key {
            Key::Honoured | Key::Free => {}
            Key::Ignored(reason) => {
                if !is_zero(v) {
                    warnings.push(format!("{path} {reason}; ignored"));
                }
            }
            Key::Section(inner) => {
                if !matches!(v, Value::Null) {
                    check_keys(v, inner, &format!("{path}."), warnings)?;
                }
            }
        }
    }
    Ok(())
}

/// The kube-proxy keywords `primary` and `all` and CIDRs, as `--nodeport-addresses` takes them.
fn nodeport_addresses(doc: &Value, warnings: &mut Vec<String>) -> Result<Option<String>, String> {
    let list = match at(doc, "nodePortAddresses") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Sequence(items)) => items,
        Some(v) => {
            return Err(format!(
                "nodePortAddresses: expected a list, found {}",
                describe(v)
            ));
        }
    };
    let mut out = Vec::new();
    for item in list {
        let Some(s) = item.as_str() else {
            return Err(format!(
                "nodePortAddresses: expected strings, found {}",
                describe(item)
            ));
        };
        match s {
            "all" => out.extend(["0.0.0.0/0".to_string(), "::/0".to_string()]),
            "localhost" => warnings.push(
                "nodePortAddresses: localhost NodePorts are not served (as in kube-proxy's \
                 nftables mode without its feature gate); ignored"
                    .to_string(),
            ),
            other => out.push(other.to_string()),
        }
    }
    Ok((!out.is_empty()).then(|| out.join(",")))
}

/// The value at a dotted path, if every step exists.
fn at<'v>(doc: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(doc, |v, k| v.get(k))
}

/// A string at `path`; empty strings count as unset, as kubeadm writes unset fields.
fn string_at(doc: &Value, path: &str) -> Result<Option<String>, String> {
    match at(doc, path) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(format!("{path}: expected a string, found {}", describe(v))),
    }
}

/// Go's zero values, which is how generated configs say "not set".
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || is_zero_duration(s),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.values().all(is_zero),
        Value::Tagged(t) => is_zero(&t.value),
    }
}

fn is_zero_duration(s: &str) -> bool {
    crate::config::parse_go_duration(s).is_ok_and(|d| d.is_zero())
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `kubeadm config print init-defaults --component-configs KubeProxyConfiguration`
    /// prints for the proxy (every field present, unset ones as zero values), with the
    /// cluster's pod network filled in.
    const KUBEADM: &str = r#"
apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
"#;

    fn error(text: &str) -> String {
        parse(text, "config.conf").unwrap_err().to_string()
    }

    #[test]
    fn kubeadms_defaults_parse_with_only_the_kubeconfig_and_pod_network_set_and_no_warning() {
        let c = parse(KUBEADM, "config.conf").unwrap();
        assert_eq!(
            c,
            FileConfig {
                cluster_cidr: Some("10.244.0.0/16".into()),
                kubeconfig: Some("/var/lib/kube-proxy/kubeconfig.conf".into()),
                // Null fields take kube-proxy's defaults; the zero ones leave the kernel alone.
                conntrack: FileConntrack {
                    tcp_be_liberal: Some(false),
                    udp_timeout: Some("0s".into()),
                    udp_stream_timeout: Some("0s".into()),
                    ..FileConntrack::default()
                },
                ..FileConfig::default()
            }
        );
    }

    #[test]
    fn the_conntrack_section_is_read_with_zero_as_a_setting() {
        let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
        let c = parse(
            &format!(
                "{head}conntrack: {{maxPerCore: 0, min: 65536, tcpEstablishedTimeout: 2h, \
                 tcpCloseWaitTimeout: 0s, tcpBeLiberal: true, udpTimeout: 10s, \
                 udpStreamTimeout: 2m}}\n"
            ),
            "x",
        )
        .unwrap();
        assert_eq!(
            c.conntrack,
            FileConntrack {
                max_per_core: Some(0),
                min: Some(65536),
                tcp_established_timeout: Some("2h".into()),
                tcp_close_wait_timeout: Some("0s".into()),
                tcp_be_liberal: Some(true),
                udp_timeout: Some("10s".into()),
                udp_stream_timeout: Some("2m".into()),
            }
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert!(
            error(&format!("{head}conntrack: {{maxPerCore: -1}}\n")).contains(
                "conntrack.maxPerCore: expected a number 0..=2147483647, found the number -1"
            )
        );
        assert!(
            error(&format!("{head}conntrack: {{udpTimeout: soon}}\n"))
                .contains("conntrack.udpTimeout: \"soon\" is not a duration")
        );
        assert!(
            error(&format!("{head}conntrack: {{maxPercore: 1}}\n"))
                .contains("conntrack.maxPercore: unknown field")
        );
    }

    #[test]
    fn every_honoured_field_is_mapped_to_its_flag_and_durations_are_kept_verbatim() {
        let c = parse(
            r#"
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: node-a
bindAddress: 10.0.0.1
clusterCIDR: 10.244.0.0/16,fd00:244::/48
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection: {kubeconfig: /etc/kubenft/kubeconfig}
detectLocalMode: BridgeInterface
detectLocal: {bridgeInterface: cni0, interfaceNamePrefix: veth}
nodePortAddresses: [primary]
nftables: {masqueradeAll: true, masqueradeBit: 13, syncPeriod: 1m30s, minSyncPeriod: 250ms}
"#,
            "x",
        )
        .unwrap();
        assert_eq!(c.hostname_override.as_deref(), Some("node-a"));
        assert_eq!(c.node_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            c.cluster_cidr.as_deref(),
            Some("10.244.0.0/16,fd00:244::/48")
        );
        assert_eq!(c.healthz_bind_address.as_deref(), Some("0.0.0.0:10256"));
        assert_eq!(c.metrics_bind_address.as_deref(), Some("127.0.0.1:10249"));
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/etc/kubenft/kubeconfig")));
        assert_eq!(c.detect_local_mode.as_deref(), Some("BridgeInterface"));
        assert_eq!(c.pod_bridge_interface.as_deref(), Some("cni0"));
        assert_eq!(c.pod_interface_name_prefix.as_deref(), Some("veth"));
        assert_eq!(c.nodeport_addresses.as_deref(), Some("primary"));
        assert_eq!(c.masquerade_all, Some(true));
        assert_eq!(c.masquerade_bit, Some(13));
        assert_eq!(c.sync_period.as_deref(), Some("1m30s"));
        assert_eq!(c.min_sync_period.as_deref(), Some("250ms"));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn a_typo_is_rejected_naming_the_full_path_of_the_field() {
        let e = error(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnftables: {syncPerod: 1s}\n",
        );
        assert!(
            e.starts_with(
                "config.conf: nftables.syncPerod: unknown field (known here: masqueradeBit,"
            ),
            "{e}"
        );
        let e = error(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCidr: 10.0.0.0/8\n",
        );
        assert!(e.contains("clusterCidr: unknown field"), "{e}");
    }

    #[test]
    fn other_modes_api_versions_and_kinds_are_refused() {
        let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
        assert!(
            error(&format!("{head}mode: ipvs\n"))
                .contains("kubenft implements the nftables mode only")
        );
        assert_eq!(
            error("apiVersion: v1\nkind: KubeProxyConfiguration\n"),
            "config.conf: apiVersion is Some(\"v1\"), expected \"kubeproxy.config.k8s.io/v1alpha1\""
        );
        assert_eq!(
            error("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n"),
            "config.conf: kind is Some(\"KubeletConfiguration\"), expected \"KubeProxyConfiguration\""
        );
        assert_eq!(
            error(""),
            "config.conf: expected a KubeProxyConfiguration mapping, found nothing"
        );
        assert!(error("[1, 2").starts_with("config.conf: not YAML"));
        assert!(error(&format!("{head}nftables: {{masqueradeBit: 32}}\n")).contains("0..=31"));
    }

    #[test]
    fn settings_kubenft_does_not_apply_are_warned_about_once_each() {
        let c = parse(
            r#"
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
iptables: {masqueradeBit: 14, syncPeriod: 30s}
nodePortAddresses: [all, localhost]
"#,
            "x",
        )
        .unwrap();
        assert_eq!(
            c.warnings,
            [
                "iptables.masqueradeBit belongs to another proxy mode; ignored",
                "iptables.syncPeriod belongs to another proxy mode; ignored",
                "nodePortAddresses: localhost NodePorts are not served (as in kube-proxy's \
                 nftables mode without its feature gate); ignored",
            ]
        );
        assert_eq!(c.nodeport_addresses.as_deref(), Some("0.0.0.0/0,::/0"));
    }
}
