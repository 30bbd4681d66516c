//! What kube-proxy may have left where nf_tables cannot reach: IPVS virtual servers and the
//! `kube-ipvs0` dummy interface its IPVS mode binds service addresses to, and legacy (x_tables)
//! iptables tables. Read from this network namespace's `/proc/net`; reported with the way to
//! remove them, never removed: IPVS and x_tables may serve other programs too (keepalived,
//! a legacy firewall), and kubenft cannot tell their objects from kube-proxy's there.

use std::fmt;

/// What `/proc/net` shows of kube-proxy's IPVS mode and of legacy iptables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Unreachable {
    /// The `kube-ipvs0` interface exists.
    pub(crate) kube_ipvs0: bool,
    /// IPVS virtual services (`/proc/net/ip_vs`), only counted when `kube-ipvs0` exists: IPVS
    /// without it is someone else's.
    pub(crate) ipvs_services: usize,
    /// Legacy iptables tables in use, as `ip nat`, `ip6 filter`.
    pub(crate) legacy_tables: Vec<String>,
}

impl Unreachable {
    /// Reads this network namespace's `/proc/net`. A file that is missing (its module is not
    /// loaded) or unreadable counts as nothing.
    pub(crate) fn survey() -> Unreachable {
        let read = |name: &str| std::fs::read_to_string(format!("/proc/self/net/{name}"));
        let kube_ipvs0 = read("dev").is_ok_and(|dev| has_interface(&dev, "kube-ipvs0"));
        let mut legacy_tables = Vec::new();
        for (file, family) in [("ip_tables_names", "ip"), ("ip6_tables_names", "ip6")] {
            if let Ok(names) = read(file) {
                legacy_tables.extend(
                    (names.lines())
                        .map(str::trim)
                        .filter(|n| super::IPTABLES_TABLES.contains(n))
                        .map(|n| format!("{family} {n}")),
                );
            }
        }
        Unreachable {
            kube_ipvs0,
            ipvs_services: match kube_ipvs0 {
                true => read("ip_vs").map_or(0, |s| ipvs_services(&s)),
                false => 0,
            },
            legacy_tables,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        !self.kube_ipvs0 && self.legacy_tables.is_empty()
    }
}

impl fmt::Display for Unreachable {
    /// What is there and how an operator removes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.kube_ipvs0 {
            parts.push(format!(
                "kube-proxy's IPVS mode left the kube-ipvs0 interface and {} IPVS virtual \
                 services: remove them with `kube-proxy --cleanup` (or `ip link delete \
                 kube-ipvs0`, `ipvsadm --clear` if nothing else on the node uses IPVS, and \
                 `ipset destroy` of the KUBE-* sets)",
                self.ipvs_services
            ));
        }
        if !self.legacy_tables.is_empty() {
            parts.push(format!(
                "legacy iptables tables are in use ({}), which nf_tables cannot see into: if \
                 kube-proxy ran with iptables-legacy, remove its rules with `kube-proxy \
                 --cleanup` (`iptables-legacy-save | grep KUBE-` shows them)",
                self.legacy_tables.join(", ")
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Whether `/proc/net/dev` text lists interface `name`.
fn has_interface(dev: &str, name: &str) -> bool {
    dev.lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(ifname, _)| ifname.trim() == name)
}

/// Virtual services in `/proc/net/ip_vs` text: one line each, opening with its protocol (real
/// servers follow on lines opening with `->`).
fn ipvs_services(ip_vs: &str) -> usize {
    ip_vs
        .lines()
        .filter(|l| {
            let first = l.split_whitespace().next().unwrap_or("");
            matches!(first, "TCP" | "UDP" | "SCTP" | "FWM")
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_list_is_read_by_name_not_by_prefix() {
        let dev =
            "Inter-|   Receive\n face |bytes\n    lo: 1 2 3\nkube-ipvs0: 0 0 0\n  eth0: 9 9\n";
        assert!(has_interface(dev, "kube-ipvs0"));
        assert!(has_interface(dev, "eth0"));
        assert!(!has_interface(dev, "kube-ipvs"));
    }

    #[test]
    fn ipvs_services_are_counted_without_their_real_servers() {
        let ip_vs = "IP Virtual Server version 1.2.1 (size=4096)\n\
                     Prot LocalAddress:Port Scheduler Flags\n\
                     \x20 -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
                     TCP  0A600001:01BB rr\n\
                     \x20 -> 0AF40102:1A0A      Masq    1      0          0\n\
                     UDP  0A60000A:0035 rr\n\
                     \x20 -> 0AF40103:0035      Masq    1      0          0\n";
        assert_eq!(ipvs_services(ip_vs), 2);
    }
}
