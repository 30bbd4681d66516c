//! Reads Services, EndpointSlices, Nodes and ServiceCIDRs from YAML files as `kubectl get -o yaml` prints them.
//!
//! Guarantees: files are read in sorted name order, documents in file order and `List` items in
//! list order, so the same directory always yields the same `Manifests`. A malformed document is
//! skipped with a `ManifestWarning` naming the file, the document and (when it can be read) the
//! object; it never hides the documents around it. Only I/O failures are errors.

use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use serde_json::Value;

/// The objects the proxy cares about, in the order they were read.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    pub services: Vec<Service>,
    pub endpoint_slices: Vec<EndpointSlice>,
    pub nodes: Vec<Node>,
    pub(crate) service_cidrs: Vec<ServiceCIDR>,
}

/// A document (or `List` item) that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestWarning {
    pub(crate) file: PathBuf,
    /// 1-based position of the YAML document in its file, as an editor would count.
    pub(crate) document: usize,
    /// 0-based index in the document's `items` when the document is a `List`.
    pub(crate) item: Option<usize>,
    /// `kind` of the object, when the document got far enough to have one.
    pub(crate) kind: Option<String>,
    /// `namespace/name` (or `name` for cluster-scoped objects), when known.
    pub(crate) name: Option<String>,
    pub(crate) reason: String,
}

impl fmt::Display for ManifestWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} document {}", self.file.display(), self.document)?;
        if let Some(item) = self.item {
            write!(f, " item {item}")?;
        }
        match (&self.kind, &self.name) {
            (Some(kind), Some(name)) => write!(f, " ({kind} {name})")?,
            (Some(kind), None) => write!(f, " ({kind})")?,
            (None, Some(name)) => write!(f, " ({name})")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.reason)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading manifests path {path}: {source}", path = path.display())]
    Stat {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("listing manifests directory {path}: {source}", path = path.display())]
    ReadDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading manifest file {path}: {source}", path = path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// File name endings `kubectl apply -f DIR` reads; other files in a directory are ignored.
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Loads `path`: a single file (whatever its name), or every `*.yaml`, `*.yml` and `*.json`
/// file directly inside a directory (not recursive, like `kubectl apply -f DIR`).
pub(crate) fn load(path: &Path) -> Result<(Manifests, Vec<ManifestWarning>), ManifestError> {
    let meta = std::fs::metadata(path).map_err(|source| ManifestError::Stat {
        path: path.to_path_buf(),
        source,
    })?;
    let files = if meta.is_dir() {
        list_dir(path)?
    } else {
        vec![path.to_path_buf()]
    };
    let mut manifests = Manifests::default();
    let mut warnings = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).map_err(|source| ManifestError::ReadFile {
            path: file.clone(),
            source,
        })?;
        match String::from_utf8(bytes) {
            Ok(text) => parse_file(&file, &text, &mut manifests, &mut warnings),
            Err(e) => warnings.push(ManifestWarning {
                file,
                document: 1,
                item: None,
                kind: None,
                name: None,
                reason: format!("not UTF-8 text: {e}"),
            }),
        }
    }
    Ok((manifests, warnings))
}

fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let read_dir_error = |source| ManifestError::ReadDir {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
        let path = entry.map_err(read_dir_error)?.path();
        let wanted = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e));
        // metadata() follows symlinks, so a link to a manifest counts like the file itself.
        if wanted && path.metadata().is_ok_and(|m| m.is_file()) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses every document of one file's text into `out`, recording skipped ones in `warnings`.
