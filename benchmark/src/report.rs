//! Tables, the plot and the machine description for BENCHMARKS.md.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

use kubenft::cluster::ConsistentEndpoint;

use crate::churn::ChurnRun;
use crate::conntrack::ConntrackRun;
use crate::control::{ConsistentRow, ControlRow, SHARDS};
use crate::daemon::{DaemonRun, LoggedSync};
use crate::dataplane::{Latency, LatencyRow, Spread};
use crate::soak::{SoakRun, Traffic, schedule};
use crate::takeover::{Case as TakeoverCase, TakeoverRow};

pub fn secs(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

pub fn cold_table(rows: &[ControlRow]) -> String {
    let mut out = String::from(
        "| services × endpoints | chains | rules | map elements | kubenft netlink | nft -f | iptables-restore | nft -f ÷ netlink | planner only |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} × {} | {} | {} | {} | {} | {} | {} | {:.1}× | {} |",
            r.services,
            r.endpoints,
            r.chains,
            r.rules,
            r.elements,
            secs(r.netlink),
            secs(r.nft_text),
            r.iptables.map_or("—".into(), secs),
            r.nft_text.as_secs_f64() / r.netlink.as_secs_f64(),
            secs(r.build),
        );
    }
    out
}

/// The same clusters cold-synced without and with consistent endpoint choice on every Service.
pub fn consistent_table(rows: &[ConsistentRow]) -> String {
    let mut out = String::from(
        "| services × endpoints | endpoint choice | set and map elements | rules | planner only | kubenft netlink |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let mode = match r.mode {
            None => "numgen random (no annotation)",
            Some(ConsistentEndpoint::Client) => "annotated `client` (jhash)",
            Some(ConsistentEndpoint::Connection) => "annotated `connection` (jhash)",
        };
        let _ = writeln!(
            out,
            "| {} × {} | {mode} | {} | {} | {} | {} |",
            r.services,
            r.endpoints,
            r.cold.elements,
            r.cold.rules,
            secs(r.cold.build),
            secs(r.cold.netlink),
        );
    }
    out
}

/// The sets whose elements took longest to read back at each scale's restart, and the same
/// elements split into `SHARDS` sets.
pub fn set_read_table(rows: &[ControlRow]) -> String {
    let mut out = format!(
        "| services × endpoints | set | elements | messages | read back | split into {SHARDS} sets | speed-up |\n|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        for s in &r.slowest_sets {
            let _ = writeln!(
                out,
                "| {} × {} | {} | {} | {} | {} | {} | {:.1}× |",
                r.services,
                r.endpoints,
                s.name,
                s.elements,
                s.messages,
                secs(s.time),
                secs(s.sharded),
                s.time.as_secs_f64() / s.sharded.as_secs_f64().max(1e-9),
            );
        }
    }
    out
}

/// Each scale's restart on an unchanged kernel, phase by phase, and the same restart reading
/// every element back.
pub fn restart_table(rows: &[ControlRow]) -> String {
    let mut out = String::from(
        "| services × endpoints | read back (records trusted) | plan | digests, diff, commit | total | ops | reading every element: total | ops | speed-up |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let p = r.restart_phases;
        let _ = writeln!(
            out,
            "| {} × {} | {} | {} | {} | **{}** | {} | {} | {} | {:.1}× |",
            r.services,
            r.endpoints,
            secs(p.read),
            secs(p.plan),
            secs(p.sync),
            secs(r.restart),
            r.restart_ops,
            secs(p.every_element),
            p.every_element_ops,
            p.every_element.as_secs_f64() / r.restart.as_secs_f64().max(1e-9),
        );
    }
    out
}

