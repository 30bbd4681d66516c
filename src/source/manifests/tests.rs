use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const SERVICE: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  clusterIP: 10.96.0.10
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 8080
";

const SLICE: &str = "\
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc12
  namespace: shop
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
endpoints:
- addresses: [10.244.1.5]
  conditions: {ready: true}
  nodeName: node-a
ports:
- name: http
  port: 8080
  protocol: TCP
";

const NODE: &str = "\
apiVersion: v1
kind: Node
metadata:
  name: node-a
spec:
  podCIDRs: [10.244.1.0/24]
status:
  addresses:
  - type: InternalIP
    address: 192.168.1.10
";

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn names<T: Metadata<Ty = ObjectMeta>>(objs: &[T]) -> Vec<String> {
    objs.iter()
        .map(|o| o.metadata().name.clone().unwrap_or_default())
        .collect()
}

#[test]
fn a_multi_document_file_yields_every_known_kind() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "all.yaml",
        &format!("---\n{SERVICE}---\n{SLICE}--- # node\n{NODE}"),
    );
    let (m, warnings) = load(dir.path()).unwrap();
    assert_eq!(warnings, vec![]);
    assert_eq!(names(&m.services), ["web"]);
    assert_eq!(names(&m.endpoint_slices), ["web-abc12"]);
    assert_eq!(names(&m.nodes), ["node-a"]);
    let svc = &m.services[0];
    assert_eq!(svc.metadata.namespace.as_deref(), Some("shop"));
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.10"));
    assert_eq!(spec.ports.as_ref().unwrap()[0].port, 80);
    assert_eq!(m.endpoint_slices[0].endpoints[0].addresses, ["10.244.1.5"]);
}

#[test]
fn a_kubectl_list_is_unpacked_item_by_item() {
    let indent = |s: &str| s.replace('\n', "\n  ");
    let text = format!(
        "apiVersion: v1\nkind: List\nmetadata: {{resourceVersion: \"\"}}\nitems:\n- {}\n- {}\n",
        indent(SLICE),
        indent(SERVICE)
    );
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("list.yaml"), &text, &mut m, &mut warnings);
    assert_eq!(warnings, vec![]);
    assert_eq!(names(&m.services), ["web"]);
    assert_eq!(names(&m.endpoint_slices), ["web-abc12"]);
}

#[test]
fn items_of_a_typed_api_list_get_their_kind_from_the_list() {
    let text = "\
apiVersion: v1
kind: NodeList
items:
- metadata: {name: node-b}
- metadata: {name: node-c}
";
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("nodes.yaml"), text, &mut m, &mut warnings);
    assert_eq!(warnings, vec![]);
    assert_eq!(names(&m.nodes), ["node-b", "node-c"]);
}

#[test]
fn service_cidrs_are_read_as_objects_and_in_typed_lists() {
    let text = "\
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: kubernetes}
spec:
  cidrs: [10.96.0.0/16, fd00:10:96::/112]
---
apiVersion: networking.k8s.io/v1
kind: ServiceCIDRList
items:
- metadata: {name: extra}
  spec: {cidrs: [10.97.0.0/16]}
---
apiVersion: networking.k8s.io/v1beta1
kind: ServiceCIDR
metadata: {name: beta-is-not-read}
spec: {cidrs: [10.98.0.0/16]}
";
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("cidrs.yaml"), text, &mut m, &mut warnings);
    assert_eq!(warnings, vec![]);
    assert_eq!(names(&m.service_cidrs), ["kubernetes", "extra"]);
    let cidrs = m.service_cidrs[0].spec.as_ref().unwrap().cidrs.clone();
    assert_eq!(cidrs.unwrap(), ["10.96.0.0/16", "fd00:10:96::/112"]);
}

#[test]
fn files_are_read_in_sorted_name_order_and_other_files_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let svc = |name: &str| SERVICE.replace("name: web", &format!("name: {name}"));
    write(dir.path(), "b.yml", &svc("second"));
    write(dir.path(), "a.yaml", &svc("first"));
    write(
        dir.path(),
        "c.json",
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"third"}}"#,
    );
    write(dir.path(), "README.md", &svc("ignored"));
    std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();
    let (m, warnings) = load(dir.path()).unwrap();
    assert_eq!(warnings, vec![]);
    assert_eq!(names(&m.services), ["first", "second", "third"]);
}

