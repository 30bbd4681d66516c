//! kube-proxy's feature gates (`featureGates` in the file, `--feature-gates` on the command
//! line): the ones that change what kube-proxy's nftables mode does are honoured, or are
//! behaviour kubenft always has; any other is named in one warning. A deprecated gate that is
//! set gets a warning of its own, as in kube-proxy.

use std::collections::BTreeMap;

/// Records a gate's value in `FeatureGates`.
type Apply = fn(&mut FeatureGates, bool);

/// What a gate means to kubenft.
#[derive(Clone, Copy)]
enum Gate {
    /// Both values are honoured: `Apply` records the value (see `FeatureGates`).
    Honoured(Apply),
    /// Honoured too, but deprecated in kube-proxy: setting it, either way, gets a warning of
    /// its own, as kube-proxy logs one for every deprecated gate that is set.
    Deprecated(Apply),
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
    // KEP-5707 (deprecated since 1.36, default on): off, Services' externalIPs are not proxied.
    (
        "AllowServiceExternalIPs",
        Gate::Deprecated(|g, on| g.allow_service_external_ips = on),
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
    /// AllowServiceExternalIPs (deprecated, default on, in 1.36 and 1.37).
    pub(crate) allow_service_external_ips: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            prefer_same_traffic_distribution: true,
            localhost_nodeports: false,
            allow_service_external_ips: true,
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

/// The planner's gates from the merged settings, and the warnings: one per deprecated gate set,
/// then one naming every gate that changes nothing here.
pub(super) fn resolve(settings: &BTreeMap<String, bool>) -> (FeatureGates, Vec<String>) {
    let mut gates = FeatureGates::default();
    let mut warnings = Vec::new();
    let mut no_effect = Vec::new();
    for (name, &on) in settings {
        match GATES.iter().find(|(n, _)| n == name).map(|(_, g)| *g) {
            Some(Gate::Honoured(apply)) => apply(&mut gates, on),
            Some(Gate::Deprecated(apply)) => {
                apply(&mut gates, on);
                warnings.push(format!(
                    "feature gate {name}={on} is deprecated: kube-proxy will remove it in a \
                     future release"
                ));
            }
            Some(Gate::AlwaysOn) if on => {}
            Some(Gate::AlwaysOn) => no_effect.push(format!(
                "{name}=false (kubenft always behaves as with it on)"
            )),
            None => no_effect.push(format!("{name}={on}")),
        }
    }
    if !no_effect.is_empty() {
        warnings.push(format!(
            "feature gates that change nothing in kubenft: {}",
            no_effect.join(", ")
        ));
    }
    (gates, warnings)
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
        let (gates, warnings) = resolve(&BTreeMap::new());
        assert!(gates.prefer_same_traffic_distribution);
        assert!(warnings.is_empty());

        let (gates, warnings) = resolve(&BTreeMap::from([
            ("PreferSameTrafficDistribution".into(), false),
            ("TopologyAwareHints".into(), true),
        ]));
        assert!(!gates.prefer_same_traffic_distribution);
        assert!(warnings.is_empty(), "gates kubenft follows need no warning");

        let (gates, warnings) = resolve(&BTreeMap::from([(
            "KubeProxyNFTablesLocalhostNodePorts".into(),
            true,
        )]));
        assert!(gates.localhost_nodeports && gates.prefer_same_traffic_distribution);
        assert!(warnings.is_empty());

        let (_, warnings) = resolve(&BTreeMap::from([
            ("ContextualLogging".into(), true),
            ("LoadBalancerIPMode".into(), false),
            ("WinDSR".into(), true),
        ]));
        assert_eq!(
            warnings,
            [
                "feature gates that change nothing in kubenft: ContextualLogging=true, \
                 LoadBalancerIPMode=false (kubenft always behaves as with it on), WinDSR=true"
            ]
        );
    }

    #[test]
    fn service_external_ips_are_allowed_unless_the_deprecated_gate_is_set_off() {
        let (gates, warnings) = resolve(&BTreeMap::new());
        assert!(
            gates.allow_service_external_ips,
            "on by default, as in 1.36 and 1.37"
        );
        assert!(
            warnings.is_empty(),
            "an unset deprecated gate is not mentioned"
        );

        for on in [false, true] {
            let (gates, warnings) = resolve(&BTreeMap::from([
                ("AllowServiceExternalIPs".into(), on),
                ("WinDSR".into(), true),
            ]));
            assert_eq!(gates.allow_service_external_ips, on);
            assert!(
                gates.prefer_same_traffic_distribution,
                "other gates keep their defaults"
            );
            assert_eq!(
                warnings,
                [
                    format!(
                        "feature gate AllowServiceExternalIPs={on} is deprecated: kube-proxy \
                         will remove it in a future release"
                    ),
                    "feature gates that change nothing in kubenft: WinDSR=true".to_string(),
                ],
                "set either way, it is warned about as kube-proxy does"
            );
        }
    }
}
