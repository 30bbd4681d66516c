//! Taking a node over from kube-proxy (`--takeover`): the real `kubenft sync --once --manifests`
//! of a synthetic cluster, each run in a fresh namespace, on a node holding nothing and on
//! nodes holding kube-proxy's nftables-mode or iptables-mode rules for the same cluster (loaded
//! first, untimed), with `--replace-kube-proxy`. Afterwards nothing of kube-proxy's may remain.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kubenft::cluster::ClusterState;
use kubenft::netns::Netns;

use crate::control::{iptables_ruleset, median, run_with_stdin};
use crate::daemon::{binary, field};
use crate::report::secs;
use crate::synthetic::{self, cluster, manifests};

/// What the node holds of kube-proxy's before kubenft's first sync, and whether kubenft is
/// asked to replace it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Case {
    /// Nothing; plain `sync --once` (the baseline).
    Empty,
    /// Nothing; `sync --once --replace-kube-proxy` (what the survey costs when there is none).
    EmptyReplacing,
    /// kube-proxy's nftables mode (`ip kube-proxy`, `ip6 kube-proxy`), loaded with `nft -f`.
    Nftables,
    /// kube-proxy's iptables mode (chains in iptables-nft's nat and filter tables, with the
    /// built-in chains' jumps), loaded with `iptables-restore`.
    Iptables,
}

const CASES: [Case; 4] = [
    Case::Empty,
    Case::EmptyReplacing,
    Case::Nftables,
    Case::Iptables,
];

impl Case {
    pub fn label(self) -> &'static str {
        match self {
            Case::Empty => "nothing",
            Case::EmptyReplacing => "nothing, `--replace-kube-proxy`",
            Case::Nftables => "nftables mode, `--replace-kube-proxy`",
            Case::Iptables => "iptables mode, `--replace-kube-proxy`",
        }
    }

    fn replaces(self) -> bool {
        self != Case::Empty
    }
}

/// kube-proxy's objects in a namespace's nf_tables, as `nft list` shows them.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Objects {
    /// Tables `ip kube-proxy` and `ip6 kube-proxy`.
    pub tables: usize,
    /// Chains of those tables.
    pub table_chains: usize,
    /// `KUBE-` chains in iptables-nft's nat, filter and mangle tables (only kube-proxy writes
    /// any in these namespaces).
    pub iptables_chains: usize,
    /// Rules of those tables' other (built-in) chains jumping to a `KUBE-` chain.
    pub iptables_jumps: usize,
}

impl Objects {
    fn count(ns: &Netns) -> Objects {
        let text = |args: &[&str]| {
            let out = ns
                .exec(args)
                .unwrap_or_else(|e| panic!("listing kube-proxy's rules: {e}"));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let is_kube_proxy_header = |l: &str| {
            let l = l.trim();
            l.starts_with("table ip kube-proxy") || l.starts_with("table ip6 kube-proxy")
        };
        let tables = text(&["nft", "list", "tables"])
            .lines()
            .filter(|l| is_kube_proxy_header(l))
            .count();
        // iptables-nft's tables are nf_tables tables (`table ip nat`): read through `nft`, as
        // iptables-save 1.8.9 overflows its stack on some 100,000 chains.
        let iptables_header = |l: &str| {
            let mut words = l.split_whitespace();
            let (family, name) = (words.nth(1)?, words.next()?);
            (["ip", "ip6"].contains(&family) && ["nat", "filter", "mangle"].contains(&name))
                .then(|| format!("{family} {name}"))
        };
        // `nft list chains` groups the chains under their tables' headers.
        let mut table_chains = 0;
        let mut iptables_chains = 0;
        let mut other_chains = Vec::new();
        let (mut in_kube_proxy, mut in_iptables) = (false, None);
        for line in text(&["nft", "list", "chains"]).lines() {
            if line.starts_with("table ") {
                in_kube_proxy = is_kube_proxy_header(line);
                in_iptables = iptables_header(line);
            } else if let Some(name) = line.trim_start().strip_prefix("chain ") {
                let name = name.trim_end_matches('{').trim();
                if in_kube_proxy {
                    table_chains += 1;
                } else if let Some(table) = &in_iptables {
                    if name.starts_with("KUBE-") {
                        iptables_chains += 1;
                    } else {
                        other_chains.push(format!("{table} {name}"));
                    }
                }
            }
        }
        // Only built-in chains are there besides kube-proxy's: their jumps into `KUBE-` chains.
        let mut iptables_jumps = 0;
        for chain in &other_chains {
            let mut args = vec!["nft", "list", "chain"];
            args.extend(chain.split(' '));
            iptables_jumps += text(&args)
                .lines()
                .filter(|l| l.contains("jump KUBE-") || l.contains("goto KUBE-"))
                .count();
        }
        Objects {
            tables,
            table_chains,
            iptables_chains,
            iptables_jumps,
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Objects::default()
    }
}

impl fmt::Display for Objects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.tables > 0 {
            parts.push(format!(
                "{} tables ({} chains)",
                self.tables, self.table_chains
            ));
        }
        if self.iptables_chains > 0 || self.iptables_jumps > 0 {
            parts.push(format!(
                "{} iptables chains, {} jumps",
                self.iptables_chains, self.iptables_jumps
            ));
        }
        if parts.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&parts.join(", "))
    }
}

