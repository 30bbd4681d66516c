//! When to sync: kube-proxy's rate limits as a pure state machine over `Instant`s, so the
//! daemon's loop only sleeps until `next_sync` and tests need no clock.
//!
//! Guarantees: a sync never starts less than `min_sync_period` after the previous one finished
//! (bursts of changes are coalesced into one sync), however long that one took; a change is
//! never forgotten (it waits at most `min_sync_period` after the running sync ends); after a
//! failure the next attempt comes `sync_period` later; with no change at all a sync still runs
//! every `sync_period` (cheap: it notices a foreign change to the ruleset through the
//! generation and repairs it); and a full sync is forced every `full_sync_period`.
//!
//! Every period counts from the end of the previous sync, as kube-proxy's sync runner counts
//! them since 1.34 (kubernetes#131615: it re-arms its timers once the work function returns).
//! Counted from the start instead, a sync longer than `min_sync_period` would be followed at
//! once by the next, and a node busy with long syncs would never rest between them.

use std::time::Duration;
#[cfg(feature = "daemon")]
use std::time::Instant;

#[cfg(feature = "daemon")]
use super::engine::SyncKind;

/// kube-proxy's timing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Periods {
    /// `--min-sync-period`: minimum time from the end of a sync to the start of the next.
    pub(crate) min_sync_period: Duration,
    /// `--sync-period`: retry delay after a failure, and the longest time without a sync
    /// (both counted from the end of the last one).
    pub(crate) sync_period: Duration,
    /// `--full-sync-period`: longest time without a full sync (one that reads the kernel).
    pub(crate) full_sync_period: Duration,
}

impl Default for Periods {
    fn default() -> Self {
        Periods {
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            full_sync_period: Duration::from_secs(3600),
        }
    }
}

#[cfg(feature = "daemon")]
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    periods: Periods,
    /// When the last sync finished (successfully or not).
    last_end: Option<Instant>,
    last_full: Option<Instant>,
    /// A change arrived that no started sync has taken yet.
    pending: bool,
    /// The last sync failed at this instant.
    failed_at: Option<Instant>,
}

#[cfg(feature = "daemon")]
impl Schedule {
    pub(crate) fn new(periods: Periods) -> Self {
        Schedule {
            periods,
            last_end: None,
            last_full: None,
            pending: true,
            failed_at: None,
        }
    }

    pub(crate) fn periods(&self) -> Periods {
        self.periods
    }

    /// Something changed in the cluster.
    pub(crate) fn changed(&mut self) {
        self.pending = true;
    }

    /// The last sync failed for a reason already gone (operations that led it were refused
    /// and dropped): the next one is due after `min_sync_period`, not `sync_period`.
    pub(crate) fn retry_soon(&mut self) {
        self.failed_at = None;
        self.pending = true;
    }

    #[cfg(test)]
    pub(crate) fn pending(&self) -> bool {
        self.pending
    }

    /// When the next sync should start (possibly in the past: start now).
    pub(crate) fn next_sync(&self, now: Instant) -> Instant {
        let Some(last) = self.last_end else {
            return now;
        };
        let earliest = last + self.periods.min_sync_period;
        let wanted = if let Some(failed) = self.failed_at {
            failed + self.periods.sync_period
        } else if self.pending {
            earliest
        } else {
            last + self.periods.sync_period
        };
        wanted.max(earliest)
    }

    /// A sync starts at `now`; returns whether it must be a full one.
    pub(crate) fn start(&mut self, now: Instant) -> bool {
        self.pending = false;
        self.last_full
            .is_none_or(|t| now.duration_since(t) >= self.periods.full_sync_period)
    }

