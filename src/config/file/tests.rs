use super::*;

/// What `kubeadm config print init-defaults --component-configs KubeProxyConfiguration`
/// prints for the proxy (every field present, unset ones as zero values), with the
/// cluster's pod network filled in.
const KUBEADM: &str = r#"
apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
"#;

/// What every KubeProxyConfiguration starts with.
const HEAD: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

fn error(text: &str) -> String {
    parse(text, "config.conf").unwrap_err().to_string()
}

/// A KubeProxyConfiguration of `HEAD` and then `fields`, parsed.
fn parsed(fields: &str) -> FileConfig {
    parse(&format!("{HEAD}{fields}"), "config.conf").unwrap()
}

#[test]
fn kubeadms_defaults_parse_with_only_the_kubeconfig_and_pod_network_set_and_no_warning() {
    let c = parse(KUBEADM, "config.conf").unwrap();
    assert_eq!(
        c,
        FileConfig {
            bind_address: Some("0.0.0.0".into()),
            cluster_cidr: Some("10.244.0.0/16".into()),
            kubeconfig: Some("/var/lib/kube-proxy/kubeconfig.conf".into()),
            // Null fields take kube-proxy's defaults; the zero ones leave the kernel alone.
            conntrack: FileConntrack {
                tcp_be_liberal: Some(false),
                udp_timeout: Some("0s".into()),
                udp_stream_timeout: Some("0s".into()),
                ..FileConntrack::default()
            },
            ..FileConfig::default()
        }
    );
}

#[test]
fn the_conntrack_section_is_read_with_zero_as_a_setting() {
    let c = parsed(
        "conntrack: {maxPerCore: 0, min: 65536, tcpEstablishedTimeout: 2h, \
         tcpCloseWaitTimeout: 0s, tcpBeLiberal: true, udpTimeout: 10s, udpStreamTimeout: 2m}\n",
    );
    assert_eq!(
        c.conntrack,
        FileConntrack {
            max_per_core: Some(0),
            min: Some(65536),
            tcp_established_timeout: Some("2h".into()),
            tcp_close_wait_timeout: Some("0s".into()),
            tcp_be_liberal: Some(true),
            udp_timeout: Some("10s".into()),
            udp_stream_timeout: Some("2m".into()),
        }
    );
    assert_eq!(c.warning, None);
    assert!(
        error(&format!("{HEAD}conntrack: {{maxPerCore: -1}}\n")).contains(
            "conntrack.maxPerCore: expected a number 0..=2147483647, found the number -1"
        )
    );
    assert!(
        error(&format!("{HEAD}conntrack: {{udpTimeout: soon}}\n"))
            .contains("conntrack.udpTimeout: \"soon\" is not a duration")
    );
    assert!(
        error(&format!("{HEAD}conntrack: {{maxPercore: 1}}\n"))
            .contains("conntrack.maxPercore: no kube-proxy version defines this field; the closest is conntrack.maxPerCore")
    );
}

#[test]
fn every_honoured_field_is_mapped_to_its_flag_and_durations_are_kept_verbatim() {
    let c = parsed(
        r#"
mode: nftables
hostnameOverride: node-a
bindAddress: 10.0.0.1
clusterCIDR: 10.244.0.0/16,fd00:244::/48
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection: {kubeconfig: /etc/kubenft/kubeconfig}
detectLocalMode: BridgeInterface
detectLocal: {bridgeInterface: cni0, interfaceNamePrefix: veth}
nodePortAddresses: [primary]
nftables: {masqueradeAll: true, masqueradeBit: 13, syncPeriod: 1m30s, minSyncPeriod: 250ms}
"#,
    );
    assert_eq!(c.hostname_override.as_deref(), Some("node-a"));
    assert_eq!(c.bind_address.as_deref(), Some("10.0.0.1"));
    assert_eq!(
        c.cluster_cidr.as_deref(),
        Some("10.244.0.0/16,fd00:244::/48")
    );
    assert_eq!(c.healthz_bind_address.as_deref(), Some("0.0.0.0:10256"));
    assert_eq!(c.metrics_bind_address.as_deref(), Some("127.0.0.1:10249"));
    assert_eq!(c.kubeconfig, Some(PathBuf::from("/etc/kubenft/kubeconfig")));
    assert_eq!(c.detect_local_mode.as_deref(), Some("BridgeInterface"));
    assert_eq!(c.pod_bridge_interface.as_deref(), Some("cni0"));
    assert_eq!(c.pod_interface_name_prefix.as_deref(), Some("veth"));
    assert_eq!(c.nodeport_addresses.as_deref(), Some("primary"));
    assert_eq!(c.masquerade_all, Some(true));
    assert_eq!(c.masquerade_bit, Some(13));
    assert_eq!(c.sync_period.as_deref(), Some("1m30s"));
    assert_eq!(c.min_sync_period.as_deref(), Some("250ms"));
    assert_eq!(c.warning, None);
}