/// One case at one scale: medians of the repeats.
pub struct TakeoverRow {
    pub services: usize,
    pub endpoints: usize,
    pub case: Case,
    /// kube-proxy's rules loaded by kube-proxy's own tool (`nft -f`, `iptables-restore`), not
    /// part of kubenft's time.
    pub load: Option<Duration>,
    /// `kubenft sync --once` from process start to exit.
    pub sync: Duration,
    /// Operations of kubenft's transaction (its `transaction applied` log line).
    pub ops: usize,
    /// kube-proxy's objects in the kernel before kubenft ran.
    pub before: Objects,
    /// What kubenft logged it removed (`kube-proxy's rules removed …`), or "—".
    pub removed: String,
}

/// One run of one case in a fresh namespace.
struct Run {
    load: Option<Duration>,
    sync: Duration,
    ops: usize,
    before: Objects,
    removed: String,
}

/// kube-proxy's nftables mode for the same services (IPv4; the `ip6` table holds its fixed
/// chains and sets only): a service chain per service port picking one of its endpoint
/// chains with `numgen`, each endpoint chain masquerading hairpin traffic and DNATing, and the
/// `service-ips` verdict map leading to the service chains. Chain names follow kube-proxy's
/// `service-HASH-ns/name/tcp/port` and `endpoint-HASH-…__ip/port`, with the index in place
/// of the hash. Every chain and map is declared before the rules (`nft -f` refuses forward
/// references in one batch).
pub fn nftables_ruleset(state: &ClusterState) -> String {
    let mut decl = String::new();
    let mut rules = String::new();
    for (family, addr) in [("ip", "ipv4_addr"), ("ip6", "ipv6_addr")] {
        let t = format!("{family} kube-proxy");
        let _ = write!(
            decl,
            "add table {t} {{ comment \"rules for kube-proxy\" ; }}\n\
             add set {t} cluster-ips {{ type {addr} ; }}\n\
             add set {t} nodeport-ips {{ type {addr} ; }}\n\
             add map {t} no-endpoint-services {{ type {addr} . inet_proto . inet_service : verdict ; }}\n\
             add map {t} service-ips {{ type {addr} . inet_proto . inet_service : verdict ; }}\n\
             add map {t} service-nodeports {{ type inet_proto . inet_service : verdict ; }}\n\
             add chain {t} filter-forward {{ type filter hook forward priority 0 ; }}\n\
             add chain {t} filter-output {{ type filter hook output priority 0 ; }}\n\
             add chain {t} nat-prerouting {{ type nat hook prerouting priority -100 ; }}\n\
             add chain {t} nat-output {{ type nat hook output priority -100 ; }}\n\
             add chain {t} nat-postrouting {{ type nat hook postrouting priority 100 ; }}\n\
             add chain {t} service-endpoints-check\n\
             add chain {t} mark-for-masquerade\n\
             add chain {t} masquerading\n\
             add chain {t} services\n"
        );
        let daddr = if family == "ip" { "ip" } else { "ip6" };
        let _ = write!(
            rules,
            "add rule {t} filter-forward ct state new jump service-endpoints-check\n\
             add rule {t} filter-output ct state new jump service-endpoints-check\n\
             add rule {t} service-endpoints-check {daddr} daddr . meta l4proto . th dport vmap @no-endpoint-services\n\
             add rule {t} mark-for-masquerade mark set mark or 0x4000\n\
             add rule {t} masquerading mark and 0x4000 == 0 return\n\
             add rule {t} masquerading mark set mark xor 0x4000\n\
             add rule {t} masquerading masquerade fully-random\n\
             add rule {t} nat-prerouting jump services\n\
             add rule {t} nat-output jump services\n\
             add rule {t} nat-postrouting jump masquerading\n\
             add rule {t} services {daddr} daddr . meta l4proto . th dport vmap @service-ips\n\
             add rule {t} services {daddr} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports\n"
        );
    }
    let t = "ip kube-proxy";
    let mut cluster_ips = Vec::new();
    let mut service_ips = Vec::new();
    for (i, (name, sp)) in state.services.iter().enumerate() {
        let port_name = format!("{}/{}/tcp/{}", name.namespace, name.name, name.port);
        let svc = format!("service-{i:08X}-{port_name}");
        let ip = sp.cluster_ips[0];
        let _ = writeln!(decl, "add chain {t} {svc}");
        let _ = writeln!(
            rules,
            "add rule {t} {svc} ip daddr {ip} ip saddr != {} jump mark-for-masquerade",
            synthetic::CLUSTER_CIDR
        );
        let eps = &state.endpoints[name];
        let mut picks = Vec::with_capacity(eps.len());
        for (j, ep) in eps.iter().enumerate() {
            let chain = format!(
                "endpoint-{:08X}-{port_name}__{}/{}",
                i * eps.len() + j,
                ep.ip,
                ep.port
            );
            let _ = writeln!(decl, "add chain {t} {chain}");
            let _ = writeln!(
                rules,
                "add rule {t} {chain} ip saddr {} jump mark-for-masquerade\n\
                 add rule {t} {chain} meta l4proto tcp dnat to {}:{}",
                ep.ip, ep.ip, ep.port
            );
            picks.push(format!("{j} : goto {chain}"));
        }
        if !picks.is_empty() {
            let _ = writeln!(
                rules,
                "add rule {t} {svc} numgen random mod {} vmap {{ {} }}",
                picks.len(),
                picks.join(" , ")
            );
        }
        cluster_ips.push(ip.to_string());
        service_ips.push(format!("{ip} . tcp . {} : goto {svc}", sp.port));
    }
    if !cluster_ips.is_empty() {
        let _ = writeln!(
            rules,
            "add element {t} cluster-ips {{ {} }}\nadd element {t} service-ips {{ {} }}",
            cluster_ips.join(", "),
            service_ips.join(", ")
        );
    }
    decl + &rules
}

