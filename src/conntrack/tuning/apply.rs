//! Deciding and writing the conntrack sysctls of `ConntrackSettings` (the daemon's part: its
//! start, or `--init-only`).

use std::fmt;
use std::path::{Path, PathBuf};

use super::ConntrackSettings;

/// kube-proxy's ceiling for the computed `nf_conntrack_max`, so that a machine with hundreds of
/// cores does not reserve memory for tens of millions of entries.
const MAX_LIMIT: u64 = 1_048_576;

impl ConntrackSettings {
    /// The `nf_conntrack_max` to ensure on a machine with `cpus` CPUs, if any.
    pub(crate) fn conntrack_max(&self, cpus: u32) -> Option<u64> {
        if self.max_per_core == 0 {
            return None;
        }
        let scaled = u64::from(self.max_per_core) * u64::from(cpus);
        let max = if scaled > MAX_LIMIT {
            MAX_LIMIT
        } else {
            scaled.max(u64::from(self.min))
        };
        (max > 0).then_some(max)
    }
}

/// Where `/proc/sys` and `/sys` are: the host's, or a directory standing in for both in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Roots {
    pub(crate) proc_sys: PathBuf,
    pub(crate) sys: PathBuf,
}

impl Roots {
    pub(crate) fn host() -> Roots {
        Roots {
            proc_sys: PathBuf::from("/proc/sys"),
            sys: PathBuf::from("/sys"),
        }
    }

    /// `dir/proc/sys` and `dir/sys`.
    #[cfg(test)]
    pub(crate) fn under(dir: &Path) -> Roots {
        Roots {
            proc_sys: dir.join("proc/sys"),
            sys: dir.join("sys"),
        }
    }

    pub(super) fn sysctl(&self, name: &str) -> PathBuf {
        self.proc_sys.join("net/netfilter").join(name)
    }

    pub(super) fn hashsize(&self) -> PathBuf {
        self.sys.join("module/nf_conntrack/parameters/hashsize")
    }

    /// The online CPUs (`/sys/devices/system/cpu/online`, e.g. `0-3,8-11`), as kube-proxy
    /// counts them from sysfs; the threads this process may use when that cannot be read.
    pub(crate) fn cpus(&self) -> u32 {
        std::fs::read_to_string(self.sys.join("devices/system/cpu/online"))
            .ok()
            .and_then(|list| count_cpu_list(list.trim()))
            .filter(|n| *n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
    }
}

pub(super) fn count_cpu_list(list: &str) -> Option<u32> {
    list.split(',').try_fold(0u32, |total, part| {
        let n = match part.split_once('-') {
            Some((a, b)) => b.parse::<u32>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
        Some(total + n)
    })
}

/// What was done with one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Written: the value was `from`, is now `to`.
    Set { name: String, from: u64, to: u64 },
    /// Left: already at `value`, which the target `wanted` does not call for changing.
    Kept {
        name: String,
        value: u64,
        wanted: u64,
    },
    /// Not written: the file is read-only (`why` says how).
    SkippedReadOnly {
        name: String,
        wanted: u64,
        why: String,
    },
    /// Reading or writing failed.
    Failed {
        name: String,
        wanted: u64,
        error: String,
    },
}

impl Decision {
    pub(crate) fn failed(&self) -> bool {
        matches!(self, Decision::Failed { .. })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Set { name, from, to } if to > from => {
                write!(f, "raised {name} from {from} to {to}")
            }
            Decision::Set { name, from, to } => write!(f, "set {name} from {from} to {to}"),
            Decision::Kept {
                name,
                value,
                wanted,
            } if value == wanted => write!(f, "left {name} at {value}: already as configured"),
            Decision::Kept {
                name,
                value,
                wanted,
            } => write!(
                f,
                "left {name} at {value}: already at least {wanted}, and it is never lowered"
            ),
            Decision::SkippedReadOnly { name, wanted, why } => {
                write!(f, "skipped {name} (wanted {wanted}): {why}")
            }
            Decision::Failed {
                name,
                wanted,
                error,
            } => write!(f, "could not set {name} to {wanted}: {error}"),
        }
    }
}

