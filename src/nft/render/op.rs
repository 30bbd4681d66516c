//! Transaction operations as self-contained nft commands, one per line, so a `Transaction` can
//! be fed to `nft -f` and quoted in error messages.

use super::table::{base_chain_line, render_element_key, set_decl_lines, set_keyword};
use super::*;

fn table_ref(t: &TableRef) -> String {
    format!("{} {}", family_keyword(t.family), t.name)
}

/// `add element` or `delete element` with each element printed by `item`. An empty list is a
/// comment: `{ }` is a syntax error, and an empty list changes nothing.
fn element_command(
    verb: &str,
    table: &TableRef,
    set: &str,
    elements: &[Element],
    item: fn(&Element) -> String,
) -> String {
    if elements.is_empty() {
        return format!("# {verb} element {} {set}: no elements", table_ref(table));
    }
    let items: Vec<String> = elements.iter().map(item).collect();
    format!(
        "{verb} element {} {set} {{ {} }}",
        table_ref(table),
        items.join(", ")
    )
}

/// One operation as one nft command line. `flush set` is printed for `FlushSet`; nft spells it
/// `flush map` for maps, which this function cannot know: `render_transaction` and
/// `render_op_with_maps` can.
pub fn render_op(op: &Op) -> String {
    render_op_with_maps(op, &|_, _| false)
}

/// Like `render_op`, with `is_map(table, name)` telling whether a set name is a map (only
/// `FlushSet` needs it: nft rejects `flush set` on a map and `flush map` on a set).
pub(crate) fn render_op_with_maps(op: &Op, is_map: &dyn Fn(&TableRef, &str) -> bool) -> String {
    match op {
        Op::AddTable { table, comment } => match comment {
            Some(c) => format!(
                "add table {} {{ {}; }}",
                table_ref(table),
                quoted_comment(c)
            ),
            None => format!("add table {}", table_ref(table)),
        },
        Op::DeleteTable { table } => format!("delete table {}", table_ref(table)),
        Op::FlushTable { table } => format!("flush table {}", table_ref(table)),
        Op::AddChain { table, chain } => {
            let mut body = Vec::new();
            if let Some(b) = &chain.base {
                body.push(base_chain_line(b));
            }
            if let Some(c) = &chain.comment {
                body.push(format!("{};", quoted_comment(c)));
            }
            if body.is_empty() {
                format!("add chain {} {}", table_ref(table), chain.name)
            } else {
                format!(
                    "add chain {} {} {{ {} }}",
                    table_ref(table),
                    chain.name,
                    body.join(" ")
                )
            }
        }
        Op::FlushChain { table, chain } => format!("flush chain {} {chain}", table_ref(table)),
        Op::DeleteChain { table, chain } => format!("delete chain {} {chain}", table_ref(table)),
        Op::AddSet { table, set } => {
            let body: Vec<String> = set_decl_lines(set)
                .into_iter()
                .map(|l| format!("{l};"))
                .collect();
            format!(
                "add {} {} {} {{ {} }}",
                set_keyword(set),
                table_ref(table),
                set.name,
                body.join(" ")
            )
        }
        Op::FlushSet { table, set } => {
            let kw = if is_map(table, set) { "map" } else { "set" };
            format!("flush {kw} {} {set}", table_ref(table))
        }
        Op::DeleteSet { table, set } => format!("delete set {} {set}", table_ref(table)),
        Op::AddElements {
            table,
            set,
            elements,
        } => element_command("add", table, set, elements, render_element),
        Op::DeleteElements {
            table,
            set,
            elements,
        } => element_command("delete", table, set, elements, render_element_key),
        Op::AddRule { table, chain, rule } => format!(
            "add rule {} {chain} {}",
            table_ref(table),
            render_rule(rule, table.family)
        ),
        Op::DeleteRule {
            table,
            chain,
            handle,
        } => format!("delete rule {} {chain} handle {handle}", table_ref(table)),
    }
}

/// The whole transaction, one command per line, ready for `nft -f`. Maps are recognised from
/// the transaction's own `AddSet` operations (for `flush map`). An expected generation cannot be
/// expressed in nft syntax and is printed as a comment line.
pub fn render_transaction(tx: &Transaction) -> String {
    render_transaction_with_maps(tx, &[])
}

/// Like `render_transaction`, also treating the maps of `known` tables (e.g. the last applied
/// state) as maps when flushing.
pub fn render_transaction_with_maps(tx: &Transaction, known: &[&Table]) -> String {
    let mut maps: BTreeSet<(TableRef, String)> = BTreeSet::new();
    for t in known {
        let tref = TableRef {
            family: t.family,
            name: t.name.clone(),
        };
        for set in t.sets.values().filter(|s| !s.data.is_empty()) {
            maps.insert((tref.clone(), set.name.clone()));
        }
    }
    for op in &tx.ops {
        if let Op::AddSet { table, set } = op
            && !set.data.is_empty()
        {
            maps.insert((table.clone(), set.name.clone()));
        }
    }
    let is_map = |t: &TableRef, name: &str| maps.contains(&(t.clone(), name.to_string()));
    let mut out = String::new();
    if let Some(g) = tx.expected_generation {
        let _ = writeln!(out, "# expected ruleset generation {g}");
    }
    for op in &tx.ops {
        out.push_str(&render_op_with_maps(op, &is_map));
        out.push('\n');
    }
    out
}