pub fn change_table(rows: &[ControlRow]) -> String {
    let mut out = String::from(
        "| services × endpoints | +1 endpoint: plan | diff | commit | total | ops | plan, comparing all | +1 service: plan | diff | commit | total | ops | plan, comparing all | restart: read back + diff | ops |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let (e, s) = (r.add_endpoint, r.add_service);
        let _ = writeln!(
            out,
            "| {} × {} | {} | {} | {} | **{}** | {} | {} | {} | {} | {} | **{}** | {} | {} | {} | {} |",
            r.services,
            r.endpoints,
            secs(e.plan),
            secs(e.diff),
            secs(e.commit),
            secs(e.total()),
            e.ops,
            secs(e.plan_compare_all),
            secs(s.plan),
            secs(s.diff),
            secs(s.commit),
            secs(s.total()),
            s.ops,
            secs(s.plan_compare_all),
            secs(r.restart),
            r.restart_ops,
        );
    }
    out
}

/// `limit`: the shipped DaemonSet's memory limit in MiB (or why it could not be read).
pub fn daemon_table(
    rows: &[(String, Result<DaemonRun, String>)],
    limit: &Result<f64, String>,
) -> String {
    let limit_header = match limit {
        Ok(mib) => format!("shipped {mib:.0} MiB limit at the peak"),
        Err(_) => "shipped memory limit".to_string(),
    };
    let mut out = format!(
        "| services × endpoints | start → first sync | the sync in it | of which model update | kernel round trip | RSS after it | peak RSS | its cgroup after it | cgroup peak | {limit_header} | +1 endpoint, API write → synced: median | slowest | the daemon's sync in it | of which model update | kernel round trip | ops | after-sync steps | +1 service, API write → synced | ops |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (scale, run) in rows {
        let _ = match run {
            Ok(d) => {
                let median = |f: fn(&LoggedSync) -> Duration| {
                    let mut v: Vec<Duration> = d.endpoint_syncs.iter().map(f).collect();
                    v.sort();
                    v.get(v.len() / 2).copied()
                };
                let shown = |t: Option<Duration>| t.map_or("not seen".into(), secs);
                // The limit is enforced on the cgroup's usage; RSS where no cgroup was made.
                let peak = d.peak_cgroup_mib.unwrap_or(d.peak_rss_mib);
                let fits = match limit {
                    Ok(mib) if peak <= *mib => {
                        format!("holds ({:.0}% used)", 100.0 * peak / mib)
                    }
                    Ok(mib) => format!("**exceeded** by {:.0} MiB", peak - mib),
                    Err(e) => format!("not read: {e}"),
                };
                let mib = |m: Option<f64>| m.map_or("—".to_string(), |m| format!("{m:.0} MiB"));
                writeln!(
                    out,
                    "| {scale} | {} | {} | {} | {} | {:.0} MiB | {:.0} MiB | {} | {} | {fits} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    secs(d.first_sync),
                    shown(d.first_sync_itself),
                    shown(d.first_sync_model),
                    shown(d.first_sync_kernel),
                    d.rss_mib,
                    d.peak_rss_mib,
                    mib(d.cgroup_mib),
                    mib(d.peak_cgroup_mib),
                    shown(median(|s| s.end_to_end)),
                    shown(d.endpoint_syncs.iter().map(|s| s.end_to_end).max()),
                    shown(median(|s| s.sync)),
                    shown(median(|s| s.model)),
                    shown(median(|s| s.kernel)),
                    d.endpoint_syncs
                        .iter()
                        .map(|s| s.ops.to_string())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect::<Vec<_>>()
                        .join(", "),
                    shown(median(|s| s.after_sync)),
                    shown(d.service_sync.as_ref().map(|s| s.end_to_end)),
                    d.service_sync
                        .as_ref()
                        .map_or("—".to_string(), |s| s.ops.to_string()),
                )
            }
            Err(e) => writeln!(
                out,
                "| {scale} | not measured: {} | | | | | | | | | | | | | | | | | |",
                e.lines().next().unwrap_or("")
            ),
        };
    }
    out
}

