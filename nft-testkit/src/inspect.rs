//! The kernel's view of a table through the `nft` binary, normalised so that two kernels holding
//! the same ruleset give `==` JSON. For tests and benchmarks only, so outside the product: kubenft
//! never runs `nft`.
//!
//! Normalisation drops what differs between equal rulesets: `metainfo`, every `handle`, counter
//! values and element `expires`. Sets and maps are sorted by name with their elements sorted,
//! chains by name each followed by its rules in chain order (rule order is semantics), and the
//! elements of anonymous sets inside rules are sorted. Table and chain comments, which nft
//! 1.0.6's JSON omits, are read from the text listing and added.

use serde_json::{Map, Value};

use kubenft::netns::{Netns, NetnsError};
use kubenft::nft::model::Family;
use kubenft::nft::render::family_keyword;

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("listing table {table}")]
    List {
        table: String,
        #[source]
        source: NetnsError,
    },
    #[error("parsing `nft -j` output of table {table}")]
    Parse {
        table: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("`nft -j` output of table {table} has an unexpected shape: {detail}")]
    Shape { table: String, detail: String },
    /// nft could not be started, or rejected the script (its stderr is in `failure`).
    #[error("nft -f in namespace {ns}: {failure}")]
    Apply { ns: String, failure: NetnsError },
}

/// `nft -j list table <family> <name>` inside `ns`, normalised (see the module comment).
///
/// nft 1.0.6's JSON leaves out table and chain comments, so they are read from the text listing
/// and added to the `table` and `chain` objects as `"comment"`, the key sets and rules use.
pub fn list_table_json(ns: &Netns, family: Family, name: &str) -> Result<Value, InspectError> {
    let text = list_table_text(ns, family, name)?;
    let mut view = list_table_json_only(ns, family, name)?;
    add_text_comments(&mut view, &text);
    Ok(view)
}

fn list_table_json_only(ns: &Netns, family: Family, name: &str) -> Result<Value, InspectError> {
    let table = format!("{} {name}", family_keyword(family));
    let out = ns
        .exec(&["nft", "-j", "list", "table", family_keyword(family), name])
        .map_err(|source| InspectError::List {
            table: table.clone(),
            source,
        })?;
    let raw: Value = serde_json::from_slice(&out.stdout).map_err(|source| InspectError::Parse {
        table: table.clone(),
        source,
    })?;
    normalize_listing(raw).map_err(|detail| InspectError::Shape { table, detail })
}

