//! The soak's fault schedule (seeded, jittered, printed before the run) and the trend check
//! on its samples: pure functions, tested without a kernel.

use std::time::Duration;

/// The faults the soak injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// The test API server answers 503 and ends every watch for `hold`, its history is
    /// compacted, then it answers again: resumed watches get 410 Expired and re-list.
    ApiRestart,
    /// The daemon SIGKILLed, started again after `hold`.
    DaemonKill,
    /// `nft flush table ip kubenft` in the node's namespace: the daemon must repair it.
    Flush,
    /// A foreign table added to the node's ruleset and removed `hold` later.
    ForeignTable,
    /// 200,000 UDP conntrack entries created in the node's namespace, left to expire.
    Conntrack,
}

pub const KINDS: [FaultKind; 5] = [
    FaultKind::ApiRestart,
    FaultKind::DaemonKill,
    FaultKind::Flush,
    FaultKind::ForeignTable,
    FaultKind::Conntrack,
];

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ApiRestart => "API server restart + compaction",
            FaultKind::DaemonKill => "daemon SIGKILL + restart",
            FaultKind::Flush => "kubenft's table flushed",
            FaultKind::ForeignTable => "foreign table added and removed",
            FaultKind::Conntrack => "200k conntrack entries",
        }
    }

    /// Its name in `--soak-faults`.
    pub fn flag(self) -> &'static str {
        match self {
            FaultKind::ApiRestart => "api",
            FaultKind::DaemonKill => "kill",
            FaultKind::Flush => "flush",
            FaultKind::ForeignTable => "foreign",
            FaultKind::Conntrack => "conntrack",
        }
    }

    /// The kinds `--soak-faults` names (comma-separated `flag`s).
    pub fn parse_list(list: &str) -> Result<Vec<FaultKind>, String> {
        list.split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(|f| {
                KINDS.into_iter().find(|k| k.flag() == f).ok_or_else(|| {
                    let known: Vec<&str> = KINDS.iter().map(|k| k.flag()).collect();
                    format!("--soak-faults: {f:?} is not one of {}", known.join(", "))
                })
            })
            .collect()
    }

    /// How long the fault lasts, drawn from this range: the API server's outage, the daemon's
    /// downtime, the foreign table's life.
    fn hold(self) -> (Duration, Duration) {
        let s = Duration::from_secs;
        match self {
            FaultKind::ApiRestart => (s(2), s(8)),
            FaultKind::DaemonKill => (s(1), s(5)),
            FaultKind::ForeignTable => (s(5), s(15)),
            FaultKind::Flush | FaultKind::Conntrack => (Duration::ZERO, Duration::ZERO),
        }
    }
}

/// splitmix64: a small seeded generator, enough for jitter.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi].
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(if span == 0 {
            0
        } else {
            self.next() % (span + 1)
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planned {
    /// From the soak's start.
    pub at: Duration,
    pub kind: FaultKind,
    pub hold: Duration,
}

/// Runs of this length or longer repeat each fault every 2–5 minutes; shorter ones (CI's
/// slice) inject each fault once, in a shuffled order, one per slot of the run's middle.
pub const LONG_RUN: Duration = Duration::from_secs(600);

/// The faults of `kinds` in a run of `length`, in time order. Every fault starts at least
/// `tail` before the end, so its recovery is inside the run.
pub fn plan(seed: u64, length: Duration, kinds: &[FaultKind]) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let s = Duration::from_secs;
    let mut out = Vec::new();
    if length >= LONG_RUN {
        let last = length - s(90);
        for &kind in kinds {
            let mut at = rng.between(s(20), s(150));
            while at < last {
                let (lo, hi) = kind.hold();
                out.push(Planned {
                    at,
                    kind,
                    hold: rng.between(lo, hi),
                });
                at += rng.between(s(120), s(300));
            }
        }
    } else {
        let mut kinds = kinds.to_vec();
        for i in (1..kinds.len()).rev() {
            kinds.swap(i, rng.next() as usize % (i + 1));
        }
        // The middle of the run: after a short warm-up, before a tail left for recovery.
        let (from, to) = (length / 8, length.saturating_sub(length / 4));
        let slot = to.saturating_sub(from) / kinds.len().max(1) as u32;
        for (i, kind) in kinds.into_iter().enumerate() {
            let (lo, hi) = kind.hold();
            let start = from + slot * i as u32;
            out.push(Planned {
                at: rng.between(start, start + slot / 3),
                kind,
                hold: rng.between(lo, hi.min(slot / 2).max(lo)),
            });
        }
    }
    out.sort_by_key(|p| p.at);
    out
}

/// One sample of the daemon's process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// From the soak's start.
    pub at: Duration,
    /// Which start of the daemon (1 = the first), and how long that process had been running.
    pub incarnation: usize,
    pub since_start: Duration,
    pub rss_mib: f64,
    pub fds: usize,
}