/// kube-proxy's iptables mode: the nat chains of `control::iptables_ruleset`, and the filter
/// table's fixed chains with the built-in chains' jumps into them and the canary chains
/// kube-proxy creates outside its restore.
pub fn iptables_rules(state: &ClusterState) -> String {
    iptables_ruleset(state).replacen("*nat\n", "*nat\n:KUBE-PROXY-CANARY - [0:0]\n", 1)
        + "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
           :KUBE-SERVICES - [0:0]\n:KUBE-EXTERNAL-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n\
           :KUBE-FORWARD - [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\n\
           -A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
           -A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS\n\
           -A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
           -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
           -A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
           -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
           -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
           -A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
           -A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
           -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n\
           -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT\n\
           -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
           COMMIT\n\
           *mangle\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n"
}

/// The synthetic cluster's manifests written to a directory of their own, removed on drop.
struct ManifestDir(PathBuf);

impl ManifestDir {
    fn write(services: usize, endpoints: usize) -> ManifestDir {
        let dir = std::env::temp_dir().join(format!(
            "kubenft-bench-{}-takeover-{services}x{endpoints}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("manifest directory");
        for (name, text) in manifests(services, endpoints) {
            std::fs::write(dir.join(name), text).expect("writing the manifests");
        }
        ManifestDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ManifestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The text after `removed=` of kubenft's `kube-proxy's rules removed` log line.
fn removed_line(log: &str) -> Option<String> {
    let line = log
        .lines()
        .find(|l| l.contains("kube-proxy's rules removed"))?;
    Some(line.split_once("removed=")?.1.trim().to_string())
}

fn one_run(case: Case, manifests: &Path, nft_text: &str, ipt_text: &str) -> Run {
    let bin = binary().unwrap_or_else(|e| panic!("{e}"));
    let ns = Netns::create("btko").expect("namespace");
    let load = match case {
        Case::Empty | Case::EmptyReplacing => None,
        Case::Nftables => Some(run_with_stdin(&ns, "nft", &["-f", "-"], nft_text)),
        Case::Iptables => Some(run_with_stdin(&ns, "iptables-restore", &[], ipt_text)),
    };
    let counting = Instant::now();
    let before = Objects::count(&ns);
    let counted = counting.elapsed();
    assert_eq!(
        before.is_empty(),
        load.is_none(),
        "{case:?}: kube-proxy's objects before kubenft: {before}"
    );
    let mut argv = vec![
        bin.to_str().expect("a UTF-8 path"),
        "sync",
        "--once",
        "--manifests",
        manifests.to_str().expect("a UTF-8 path"),
        "--hostname-override",
        synthetic::NODE,
        "--cluster-cidr",
        synthetic::CLUSTER_CIDR,
    ];
    if case.replaces() {
        argv.push("--replace-kube-proxy");
    }
    let start = Instant::now();
    let out = ns
        .exec(&argv)
        .unwrap_or_else(|e| panic!("takeover stage, {case:?}: {e}"));
    let sync = start.elapsed();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let after = Objects::count(&ns);
    eprintln!(
        "    loaded in {}, counted in {}, kubenft in {}",
        load.map_or("—".into(), secs),
        secs(counted),
        secs(sync)
    );
    if !after.is_empty() {
        panic!(
            "takeover stage, {case:?}: kube-proxy's rules remain after kubenft's sync: {after} \
             (before: {before})\nkubenft's log:\n{log}"
        );
    }
    let tables = ns
        .exec(&["nft", "list", "tables"])
        .expect("nft list tables");
    if !String::from_utf8_lossy(&tables.stdout).contains("table ip kubenft") {
        panic!("takeover stage, {case:?}: kubenft's table is missing\nkubenft's log:\n{log}");
    }
    let removed = removed_line(&log);
    // What kubenft says it removed is what the kernel held.
    match (case, &removed) {
        (Case::Empty | Case::EmptyReplacing, None) => {}
        (Case::Nftables, Some(r)) if r.contains("table ip kube-proxy, ip6 kube-proxy") => {}
        (Case::Iptables, Some(r))
            if r.starts_with(&format!(
                "iptables-nft: {} chains and {} jump rules",
                before.iptables_chains, before.iptables_jumps
            )) => {}
        _ => panic!(
            "takeover stage, {case:?}: kubenft reported removing {removed:?}, the kernel held \
             {before}\nkubenft's log:\n{log}"
        ),
    }
    let ops = log
        .lines()
        .find(|l| l.contains("transaction applied"))
        .and_then(|l| field(l, "ops"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("takeover stage, {case:?}: no ops in kubenft's log:\n{log}"));
    Run {
        load,
        sync,
        ops,
        before,
        removed: removed.unwrap_or_else(|| "—".into()),
    }
}

/// Every case at one scale, the cases interleaved within each repeat so they share the
/// machine's noise; medians of the repeats.
pub fn measure(services: usize, endpoints: usize, repeats: usize) -> Vec<TakeoverRow> {
    let state = cluster(services, endpoints);
    let dir = ManifestDir::write(services, endpoints);
    let nft_text = nftables_ruleset(&state);
    let ipt_text = iptables_rules(&state);
    let mut runs: Vec<Vec<Run>> = CASES.iter().map(|_| Vec::new()).collect();
    for repeat in 0..repeats.max(1) {
        for (k, &case) in CASES.iter().enumerate() {
            eprintln!(
                "  {services} × {endpoints}, {}, run {}/{} …",
                case.label(),
                repeat + 1,
                repeats.max(1)
            );
            runs[k].push(one_run(case, dir.path(), &nft_text, &ipt_text));
        }
    }
    CASES
        .iter()
        .zip(runs)
        .map(|(&case, runs)| {
            let first = &runs[0];
            for r in &runs[1..] {
                assert_eq!(
                    (r.ops, r.before, &r.removed),
                    (first.ops, first.before, &first.removed),
                    "{case:?}: every repeat does the same"
                );
            }
            TakeoverRow {
                services,
                endpoints,
                case,
                load: first
                    .load
                    .map(|_| median(runs.iter().filter_map(|r| r.load).collect())),
                sync: median(runs.iter().map(|r| r.sync).collect()),
                ops: first.ops,
                before: first.before,
                removed: first.removed.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_is_read_from_the_log_line() {
        let log = "2026-11-29T00:00:00Z  INFO kubenft::takeover: kube-proxy's rules removed in \
                   the same transaction as this sync removed=iptables-nft: 12 chains and 4 jump \
                   rules in ip nat, ip filter\n";
        assert_eq!(
            removed_line(log).as_deref(),
            Some("iptables-nft: 12 chains and 4 jump rules in ip nat, ip filter")
        );
        assert_eq!(removed_line("nothing here"), None);
    }

    #[test]
    fn the_nftables_ruleset_declares_a_chain_per_service_and_endpoint() {
        let text = nftables_ruleset(&cluster(3, 2));
        let chains = text
            .lines()
            .filter(|l| l.starts_with("add chain ip kube-proxy "))
            .count();
        // 9 fixed chains, 3 services, 6 endpoints.
        assert_eq!(chains, 9 + 3 + 6);
    }
}
