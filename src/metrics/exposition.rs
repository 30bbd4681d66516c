//! The registry's building blocks: lock-free cells (float gauges, fixed-bucket histograms),
//! kube-proxy's bucket layouts, and the Prometheus text exposition format's spelling of
//! numbers, label values and HELP/TYPE lines.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// A float stored in an `AtomicU64` as its bit pattern, so gauges and sums need no lock.
#[derive(Debug, Default)]
pub(super) struct AtomicF64(AtomicU64);

impl AtomicF64 {
    pub(super) fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    pub(super) fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }

    pub(super) fn add(&self, v: f64) {
        // fetch_update retries on contention; the closure never refuses.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }
}

/// A Prometheus histogram with fixed upper bounds. Buckets are stored non-cumulatively (one
/// increment per observation) and summed up when rendered.
#[derive(Debug)]
pub(super) struct Histogram {
    bounds: Vec<f64>,
    /// One slot per bound plus the +Inf overflow slot.
    buckets: Vec<AtomicU64>,
    sum: AtomicF64,
    count: AtomicU64,
}

impl Histogram {
    pub(super) fn new(bounds: Vec<f64>) -> Self {
        debug_assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "bounds must increase"
        );
        let buckets = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            bounds,
            buckets,
            sum: AtomicF64::default(),
            count: AtomicU64::new(0),
        }
    }

    pub(super) fn observe(&self, v: f64) {
        // Prometheus buckets are "less than or equal": v lands in the first bound >= v.
        let slot = self.bounds.partition_point(|b| *b < v);
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.sum.add(v);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn render(&self, out: &mut String, name: &str) {
        self.render_labelled(out, name, "");
    }

    /// Renders the series with `labels` (`key="value",…`, already escaped) before `le`.
    pub(super) fn render_labelled(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (bound, slot) in self.bounds.iter().zip(&self.buckets) {
            cumulative += slot.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{}\"}} {cumulative}",
                fmt_f64(*bound)
            );
        }
        cumulative += self.buckets[self.bounds.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let braced = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braced} {}", fmt_f64(self.sum.get()));
        // The count is read after the buckets; a concurrent observation may make it lead the
        // +Inf bucket by one for a scrape, which Prometheus tolerates. Report the larger.
        let count = self.count.load(Ordering::Relaxed).max(cumulative);
        let _ = writeln!(out, "{name}_count{braced} {count}");
    }
}

/// `count` bounds starting at `start`, each `factor` times the previous.
pub(super) fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    std::iter::successors(Some(start), |b| Some(b * factor))
        .take(count)
        .collect()
}

/// `count` bounds starting at `start`, `width` apart.
pub(super) fn linear_buckets(start: f64, width: f64, count: usize) -> Vec<f64> {
    (0..count).map(|i| start + width * i as f64).collect()
}

/// kube-proxy's sync-duration layout: 1 ms doubling up to ~16 s.
pub(super) fn sync_duration_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 15)
}

/// kube-proxy's network-programming layout: a 0 bucket, 0.25 s and 0.5 s, each second to 59 s,
/// every 5 s to 115 s, then every 30 s to 5 minutes.
pub(super) fn network_programming_buckets() -> Vec<f64> {
    let mut b = vec![0.0];
    b.extend(linear_buckets(0.25, 0.25, 2));
    b.extend(linear_buckets(1.0, 1.0, 59));
    b.extend(linear_buckets(60.0, 5.0, 12));
    b.extend(linear_buckets(120.0, 30.0, 7));
    b
}

/// Prometheus float formatting: integers without a fraction, specials as Prometheus spells them.
pub(super) fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

/// Escapes a label value as the exposition format requires (backslash, quote, newline).
pub(super) fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

pub(super) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}