/// The trend check: the largest value among the settled samples (each process past its
/// warm-up) of the run's first window against the same of its last window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trend {
    pub first_max: f64,
    pub last_max: f64,
    pub samples: (usize, usize),
}

impl Trend {
    /// last ≤ first × 1.05; no verdict without samples in both windows.
    pub fn passes(&self) -> Option<bool> {
        (self.samples.0 > 0 && self.samples.1 > 0).then_some(self.last_max <= self.first_max * 1.05)
    }
}

/// The windows compared: 10 minutes each, or a third of a shorter run.
pub fn window(length: Duration) -> Duration {
    (length / 3).min(Duration::from_secs(600))
}

/// How long after its start a process's samples are left out of the trend: a minute, or an
/// eighth of a short run (at least 10 s).
pub fn warm_up(length: Duration) -> Duration {
    (length / 8).clamp(Duration::from_secs(10), Duration::from_secs(60))
}

pub fn trend(samples: &[Sample], length: Duration, value: impl Fn(&Sample) -> f64) -> Trend {
    let (w, warm) = (window(length), warm_up(length));
    let settled = |s: &&Sample| s.since_start >= warm;
    let max_of = |it: Vec<&Sample>| (it.iter().map(|s| value(s)).fold(0.0, f64::max), it.len());
    let (first_max, n_first) = max_of(
        samples
            .iter()
            .filter(settled)
            .filter(|s| s.at < w)
            .collect(),
    );
    let (last_max, n_last) = max_of(
        samples
            .iter()
            .filter(settled)
            .filter(|s| s.at >= length.saturating_sub(w))
            .collect(),
    );
    Trend {
        first_max,
        last_max,
        samples: (n_first, n_last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_long_run_repeats_every_fault_two_to_five_minutes_apart_and_ends_early() {
        let length = S(1800);
        let p = plan(7, length, &KINDS);
        assert_eq!(p, plan(7, length, &KINDS), "seeded");
        assert_ne!(p, plan(8, length, &KINDS));
        for kind in KINDS {
            let at: Vec<Duration> = p.iter().filter(|f| f.kind == kind).map(|f| f.at).collect();
            assert!(at.len() >= 5, "{kind:?}: {at:?}");
            assert!(
                at.windows(2)
                    .all(|w| w[1] - w[0] >= S(120) && w[1] - w[0] <= S(300))
            );
            assert!(at.iter().all(|&t| t >= S(20) && t < length - S(90)));
        }
        assert!(p.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn a_short_run_has_each_fault_once_inside_its_middle() {
        let p = plan(1, S(120), &KINDS);
        let mut kinds: Vec<FaultKind> = p.iter().map(|f| f.kind).collect();
        kinds.sort();
        assert_eq!(kinds, KINDS.to_vec());
        assert!(
            p.iter().all(|f| f.at >= S(15) && f.at + f.hold < S(90)),
            "{p:?}"
        );
        let kill = p.iter().find(|f| f.kind == FaultKind::DaemonKill).unwrap();
        assert!(kill.hold >= S(1));
    }

    #[test]
    fn faults_can_be_chosen_by_name_and_the_default_plan_is_unchanged() {
        let chosen = FaultKind::parse_list("api, flush,foreign,conntrack").unwrap();
        assert!(!chosen.contains(&FaultKind::DaemonKill) && chosen.len() == 4);
        let p = plan(7, S(1800), &chosen);
        assert!(p.iter().all(|f| f.kind != FaultKind::DaemonKill), "{p:?}");
        assert!(
            FaultKind::parse_list("kill,reboot")
                .unwrap_err()
                .contains("\"reboot\"")
        );
        // Every kind named is the same schedule as before the option, so a seed reproduces it.
        let all = FaultKind::parse_list("api,kill,flush,foreign,conntrack").unwrap();
        assert_eq!(plan(7, S(1800), &all), plan(7, S(1800), &KINDS));
    }

    #[test]
    fn the_trend_compares_settled_samples_of_the_first_and_last_windows() {
        let sample = |at: u64, since: u64, rss: f64| Sample {
            at: S(at),
            incarnation: 1,
            since_start: S(since),
            rss_mib: rss,
            fds: 10,
        };
        let length = S(1800);
        let samples = [
            sample(10, 10, 500.0), // warming up: left out
            sample(100, 100, 40.0),
            sample(590, 590, 42.0),
            sample(1000, 1000, 90.0), // the middle: not compared
            sample(1210, 20, 300.0),  // a restarted process warming up
            sample(1700, 510, 44.0),
        ];
        let t = trend(&samples, length, |s| s.rss_mib);
        assert_eq!((t.first_max, t.last_max, t.samples), (42.0, 44.0, (2, 1)));
        assert_eq!(t.passes(), Some(true));
        let grown = trend(&[samples[1], sample(1700, 500, 45.0)], length, |s| {
            s.rss_mib
        });
        assert_eq!(grown.passes(), Some(false));
        assert_eq!(trend(&samples[..1], length, |s| s.rss_mib).passes(), None);
    }
}
