//! Every field of KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) that kube-proxy
//! 1.33 to 1.37 define, with what kubenft does with it: the one list that file reading, the
//! "accepted and not applied" warning, the unknown-field suggestion and the table in
//! docs/configuration.md agree on.

/// What kubenft does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// Applied, as the flag named here would be.
    Applied(&'static str),
    /// Accepted; a value other than the zero value gets a mention in the one warning, with
    /// this reason.
    Ignored(&'static str),
    /// A section whose fields are listed.
    Section(&'static [Field]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) name: &'static str,
    pub(crate) use_: Use,
}

const fn applied(name: &'static str, flag: &'static str) -> Field {
    Field {
        name,
        use_: Use::Applied(flag),
    }
}

const fn ignored(name: &'static str, why: &'static str) -> Field {
    Field {
        name,
        use_: Use::Ignored(why),
    }
}

const fn section(name: &'static str, fields: &'static [Field]) -> Field {
    Field {
        name,
        use_: Use::Section(fields),
    }
}

pub(crate) const OTHER_MODE: &str = "another proxy mode's setting";
const CLIENT: &str = "the API client keeps its own defaults: JSON, no client-side rate limit";
const KLOG_OUTPUT: &str = "klog's output buffering; kubenft writes each line as it is logged";

const CLIENT_CONNECTION: &[Field] = &[
    applied("kubeconfig", "--kubeconfig"),
    ignored("acceptContentTypes", CLIENT),
    ignored("contentType", CLIENT),
    ignored("qps", CLIENT),
    ignored("burst", CLIENT),
];
const LOG_OUTPUT: &[Field] = &[
    ignored("splitStream", KLOG_OUTPUT),
    ignored("infoBufferSize", KLOG_OUTPUT),
];
const LOG_OPTIONS: &[Field] = &[section("text", LOG_OUTPUT), section("json", LOG_OUTPUT)];
const LOGGING: &[Field] = &[
    applied("format", "--log-format"),
    applied("verbosity", "--v"),
    ignored("flushFrequency", KLOG_OUTPUT),
    ignored(
        "vmodule",
        "per-file verbosity is klog's; RUST_LOG filters by module",
    ),
    section("options", LOG_OPTIONS),
];
const IPTABLES: &[Field] = &[
    ignored("masqueradeBit", OTHER_MODE),
    ignored("masqueradeAll", OTHER_MODE),
    ignored("localhostNodePorts", OTHER_MODE),
    ignored("snatNodeInternalIP", OTHER_MODE),
    ignored("syncPeriod", OTHER_MODE),
    ignored("minSyncPeriod", OTHER_MODE),
];
const IPVS: &[Field] = &[
    ignored("syncPeriod", OTHER_MODE),
    ignored("minSyncPeriod", OTHER_MODE),
    ignored("scheduler", OTHER_MODE),
    ignored("excludeCIDRs", OTHER_MODE),
    ignored("strictARP", OTHER_MODE),
    ignored("tcpTimeout", OTHER_MODE),
    ignored("tcpFinTimeout", OTHER_MODE),
    ignored("udpTimeout", OTHER_MODE),
];
const NFTABLES: &[Field] = &[
    applied("masqueradeBit", "--masquerade-bit"),
    applied("masqueradeAll", "--masquerade-all"),
    applied("syncPeriod", "--sync-period"),
    applied("minSyncPeriod", "--min-sync-period"),
];
const WINKERNEL: &[Field] = &[
    ignored("networkName", OTHER_MODE),
    ignored("sourceVip", OTHER_MODE),
    ignored("enableDSR", OTHER_MODE),
    ignored("rootHnsEndpointName", OTHER_MODE),
    ignored("forwardHealthCheckVip", OTHER_MODE),
];
const CONNTRACK: &[Field] = &[
    applied("maxPerCore", "--conntrack-max-per-core"),
    applied("min", "--conntrack-min"),
    applied(
        "tcpEstablishedTimeout",
        "--conntrack-tcp-timeout-established",
    ),
    applied("tcpCloseWaitTimeout", "--conntrack-tcp-timeout-close-wait"),
    applied("tcpBeLiberal", "--conntrack-tcp-be-liberal"),
    applied("udpTimeout", "--conntrack-udp-timeout"),
    applied("udpStreamTimeout", "--conntrack-udp-timeout-stream"),
];
const DETECT_LOCAL: &[Field] = &[
    applied("bridgeInterface", "--pod-bridge-interface"),
    applied("interfaceNamePrefix", "--pod-interface-name-prefix"),
];

/// The top level, in upstream's order.
pub(crate) const TOP: &[Field] = &[
    applied("apiVersion", "(checked)"),
    applied("kind", "(checked)"),
    applied("featureGates", "--feature-gates"),
    section("clientConnection", CLIENT_CONNECTION),
    section("logging", LOGGING),
    applied("hostnameOverride", "--hostname-override"),
    applied("bindAddress", "--bind-address"),
    applied("healthzBindAddress", "--healthz-bind-address"),
    applied("metricsBindAddress", "--metrics-bind-address"),
    ignored(
        "bindAddressHardFail",
        "a port that cannot be bound always stops kubenft",
    ),
    ignored("enableProfiling", "kubenft serves no /debug/pprof"),
    ignored(
        "showHiddenMetricsForVersion",
        "kubenft has no hidden metrics",
    ),
    applied("mode", "--proxy-mode"),
    section("iptables", IPTABLES),
    section("ipvs", IPVS),
    section("nftables", NFTABLES),
    section("winkernel", WINKERNEL),
    applied("detectLocalMode", "--detect-local-mode"),
    section("detectLocal", DETECT_LOCAL),
    applied("clusterCIDR", "--cluster-cidr"),
    applied("nodePortAddresses", "--nodeport-addresses"),
    ignored(
        "oomScoreAdj",
        "kubenft leaves its OOM score to the pod spec",
    ),
    section("conntrack", CONNTRACK),
    ignored(
        "configSyncPeriod",
        "watches keep the state current; nothing is re-listed on a timer",
    ),
    ignored(
        "portRange",
        "unused by kube-proxy too (the userspace proxy is gone)",
    ),
    ignored("windowsRunAsService", OTHER_MODE),
];

/// Every field as (dotted path, use), sections left out, in the table's order.
pub(crate) fn all() -> Vec<(String, Use)> {
    fn walk(prefix: &str, fields: &[Field], out: &mut Vec<(String, Use)>) {
        for f in fields {
            let path = format!("{prefix}{}", f.name);
            match f.use_ {
                Use::Section(inner) => walk(&format!("{path}."), inner, out),
                u => out.push((path, u)),
            }
        }
    }
    let mut out = Vec::new();
    walk("", TOP, &mut out);
    out
}

/// The known field closest to `path` (a dotted path no version defines): the nearest
/// spelling within the same section, or the same name where it lives elsewhere (e.g. a
/// `syncPeriod` at the top level is `nftables.syncPeriod`).
pub(crate) fn closest(path: &str) -> String {
    let (section, name) = path.rsplit_once('.').unwrap_or(("", path));
    let prefix = match section {
        "" => String::new(),
        s => format!("{s}."),
    };
    let known = all();
    let lower = name.to_lowercase();
    let apart = |candidate: &str| distance(&lower, &candidate.to_lowercase());
    let best = known
        .iter()
        .map(|(p, _)| p.as_str())
        .chain(sections().map(|s: &'static str| -> &str { s }))
        .filter_map(|p| p.strip_prefix(prefix.as_str()))
        .map(|rest| rest.split('.').next().unwrap_or(rest))
        .min_by_key(|candidate| apart(candidate));
    let near = best.filter(|candidate| apart(candidate) <= 2);
    let elsewhere = known
        .iter()
        .find(|(p, u)| p.rsplit('.').next() == Some(name) && *u != Use::Ignored(OTHER_MODE));
    match (near, elsewhere) {
        (Some(c), _) => format!("{prefix}{c}"),
        (None, Some((p, _))) => p.clone(),
        (None, None) => best.map(|c| format!("{prefix}{c}")).unwrap_or_default(),
    }
}

/// The dotted paths of the sections themselves.
fn sections() -> impl Iterator<Item = &'static str> {
    [
        "clientConnection",
        "logging",
        "logging.options",
        "logging.options.text",
        "logging.options.json",
        "iptables",
        "ipvs",
        "nftables",
        "winkernel",
        "detectLocal",
        "conntrack",
    ]
    .into_iter()
}

/// Levenshtein distance, over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_field_is_a_near_spelling_or_the_same_name_in_its_section() {
        assert_eq!(closest("nftables.syncPerod"), "nftables.syncPeriod");
        assert_eq!(closest("clusterCidr"), "clusterCIDR");
        assert_eq!(closest("conntrack.maxPercore"), "conntrack.maxPerCore");
        assert_eq!(closest("masqueradeBit"), "nftables.masqueradeBit");
        assert_eq!(closest("syncPeriod"), "nftables.syncPeriod");
        assert_eq!(closest("nftable"), "nftables");
        assert_eq!(closest("logging.verbose"), "logging.verbosity");
    }

    #[test]
    fn every_path_is_listed_once() {
        let all = all();
        let mut paths: Vec<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
        paths.sort();
        let n = paths.len();
        paths.dedup();
        assert_eq!(paths.len(), n);
        for s in sections() {
            assert!(
                all.iter().any(|(p, _)| p.starts_with(&format!("{s}."))),
                "{s}"
            );
        }
    }
}
