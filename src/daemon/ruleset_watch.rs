//! Between syncs, a cheap look for our rules having been taken away by another program: every
//! second the ruleset generation is read, and when it moved since our last commit the base
//! chains of our tables are counted against the plan. Those chains hook every other rule into
//! the kernel's paths, and whatever empties them (`nft flush table`, a deleted table, a
//! `flush ruleset` such as a host firewall's reload) leaves every Service unserved; a
//! difference brings the next sync forward, and that sync, seeing the generation moved, reads
//! the kernel and repairs it. Without this an idle node would wait for its periodic sync
//! (`--sync-period`, 30 s by default).
//!
//! Deeper edits (one Service's chain flushed, an element deleted) are still found by that
//! periodic sync: finding them means reading the whole table, too dear to do every second.
//! Another program's commits elsewhere in the ruleset cost one dump of the base chains per
//! commit, at most one a second.

use std::time::Duration;

use crate::nft::kernel::Nftables;
use crate::nft::render::family_keyword;
use crate::proxier::Planner;
use crate::sync::Syncer;

/// How often the generation is read.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(super) struct RulesetWatch {
    /// The last generation looked at: not looked at again (a difference is reported once; the
    /// sync it brings forward commits a new generation).
    looked_at: Option<u32>,
}

impl RulesetWatch {
    /// What another program took from our base chains since our last commit, if anything.
    /// Nothing is looked at before our first commit or after a failed sync: a sync that reads
    /// the kernel is due then anyway.
    pub(super) fn missing_rules(
        &mut self,
        syncer: &mut Syncer<Nftables>,
        planner: &Planner,
    ) -> Option<String> {
        let ours = syncer.generation()?;
        let nft = syncer.kernel();
        let now = match nft.generation() {
            Ok(now) => now,
            Err(error) => {
                tracing::debug!(%error, "cannot read the ruleset generation; looking again in a second");
                return None;
            }
        };
        if now == ours || Some(now) == self.looked_at {
            return None;
        }
        self.looked_at = Some(now);
        for planned in planner.base_chains() {
            match nft.rule_count(planned.family, planned.table, planned.chain) {
                Ok(rules) if rules == planned.rules => {}
                Ok(rules) => {
                    return Some(format!(
                        "chain {} of table {} {} holds {rules} of its {} rules",
                        planned.chain,
                        family_keyword(planned.family),
                        planned.table,
                        planned.rules
                    ));
                }
                Err(error) => {
                    tracing::debug!(%error, "cannot count our rules; looking again in a second");
                    self.looked_at = None;
                    return None;
                }
            }
        }
        None
    }
}
