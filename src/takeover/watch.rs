//! What the daemon says about another proxy's rules, from what each full sync finds: the
//! gauge's counts every time, and each kind of finding once per start, so a kube-proxy that is
//! still running and writes its rules again is reported once and then left alone (never
//! fought over).

use super::unreachable::Unreachable;
use super::{Leftovers, Outcome, TakeoverOutcome};

/// One thing to tell the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Say {
    /// The takeover removed kube-proxy's rules (a Normal event).
    Replaced(String),
    /// A Warning: kube-proxy's rules are back after the takeover, were not removable, or
    /// are where nf_tables cannot reach.
    Warn(String),
    /// Only a log line: kube-proxy's rules are there and `--replace-kube-proxy` is off.
    Beside(String),
}

/// What one full sync found, and what to say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// `kubenft_foreign_proxy_rules`, by `FOREIGN_PROXY_KINDS`.
    pub(crate) counts: [u64; 4],
    pub(crate) say: Vec<Say>,
}

/// Remembers what was said since the start.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// The takeover started at start (`--replace-kube-proxy`), if any.
    takeover: Option<TakeoverOutcome>,
    said_outcome: bool,
    said_back: bool,
    said_held: bool,
    said_unreachable: bool,
    said_beside: bool,
    /// The takeover was seen abandoned (`abandoned_just_now`).
    seen_abandoned: bool,
}

impl Watch {
    pub(crate) fn new(takeover: Option<TakeoverOutcome>) -> Watch {
        Watch {
            takeover,
            ..Watch::default()
        }
    }

    /// Whether the takeover was abandoned since this was last asked: true once. A sync it
    /// led failed then, and the next one goes without it.
    pub(crate) fn abandoned_just_now(&mut self) -> bool {
        let abandoned =
            (self.takeover.as_ref()).is_some_and(|t| matches!(t.get(), Outcome::Abandoned { .. }));
        abandoned && !std::mem::replace(&mut self.seen_abandoned, true)
    }

    /// What `leftovers` and `unreachable`, found after a successful full sync, call for.
    pub(crate) fn observe(&mut self, leftovers: &Leftovers, unreachable: &Unreachable) -> Finding {
        let mut say = Vec::new();
        let counts = [
            leftovers.tables.len() as u64,
            leftovers.iptables_chains() as u64,
            (unreachable.ipvs_services + usize::from(unreachable.kube_ipvs0)) as u64,
            unreachable.legacy_tables.len() as u64,
        ];
        let outcome = self.takeover.as_ref().map(TakeoverOutcome::get);
        match &outcome {
            None => {
                if !leftovers.is_empty() && !std::mem::replace(&mut self.said_beside, true) {
                    say.push(Say::Beside(format!(
                        "kube-proxy's rules are on the node beside kubenft's \
                         (--replace-kube-proxy is off): {leftovers}"
                    )));
                }
            }
            Some(Outcome::Pending) => {}
            Some(Outcome::Done { removed }) => {
                if !std::mem::replace(&mut self.said_outcome, true) && removed.removable() {
                    say.push(Say::Replaced(removed.to_string()));
                }
                if leftovers.removable() && !std::mem::replace(&mut self.said_back, true) {
                    say.push(Say::Warn(format!(
                        "kube-proxy's rules are on the node again after kubenft removed them \
                         (is kube-proxy still running on this node?); they are left in place \
                         until kubenft restarts: {leftovers}"
                    )));
                }
            }
            Some(Outcome::Abandoned { error }) => {
                if !std::mem::replace(&mut self.said_outcome, true) {
                    say.push(Say::Warn(format!(
                        "kube-proxy's rules could not be removed ({error}); they stay in \
                         place until kubenft restarts: {leftovers}"
                    )));
                }
            }
        }
        if outcome.is_some() && !leftovers.held.is_empty() && !self.said_held {
            self.said_held = true;
            say.push(Say::Warn(format!(
                "some of kube-proxy's iptables chains stay: another program's rules jump into \
                 them ({leftovers})"
            )));
        }
        if outcome.is_some()
            && !unreachable.is_empty()
            && !std::mem::replace(&mut self.said_unreachable, true)
        {
            say.push(Say::Warn(unreachable.to_string()));
        }
        Finding { counts, say }
    }
}