pub fn parse_file(
    file: &Path,
    text: &str,
    out: &mut Manifests,
    warnings: &mut Vec<ManifestWarning>,
) {
    for (i, doc) in split_documents(text).into_iter().enumerate() {
        let mut at = Location {
            file,
            document: i + 1,
            item: None,
        };
        let value: Value = match serde_saphyr::from_str(doc) {
            Ok(v) => v,
            Err(e) => {
                warnings.push(at.warning(None, None, format!("invalid YAML: {e}")));
                continue;
            }
        };
        if value.is_null() {
            continue; // an empty document: only comments, or `---` twice
        }
        let kind = str_field(&value, "kind");
        if kind.is_some_and(|k| k.ends_with("List")) && value.get("items").is_some() {
            let no_items = Vec::new();
            // `items:` with nothing after it is YAML null: an empty list, not an error.
            let items = match value.get("items") {
                Some(Value::Null) => Some(&no_items),
                other => other.and_then(Value::as_array),
            };
            let Some(items) = items else {
                warnings.push(at.warning(
                    kind.map(str::to_string),
                    None,
                    "`items` is not a list".into(),
                ));
                continue;
            };
            // A typed list straight from the API (`ServiceList`) leaves kind and apiVersion off
            // its items; `kind: List` from kubectl keeps them.
            let item_kind = kind
                .and_then(|k| k.strip_suffix("List"))
                .filter(|k| !k.is_empty());
            let item_api_version = str_field(&value, "apiVersion");
            for (j, item) in items.iter().enumerate() {
                at.item = Some(j);
                let mut item = item.clone();
                if let (Some(k), Value::Object(m)) = (item_kind, &mut item) {
                    m.entry("kind").or_insert_with(|| k.into());
                    if let Some(v) = item_api_version {
                        m.entry("apiVersion").or_insert_with(|| v.into());
                    }
                }
                parse_object(&at, item, out, warnings);
            }
        } else {
            parse_object(&at, value, out, warnings);
        }
    }
}

/// Where a document or item came from, for warnings.
struct Location<'a> {
    file: &'a Path,
    document: usize,
    item: Option<usize>,
}

impl Location<'_> {
    fn warning(
        &self,
        kind: Option<String>,
        name: Option<String>,
        reason: String,
    ) -> ManifestWarning {
        ManifestWarning {
            file: self.file.to_path_buf(),
            document: self.document,
            item: self.item,
            kind,
            name,
            reason,
        }
    }
}

fn parse_object(
    at: &Location<'_>,
    value: Value,
    out: &mut Manifests,
    warnings: &mut Vec<ManifestWarning>,
) {
    if !value.is_object() {
        warnings.push(at.warning(None, None, "not a Kubernetes object (not a mapping)".into()));
        return;
    }
    let name = object_name(&value);
    let (Some(api_version), Some(kind)) =
        (str_field(&value, "apiVersion"), str_field(&value, "kind"))
    else {
        let kind = str_field(&value, "kind").map(str::to_string);
        warnings.push(at.warning(
            kind,
            name,
            "not a Kubernetes object (apiVersion or kind missing)".into(),
        ));
        return;
    };
    let kind = kind.to_string();
    let result = match (api_version, kind.as_str()) {
        ("v1", "Service") => serde_json::from_value(value).map(|s| out.services.push(s)),
        ("discovery.k8s.io/v1", "EndpointSlice") => {
            serde_json::from_value(value).map(|s| out.endpoint_slices.push(s))
        }
        ("v1", "Node") => serde_json::from_value(value).map(|n| out.nodes.push(n)),
        ("networking.k8s.io/v1", "ServiceCIDR") => {
            serde_json::from_value(value).map(|c| out.service_cidrs.push(c))
        }
        _ => {
            tracing::debug!(
                file = %at.file.display(),
                document = at.document,
                api_version,
                kind,
                name = name.as_deref().unwrap_or(""),
                "ignoring a kind the proxy does not use"
            );
            return;
        }
    };
    if let Err(e) = result {
        warnings.push(at.warning(Some(kind), name, e.to_string()));
    }
}

fn str_field<'v>(value: &'v Value, key: &str) -> Option<&'v str> {
    value.get(key).and_then(Value::as_str)
}

/// `namespace/name`, or `name` alone for cluster-scoped objects.
fn object_name(value: &Value) -> Option<String> {
    let meta = value.get("metadata")?;
    let name = str_field(meta, "name")?;
    Some(match str_field(meta, "namespace") {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    })
}

/// Splits a multi-document YAML stream the way kubectl does: a line starting with `---` and
/// followed by nothing but blanks or a comment separates documents. Splitting by lines (rather
/// than letting the YAML parser walk the stream) keeps a syntax error in one document from
/// swallowing the documents after it.
fn split_documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("---") {
            let rest = rest.trim();
            if rest.is_empty() || rest.starts_with('#') {
                docs.push(&text[start..pos]);
                start = pos + line.len();
            }
        }
        pos += line.len();
    }
    docs.push(&text[start..]);
    // A leading `---` opens the first document rather than closing an empty one.
    if text.starts_with("---") && docs.first().is_some_and(|d| d.trim().is_empty()) {
        docs.remove(0);
    }
    docs
}

#[cfg(test)]
mod tests;
