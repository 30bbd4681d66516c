//! The node's conntrack sysctls, set at start as kube-proxy sets them: `nf_conntrack_max` from
//! `maxPerCore` × CPUs (at least `min`, at most 1,048,576), the hash table sized to a quarter
//! of it, and the TCP and UDP timeouts and `tcp_be_liberal` when they are configured.
//!
//! Guarantees: `nf_conntrack_max` and the hash size are only ever raised, never lowered;
//! timeouts are set to exactly the configured value (as kube-proxy does), and a zero setting
//! leaves the kernel's value alone; a setting whose file is read-only (a read-only `/proc/sys`
//! or `/sys` mount, or a global knob seen from a network namespace that is not the host's,
//! which the kernel makes read-only there) is skipped, not failed; every decision is returned
//! for the caller to log; every path lies under [`Roots`], so the decisions are tested on a
//! plain directory and never on the host.

use std::time::Duration;

/// kube-proxy's `KubeProxyConntrackConfiguration`, with its defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConntrackSettings {
    /// `--conntrack-max-per-core`; 0 leaves `nf_conntrack_max` (and `min`) alone.
    pub(crate) max_per_core: u32,
    /// `--conntrack-min`: the least `nf_conntrack_max` is set to.
    pub(crate) min: u32,
    /// `--conntrack-tcp-timeout-established`; zero leaves it alone.
    pub(crate) tcp_established_timeout: Duration,
    /// `--conntrack-tcp-timeout-close-wait`; zero leaves it alone.
    pub(crate) tcp_close_wait_timeout: Duration,
    /// `--conntrack-tcp-be-liberal`: sets `nf_conntrack_tcp_be_liberal` to 1 (never back to 0).
    pub(crate) tcp_be_liberal: bool,
    /// `--conntrack-udp-timeout` (unreplied UDP); zero leaves it alone.
    pub(crate) udp_timeout: Duration,
    /// `--conntrack-udp-timeout-stream` (assured UDP); zero leaves it alone.
    pub(crate) udp_stream_timeout: Duration,
}

impl Default for ConntrackSettings {
    fn default() -> Self {
        ConntrackSettings {
            max_per_core: 32 * 1024,
            min: 128 * 1024,
            tcp_established_timeout: Duration::from_secs(24 * 3600),
            tcp_close_wait_timeout: Duration::from_secs(3600),
            tcp_be_liberal: false,
            udp_timeout: Duration::ZERO,
            udp_stream_timeout: Duration::ZERO,
        }
    }
}

#[cfg(feature = "daemon")]
mod apply;
#[cfg(feature = "daemon")]
pub(crate) use apply::*;

#[cfg(test)]
mod tests;
