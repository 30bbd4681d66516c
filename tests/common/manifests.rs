//! The shipped manifests in `deploy/`, read as the Kubernetes objects they hold.

use std::path::Path;

/// The YAML documents of `deploy/FILE`, empty ones left out.
pub fn documents(file: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy")
            .join(file),
    )
    .unwrap_or_else(|e| panic!("reading deploy/{file}: {e}"));
    serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .unwrap_or_else(|e| panic!("deploy/{file}: {e}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// The one object of `kind` in `deploy/FILE`.
pub fn one<T: serde::de::DeserializeOwned>(file: &str, kind: &str) -> T {
    let docs: Vec<_> = documents(file)
        .into_iter()
        .filter(|d| d["kind"] == kind)
        .collect();
    assert_eq!(docs.len(), 1, "deploy/{file} holds one {kind}");
    serde_json::from_value(docs[0].clone()).unwrap_or_else(|e| panic!("deploy/{file} {kind}: {e}"))
}
