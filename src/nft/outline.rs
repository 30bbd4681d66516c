//! Other programs' tables in outline: which tables exist, the chains of a table, and for each
//! rule of a chain its handle and the chains it jumps or goes to. That is enough to remove a
//! program's chains and the rules that lead into them, by handle, without understanding the
//! rest of those rules (iptables-nft writes `match`/`target` compat expressions no model here
//! describes). Reading an outline never fails on an expression it does not know.

use super::transaction::TableRef;

/// A chain as listed: its name and whether it hangs on a hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainOutline {
    pub name: String,
    /// A base chain (`type … hook …`), such as iptables' built-in `PREROUTING`.
    pub base: bool,
}

/// A rule as listed: its kernel handle and where it transfers control to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOutline {
    pub handle: u64,
    /// The chains the rule jumps or goes to, in its expressions' order.
    pub jumps: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("listing {what}: {source}")]
pub struct OutlineError {
    pub what: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Lists the kernel's tables, chains and rules in outline. Tables of families the model has no
/// name for (`arp`, `bridge`, `netdev`) are left out.
pub trait Outline {
    fn tables(&mut self) -> Result<Vec<TableRef>, OutlineError>;
    /// The chains of `table`, in the kernel's order; empty if the table does not exist.
    fn chains(&mut self, table: &TableRef) -> Result<Vec<ChainOutline>, OutlineError>;
    /// The rules of `chain` in `table`, in the kernel's order; empty if it does not exist.
    fn rules(&mut self, table: &TableRef, chain: &str) -> Result<Vec<RuleOutline>, OutlineError>;
}

#[cfg(any(test, feature = "fake-kernel"))]
impl Outline for super::fake::FakeKernel {
    fn tables(&mut self) -> Result<Vec<TableRef>, OutlineError> {
        Ok(self.tables.keys().cloned().collect())
    }

    fn chains(&mut self, table: &TableRef) -> Result<Vec<ChainOutline>, OutlineError> {
        Ok(self.table(table).map_or_else(Vec::new, |t| {
            t.chains
                .values()
                .map(|c| ChainOutline {
                    name: c.name.clone(),
                    base: c.base.is_some(),
                })
                .collect()
        }))
    }

    fn rules(&mut self, table: &TableRef, chain: &str) -> Result<Vec<RuleOutline>, OutlineError> {
        let rules = self
            .table(table)
            .and_then(|t| t.chains.get(chain))
            .map_or(&[][..], |c| &c.rules[..]);
        Ok(rules
            .iter()
            .map(|r| RuleOutline {
                handle: r.handle.unwrap_or_default(),
                jumps: r
                    .referenced_chains()
                    .into_iter()
                    .map(String::from)
                    .collect(),
            })
            .collect())
    }
}
