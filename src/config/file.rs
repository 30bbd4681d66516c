//! `--config FILE`: a kube-proxy `KubeProxyConfiguration` (kubeproxy.config.k8s.io/v1alpha1),
//! as kubeadm writes it, read into the values of the flags it stands for.
//!
//! Guarantees: every key of the file is a field some kube-proxy from 1.33 to 1.37 defines
//! (`fields`) — any other is an error naming its full path, its line and the closest known
//! field; the fields that apply to nftables mode are returned as flag values (zero values,
//! which is how kubeadm writes "unset", are left unset); fields of other modes and settings
//! kubenft does not apply are accepted, and those set to something other than their zero
//! value are named together in one warning.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::duration::parse_go_duration;
use super::fields::{self, Field, Use};

pub(crate) const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub(crate) const KIND: &str = "KubeProxyConfiguration";

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
        source: Box<serde_saphyr::Error>,
    },
    #[error("{origin}:{line}: {message}")]
    Invalid {
        origin: String,
        line: u64,
        message: String,
    },
}

/// The file's settings, as the flags they stand for would carry them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileConfig {
    pub(crate) hostname_override: Option<String>,
    /// `bindAddress` (kube-proxy's "primary node IP", despite the name), as written.
    pub(crate) bind_address: Option<String>,
    pub(crate) cluster_cidr: Option<String>,
    pub(crate) nodeport_addresses: Option<String>,
    pub(crate) masquerade_all: Option<bool>,
    pub(crate) masquerade_bit: Option<u32>,
    pub(crate) detect_local_mode: Option<String>,
    pub(crate) pod_bridge_interface: Option<String>,
    pub(crate) pod_interface_name_prefix: Option<String>,
    pub(crate) healthz_bind_address: Option<String>,
    pub(crate) metrics_bind_address: Option<String>,
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) sync_period: Option<String>,
    pub(crate) min_sync_period: Option<String>,
    pub mode: Option<String>,
    pub(crate) feature_gates: BTreeMap<String, bool>,
    /// `logging.format`.
    pub(crate) log_format: Option<String>,
    /// `logging.verbosity` (klog's level).
    pub(crate) verbosity: Option<u32>,
    pub(crate) conntrack: FileConntrack,
    /// The one warning about fields accepted but not applied, when some are set.
    pub warning: Option<String>,
}

/// The `conntrack` section. Unlike most fields, a zero here is a setting ("leave the kernel's
/// value"), so only absent or null fields are unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FileConntrack {
    pub(crate) max_per_core: Option<u32>,
    pub(crate) min: Option<u32>,
    pub(crate) tcp_established_timeout: Option<String>,
    pub(crate) tcp_close_wait_timeout: Option<String>,
    pub(crate) tcp_be_liberal: Option<bool>,
    pub(crate) udp_timeout: Option<String>,
    pub(crate) udp_stream_timeout: Option<String>,
}

/// A YAML node and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
struct Node {
    line: u64,
    value: Value,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<Value>::deserialize(d)?;
        Ok(Node {
            line: spanned.referenced.line(),
            value: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Node>()? {
            if entries.iter().any(|(seen, _): &(String, Node)| *seen == k) {
                return Err(de::Error::custom(format_args!("{k} appears twice")));
            }
            entries.push((k, v));
        }
        Ok(Value::Map(entries))
    }
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The node at a dotted path, if every step exists.
    fn at(&self, path: &str) -> Option<&Node> {
        path.split('.').try_fold(self, |n, k| n.get(k))
    }

    fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// Go's zero values, which is how generated configs say "not set".
    fn is_zero(&self) -> bool {
        match &self.value {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Int(n) => *n == 0,
            Value::Float(f) => *f == 0.0,
            Value::Str(s) => s.is_empty() || is_zero_duration(s),
            Value::Seq(s) => s.is_empty(),
            Value::Map(m) => m.iter().all(|(_, v)| v.is_zero()),
        }
    }

    fn describe(&self) -> String {
        match &self.value {
            Value::Null => "nothing".into(),
            Value::Bool(b) => format!("{b}"),
            Value::Int(n) => format!("the number {n}"),
            Value::Float(n) => format!("the number {n}"),
            Value::Str(s) => format!("{s:?}"),
            Value::Seq(_) => "a list".into(),
            Value::Map(_) => "a mapping".into(),
        }
    }
}

/// A problem at a line.
struct Problem {
    line: u64,
    message: String,
}

fn problem(node: &Node, message: String) -> Problem {
    Problem {
        line: node.line,
        message,
    }
}

/// Reads and checks `path`.
pub(crate) fn load(path: &Path) -> Result<FileConfig, FileConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// Checks `text`; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<FileConfig, FileConfigError> {
    let mut options = serde_saphyr::Options::default();
    // One line naming the place, like our other messages, rather than a drawn snippet.
    options.with_snippet = false;
    let doc: Node = match serde_saphyr::from_str_with_options(text, options) {
        Ok(doc) => doc,
        Err(source) => {
            return Err(FileConfigError::Parse {
                origin: origin.to_string(),
                source: Box::new(source),
            });
        }
    };
    read(&doc).map_err(|p| FileConfigError::Invalid {
        origin: origin.to_string(),
        line: p.line,
        message: p.message,
    })
}

