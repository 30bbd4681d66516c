//! Throw-away network namespaces for tests, the demo and benchmarks.
//!
//! A `Netns` is created with a unique name and deleted when dropped (also during a panic's
//! unwinding), so a failed test leaves nothing behind. Code runs inside it either as a
//! closure on a thread that joined the namespace (`run`) or as a command (`exec`).

use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("running `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("opening namespace {name}: {source}")]
    Open {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("joining namespace {name}: {source}")]
    Join {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A named network namespace that is deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

/// True when this process may create network namespaces (root, or CAP_SYS_ADMIN).
pub fn can_create() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Netns {
    /// Creates `knft-<tag>-<pid>-<n>`: unique per process and call, short enough for IFNAMSIZ
    /// users that derive interface names from it. Loopback is brought up.
    pub fn create(tag: &str) -> Result<Netns, NetnsError> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag: String = tag
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(12)
            .collect();
        let name = format!("knft-{tag}-{}-{n}", std::process::id());
        run_checked(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs a command inside the namespace; a non-zero exit is an error carrying stderr.
    pub fn exec(&self, args: &[&str]) -> Result<Output, NetnsError> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).args(args);
        run_checked(&mut cmd)
    }

    /// Runs a command inside the namespace with `input` on its standard input (a script for
    /// `nft -f -`, a ruleset for `iptables-restore`); a non-zero exit is an error.
    pub fn exec_with_stdin(&self, args: &[&str], input: &str) -> Result<Output, NetnsError> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let command = describe(&cmd);
        let spawn_err = |source| NetnsError::Spawn {
            command: command.clone(),
            source,
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        // Write then drop stdin so the program sees EOF. A program that fails early closes its
        // end; its exit status and stderr below say why, so a failed write is reported only
        // when the program succeeded.
        let written = child
            .stdin
            .take()
            .expect("stdin was piped")
            .write_all(input.as_bytes());
        let out = child.wait_with_output().map_err(spawn_err)?;
        if !out.status.success() {
            return Err(NetnsError::Failed {
                command,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        written.map_err(spawn_err)?;
        Ok(out)
    }

    /// Runs a command inside the namespace and returns its output whatever the exit status.
    pub fn exec_unchecked(&self, args: &[&str]) -> Result<Output, NetnsError> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).args(args);
        cmd.output().map_err(|source| NetnsError::Spawn {
            command: describe(&cmd),
            source,
        })
    }

    /// Runs `f` on a new thread that has joined this namespace, and returns its result.
    /// Sockets made by `f` belong to the namespace and keep working after the thread ends.
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, NetnsError> {
        let join = self.enter_fn()?;
        let handle = std::thread::spawn(move || {
            join()?;
            Ok(f())
        });
        handle.join().expect("thread inside namespace panicked")
    }

    /// Spawns a long-running thread inside the namespace (servers). The thread ends when `f` does.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<std::thread::JoinHandle<Result<T, NetnsError>>, NetnsError> {
        let join = self.enter_fn()?;
        Ok(std::thread::spawn(move || {
            join()?;
            Ok(f())
        }))
    }

    /// Returns a closure that moves the calling thread into this namespace.
    fn enter_fn(
        &self,
    ) -> Result<impl FnOnce() -> Result<(), NetnsError> + Send + 'static, NetnsError> {
        let name = self.name.clone();
        let file = File::open(format!("/run/netns/{name}")).map_err(|source| NetnsError::Open {
            name: name.clone(),
            source,
        })?;
        Ok(move || {
            // SAFETY: setns on a valid namespace fd only changes this thread's namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(NetnsError::Join {
                    name,
                    source: std::io::Error::last_os_error(),
                });
            }
            Ok(())
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command, turning a spawn failure or non-zero exit into an error.
pub(crate) fn run_checked(cmd: &mut Command) -> Result<Output, NetnsError> {
    let command = describe(cmd);
    let out = cmd.output().map_err(|source| NetnsError::Spawn {
        command: command.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(NetnsError::Failed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_usable_and_gone_after_drop() {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("selftest").unwrap();
        let name = ns.name().to_string();
        let out = ns.exec(&["ip", "-o", "link", "show", "lo"]).unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("UP"));
        let ifaces = ns
            .run(|| std::fs::read_to_string("/proc/thread-self/net/dev").unwrap())
            .unwrap();
        assert_eq!(
            ifaces.lines().count(),
            3,
            "only lo inside a fresh namespace: {ifaces}"
        );
        drop(ns);
        assert!(!std::path::Path::new(&format!("/run/netns/{name}")).exists());
    }
}
