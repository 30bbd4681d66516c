//! Taking a node over from kube-proxy. What kube-proxy left in nf_tables (its nftables-mode
//! tables; in iptables mode, its chains in iptables-nft's tables and the rules of the built-in
//! chains that jump into them) is removed in the same transaction as kubenft's first sync, so a
//! packet meets kube-proxy's rules or kubenft's: never neither, never both. What it left where
//! nf_tables cannot reach (IPVS, legacy iptables) is found and reported (`unreachable`).
//!
//! Guarantees: only objects kube-proxy names as its own are removed (`names`): kubelet's
//! chains and every other program's tables, chains and rules stay as they were. A kube-proxy
//! chain that another program's chain jumps into is not removed, nor is anything else of
//! kube-proxy's in that table (removing it would break that program's rule, and the kernel
//! would refuse the whole transaction): the table is reported as held. Removal is offered to
//! one commit only (`Takeover` is a `sync::Leading`): rules kube-proxy writes again afterwards
//! are reported, never fought over.

mod names;
pub(crate) mod unreachable;
#[cfg(feature = "daemon")]
pub(crate) mod watch;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::nft::model::Family;
use crate::nft::outline::{Outline, OutlineError};
use crate::nft::transaction::{Op, TableRef};
use crate::sync::Leading;

pub(crate) use names::{IPTABLES_TABLES, is_kube_proxy_chain, is_kube_proxy_table};

/// What kube-proxy left in nf_tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Leftovers {
    /// kube-proxy's nftables-mode tables (`ip kube-proxy`, `ip6 kube-proxy`).
    pub(crate) tables: Vec<TableRef>,
    /// Its iptables-mode chains, per iptables-nft table that holds any.
    pub(crate) iptables: Vec<IptablesLeftovers>,
    /// Why some of those tables are left whole: another program's chain jumps into
    /// kube-proxy's there.
    pub(crate) held: Vec<Held>,
}

/// kube-proxy's chains in one iptables-nft table (`ip nat`, say), and the rules of that table's
/// built-in chains that jump into them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IptablesLeftovers {
    pub(crate) table: TableRef,
    pub(crate) chains: Vec<String>,
    pub(crate) jumps: Vec<Jump>,
}

/// A rule of a built-in chain (`PREROUTING`, …) that jumps into a kube-proxy chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Jump {
    pub(crate) chain: String,
    pub(crate) handle: u64,
    pub(crate) to: String,
}

/// Why an iptables-nft table's kube-proxy chains stay: a rule of another program's chain
/// jumps into one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) table: TableRef,
    /// The other program's chain and its rule's handle.
    pub(crate) from: String,
    pub(crate) handle: u64,
    /// The kube-proxy chain it jumps to.
    pub(crate) to: String,
}

impl Leftovers {
    #[cfg(feature = "daemon")]
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.iptables.is_empty() && self.held.is_empty()
    }

    /// Whether anything here can be removed (what is held cannot).
    pub(crate) fn removable(&self) -> bool {
        !self.tables.is_empty() || self.removable_iptables().next().is_some()
    }

    /// kube-proxy's iptables-nft chains, counted over every table (removable and held).
    #[cfg(feature = "daemon")]
    pub(crate) fn iptables_chains(&self) -> usize {
        self.iptables.iter().map(|t| t.chains.len()).sum::<usize>()
    }

    /// The iptables-nft tables whose kube-proxy chains no other program's chain leads into.
    fn removable_iptables(&self) -> impl Iterator<Item = &IptablesLeftovers> {
        (self.iptables.iter()).filter(|t| !self.held.iter().any(|h| h.table == t.table))
    }

    /// The operations that remove everything removable, in an order the kernel accepts in one
    /// batch: each table whole; in iptables-nft tables, the jumps into kube-proxy's chains
    /// first, then every rule of those chains (they jump to each other), then the chains.
    pub(crate) fn removal(&self) -> Vec<Op> {
        let mut ops: Vec<Op> = (self.tables.iter())
            .map(|t| Op::DeleteTable { table: t.clone() })
            .collect();
        for t in self.removable_iptables() {
            ops.extend(t.jumps.iter().map(|j| Op::DeleteRule {
                table: t.table.clone(),
                chain: j.chain.clone(),
                handle: j.handle,
            }));
            ops.extend(t.chains.iter().map(|c| Op::FlushChain {
                table: t.table.clone(),
                chain: c.clone(),
            }));
            ops.extend(t.chains.iter().map(|c| Op::DeleteChain {
                table: t.table.clone(),
                chain: c.clone(),
            }));
        }
        ops
    }
}

impl fmt::Display for Leftovers {
    /// One line: `tables ip kube-proxy, ip6 kube-proxy; iptables-nft: 12 chains and 4 jump
    /// rules in ip nat, ip filter`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.tables.is_empty() {
            let names: Vec<String> = self.tables.iter().map(ToString::to_string).collect();
            parts.push(format!("nftables: table {}", names.join(", ")));
        }
        let removable: Vec<&IptablesLeftovers> = self.removable_iptables().collect();
        if !removable.is_empty() {
            let chains: usize = removable.iter().map(|t| t.chains.len()).sum();
            let jumps: usize = removable.iter().map(|t| t.jumps.len()).sum();
            let tables: Vec<String> = removable.iter().map(|t| t.table.to_string()).collect();
            parts.push(format!(
                "iptables-nft: {chains} chains and {jumps} jump rules in {}",
                tables.join(", ")
            ));
        }
        for h in &self.held {
            parts.push(format!(
                "iptables-nft table {} held: rule {} of chain {} jumps to kube-proxy's {}",
                h.table, h.handle, h.from, h.to
            ));
        }
        if parts.is_empty() {
            return f.write_str("nothing");
        }
        f.write_str(&parts.join("; "))
    }
}