fn read(doc: &Node) -> Result<FileConfig, Problem> {
    let Value::Map(_) = doc.value else {
        return Err(problem(
            doc,
            format!("expected a {KIND} mapping, found {}", doc.describe()),
        ));
    };
    let text_at = |path: &str| string_at(doc, path);
    for (field, want) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        let found = text_at(field)?;
        if found.as_deref() != Some(want) {
            let node = doc.get(field).unwrap_or(doc);
            return Err(problem(
                node,
                format!("{field} is {found:?}, expected {want:?}"),
            ));
        }
    }
    let mut ignored = Vec::new();
    check_keys(doc, fields::TOP, "", &mut ignored)?;

    let mut config = FileConfig {
        hostname_override: text_at("hostnameOverride")?,
        bind_address: text_at("bindAddress")?,
        cluster_cidr: text_at("clusterCIDR")?,
        healthz_bind_address: text_at("healthzBindAddress")?,
        metrics_bind_address: text_at("metricsBindAddress")?,
        kubeconfig: text_at("clientConnection.kubeconfig")?.map(PathBuf::from),
        detect_local_mode: text_at("detectLocalMode")?,
        pod_bridge_interface: text_at("detectLocal.bridgeInterface")?,
        pod_interface_name_prefix: text_at("detectLocal.interfaceNamePrefix")?,
        sync_period: text_at("nftables.syncPeriod")?.filter(|d| !is_zero_duration(d)),
        min_sync_period: text_at("nftables.minSyncPeriod")?.filter(|d| !is_zero_duration(d)),
        mode: text_at("mode")?,
        log_format: text_at("logging.format")?,
        masquerade_all: bool_at(doc, "nftables.masqueradeAll")?.filter(|b| *b),
        masquerade_bit: number_at(doc, "nftables.masqueradeBit", 31)?,
        verbosity: number_at(doc, "logging.verbosity", i32::MAX as u32)?.filter(|v| *v != 0),
        feature_gates: feature_gates(doc)?,
        conntrack: conntrack(doc)?,
        ..FileConfig::default()
    };
    config.nodeport_addresses = nodeport_addresses(doc)?;
    config.warning = ignored_warning(&ignored);
    Ok(config)
}

