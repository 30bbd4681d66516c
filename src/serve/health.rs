//! Proxy health with kube-proxy's rules: healthy unless a change has waited longer than the
//! health timeout without a successful sync; `/healthz` is additionally unhealthy while the node
//! is being deleted, `/livez` is not. Once the kernel refused the start-up probe, both are
//! unhealthy for good and their body says why (`kernelUnsupported`). Time is always passed in,
//! so the rules are testable without sleeping.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the HTTP server reads the current time from.
pub(crate) trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> SystemTime;
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

#[derive(Debug)]
struct State {
    last_updated: Option<SystemTime>,
    /// When the oldest change not yet synced was queued; cleared by a successful sync.
    oldest_pending: Option<SystemTime>,
    node_eligible: bool,
    /// Why this kernel cannot run the ruleset, once the start-up probe said so.
    kernel_unsupported: Option<String>,
}

/// Shared health state: the sync loop writes it, the health servers read it. Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct HealthState {
    state: Arc<Mutex<State>>,
    timeout: Duration,
    clock: Arc<dyn Clock>,
}

/// What a health endpoint answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HealthReport {
    pub healthy: bool,
    /// A small JSON object shaped like kube-proxy's answer.
    pub body: String,
}

impl HealthState {
    /// `timeout` is how long a queued change may wait for a sync; kube-proxy uses twice the
    /// sync period.
    pub(crate) fn new(timeout: Duration) -> Self {
        Self::with_clock(timeout, Arc::new(SystemClock))
    }

    /// Like [`HealthState::new`] with the clock the HTTP handlers read.
    pub(crate) fn with_clock(timeout: Duration, clock: Arc<dyn Clock>) -> Self {
        HealthState {
            state: Arc::new(Mutex::new(State {
                last_updated: None,
                oldest_pending: None,
                // Eligible until the first Node event says otherwise, as in kube-proxy.
                node_eligible: true,
                kernel_unsupported: None,
            })),
            timeout,
            clock,
        }
    }

    /// The clock the HTTP handlers use.
    pub(crate) fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A change was queued at `now`. Only the oldest pending change matters, so later calls
    /// before the next sync do not move the deadline.
    pub(crate) fn queued(&self, now: SystemTime) {
        let mut s = self.lock();
        s.oldest_pending.get_or_insert(now);
    }

    /// A sync succeeded at `now`: everything queued so far is in the kernel.
    pub(crate) fn synced(&self, now: SystemTime) {
        let mut s = self.lock();
        s.oldest_pending = None;
        s.last_updated = Some(now);
    }

    /// Whether the node may receive traffic: false once it is being deleted or is tainted
    /// `ToBeDeletedByClusterAutoscaler`, so load balancers drain it.
    pub(crate) fn set_node_eligible(&self, eligible: bool) {
        self.lock().node_eligible = eligible;
    }

    pub(crate) fn node_eligible(&self) -> bool {
        self.lock().node_eligible
    }

    /// The kernel refused the start-up probe for `reason`: unhealthy from now on.
    pub(crate) fn kernel_unsupported(&self, reason: &str) {
        self.lock().kernel_unsupported = Some(reason.to_string());
    }

    /// The proxy's own health at `now`, ignoring the node.
    pub(crate) fn is_healthy(&self, now: SystemTime) -> bool {
        let s = self.lock();
        if s.kernel_unsupported.is_some() {
            return false;
        }
        match s.oldest_pending {
            None => true,
            // A clock stepping backwards makes the wait negative: not late.
            Some(q) => now.duration_since(q).unwrap_or_default() < self.timeout,
        }
    }

    /// The last successful sync, if any.
    pub(crate) fn last_updated(&self) -> Option<SystemTime> {
        self.lock().last_updated
    }

    /// The `/healthz` answer at `now`: healthy only if the proxy is and the node is eligible.
    pub(crate) fn healthz(&self, now: SystemTime) -> HealthReport {
        let eligible = self.node_eligible();
        let healthy = self.is_healthy(now) && eligible;
        let body = format!(
            r#"{{"lastUpdated": "{}","currentTime": "{}", "nodeEligible": {eligible}{}}}"#,
            self.reported_last_updated(healthy, now),
            rfc3339(now),
            self.kernel_unsupported_field()
        );
        HealthReport { healthy, body }
    }

    /// The `/livez` answer at `now`: the proxy's health alone.
    pub(crate) fn livez(&self, now: SystemTime) -> HealthReport {
        let healthy = self.is_healthy(now);
        let body = format!(
            r#"{{"lastUpdated": "{}","currentTime": "{}"{}}}"#,
            self.reported_last_updated(healthy, now),
            rfc3339(now),
            self.kernel_unsupported_field()
        );
        HealthReport { healthy, body }
    }