pub fn latency_table(rows: &[LatencyRow]) -> String {
    let mut out = String::from(
        "| services in the table | direct p50 | direct p99 | pod via kubenft node p50 | p99 | kubenft service p50 | p99 | iptables service p50 | p99 | service p50 ÷ direct | ÷ pod via node |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let pair = |l: Option<Latency>| {
        l.map_or(("—".into(), "—".into()), |l| {
            (micros(l.p50), micros(l.p99))
        })
    };
    for r in rows {
        let (d50, d99) = pair(Some(r.direct));
        let (v50, v99) = pair(Some(r.pod_via_kubenft));
        let (k50, k99) = pair(Some(r.kubenft));
        let (i50, i99) = pair(r.iptables);
        let _ = writeln!(
            out,
            "| {} | {d50} | {d99} | {v50} | {v99} | {k50} | {k99} | {i50} | {i99} | {:.2} | {:.2} |",
            r.services,
            r.kubenft.p50.as_secs_f64() / r.direct.p50.as_secs_f64(),
            r.kubenft.p50.as_secs_f64() / r.pod_via_kubenft.p50.as_secs_f64()
        );
    }
    out
}

pub fn spread_table(s: &Spread) -> String {
    let fewest = s.counts.values().min().copied().unwrap_or(0);
    let most = s.counts.values().max().copied().unwrap_or(0);
    let counts: Vec<String> = s.counts.values().map(|c| c.to_string()).collect();
    format!(
        "| endpoints | connections | per endpoint | fewest | most | χ² (df {}) | p-value |\n|---|---|---|---|---|---|---|\n| {} | {} | {} | {fewest} | {most} | {:.2} | {:.3} |\n",
        s.counts.len().saturating_sub(1),
        s.counts.len(),
        s.connections,
        counts.join(" "),
        s.chi_square,
        s.p_value,
    )
}

/// Grouped horizontal bars of the cold syncs, one group per scale, linear in seconds.
pub fn svg(rows: &[ControlRow]) -> String {
    let series: [(&str, &str); 3] = [
        ("kubenft (netlink)", "#2b7bb9"),
        ("nft -f", "#e08a1e"),
        ("iptables-restore", "#999999"),
    ];
    let value = |r: &ControlRow, i: usize| match i {
        0 => Some(r.netlink),
        1 => Some(r.nft_text),
        _ => r.iptables,
    };
    let max = rows
        .iter()
        .flat_map(|r| (0..3).filter_map(move |i| value(r, i)))
        .max()
        .unwrap_or(Duration::from_secs(1))
        .as_secs_f64()
        .max(1e-3);
    let (left, width, bar, gap) = (150.0, 560.0, 14.0, 16.0);
    let height = 60.0 + rows.len() as f64 * (3.0 * bar + gap);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"10\" y=\"18\" font-size=\"13\">Cold full sync (median seconds, lower is better)</text>\n",
        left + width + 90.0
    );
    for (i, (name, color)) in series.iter().enumerate() {
        let x = 10.0 + i as f64 * 170.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"28\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"37\">{name}</text>",
            x + 14.0
        );
    }
    let mut y = 50.0;
    for r in rows {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{}\">{} × {}</text>",
            y + 1.5 * bar + 4.0,
            r.services,
            r.endpoints
        );
        for (i, (_, color)) in series.iter().enumerate() {
            if let Some(v) = value(r, i) {
                let w = (v.as_secs_f64() / max * width).max(1.0);
                let _ = writeln!(
                    s,
                    "<rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{}\">{}</text>",
                    bar - 2.0,
                    left + w + 4.0,
                    y + bar - 4.0,
                    secs(v)
                );
            }
            y += bar;
        }
        y += gap;
    }
    s.push_str("</svg>\n");
    s
}

pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let version = |cmd: &str| {
        Command::new(cmd)
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_else(|_| "not installed".into())
    };
    format!(
        "kernel {kernel}; {cores} × {cpu}; {}; {}",
        version("nft"),
        version("iptables-restore")
    )
}