#[test]
fn a_single_file_path_is_read_whatever_its_extension() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.txt");
    std::fs::write(&file, NODE).unwrap();
    let (m, _) = load(&file).unwrap();
    assert_eq!(names(&m.nodes), ["node-a"]);
}

#[test]
fn a_malformed_document_is_skipped_with_a_warning_and_the_rest_is_kept() {
    let broken_yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: [unclosed\n";
    let wrong_type = "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: shop}\nspec:\n  ports: not-a-list\n";
    let text = format!("{SERVICE}---\n{broken_yaml}---\n{wrong_type}---\n{NODE}");
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("mixed.yaml"), &text, &mut m, &mut warnings);
    assert_eq!(names(&m.services), ["web"]);
    assert_eq!(names(&m.nodes), ["node-a"]);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert_eq!(warnings[0].document, 2);
    assert_eq!(warnings[0].kind, None);
    assert!(
        warnings[0].reason.starts_with("invalid YAML"),
        "{}",
        warnings[0]
    );
    assert_eq!(warnings[1].document, 3);
    assert_eq!(warnings[1].kind.as_deref(), Some("Service"));
    assert_eq!(warnings[1].name.as_deref(), Some("shop/bad"));
    let shown = warnings[1].to_string();
    assert!(
        shown.starts_with("mixed.yaml document 3 (Service shop/bad): "),
        "{shown}"
    );
}

#[test]
fn a_bad_list_item_names_its_index() {
    let text = "\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: good}}
- {apiVersion: v1, kind: Node, metadata: {name: bad}, spec: {podCIDRs: 7}}
- just a string
";
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("l.yaml"), text, &mut m, &mut warnings);
    assert_eq!(names(&m.nodes), ["good"]);
    let at: Vec<_> = warnings.iter().map(|w| (w.item, w.name.clone())).collect();
    assert_eq!(at, [(Some(1), Some("bad".into())), (Some(2), None)]);
}

#[test]
fn an_empty_list_is_fine_and_a_list_with_non_list_items_is_reported() {
    let text = "apiVersion: v1\nkind: List\nitems:\n---\napiVersion: v1\nkind: List\nitems: 3\n";
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("e.yaml"), text, &mut m, &mut warnings);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].document, 2);
    assert_eq!(warnings[0].reason, "`items` is not a list");
}

#[test]
fn other_kinds_and_versions_are_ignored_without_warnings() {
    let text = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: k}
---
# only a comment
";
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("o.yaml"), text, &mut m, &mut warnings);
    assert_eq!(warnings, vec![]);
    assert!(m.services.is_empty());
}

#[test]
fn a_document_without_kind_is_reported() {
    let mut m = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(
        Path::new("x.yaml"),
        "metadata: {name: lost}\n",
        &mut m,
        &mut warnings,
    );
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].name.as_deref(), Some("lost"));
    assert!(warnings[0].reason.contains("kind missing"));
}

#[test]
fn a_separator_needs_to_stand_alone_on_its_line() {
    assert_eq!(split_documents("a: 1\n---\nb: 2\n"), ["a: 1\n", "b: 2\n"]);
    assert_eq!(split_documents("---\na: 1\n"), ["a: 1\n"]);
    assert_eq!(split_documents("a: ---x\n---x\n"), ["a: ---x\n---x\n"]);
    assert_eq!(split_documents("a: 1\n---   # c\nb: 2"), ["a: 1\n", "b: 2"]);
}

#[test]
fn a_missing_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = load(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(err, ManifestError::Stat { .. }), "{err}");
}

#[test]
fn an_unreadable_directory_is_an_error() {
    // Root ignores directory permissions, so "cannot be listed" is produced with a file
    // (ENOTDIR), which read_dir fails on just the same.
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file.yaml");
    std::fs::write(&not_a_dir, "").unwrap();
    let err = list_dir(&not_a_dir).unwrap_err();
    assert!(matches!(err, ManifestError::ReadDir { .. }), "{err}");
    assert!(err.to_string().contains("file.yaml"), "{err}");
}