/// One sentence naming every field that is set and not applied, grouped by reason.
fn ignored_warning(ignored: &[(String, &'static str)]) -> Option<String> {
    if ignored.is_empty() {
        return None;
    }
    let mut by_reason: Vec<(&str, Vec<&str>)> = Vec::new();
    for (path, reason) in ignored {
        match by_reason.iter_mut().find(|(r, _)| r == reason) {
            Some((_, paths)) => paths.push(path),
            None => by_reason.push((reason, vec![path])),
        }
    }
    let groups: Vec<String> = by_reason
        .iter()
        .map(|(reason, paths)| format!("{} ({reason})", paths.join(", ")))
        .collect();
    Some(format!("accepted and not applied: {}", groups.join("; ")))
}

/// The `conntrack` section, as kube-proxy reads it: null or absent fields take the defaults,
/// zero ones mean "leave the kernel's value".
fn conntrack(doc: &Node) -> Result<FileConntrack, Problem> {
    let count = |field: &str| number_at(doc, &format!("conntrack.{field}"), i32::MAX as u32);
    let duration = |field: &str| -> Result<Option<String>, Problem> {
        let path = format!("conntrack.{field}");
        let text = string_at(doc, &path)?;
        if let (Some(d), Some(node)) = (&text, doc.at(&path)) {
            parse_go_duration(d).map_err(|reason| {
                problem(node, format!("{path}: {d:?} is not a duration: {reason}"))
            })?;
        }
        Ok(text)
    };
    Ok(FileConntrack {
        max_per_core: count("maxPerCore")?,
        min: count("min")?,
        tcp_established_timeout: duration("tcpEstablishedTimeout")?,
        tcp_close_wait_timeout: duration("tcpCloseWaitTimeout")?,
        tcp_be_liberal: bool_at(doc, "conntrack.tcpBeLiberal")?,
        udp_timeout: duration("udpTimeout")?,
        udp_stream_timeout: duration("udpStreamTimeout")?,
    })
}

/// `featureGates`: a mapping of gate names to true or false.
fn feature_gates(doc: &Node) -> Result<BTreeMap<String, bool>, Problem> {
    let Some(node) = doc.get("featureGates").filter(|n| !n.is_null()) else {
        return Ok(BTreeMap::new());
    };
    let Value::Map(entries) = &node.value else {
        return Err(problem(
            node,
            format!(
                "featureGates: expected a mapping of gate names to true or false, found {}",
                node.describe()
            ),
        ));
    };
    entries
        .iter()
        .map(|(name, v)| match v.value {
            Value::Bool(b) => Ok((name.clone(), b)),
            _ => Err(problem(
                v,
                format!(
                    "featureGates.{name}: expected true or false, found {}",
                    v.describe()
                ),
            )),
        })
        .collect()
}

/// Walks `node` against `schema`: unknown keys are errors; ignored keys set to a non-zero
/// value are collected with their reason.
fn check_keys(
    node: &Node,
    schema: &[Field],
    prefix: &str,
    ignored: &mut Vec<(String, &'static str)>,
) -> Result<(), Problem> {
    let Value::Map(map) = &node.value else {
        return Err(problem(
            node,
            format!(
                "{}: expected a mapping, found {}",
                prefix.trim_end_matches('.'),
                node.describe()
            ),
        ));
    };
    for (name, v) in map {
        let path = format!("{prefix}{name}");
        let Some(field) = schema.iter().find(|f| f.name == name) else {
            return Err(problem(
                v,
                format!(
                    "{path}: no kube-proxy version defines this field; the closest is {}",
                    fields::closest(&path)
                ),
            ));
        };
        match field.use_ {
            Use::Applied(_) => {}
            Use::Ignored(reason) => {
                if !v.is_zero() {
                    ignored.push((path, reason));
                }
            }
            Use::Section(inner) => {
                if !v.is_null() {
                    check_keys(v, inner, &format!("{path}."), ignored)?;
                }
            }
        }
    }
    Ok(())
}

/// The kube-proxy keywords and CIDRs, as `--nodeport-addresses` takes them.
fn nodeport_addresses(doc: &Node) -> Result<Option<String>, Problem> {
    const FIELD: &str = "nodePortAddresses";
    let Some(node) = doc.get(FIELD).filter(|n| !n.is_null()) else {
        return Ok(None);
    };
    let Value::Seq(items) = &node.value else {
        return Err(problem(
            node,
            format!("{FIELD}: expected a list, found {}", node.describe()),
        ));
    };
    let mut out = Vec::new();
    for item in items {
        let Value::Str(s) = &item.value else {
            return Err(problem(
                item,
                format!("{FIELD}: expected strings, found {}", item.describe()),
            ));
        };
        out.push(s.clone());
    }
    Ok((!out.is_empty()).then(|| out.join(",")))
}

/// A string at `path`; empty strings count as unset, as kubeadm writes unset fields.
fn string_at(doc: &Node, path: &str) -> Result<Option<String>, Problem> {
    let Some(node) = doc.at(path) else {
        return Ok(None);
    };
    match &node.value {
        Value::Null => Ok(None),
        Value::Str(s) if s.is_empty() => Ok(None),
        Value::Str(s) => Ok(Some(s.clone())),
        _ => Err(problem(
            node,
            format!("{path}: expected a string, found {}", node.describe()),
        )),
    }
}

fn bool_at(doc: &Node, path: &str) -> Result<Option<bool>, Problem> {
    let Some(node) = doc.at(path) else {
        return Ok(None);
    };
    match node.value {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(b)),
        _ => Err(problem(
            node,
            format!("{path}: expected true or false, found {}", node.describe()),
        )),
    }
}

/// A whole number 0..=`max` at `path`.
fn number_at(doc: &Node, path: &str, max: u32) -> Result<Option<u32>, Problem> {
    let Some(node) = doc.at(path) else {
        return Ok(None);
    };
    match node.value {
        Value::Null => Ok(None),
        Value::Int(n) if (0..=i128::from(max)).contains(&n) => Ok(Some(n as u32)),
        _ => Err(problem(
            node,
            format!(
                "{path}: expected a number 0..={max}, found {}",
                node.describe()
            ),
        )),
    }
}

fn is_zero_duration(s: &str) -> bool {
    parse_go_duration(s).is_ok_and(|d| d.is_zero())
}

#[cfg(test)]
mod tests;
