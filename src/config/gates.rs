//! kube-proxy's feature gates (`featureGates` in the file, `--feature-gates` on the command
//! line): the ones that change what kube-proxy's nftables mode does are honoured, or are
//! behaviour kubenft always has; any other is named in one warning.

use std::collections::BTreeMap;

/// What a gate means to kubenft.
#[derive(Clone, Copy)]
enum Gate {
    /// Both values are honoured: the setter records the value in `FeatureGates`.
    Honoured(fn(&mut FeatureGates, bool)),
    /// kubenft always behaves as with this gate on (GA, and locked on, in the kube-proxy
    /// versions it follows); turning it off is named in the warning.
    AlwaysOn,
}

/// The gates kube-proxy 1.33 to 1.37 consult in nftables mode.
const GATES: &[(&str, Gate)] = &[
    // Node hints (`forNodes`) of PreferSameNode: off, only zone hints are used.
    (
        "PreferSameTrafficDistribution",
        Gate::Honoured(|g, on| g.prefer_same_traffic_distribution = on),
    ),
    // Loopback NodePorts served by a userspace TCP proxy (alpha in 1.37, default off).
    (
        "KubeProxyNFTablesLocalhostNodePorts",
        Gate::Honoured(|g, on| g.localhost_nodeports = on),
    ),
    ("TopologyAwareHints", Gate::AlwaysOn),
    ("ServiceTrafficDistribution", Gate::AlwaysOn),
    // ServiceCIDR objects drive the drop of unallocated ClusterIPs.
    ("MultiCIDRServiceAllocator", Gate::AlwaysOn),
    // LoadBalancer ingress IPs with `ipMode: Proxy` are left to the load balancer.
    ("LoadBalancerIPMode", Gate::AlwaysOn),
    ("NFTablesProxyMode", Gate::AlwaysOn),
];

/// The gates that change the planner, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FeatureGates {
    /// PreferSameTrafficDistribution (default on since 1.34, GA in 1.35).
    pub(crate) prefer_same_traffic_distribution: bool,
    /// KubeProxyNFTablesLocalhostNodePorts (alpha in 1.37, default off).
    pub(crate) localhost_nodeports: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            prefer_same_traffic_distribution: true,
            localhost_nodeports: false,
        }
    }
}

/// Parses `--feature-gates` as kube-proxy does: `Name=true,Other=false`, blanks tolerated.
pub(super) fn parse_flag(value: &str) -> Result<BTreeMap<String, bool>, String> {
    let mut gates = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, setting)) = entry.split_once('=') else {
            return Err(format!("{entry:?} is not NAME=true or NAME=false"));
        };
        let setting = match setting.trim().to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(format!("{entry:?}: {setting:?} is not true or false")),
        };
        gates.insert(name.trim().to_string(), setting);
    }
    Ok(gates)
}

/// The planner's gates from the merged settings, and the one warning naming those that change
/// nothing here.
pub(super) fn resolve(settings: &BTreeMap<String, bool>) -> (FeatureGates, Option<String>) {
    let mut gates = FeatureGates::default();
    let mut no_effect = Vec::new();
    for (name, &on) in settings {
        match GATES.iter().find(|(n, _)| n == name).map(|(_, g)| *g) {
            Some(Gate::Honoured(set)) => set(&mut gates, on),
            Some(Gate::AlwaysOn) if on => {}
            Some(Gate::AlwaysOn) => no_effect.push(format!(
                "{name}=false (kubenft always behaves as with it on)"
            )),
            None => no_effect.push(format!("{name}={on}")),
        }
    }
    let warning = (!no_effect.is_empty()).then(|| {
        format!(
            "feature gates that change nothing in kubenft: {}",
            no_effect.join(", ")
        )
    });
    (gates, warning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_as_kube_proxy_writes_them() {
        assert_eq!(
            parse_flag("A=true, B=False,").unwrap(),
            BTreeMap::from([("A".into(), true), ("B".into(), false)])
        );
        assert_eq!(
            parse_flag("A").unwrap_err(),
            "\"A\" is not NAME=true or NAME=false"
        );
        assert_eq!(
            parse_flag("A=yes").unwrap_err(),
            "\"A=yes\": \"yes\" is not true or false"
        );
    }

    #[test]
    fn the_traffic_distribution_gate_is_honoured_and_the_rest_named_in_one_warning() {
        let (gates, warning) = resolve(&BTreeMap::new());
        assert!(gates.prefer_same_traffic_distribution);
        assert_eq!(warning, None);

        let (gates, warning) = resolve(&BTreeMap::from([
            ("PreferSameTrafficDistribution".into(), false),
            ("TopologyAwareHints".into(), true),
        ]));
        assert!(!gates.prefer_same_traffic_distribution);
        assert_eq!(warning, None, "gates kubenft follows need no warning");

        let (gates, warning) = resolve(&BTreeMap::from([(
            "KubeProxyNFTablesLocalhostNodePorts".into(),
            true,
        )]));
        assert!(gates.localhost_nodeports && gates.prefer_same_traffic_distribution);
        assert_eq!(warning, None);

        let (_, warning) = resolve(&BTreeMap::from([
            ("ContextualLogging".into(), true),
            ("LoadBalancerIPMode".into(), false),
            ("WinDSR".into(), true),
        ]));
        assert_eq!(
            warning.as_deref(),
            Some(
                "feature gates that change nothing in kubenft: ContextualLogging=true, \
                 LoadBalancerIPMode=false (kubenft always behaves as with it on), WinDSR=true"
            )
        );
    }
}