/// `nft list table <family> <name>` text inside `ns` (for readable assertions and failures).
pub fn list_table_text(ns: &Netns, family: Family, name: &str) -> Result<String, InspectError> {
    let out = ns
        .exec(&["nft", "list", "table", family_keyword(family), name])
        .map_err(|source| InspectError::List {
            table: format!("{} {name}", family_keyword(family)),
            source,
        })?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Feeds `script` to `nft -f -` inside `ns`; nft applies it as one transaction.
pub fn apply_script(ns: &Netns, script: &str) -> Result<(), InspectError> {
    ns.exec_with_stdin(&["nft", "-f", "-"], script)
        .map(|_| ())
        .map_err(|failure| InspectError::Apply {
            ns: ns.name().to_string(),
            failure,
        })
}

/// Normalises the parsed output of `nft -j list table` (see the module comment).
fn normalize_listing(raw: Value) -> Result<Value, String> {
    let Value::Object(mut top) = raw else {
        return Err("top level is not an object".into());
    };
    let Some(Value::Array(objects)) = top.remove("nftables") else {
        return Err("no `nftables` array".into());
    };
    let mut tables = Vec::new();
    let mut sets = Vec::new();
    let mut chains = Vec::new();
    let mut rules: Vec<(String, Value)> = Vec::new();
    let mut others = Vec::new();
    for mut obj in objects {
        strip(&mut obj);
        let Value::Object(map) = &obj else {
            return Err(format!("list entry is not an object: {obj}"));
        };
        let Some((kind, body)) = map.iter().next() else {
            continue;
        };
        let name = body.get("name").and_then(Value::as_str).unwrap_or("");
        match kind.as_str() {
            "metainfo" => {}
            "table" => tables.push(obj.clone()),
            "set" | "map" => sets.push((name.to_string(), obj.clone())),
            "chain" => chains.push((name.to_string(), obj.clone())),
            "rule" => {
                let chain = body.get("chain").and_then(Value::as_str).unwrap_or("");
                rules.push((chain.to_string(), obj.clone()));
            }
            _ => others.push(obj.clone()),
        }
    }
    sets.sort_by(|a, b| a.0.cmp(&b.0));
    chains.sort_by(|a, b| a.0.cmp(&b.0));
    others.sort_by_key(|o| o.to_string());
    let mut out = tables;
    out.extend(sets.into_iter().map(|(_, s)| s));
    for (name, chain) in chains {
        out.push(chain);
        // A stable filter keeps the kernel's rule order within the chain.
        out.extend(
            rules
                .iter()
                .filter(|(c, _)| *c == name)
                .map(|(_, r)| r.clone()),
        );
    }
    out.extend(others);
    let mut result = Map::new();
    result.insert("nftables".into(), Value::Array(out));
    Ok(Value::Object(result))
}

/// Table and chain comments of an `nft list table` text: (None, table comment) and
/// (Some(chain), chain comment). nft prints them as the first line of their block.
fn text_comments(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut chain: Option<String> = None;
    let mut first_line = false;
    for line in text.lines() {
        if line.starts_with("table ") {
            chain = None;
            first_line = true;
            continue;
        }
        if let Some(name) = line
            .strip_prefix("\tchain ")
            .and_then(|r| r.strip_suffix(" {"))
        {
            chain = Some(name.to_string());
            first_line = true;
            continue;
        }
        let depth = if chain.is_some() { "\t\t" } else { "\t" };
        if first_line
            && let Some(c) = line
                .strip_prefix(depth)
                .and_then(|r| r.strip_prefix("comment \""))
                .and_then(|r| r.strip_suffix('"'))
        {
            out.push((chain.clone(), c.to_string()));
        }
        first_line = false;
    }
    out
}

/// Puts the comments `nft -j` omits (see `list_table_json`) into the normalised view.
fn add_text_comments(view: &mut Value, text: &str) {
    let comments = text_comments(text);
    let Some(objects) = view.get_mut("nftables").and_then(Value::as_array_mut) else {
        return;
    };
    for obj in objects {
        let (key, wanted) = if let Some(t) = obj.get_mut("table") {
            (t, None)
        } else if let Some(c) = obj.get_mut("chain") {
            let name = c.get("name").and_then(Value::as_str).map(str::to_string);
            (c, Some(name))
        } else {
            continue;
        };
        let found = comments.iter().find(|(chain, _)| match &wanted {
            None => chain.is_none(),
            Some(name) => chain.as_ref() == name.as_ref(),
        });
        if let (Some((_, comment)), Value::Object(map)) = (found, key) {
            map.entry("comment")
                .or_insert_with(|| Value::String(comment.clone()));
        }
    }
}

/// Removes handles, zeroes counters, drops `expires`, sorts element lists; recursively.
fn strip(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("handle");
            map.remove("expires");
            if let Some(Value::Object(counter)) = map.get_mut("counter") {
                for key in ["packets", "bytes"] {
                    if counter.contains_key(key) {
                        counter.insert(key.into(), Value::from(0));
                    }
                }
            }
            for (key, child) in map.iter_mut() {
                strip(child);
                // `elem` of named sets, and `set` of anonymous sets inside rules: order is the
                // kernel's hashing detail, not semantics.
                if (key == "elem" || key == "set")
                    && let Value::Array(items) = child
                {
                    items.sort_by_key(|i| i.to_string());
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalising_drops_handles_and_sorts_objects_but_keeps_rule_order() {
        let raw = json!({"nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "ip", "name": "t", "handle": 1}},
            {"chain": {"family": "ip", "table": "t", "name": "z", "handle": 3}},
            {"chain": {"family": "ip", "table": "t", "name": "a", "handle": 2}},
            {"set": {"family": "ip", "name": "s", "table": "t", "handle": 4,
                     "elem": ["10.0.0.2", "10.0.0.1"]}},
            {"rule": {"chain": "z", "handle": 9, "expr": [{"drop": null}]}},
            {"rule": {"chain": "a", "handle": 7, "expr": [{"counter": {"packets": 5, "bytes": 300}}]}},
            {"rule": {"chain": "z", "handle": 8, "expr": [{"accept": null}]}},
        ]});
        let expected = json!({"nftables": [
            {"table": {"family": "ip", "name": "t"}},
            {"set": {"family": "ip", "name": "s", "table": "t", "elem": ["10.0.0.1", "10.0.0.2"]}},
            {"chain": {"family": "ip", "table": "t", "name": "a"}},
            {"rule": {"chain": "a", "expr": [{"counter": {"packets": 0, "bytes": 0}}]}},
            {"chain": {"family": "ip", "table": "t", "name": "z"}},
            {"rule": {"chain": "z", "expr": [{"drop": null}]}},
            {"rule": {"chain": "z", "expr": [{"accept": null}]}},
        ]});
        assert_eq!(normalize_listing(raw).unwrap(), expected);
    }

    #[test]
    fn table_and_chain_comments_missing_from_json_are_taken_from_the_text_listing() {
        let text = "table ip t {\n\tcomment \"tbl\"\n\tset s {\n\t\tcomment \"set\"\n\t}\n\n\tchain a {\n\t\tcomment \"ch a\"\n\t\ttype filter hook input priority filter; policy accept;\n\t\taccept comment \"rule\"\n\t}\n\n\tchain b {\n\t\taccept\n\t}\n}\n";
        let mut view = json!({"nftables": [
            {"table": {"name": "t"}},
            {"set": {"name": "s", "comment": "set"}},
            {"chain": {"name": "a"}},
            {"rule": {"chain": "a", "comment": "rule"}},
            {"chain": {"name": "b"}},
        ]});
        add_text_comments(&mut view, text);
        let expected = json!({"nftables": [
            {"table": {"name": "t", "comment": "tbl"}},
            {"set": {"name": "s", "comment": "set"}},
            {"chain": {"name": "a", "comment": "ch a"}},
            {"rule": {"chain": "a", "comment": "rule"}},
            {"chain": {"name": "b"}},
        ]});
        assert_eq!(view, expected);
    }

    #[test]
    fn normalising_rejects_output_without_the_nftables_array() {
        assert!(normalize_listing(json!({"other": []})).is_err());
    }
}