    /// The sync started last finished at `now`; `kind` is set when it succeeded.
    pub(crate) fn finished(&mut self, now: Instant, kind: Option<SyncKind>) {
        self.last_end = Some(now);
        match kind {
            Some(kind) => {
                self.failed_at = None;
                if kind == SyncKind::Full {
                    self.last_full = Some(now);
                }
            }
            None => self.failed_at = Some(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn schedule() -> (Schedule, Instant) {
        let periods = Periods {
            min_sync_period: 1000 * MS,
            sync_period: 30_000 * MS,
            full_sync_period: 3_600_000 * MS,
        };
        (Schedule::new(periods), Instant::now())
    }

    #[test]
    fn the_first_sync_starts_at_once_and_is_full() {
        let (mut s, t0) = schedule();
        assert_eq!(s.next_sync(t0), t0);
        assert!(s.start(t0));
    }

    #[test]
    fn a_burst_of_changes_waits_for_the_minimum_period_and_becomes_one_sync() {
        let (mut s, t0) = schedule();
        s.start(t0);
        s.finished(t0 + 10 * MS, Some(SyncKind::Full));
        for i in 1..50 {
            s.changed();
            assert_eq!(s.next_sync(t0 + i * MS), t0 + 1010 * MS);
        }
        assert!(!s.start(t0 + 1010 * MS), "a partial sync");
        assert!(!s.pending(), "the burst was taken by that one sync");
    }

    #[test]
    fn a_change_after_a_quiet_period_is_synced_at_once() {
        let (mut s, t0) = schedule();
        s.start(t0);
        s.finished(t0, Some(SyncKind::Full));
        s.changed();
        let later = t0 + 5000 * MS;
        assert_eq!(s.next_sync(later), t0 + 1000 * MS, "in the past: now");
    }

    #[test]
    fn without_changes_a_sync_still_runs_every_sync_period() {
        let (mut s, t0) = schedule();
        s.start(t0);
        s.finished(t0, Some(SyncKind::Full));
        assert_eq!(s.next_sync(t0 + MS), t0 + 30_000 * MS);
    }

    #[test]
    fn a_failure_is_retried_after_the_sync_period_even_with_changes_pending() {
        let (mut s, t0) = schedule();
        s.start(t0);
        s.finished(t0 + 100 * MS, None);
        s.changed();
        assert_eq!(s.next_sync(t0 + 200 * MS), t0 + 30_100 * MS);
        s.start(t0 + 30_100 * MS);
        s.finished(t0 + 30_200 * MS, Some(SyncKind::Full));
        assert_eq!(s.next_sync(t0 + 30_200 * MS), t0 + 60_200 * MS);
    }

    #[test]
    fn a_failure_whose_cause_is_gone_is_retried_after_the_minimum_period() {
        let (mut s, t0) = schedule();
        s.start(t0);
        s.finished(t0 + 100 * MS, None);
        s.retry_soon();
        assert_eq!(s.next_sync(t0 + 200 * MS), t0 + 1100 * MS);
    }

    /// kubernetes#138073 saw kube-proxy's older runner start the next sync as soon as a sync
    /// longer than `minSyncPeriod` ended (it counted from the start). Since 1.34 the period
    /// counts from the end, and so does kubenft's: a node busy with long syncs still rests.
    #[test]
    fn a_sync_longer_than_the_minimum_period_is_still_followed_by_the_whole_period() {
        let (mut s, t0) = schedule();
        s.start(t0);
        s.changed(); // during the sync
        s.finished(t0 + 2500 * MS, Some(SyncKind::Full));
        assert_eq!(s.next_sync(t0 + 2500 * MS), t0 + 3500 * MS);
        s.start(t0 + 3500 * MS);
        s.finished(t0 + 3600 * MS, Some(SyncKind::Partial));
        assert_eq!(
            s.next_sync(t0 + 3600 * MS),
            t0 + 33_600 * MS,
            "without changes, sync_period after the end too"
        );
    }

    #[test]
    fn a_full_sync_is_forced_once_the_full_sync_period_has_passed() {
        let (mut s, t0) = schedule();
        assert!(s.start(t0));
        s.finished(t0, Some(SyncKind::Full));
        assert!(!s.start(t0 + 3_599_000 * MS));
        s.finished(t0 + 3_599_000 * MS, Some(SyncKind::Partial));
        assert!(s.start(t0 + 3_600_000 * MS));
    }
}