/// The churn run: how fast changes reached the kernel, then what the traffic, the daemon's
/// syncs and its memory did meanwhile.
pub fn churn_tables(runs: &[Result<ChurnRun, String>]) -> String {
    let mut out = String::from(
        "| services × endpoints | changes asked | written (achieved rate) | writer's worst lag | API write → in the kernel: p50 | p99 | max | not seen | bar: p99 ≤ min-sync-period + 100 ms |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let shown = |t: Option<Duration>| t.map_or("—".into(), secs);
    for run in runs {
        let _ = match run {
            Ok(r) => writeln!(
                out,
                "| {} × {} | {}/s for {} s | {} ({:.0}/s) | {} | {} | {} | {} | {} | {} ({}) |",
                r.services,
                r.endpoints,
                r.rate,
                r.seconds,
                r.written,
                r.achieved_rate,
                secs(r.writer_lag),
                shown(r.programmed.map(|p| p.p50)),
                shown(r.programmed.map(|p| p.p99)),
                shown(r.programmed.map(|p| p.max)),
                r.unseen,
                if r.passes() { "**pass**" } else { "**fail**" },
                secs(r.bar()),
            ),
            Err(e) => writeln!(
                out,
                "| not measured: {} | | | | | | | | |",
                e.lines().next().unwrap_or("")
            ),
        };
    }
    out.push_str(
        "\n| services × endpoints | new connections (failed) | long-lived echoes (failed) | partial syncs | full syncs | failed syncs | sync: p50 | max | of which model update: p50 | kernel round trip: p50 | after-sync steps: p50 | ops: p50 | max | RSS at start | middle | end | peak RSS | monitor overruns |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs.iter().flatten() {
        let s = &r.syncs;
        let _ = writeln!(
            out,
            "| {} × {} | {} ({}) | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.0} MiB | {} |",
            r.services,
            r.endpoints,
            r.traffic.connections,
            r.traffic.failed,
            r.traffic.round_trips,
            r.traffic.long_failed,
            s.partial,
            s.full,
            s.failed,
            shown(s.seconds.map(|p| p.p50)),
            shown(s.seconds.map(|p| p.max)),
            shown(s.model.map(|p| p.p50)),
            shown(s.kernel.map(|p| p.p50)),
            shown(s.after_sync.map(|p| p.p50)),
            s.ops_p50,
            s.ops_max,
            r.rss_mib[0],
            r.rss_mib[1],
            r.rss_mib[2],
            r.peak_rss_mib,
            r.monitor_overruns,
        );
    }
    for r in runs.iter().flatten() {
        // Honest about the load: a writer that fell behind measured a lower rate.
        if r.achieved_rate < 0.95 * r.rate as f64 {
            let _ = writeln!(
                out,
                "\nAt {} × {} the writer could not sustain {} changes/s: it wrote {:.0}/s.",
                r.services, r.endpoints, r.rate, r.achieved_rate
            );
        }
        for e in &r.traffic.errors {
            let _ = writeln!(
                out,
                "\nFailed connection at {} × {}: {e}",
                r.services, r.endpoints
            );
        }
    }
    out
}

/// kubenft's first sync on a node holding nothing and on nodes holding kube-proxy's rules.
pub fn takeover_table(rows: &[TakeoverRow]) -> String {
    let mut out = String::from(
        "| services × endpoints | the node holds | loading it (kube-proxy's tool) | kubenft sync --once | over the empty node | operations | kube-proxy's objects before | removed (kubenft's log) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let baseline = rows
            .iter()
            .find(|b| {
                (b.services, b.endpoints, b.case) == (r.services, r.endpoints, TakeoverCase::Empty)
            })
            .map(|b| b.sync);
        let over = match baseline {
            Some(b) if r.case != TakeoverCase::Empty => {
                let d = r.sync.as_secs_f64() - b.as_secs_f64();
                format!("{d:+.3} s")
            }
            _ => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {} × {} | {} | {} | {} | {over} | {} | {} | {} |",
            r.services,
            r.endpoints,
            r.case.label(),
            r.load.map_or("—".into(), secs),
            secs(r.sync),
            r.ops,
            r.before,
            r.removed,
        );
    }
    out
}

/// The busy conntrack table: one row per sync, then the targets.
pub fn conntrack_tables(run: &Result<ConntrackRun, String>) -> String {
    let r = match run {
        Ok(r) => r,
        Err(e) => return format!("not measured: {}\n", e.lines().next().unwrap_or("")),
    };
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    let mut out = format!(
        "{} entries made over ctnetlink in {:.1} s ({} taken); the daemon at {} × {}, {} of the \
         Services UDP.\n\n| sync | operations | sync to its commit | table read | conntrack work \
         | entries read | deleted | daemon CPU |\n|---|---|---|---|---|---|---|---|\n",
        r.entries,
        r.fill.as_secs_f64(),
        r.created,
        r.services,
        r.endpoints,
        crate::conntrack::UDP_SERVICES,
    );
    for row in &r.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            row.what,
            row.ops,
            ms(row.sync),
            if row.conntrack_read { "yes" } else { "no" },
            ms(row.conntrack),
            row.examined,
            row.deleted,
            ms(row.cpu),
        );
    }
    let (fastest, slowest) = (
        r.walks.iter().min().copied().unwrap_or_default(),
        r.walks.iter().max().copied().unwrap_or_default(),
    );
    let _ = writeln!(
        out,
        "\nThe kernel's walk of the table alone (a dump no entry matches, {} times): {} to {}; \
         no reading of the table costs less.",
        r.walks.len(),
        ms(fastest),
        ms(slowest),
    );
    let _ = writeln!(
        out,
        "\nAfter the removals: {} of {} UDP flows DNATed to a removed endpoint left, {} of {} \
         to the endpoints still serving kept. The idle daemon: {} of CPU in {} s.\n",
        r.stale_left,
        r.stale_made,
        r.kept_left,
        r.kept_made,
        ms(r.idle_cpu),
        r.idle.as_secs(),
    );
    for (text, pass) in r.verdicts() {
        let _ = writeln!(out, "- {text}: **{}**", if pass { "pass" } else { "fail" });
    }
    out
}