    /// `, "kernelUnsupported": "…"` once the kernel refused the probe; nothing before.
    fn kernel_unsupported_field(&self) -> String {
        match &self.lock().kernel_unsupported {
            Some(reason) => format!(
                r#", "kernelUnsupported": {}"#,
                serde_json::Value::from(reason.as_str())
            ),
            None => String::new(),
        }
    }

    /// kube-proxy reports "now" as lastUpdated while healthy (older releases reported the last
    /// loop run, and probes compare it with the current time); when unhealthy it reports the
    /// real last sync, or the epoch if there was none.
    fn reported_last_updated(&self, healthy: bool, now: SystemTime) -> String {
        if healthy {
            rfc3339(now)
        } else {
            rfc3339(self.last_updated().unwrap_or(UNIX_EPOCH))
        }
    }
}

/// `t` as an RFC 3339 UTC timestamp with milliseconds, e.g. `2024-05-01T12:00:00.250Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), by the well-known
/// era-based algorithm (eras of 400 years, years starting in March so leap days come last).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_fresh_state_is_healthy_and_eligible() {
        let h = HealthState::new(Duration::from_secs(60));
        assert!(h.is_healthy(at(1_000)));
        assert!(h.healthz(at(1_000)).healthy);
        assert!(h.livez(at(1_000)).healthy);
    }

    #[test]
    fn a_queued_change_turns_unhealthy_only_once_the_timeout_has_passed() {
        let h = HealthState::new(Duration::from_secs(60));
        h.queued(at(1_000));
        assert!(h.is_healthy(at(1_059)));
        assert!(!h.is_healthy(at(1_060)));
        assert!(!h.livez(at(1_060)).healthy);
    }

    #[test]
    fn later_queued_changes_do_not_push_the_deadline_back() {
        let h = HealthState::new(Duration::from_secs(60));
        h.queued(at(1_000));
        h.queued(at(1_050));
        assert!(!h.is_healthy(at(1_061)));
    }

    #[test]
    fn a_successful_sync_clears_the_pending_change() {
        let h = HealthState::new(Duration::from_secs(60));
        h.queued(at(1_000));
        h.synced(at(1_010));
        assert!(h.is_healthy(at(5_000)));
        assert_eq!(h.last_updated(), Some(at(1_010)));
        // A change queued after the sync starts a new wait.
        h.queued(at(5_000));
        assert!(h.is_healthy(at(5_059)));
        assert!(!h.is_healthy(at(5_060)));
    }

    #[test]
    fn an_ineligible_node_fails_healthz_but_not_livez() {
        let h = HealthState::new(Duration::from_secs(60));
        h.set_node_eligible(false);
        let hz = h.healthz(at(1_000));
        assert!(!hz.healthy);
        assert!(hz.body.contains(r#""nodeEligible": false"#), "{}", hz.body);
        assert!(h.livez(at(1_000)).healthy);
    }

    #[test]
    fn the_body_reports_now_when_healthy_and_the_last_sync_when_not() {
        let h = HealthState::new(Duration::from_secs(60));
        h.synced(at(1_700_000_000));
        let ok = h.healthz(at(1_700_000_030));
        assert_eq!(
            ok.body,
            r#"{"lastUpdated": "2023-11-14T22:13:50.000Z","currentTime": "2023-11-14T22:13:50.000Z", "nodeEligible": true}"#
        );
        h.queued(at(1_700_000_040));
        let late = h.livez(at(1_700_000_100));
        assert!(!late.healthy);
        assert_eq!(
            late.body,
            r#"{"lastUpdated": "2023-11-14T22:13:20.000Z","currentTime": "2023-11-14T22:15:00.000Z"}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&late.body).unwrap();
        assert!(parsed["lastUpdated"].is_string());
    }

    #[test]
    fn a_kernel_that_refused_the_probe_fails_both_endpoints_saying_why() {
        let h = HealthState::new(Duration::from_secs(60));
        h.kernel_unsupported("kernel 6.1 refused `add rule …` → EINVAL");
        for report in [h.healthz(at(1_000)), h.livez(at(1_000))] {
            assert!(!report.healthy);
            let body: serde_json::Value = serde_json::from_str(&report.body).unwrap();
            assert_eq!(
                body["kernelUnsupported"],
                "kernel 6.1 refused `add rule …` → EINVAL"
            );
        }
        h.synced(at(1_001));
        assert!(!h.healthz(at(1_002)).healthy, "for good");
    }

    #[test]
    fn rfc3339_handles_epoch_leap_days_and_millis() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T23:59:59.5Z
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_199_500);
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.500Z");
        // 2000-03-01T00:00:00Z, after a 400-year leap day.
        assert_eq!(rfc3339(at(951_868_800)), "2000-03-01T00:00:00.000Z");
    }
}