#[test]
fn a_field_no_version_defines_is_rejected_with_its_line_and_the_closest_known_field() {
    assert_eq!(
        error(&format!("{HEAD}nftables:\n  syncPerod: 1s\n")),
        "config.conf:4: nftables.syncPerod: no kube-proxy version defines this field; \
         the closest is nftables.syncPeriod"
    );
    assert_eq!(
        error(&format!("{HEAD}clusterCidr: 10.0.0.0/8\n")),
        "config.conf:3: clusterCidr: no kube-proxy version defines this field; \
         the closest is clusterCIDR"
    );
    assert_eq!(
        error(&format!("{HEAD}masqueradeBit: 14\n")),
        "config.conf:3: masqueradeBit: no kube-proxy version defines this field; \
         the closest is nftables.masqueradeBit"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_reported_at_its_line() {
    assert_eq!(
        error(&format!("{HEAD}\nnftables:\n  syncPeriod: 45\n")),
        "config.conf:5: nftables.syncPeriod: expected a string, found the number 45"
    );
    assert_eq!(
        error(&format!("{HEAD}featureGates: {{A: yes please}}\n")),
        "config.conf:3: featureGates.A: expected true or false, found \"yes please\""
    );
}

#[test]
fn other_modes_api_versions_and_kinds_are_refused() {
    assert_eq!(
        error("apiVersion: v1\nkind: KubeProxyConfiguration\n"),
        "config.conf:1: apiVersion is Some(\"v1\"), expected \"kubeproxy.config.k8s.io/v1alpha1\""
    );
    assert_eq!(
        error("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n"),
        "config.conf:2: kind is Some(\"KubeletConfiguration\"), expected \"KubeProxyConfiguration\""
    );
    assert_eq!(
        error(""),
        "config.conf:1: expected a KubeProxyConfiguration mapping, found nothing"
    );
    assert!(error("[1, 2").starts_with("config.conf: not YAML"));
    assert!(error(&format!("{HEAD}nftables: {{masqueradeBit: 32}}\n")).contains("0..=31"));
}

#[test]
fn settings_kubenft_does_not_apply_are_named_together_in_one_warning() {
    let c = parsed(
        r#"
iptables: {masqueradeBit: 14, syncPeriod: 30s}
ipvs: {scheduler: rr}
enableProfiling: true
configSyncPeriod: 15m
nodePortAddresses: [all, localhost]
"#,
    );
    assert_eq!(
        c.warning.as_deref(),
        Some(
            "accepted and not applied: iptables.masqueradeBit, iptables.syncPeriod, \
             ipvs.scheduler (another proxy mode's setting); enableProfiling (kubenft serves \
             no /debug/pprof); configSyncPeriod (watches keep the state current; nothing is \
             re-listed on a timer)"
        )
    );
    assert_eq!(c.nodeport_addresses.as_deref(), Some("all,localhost"));
}

#[test]
fn feature_gates_logging_mode_and_bind_address_are_read() {
    let c = parsed(
        r#"
mode: nftables
bindAddress: "::"
featureGates: {PreferSameTrafficDistribution: false, SomeAlphaGate: true}
logging: {format: json, verbosity: 4, options: {json: {infoBufferSize: "0"}}}
"#,
    );
    assert_eq!(c.mode.as_deref(), Some("nftables"));
    assert_eq!(c.bind_address.as_deref(), Some("::"));
    assert_eq!(
        c.feature_gates,
        BTreeMap::from([
            ("PreferSameTrafficDistribution".to_string(), false),
            ("SomeAlphaGate".to_string(), true),
        ])
    );
    assert_eq!(c.log_format.as_deref(), Some("json"));
    assert_eq!(c.verbosity, Some(4));
    assert_eq!(c.warning, None);
}
