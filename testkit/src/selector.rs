//! Label and field selectors parsed and matched with the Kubernetes API server's semantics.
//!
//! Label selectors accept the full set-based grammar kube-proxy relies on (`k=v`, `k==v`,
//! `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`); a negative term (`!=`, `notin`, `!k`)
//! also matches objects that lack the label, exactly as the API server does. Field selectors
//! support `metadata.name` and `metadata.namespace` with `=`, `==` and `!=`; any other field is
//! rejected, as a real server rejects fields it does not index.

use serde_json::Value;
use std::collections::BTreeSet;

/// Why a selector string was refused; the API server answers these with 400 BadRequest.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("unable to parse requirement {term:?}: {why}")]
    ParseLabelTerm { term: String, why: &'static str },
    #[error("invalid label key {key:?}: {why}")]
    ParseLabelKey { key: String, why: &'static str },
    #[error(
        "invalid field selector term {term:?}: expected field=value, field==value or field!=value"
    )]
    ParseFieldTerm { term: String },
    #[error("field label not supported: {field}")]
    UnsupportedField { field: String },
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: every requirement must hold (the commas are ANDs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<LabelReq>,
}

impl LabelSelector {
    /// Parses a selector as it appears in the `labelSelector` query parameter.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for term in split_outside_parens(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_label_term(term)?);
        }
        Ok(Self { reqs })
    }

    /// True when the selector has no requirement (it selects everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object (its `metadata.labels`) satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.reqs.iter().all(|req| match req {
            LabelReq::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.contains(x)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|x| vs.contains(x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside a `( ... )` value list.
fn split_outside_parens(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_label_term(term: &str) -> Result<LabelReq, SelectorError> {
    let bad = |why| SelectorError::ParseLabelTerm {
        term: term.to_string(),
        why,
    };
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelReq::NotExists(check_key(key.trim())?));
    }
    // Order matters: "!=" and "==" before "=".
    for (op, ctor) in [
        ("!=", LabelReq::NotEquals as fn(String, String) -> LabelReq),
        ("==", LabelReq::Equals),
        ("=", LabelReq::Equals),
    ] {
        if let Some((k, v)) = term.split_once(op) {
            let value = check_value(v.trim()).map_err(bad)?;
            return Ok(ctor(check_key(k.trim())?, value));
        }
    }
    if let Some(open) = term.find('(') {
        let close = term
            .rfind(')')
            .filter(|&c| c == term.len() - 1)
            .ok_or(bad("missing ')'"))?;
        let head: Vec<&str> = term[..open].split_whitespace().collect();
        let [key, op] = head[..] else {
            return Err(bad("expected 'key in (...)' or 'key notin (...)'"));
        };
        let mut values = BTreeSet::new();
        for v in term[open + 1..close].split(',') {
            values.insert(check_value(v.trim()).map_err(bad)?);
        }
        let key = check_key(key)?;
        return match op {
            "in" => Ok(LabelReq::In(key, values)),
            "notin" => Ok(LabelReq::NotIn(key, values)),
            _ => Err(bad("unknown set operator, expected 'in' or 'notin'")),
        };
    }
    if term.contains(char::is_whitespace) || term.contains(['<', '>']) {
        return Err(bad("unsupported operator"));
    }
    Ok(LabelReq::Exists(check_key(term)?))
}

/// Validates a label key: optional DNS-subdomain prefix and a name of at most 63 characters.
fn check_key(key: &str) -> Result<String, SelectorError> {
    let bad = |why| SelectorError::ParseLabelKey {
        key: key.to_string(),
        why,
    };
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let dns_ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            });
        if !dns_ok {
            return Err(bad("prefix must be a DNS subdomain"));
        }
    }
    check_name(name).map_err(bad)?;
    Ok(key.to_string())
}

/// Validates a label value: empty, or a qualified name of at most 63 characters.
fn check_value(value: &str) -> Result<String, &'static str> {
    if !value.is_empty() {
        check_name(value)?;
    }
    Ok(value.to_string())
}

fn check_name(name: &str) -> Result<(), &'static str> {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if name.is_empty() || name.len() > 63 {
        return Err("must be 1 to 63 characters");
    }
    if !name.starts_with(alnum) || !name.ends_with(alnum) {
        return Err("must begin and end with an alphanumeric character");
    }
    if !name
        .chars()
        .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return Err("may contain only alphanumerics, '-', '_' and '.'");
    }
    Ok(())
}

/// A parsed field selector over the fields every object kind indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    reqs: Vec<(Field, bool, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
}

impl FieldSelector {
    /// Parses a selector as it appears in the `fieldSelector` query parameter.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(SelectorError::ParseFieldTerm {
                    term: term.to_string(),
                });
            };
            let field = match field.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    return Err(SelectorError::UnsupportedField {
                        field: other.to_string(),
                    });
                }
            };
            reqs.push((field, equal, value.trim().to_string()));
        }
        Ok(Self { reqs })
    }

    /// True when the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object satisfies every requirement; a missing namespace reads as "".
    pub fn matches(&self, object: &Value) -> bool {
        self.reqs.iter().all(|(field, equal, want)| {
            let pointer = match field {
                Field::Name => "/metadata/name",
                Field::Namespace => "/metadata/namespace",
            };
            let have = object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("");
            (have == want) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default", "labels": labels}})
    }

    fn selects(selector: &str, labels: Value) -> bool {
        LabelSelector::parse(selector)
            .unwrap()
            .matches(&labelled(labels))
    }

    #[test]
    fn kube_proxy_selector_excludes_services_owned_by_another_proxy_or_headless() {
        let sel = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
        assert!(selects(sel, json!({"app": "web"})));
        assert!(selects(sel, json!(null)));
        assert!(!selects(sel, json!({"service.kubernetes.io/headless": ""})));
        assert!(!selects(
            sel,
            json!({"service.kubernetes.io/service-proxy-name": "other"})
        ));
    }

    #[test]
    fn negative_terms_also_match_objects_without_the_label() {
        assert!(selects("tier!=db", json!({})));
        assert!(!selects("tier!=db", json!({"tier": "db"})));
        assert!(selects("tier notin (db, cache)", json!({})));
        assert!(!selects("tier notin (db, cache)", json!({"tier": "cache"})));
    }

    #[test]
    fn equality_set_and_existence_terms_are_anded() {
        let sel = "app=web,tier in (front,edge),canary";
        assert!(selects(
            sel,
            json!({"app": "web", "tier": "edge", "canary": "x"})
        ));
        assert!(!selects(sel, json!({"app": "web", "tier": "edge"})));
        assert!(!selects(
            sel,
            json!({"app": "web", "tier": "db", "canary": ""})
        ));
        assert!(selects("app==web", json!({"app": "web"})));
        assert!(!selects("app in (web)", json!({})));
    }

    #[test]
    fn malformed_label_selectors_are_rejected() {
        for bad in [
            "app in web",
            "app in (web",
            "-app=x",
            "a b",
            "app>1",
            "app=(x",
        ] {
            assert!(
                LabelSelector::parse(bad).is_err(),
                "{bad} should be rejected"
            );
        }
    }

    #[test]
    fn field_selector_matches_name_and_namespace_and_rejects_other_fields() {
        let obj = labelled(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=web")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name=db")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=kube-system")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name==web,metadata.namespace=other")
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("spec.nodeName=n1"),
            Err(SelectorError::UnsupportedField {
                field: "spec.nodeName".into()
            })
        );
    }
}