/// Finds what kube-proxy left in nf_tables. `own_table` (kubenft's table name) is never
/// counted, even if an operator named it `kube-proxy`.
pub(crate) fn survey(kernel: &mut dyn Outline, own_table: &str) -> Result<Leftovers, OutlineError> {
    let mut found = Leftovers::default();
    for table in kernel.tables()? {
        if table.name == own_table {
            continue;
        }
        if is_kube_proxy_table(&table) {
            found.tables.push(table);
        } else if matches!(table.family, Family::Ip | Family::Ip6)
            && IPTABLES_TABLES.contains(&table.name.as_str())
        {
            survey_iptables_table(kernel, table, &mut found)?;
        }
    }
    Ok(found)
}

/// kube-proxy's chains in one iptables-nft table. Only the other chains' rules are read:
/// kube-proxy's own (thousands of them on a large cluster) are removed unread.
fn survey_iptables_table(
    kernel: &mut dyn Outline,
    table: TableRef,
    found: &mut Leftovers,
) -> Result<(), OutlineError> {
    let chains = kernel.chains(&table)?;
    let (ours, others): (Vec<_>, Vec<_>) = chains
        .into_iter()
        .partition(|c| !c.base && is_kube_proxy_chain(&table.name, &c.name));
    if ours.is_empty() {
        return Ok(());
    }
    let is_ours = |name: &str| ours.iter().any(|c| c.name == name);
    let mut jumps = Vec::new();
    for chain in &others {
        for rule in kernel.rules(&table, &chain.name)? {
            for to in rule.jumps.iter().filter(|to| is_ours(to)) {
                if chain.base {
                    jumps.push(Jump {
                        chain: chain.name.clone(),
                        handle: rule.handle,
                        to: to.clone(),
                    });
                } else {
                    found.held.push(Held {
                        table: table.clone(),
                        from: chain.name.clone(),
                        handle: rule.handle,
                        to: to.clone(),
                    });
                }
            }
        }
    }
    // A rule with two jumps into kube-proxy's chains is deleted once.
    jumps.dedup_by(|a, b| a.chain == b.chain && a.handle == b.handle);
    found.iptables.push(IptablesLeftovers {
        table,
        chains: ours.into_iter().map(|c| c.name).collect(),
        jumps,
    });
    Ok(())
}

/// Logs what kube-proxy left where nf_tables cannot reach, with how to remove it; returns it.
pub(crate) fn report_unreachable() -> unreachable::Unreachable {
    let found = unreachable::Unreachable::survey();
    if !found.is_empty() {
        tracing::warn!("{found}");
    }
    found
}

/// How the takeover went, for the daemon and `sync --once` to report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No commit has carried it yet.
    #[default]
    Pending,
    /// Committed with kubenft's sync: `removed` is what went (empty when kube-proxy had left
    /// nothing), `held` what stayed because another program's rules lead into it.
    Done { removed: Leftovers },
    /// Not done: listing failed or the kernel refused the transaction carrying it.
    Abandoned { error: String },
}

/// kube-proxy's leftovers, removed by the next commit of a `Syncer` it leads
/// (`Syncer::lead_next_commit_with`). `outcome()` says how it went.
pub(crate) struct Takeover {
    own_table: String,
    listed: Option<Leftovers>,
    outcome: Arc<Mutex<Outcome>>,
}

impl Takeover {
    pub(crate) fn new(own_table: &str) -> Takeover {
        Takeover {
            own_table: own_table.to_owned(),
            listed: None,
            outcome: Arc::default(),
        }
    }

    /// Where the outcome will be, readable after the `Takeover` went to the syncer.
    pub(crate) fn outcome(&self) -> TakeoverOutcome {
        TakeoverOutcome(self.outcome.clone())
    }

    fn set(&self, outcome: Outcome) {
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = outcome;
    }
}

/// A `Takeover`'s outcome, shared with whoever started it.
#[derive(Debug, Clone)]
pub(crate) struct TakeoverOutcome(Arc<Mutex<Outcome>>);

impl TakeoverOutcome {
    pub(crate) fn get(&self) -> Outcome {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Leading for Takeover {
    fn ops(&mut self, kernel: &mut dyn Outline) -> Result<Vec<Op>, OutlineError> {
        let found = survey(kernel, &self.own_table)?;
        let ops = found.removal();
        self.listed = Some(found);
        Ok(ops)
    }

    fn committed(&mut self) {
        let removed = self.listed.take().unwrap_or_default();
        if removed.removable() {
            tracing::info!(removed = %removed, "kube-proxy's rules removed in the same transaction as this sync");
        }
        if !removed.held.is_empty() {
            tracing::warn!(leftovers = %removed, "some of kube-proxy's iptables rules are left: another program's rules jump into them");
        }
        self.set(Outcome::Done { removed });
    }

    fn abandoned(&mut self, error: &dyn std::error::Error) {
        let listed = self.listed.take().unwrap_or_default();
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        tracing::warn!(leftovers = %listed, error = %text, "kube-proxy's rules were not removed; they stay in place");
        self.set(Outcome::Abandoned { error: text });
    }
}
