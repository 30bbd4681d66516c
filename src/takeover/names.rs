//! kube-proxy's names: which nf_tables objects on a node are kube-proxy's to remove. Read from
//! upstream kube-proxy (kubernetes/kubernetes; docs/migration.md cites file and release for
//! each), never guessed from a `KUBE-` prefix: kubelet owns chains with that prefix too.

use crate::nft::model::Family;
use crate::nft::transaction::TableRef;

/// The nftables-mode table, in `ip` and `ip6` (`pkg/proxy/nftables/proxier.go`,
/// `kubeProxyTable`).
const NFTABLES_TABLE: &str = "kube-proxy";

/// The iptables tables kube-proxy writes into, as iptables-nft names its nf_tables tables.
pub(crate) const IPTABLES_TABLES: &[&str] = &["nat", "filter", "mangle"];

/// Chains kube-proxy creates under fixed names, by iptables table: the iptables proxier's
/// (`pkg/proxy/iptables/proxier.go`) and the IPVS proxier's (`pkg/proxy/ipvs/proxier.go`), whose
/// iptables rules go through iptables-nft as well; the lists their `CleanupLeftovers` remove.
/// Not here, as not there: `KUBE-FIREWALL` (kubelet's; kube-proxy only keeps a copy of its
/// rule), `KUBE-KUBELET-CANARY`, `KUBE-IPTABLES-HINT` (kubelet's) and `KUBE-MARK-DROP` (kubelet's
/// before 1.28, used by no current kube-proxy).
const FIXED_CHAINS: &[(&str, &str)] = &[
    // iptables mode
    ("nat", "KUBE-SERVICES"),
    ("nat", "KUBE-NODEPORTS"),
    ("nat", "KUBE-POSTROUTING"),
    ("nat", "KUBE-MARK-MASQ"),
    ("nat", "KUBE-PROXY-CANARY"),
    ("filter", "KUBE-SERVICES"),
    ("filter", "KUBE-EXTERNAL-SERVICES"),
    ("filter", "KUBE-NODEPORTS"),
    ("filter", "KUBE-FORWARD"),
    ("filter", "KUBE-PROXY-FIREWALL"),
    ("filter", "KUBE-PROXY-CANARY"),
    ("mangle", "KUBE-PROXY-CANARY"),
    // IPVS mode
    ("nat", "KUBE-NODE-PORT"),
    ("nat", "KUBE-LOAD-BALANCER"),
    ("filter", "KUBE-NODE-PORT"),
    ("filter", "KUBE-SOURCE-RANGES-FIREWALL"),
    ("filter", "KUBE-IPVS-FILTER"),
    ("filter", "KUBE-IPVS-OUT-FILTER"),
];

/// Prefixes of the per-service and per-endpoint chains (iptables mode, nat table):
/// `KUBE-SVC-` (service), `KUBE-SVL-` (service, local endpoints), `KUBE-EXT-` (external
/// traffic), `KUBE-FW-` (load-balancer firewall), `KUBE-SEP-` (endpoint), and `KUBE-XLB-`,
/// which releases before 1.24 used for what `KUBE-EXT-` is now.
const SERVICE_CHAIN_PREFIXES: &[&str] = &[
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
    "KUBE-XLB-",
];

/// Whether `table` is kube-proxy's nftables-mode table.
pub(crate) fn is_kube_proxy_table(table: &TableRef) -> bool {
    matches!(table.family, Family::Ip | Family::Ip6) && table.name == NFTABLES_TABLE
}

/// Whether chain `chain` of iptables table `table` (`nat`, `filter`, `mangle`) is
/// kube-proxy's.
pub(crate) fn is_kube_proxy_chain(table: &str, chain: &str) -> bool {
    FIXED_CHAINS.contains(&(table, chain))
        || (table == "nat" && SERVICE_CHAIN_PREFIXES.iter().any(|p| chain.starts_with(p)))
}