/// How a setting may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Only upwards (capacities).
    Raise,
    /// To exactly the value (timeouts, flags).
    Exact,
}

/// Applies `settings` under `roots` on a machine with `cpus` CPUs, in kube-proxy's order, and
/// returns one decision per setting it concerns.
pub(crate) fn apply(settings: &ConntrackSettings, roots: &Roots, cpus: u32) -> Vec<Decision> {
    let mut decisions = Vec::new();
    if let Some(max) = settings.conntrack_max(cpus) {
        let limit = ensure(
            &roots.sysctl("nf_conntrack_max"),
            "net.netfilter.nf_conntrack_max",
            max,
            Change::Raise,
        );
        // The hash table is global: size it only where nf_conntrack_max is writable, which the
        // kernel allows in the host's network namespace only.
        let hash = if let Decision::SkippedReadOnly { why, .. } = &limit {
            Decision::SkippedReadOnly {
                name: "nf_conntrack hashsize".into(),
                wanted: max / 4,
                why: format!("nf_conntrack_max is not writable here ({why})"),
            }
        } else {
            ensure(
                &roots.hashsize(),
                "nf_conntrack hashsize",
                max / 4,
                Change::Raise,
            )
        };
        decisions.push(limit);
        decisions.push(hash);
    }
    let timeouts = [
        (
            "nf_conntrack_tcp_timeout_established",
            settings.tcp_established_timeout,
        ),
        (
            "nf_conntrack_tcp_timeout_close_wait",
            settings.tcp_close_wait_timeout,
        ),
    ];
    for (name, timeout) in timeouts {
        if !timeout.is_zero() {
            decisions.push(set_sysctl(roots, name, timeout.as_secs()));
        }
    }
    if settings.tcp_be_liberal {
        decisions.push(set_sysctl(roots, "nf_conntrack_tcp_be_liberal", 1));
    }
    let timeouts = [
        ("nf_conntrack_udp_timeout", settings.udp_timeout),
        (
            "nf_conntrack_udp_timeout_stream",
            settings.udp_stream_timeout,
        ),
    ];
    for (name, timeout) in timeouts {
        if !timeout.is_zero() {
            decisions.push(set_sysctl(roots, name, timeout.as_secs()));
        }
    }
    decisions
}

fn set_sysctl(roots: &Roots, name: &str, value: u64) -> Decision {
    ensure(
        &roots.sysctl(name),
        &format!("net.netfilter.{name}"),
        value,
        Change::Exact,
    )
}

fn ensure(path: &Path, name: &str, wanted: u64, change: Change) -> Decision {
    let failed = |error: String| Decision::Failed {
        name: name.to_string(),
        wanted,
        error,
    };
    let current = match std::fs::read_to_string(path) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(v) => v,
            Err(_) => return failed(format!("{}: not a number: {text:?}", path.display())),
        },
        Err(e) => return failed(format!("reading {}: {e}", path.display())),
    };
    let keep = match change {
        Change::Raise => current >= wanted,
        Change::Exact => current == wanted,
    };
    if keep {
        return Decision::Kept {
            name: name.to_string(),
            value: current,
            wanted,
        };
    }
    if let Some(why) = read_only(path) {
        return Decision::SkippedReadOnly {
            name: name.to_string(),
            wanted,
            why,
        };
    }
    match std::fs::write(path, wanted.to_string()) {
        Ok(()) => Decision::Set {
            name: name.to_string(),
            from: current,
            to: wanted,
        },
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => Decision::SkippedReadOnly {
            name: name.to_string(),
            wanted,
            why: format!("{}: {e}", path.display()),
        },
        Err(e) => failed(format!("writing {}: {e}", path.display())),
    }
}

/// Why `path` cannot be written, if it cannot: its mount is read-only, or no one may write it.
fn read_only(path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data; all zeroes is a valid value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes into `stat` only; the path is NUL-terminated.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } == 0
        && stat.f_flag & libc::ST_RDONLY != 0
    {
        return Some(format!("{} is on a read-only mount", path.display()));
    }
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o222 == 0)
        .then(|| format!("{} is read-only (mode {:o})", path.display(), mode & 0o777))
}
