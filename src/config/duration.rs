//! Durations as Go's `time` package (and so kube-proxy's flags and configuration) reads and
//! writes them.

use std::time::Duration;

/// Parses a duration as Go's `time.ParseDuration` (and so kube-proxy's flags) writes them:
/// a sequence of decimal numbers with units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`, e.g. `1h30m`,
/// `1.5s`, `100ms`; `0` alone is zero. Negative durations are refused.
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, &'static str> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty");
    }
    if text.starts_with('-') {
        return Err("negative");
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("a number without a unit")?;
        if number_len == 0 {
            return Err("expected a number");
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| "a malformed number")?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err("an unknown unit"),
        };
        rest = &rest[unit_len..];
        total += number * nanos_per_unit;
    }
    if total > u64::MAX as f64 {
        return Err("too large");
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

/// Writes `d` as Go's `Duration.String` does, so kube-proxy reads back the same value: `0s`,
/// `100ms`, `1.5s`, `1m30s`, `24h0m0s`.
pub(crate) fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (unit, per) = match nanos {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", decimal(nanos / per, nanos % per, per));
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let seconds = decimal(u128::from(s), u128::from(d.subsec_nanos()), 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `whole.fraction` with the fraction's trailing zeros (and a bare point) left out.
fn decimal(whole: u128, fraction: u128, per: u128) -> String {
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = per.ilog10() as usize;
    let text = format!("{fraction:0digits$}");
    format!("{whole}.{}", text.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        for (text, nanos) in [
            ("0", 0u64),
            ("1ns", 1),
            ("1.5s", 1_500_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("2µs", 2_000),
            ("+1m", 60_000_000_000),
        ] {
            assert_eq!(
                parse_go_duration(text),
                Ok(Duration::from_nanos(nanos)),
                "{text}"
            );
        }
        for bad in ["", "-1s", "s", "1", "1..2s", "1sec"] {
            assert!(parse_go_duration(bad).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn durations_are_written_like_go_and_read_back_unchanged() {
        for (nanos, text) in [
            (0u64, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (100_000_000, "100ms"),
            (1_500_000_000, "1.5s"),
            (90_000_000_000, "1m30s"),
            (86_400_000_000_000, "24h0m0s"),
            (3_723_004_000_000, "1h2m3.004s"),
        ] {
            let d = Duration::from_nanos(nanos);
            assert_eq!(format_go_duration(d), text);
            assert_eq!(parse_go_duration(text), Ok(d), "{text} reads back");
        }
    }
}