/// The soak: its targets against what it measured, each fault, the daemon's processes and
/// every failure.
pub fn soak_tables(run: &Result<SoakRun, String>) -> String {
    let r = match run {
        Ok(r) => r,
        Err(e) => return format!("The soak did not run to the end: {e}\n"),
    };
    let mut out = String::new();
    let verdict = |ok: bool| if ok { "**pass**" } else { "**fail**" };
    let shown = |t: Option<Duration>| t.map_or("—".into(), secs);
    let length = r.length.as_secs_f64() / 60.0;
    let _ = writeln!(
        out,
        "{} × {} for {length:.0} min, {} endpoint changes/s through the API, fault schedule seed \
         {} (`--soak-seed {}` repeats it).\n",
        r.services,
        r.endpoints,
        crate::soak::RATE,
        r.seed,
        r.seed
    );
    out.push_str("| measure | value | target | result |\n|---|---|---|---|\n");
    let failed_by = |flow: Traffic, repair: bool| {
        r.failures
            .iter()
            .filter(|f| f.flow == flow && f.in_repair == repair)
            .count()
    };
    for flow in Traffic::ALL {
        let _ = writeln!(
            out,
            "| {} | {} ({} failed, {} more while a flushed table was repaired) | 0 failed | {} |",
            flow.name(),
            r.traffic[flow as usize],
            failed_by(flow, false),
            failed_by(flow, true),
            verdict(failed_by(flow, false) == 0),
        );
    }
    let in_repair = r.failures.iter().filter(|f| f.in_repair).count();
    let _ = writeln!(
        out,
        "| failures while a flushed table was repaired (flush → the repairing full sync) | {in_repair} | reported | — |"
    );
    let _ = writeln!(
        out,
        "| syncs: partial / full / failed | {} / {} / {} | 0 failed | {} |",
        r.syncs.partial,
        r.syncs.full + 1,
        r.syncs.failed,
        verdict(r.syncs.failed == 0)
    );
    let _ = writeln!(
        out,
        "| panics in the daemon's log | {} | 0 | {} |",
        r.panics,
        verdict(r.panics == 0)
    );
    let _ = writeln!(
        out,
        "| daemon exits not caused by the soak | {} | 0 | {} |",
        r.crashes.len(),
        verdict(r.crashes.is_empty())
    );
    let p = |s: Option<crate::churn::Spread>| {
        s.map_or("—".into(), |s| {
            format!(
                "p50 {} · p99 {} · max {}",
                secs(s.p50),
                secs(s.p99),
                secs(s.max)
            )
        })
    };
    let _ = writeln!(
        out,
        "| API write → in the kernel, every change | {} | reported | — |",
        p(r.programmed)
    );
    let _ = writeln!(
        out,
        "| … outside API restarts, daemon restarts and flushes (from the fault until programming caught up) | {} | reported | — |",
        p(r.programmed_outside)
    );
    let _ = writeln!(
        out,
        "| changes written / never seen in the kernel (monitor overruns) | {} / {} ({}) | 0 unseen | {} |",
        r.written,
        r.unseen,
        r.monitor_overruns,
        verdict(r.unseen == 0)
    );
    let warm = schedule::warm_up(r.length).as_secs();
    let window = schedule::window(r.length).as_secs_f64() / 60.0;
    for (what, t, unit) in [("RSS", r.rss, " MiB"), ("open fds", r.fds, "")] {
        let judged = what != "RSS" || r.judges_rss();
        let _ = writeln!(
            out,
            "| {what}: max of the first {window:.1} min → of the last {window:.1} min (each process's first {warm} s left out; samples) | {:.1}{unit} → {:.1}{unit} ({} → {}) | {} | {} |",
            t.first_max,
            t.last_max,
            t.samples.0,
            t.samples.1,
            if judged {
                "last ≤ first × 1.05"
            } else {
                "reported (a trend needs ≥ 10 min)"
            },
            match t.passes() {
                _ if !judged => "—",
                Some(ok) => verdict(ok),
                None => "**no samples**",
            }
        );
    }
    let missed = r.missed();
    let _ = writeln!(
        out,
        "\n**Soak: {}**\n",
        if missed.is_empty() {
            "every target met".to_string()
        } else {
            format!("missed: {}", missed.join("; "))
        }
    );

    out.push_str("| at | fault | what happened | programming caught up (first change after it) |\n|---|---|---|---|\n");
    for f in &r.faults {
        let _ = writeln!(
            out,
            "| {:.0} s | {} | {}{} | {} |",
            f.started.as_secs_f64(),
            f.planned.kind.name(),
            f.detail,
            f.problem
                .as_deref()
                .map(|p| format!(" **{p}**"))
                .unwrap_or_default(),
            shown(f.caught_up),
        );
    }

    out.push_str("\n| daemon process | started at | samples | RSS: first → last (max) | open fds: first → last (max) |\n|---|---|---|---|---|\n");
    let mut incarnations: Vec<usize> = r.samples.iter().map(|s| s.incarnation).collect();
    incarnations.dedup();
    for i in incarnations {
        let s: Vec<_> = r.samples.iter().filter(|s| s.incarnation == i).collect();
        let (first, last) = (s[0], s[s.len() - 1]);
        let _ = writeln!(
            out,
            "| {i} | {:.0} s | {} | {:.1} → {:.1} ({:.1}) MiB | {} → {} ({}) |",
            first.at.saturating_sub(first.since_start).as_secs_f64(),
            s.len(),
            first.rss_mib,
            last.rss_mib,
            s.iter().map(|s| s.rss_mib).fold(0.0, f64::max),
            first.fds,
            last.fds,
            s.iter().map(|s| s.fds).max().unwrap_or(0),
        );
    }
    if !r.failures.is_empty() {
        out.push_str("\n| at | traffic | service | cause | while a flushed table was repaired |\n|---|---|---|---|---|\n");
        for f in r.failures.iter().take(100) {
            let _ = writeln!(
                out,
                "| {:.1} s | {} | {} | {} | {} |",
                f.at.as_secs_f64(),
                f.flow.name(),
                f.service,
                f.cause,
                if f.in_repair { "yes" } else { "no" }
            );
        }
        if r.failures.len() > 100 {
            let _ = writeln!(
                out,
                "\n… and {} more (the bench's output lists all).",
                r.failures.len() - 100
            );
        }
    }
    for c in &r.crashes {
        let _ = writeln!(out, "\nDaemon exit: {c}");
    }
    let _ = writeln!(out, "\nThe daemon's log: {}", r.log);
    out
}
