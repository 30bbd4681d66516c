use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use clap::Parser;
use ipnet::IpNet;

use crate::proxier::{DetectLocal, NodePortAddresses};

fn parse(args: &[&str]) -> Cli {
    let mut argv = vec!["kubenft"];
    argv.extend_from_slice(args);
    Cli::parse_args(argv).unwrap()
}

fn host() -> std::io::Result<String> {
    Ok("Node-A.Example\n".into())
}

fn validate(args: &[&str]) -> Result<Config, ConfigError> {
    parse(args).validate_with(host)
}

fn run_settings(c: Config) -> RunSettings {
    match c.task {
        Task::Run(settings) => settings,
        other => panic!("not the daemon: {other:?}"),
    }
}

fn error(args: &[&str]) -> String {
    validate(args).unwrap_err().to_string()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

#[test]
fn defaults_match_kube_proxy() {
    let c = validate(&["cleanup"]).unwrap();
    let p = &c.proxy;
    assert_eq!(p.table_name, "kubenft");
    assert_eq!(p.hostname, "node-a.example");
    assert_eq!(p.masquerade_bit, 14);
    assert_eq!(p.masquerade_mark(), 0x4000);
    assert!(!p.masquerade_all);
    assert_eq!(p.nodeport_addresses, NodePortAddresses::primary());
    assert_eq!(p.detect_local, DetectLocal::ClusterCidr);
    assert!(p.node_ips.is_empty() && p.cluster_cidrs.is_empty() && p.service_cidrs.is_empty());
    assert_eq!(c.task, Task::Cleanup);
    assert_eq!(
        c.warnings.len(),
        1,
        "ClusterCIDR without a CIDR warns: {:?}",
        c.warnings
    );
}

#[test]
fn every_flag_is_parsed_into_the_proxy_config() {
    let c = validate(&[
        "render",
        "--manifests",
        "/tmp/m",
        "--hostname-override",
        " Worker-1 ",
        "--node-ip",
        "192.168.1.10, fd00::10",
        "--cluster-cidr",
        "10.244.0.0/16,fd00:10:244::/56",
        "--service-cidr",
        "10.96.0.0/12,10.100.0.0/16,fd00:10:96::/112",
        "--nodeport-addresses",
        "192.168.1.0/24,fd00::/64",
        "--masquerade-all",
        "--masquerade-bit",
        "5",
        "--detect-local-mode",
        "InterfaceNamePrefix",
        "--pod-interface-name-prefix",
        "veth",
        "--table-name",
        "kube_proxy.2",
    ])
    .unwrap();
    assert_eq!(
        c.task,
        Task::Render {
            manifests: PathBuf::from("/tmp/m")
        }
    );
    assert_eq!(c.warnings, Vec::<String>::new());
    let want = ProxyConfig {
        table_name: "kube_proxy.2".into(),
        hostname: "worker-1".into(),
        node_ips: vec![ip("192.168.1.10"), ip("fd00::10")],
        cluster_cidrs: vec![net("10.244.0.0/16"), net("fd00:10:244::/56")],
        service_cidrs: vec![
            net("10.96.0.0/12"),
            net("10.100.0.0/16"),
            net("fd00:10:96::/112"),
        ],
        nodeport_addresses: NodePortAddresses::cidrs(vec![net("192.168.1.0/24"), net("fd00::/64")]),
        local_addresses: vec![],
        masquerade_all: true,
        masquerade_bit: 5,
        detect_local: DetectLocal::InterfaceNamePrefix("veth".into()),
        ..ProxyConfig::default()
    };
    assert_eq!(c.proxy, want);
}

#[test]
fn flags_may_come_before_the_subcommand_too() {
    let c = parse(&[
        "--table-name",
        "t1",
        "-vv",
        "--log-format",
        "json",
        "cleanup",
    ]);
    assert_eq!(c.proxy.table_name, "t1");
    assert_eq!(c.log.verbose, 2);
    assert_eq!(c.log.log_format, LogFormat::Json);
}

#[test]
fn the_iptables_spelling_of_the_masquerade_bit_is_accepted() {
    let c = validate(&["cleanup", "--iptables-masquerade-bit", "0"]).unwrap();
    assert_eq!(c.proxy.masquerade_mark(), 1);
}

#[test]
fn host_bits_of_a_cidr_are_cleared_like_go_parse_cidr() {
    let c = validate(&["cleanup", "--cluster-cidr", "10.244.3.7/16"]).unwrap();
    assert_eq!(c.proxy.cluster_cidrs, vec![net("10.244.0.0/16")]);
}

#[test]
fn the_host_name_is_read_only_without_an_override() {
    let c = parse(&["cleanup", "--hostname-override", "n1"])
        .validate_with(|| panic!("host name must not be read"))
        .unwrap();
    assert_eq!(c.proxy.hostname, "n1");
}

#[test]
fn the_system_host_name_is_readable_and_not_empty() {
    let name = system_hostname().unwrap();
    assert!(!name.is_empty() && !name.contains('\0'), "{name:?}");
}

#[test]
fn detect_local_modes_carry_their_interface() {
    let c = validate(&[
        "cleanup",
        "--detect-local-mode",
        "BridgeInterface",
        "--pod-bridge-interface",
        "cni0",
    ])
    .unwrap();
    assert_eq!(
        c.proxy.detect_local,
        DetectLocal::BridgeInterface("cni0".into())
    );
    let c = validate(&["cleanup", "--detect-local-mode", "NodeCIDR"]).unwrap();
    assert_eq!(c.proxy.detect_local, DetectLocal::NodeCidr);
    assert_eq!(c.warnings, Vec::<String>::new());
}

#[test]
fn an_unknown_detect_local_mode_is_refused_by_the_parser() {
    let argv = ["kubenft", "cleanup", "--detect-local-mode", "clustercidr"];
    assert!(Cli::try_parse_from(argv).is_err());
}

#[test]
fn an_interface_flag_for_another_mode_is_a_warning() {
    let c = validate(&[
        "cleanup",
        "--cluster-cidr",
        "10.0.0.0/8",
        "--pod-bridge-interface",
        "cni0",
        "--pod-interface-name-prefix",
        "veth",
    ])
    .unwrap();
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(c.warnings[0].starts_with("--pod-bridge-interface is ignored"));
    assert!(c.warnings[1].starts_with("--pod-interface-name-prefix is ignored"));
}

#[test]
fn every_invalid_value_is_explained_with_its_flag() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--cluster-cidr", "10.0.0.0/8,10.1.0.0/16"],
            "--cluster-cidr: two IPv4 CIDRs given (10.0.0.0/8, 10.1.0.0/16), at most one per family",
        ),
        (
            &["--cluster-cidr", "fd00::/48,10.0.0.0/8,fd01::/48"],
            "--cluster-cidr: two IPv6 CIDRs given (fd00::/48, fd01::/48), at most one per family",
        ),
        (
            &["--cluster-cidr", "10.0.0.0"],
            "--cluster-cidr: \"10.0.0.0\" is not a CIDR: ",
        ),
        (
            &["--service-cidr", "10.96.0.0/33"],
            "--service-cidr: \"10.96.0.0/33\" is not a CIDR: ",
        ),
        (
            &["--service-cidr", "10.96.0.0/12,"],
            "--service-cidr: empty entry in \"10.96.0.0/12,\"",
        ),
        (
            &["--node-ip", "10.0.0.1,10.0.0.2"],
            "--node-ip: two IPv4 addresses given (10.0.0.1, 10.0.0.2), at most one per family",
        ),
        (
            &["--node-ip", "node-a"],
            "--node-ip: \"node-a\" is not an IP address: ",
        ),
        (
            &["--node-ip", "::"],
            "--node-ip: :: is an unspecified address, not a node IP",
        ),
        (
            &["--nodeport-addresses", "eth0"],
            "--nodeport-addresses: \"eth0\" is neither a CIDR nor one of the keywords primary, \
             localhost, all",
        ),
        (
            &["--masquerade-bit", "32"],
            "--masquerade-bit: 32 is out of range, must be 0..=31",
        ),
        (
            &["--detect-local-mode", "BridgeInterface"],
            "--detect-local-mode BridgeInterface: needs --pod-bridge-interface",
        ),
        (
            &[
                "--detect-local-mode",
                "InterfaceNamePrefix",
                "--pod-interface-name-prefix",
                "",
            ],
            "--detect-local-mode InterfaceNamePrefix: needs --pod-interface-name-prefix",
        ),
        (
            &[
                "--detect-local-mode",
                "BridgeInterface",
                "--pod-bridge-interface",
                "a-very-long-bridge",
            ],
            "--pod-bridge-interface: \"a-very-long-bridge\" is not a usable interface name: longer than 15 bytes (IFNAMSIZ)",
        ),
        (
            &[
                "--detect-local-mode",
                "InterfaceNamePrefix",
                "--pod-interface-name-prefix",
                "ve/th",
            ],
            "--pod-interface-name-prefix: \"ve/th\" is not a usable interface name: contains `/`, `:` or whitespace",
        ),
        (
            &[
                "--detect-local-mode",
                "BridgeInterface",
                "--pod-bridge-interface",
                "..",
            ],
            "--pod-bridge-interface: \"..\" is not a usable interface name: `.` and `..` are not interface names",
        ),
        (
            &["--table-name", ""],
            "--table-name: \"\" is not an nftables identifier: empty",
        ),
        (
            &["--table-name", "9lives"],
            "--table-name: \"9lives\" is not an nftables identifier: must start with a letter, `_` or `.`, not '9'",
        ),
        (
            &["--table-name", "kube proxy"],
            "--table-name: \"kube proxy\" is not an nftables identifier: ' ' is not allowed",
        ),
        (
            &["--hostname-override", "  "],
            "the node name is empty (--hostname-override \"  \"",
        ),
    ];
    for (args, want) in cases {
        let mut argv = vec!["cleanup"];
        argv.extend_from_slice(args);
        let got = error(&argv);
        assert!(
            got.starts_with(want),
            "{args:?}:\n got: {got}\nwant: {want}"
        );
    }
    let long = "t".repeat(256);
    let got = error(&["cleanup", "--table-name", &long]);
    assert!(got.ends_with("256 bytes, at most 255"), "{got}");
    assert!(validate(&["cleanup", "--table-name", &long[..255]]).is_ok());
}

#[test]
fn an_unreadable_host_name_is_an_error() {
    let err = parse(&["cleanup"])
        .validate_with(|| Err(std::io::Error::other("no uts")))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "--hostname-override not given and the host name could not be read: no uts"
    );
}

#[test]
fn render_and_sync_need_manifests_and_sync_needs_once() {
    assert_eq!(
        error(&["render"]),
        "render: --manifests PATH is required (only `run` reads the Kubernetes API)"
    );
    assert_eq!(
        error(&["sync", "--once"]),
        "sync: --manifests PATH is required (only `run` reads the Kubernetes API)"
    );
    assert_eq!(
        error(&["sync", "--manifests", "d"]),
        "sync: only `sync --once` is available; `run` is the daemon"
    );
    let c = validate(&["sync", "--once", "--manifests", "d"]).unwrap();
    assert_eq!(
        c.task,
        Task::Sync {
            manifests: PathBuf::from("d"),
            replace_kube_proxy: false,
        }
    );
    let c = validate(&["sync", "--once", "--replace-kube-proxy", "--manifests", "d"]).unwrap();
    assert!(matches!(
        c.task,
        Task::Sync {
            replace_kube_proxy: true,
            ..
        }
    ));
}

#[test]
fn run_takes_kube_proxys_defaults_and_durations() {
    let c = validate(&["run"]).unwrap();
    let run = run_settings(c);
    assert_eq!(run.periods, crate::sync::Periods::default());
    assert_eq!(
        run.healthz_bind_address,
        Some("0.0.0.0:10256".parse().unwrap())
    );
    assert_eq!(
        run.metrics_bind_address,
        Some("127.0.0.1:10249".parse().unwrap())
    );
    assert_eq!(run.kubeconfig, None);

    let c = validate(&[
        "run",
        "--min-sync-period=100ms",
        "--sync-period=1m30s",
        "--full-sync-period=2h",
        "--metrics-bind-address=",
        "--healthz-bind-address=:10256",
    ])
    .unwrap();
    let run = run_settings(c);
    assert_eq!(run.periods.min_sync_period, Duration::from_millis(100));
    assert_eq!(run.periods.sync_period, Duration::from_secs(90));
    assert_eq!(run.periods.full_sync_period, Duration::from_secs(7200));
    assert_eq!(run.metrics_bind_address, None, "empty disables");
    assert_eq!(
        run.healthz_bind_address,
        Some("0.0.0.0:10256".parse().unwrap())
    );
}

#[test]
fn bad_run_durations_and_addresses_are_explained() {
    assert_eq!(
        error(&["run", "--sync-period=30"]),
        "--sync-period: \"30\" is not a duration: a number without a unit \
         (write it like 100ms, 1s, 1m30s, 1h)"
    );
    assert_eq!(
        error(&["run", "--min-sync-period=1d"]),
        "--min-sync-period: \"1d\" is not a duration: an unknown unit \
         (write it like 100ms, 1s, 1m30s, 1h)"
    );
    assert_eq!(
        error(&["run", "--sync-period=0s"]),
        "--sync-period: \"0s\" must be greater than zero"
    );
    assert!(
        error(&["run", "--metrics-bind-address=localhost"])
            .starts_with("--metrics-bind-address: bind address \"localhost\" is not host:port")
    );
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

const FILE: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clusterCIDR: 10.244.0.0/16
metricsBindAddress: 0.0.0.0:10249
clientConnection: {kubeconfig: /etc/k/kubeconfig}
detectLocalMode: NodeCIDR
nftables: {masqueradeBit: 13, syncPeriod: 45s, minSyncPeriod: 2s}
iptables: {masqueradeBit: 14}
";

#[test]
fn a_config_file_fills_in_what_the_command_line_did_not_say() {
    let f = config_file(FILE);
    let c = validate(&["run", "--config", f.path().to_str().unwrap()]).unwrap();
    assert_eq!(c.proxy.cluster_cidrs, vec![net("10.244.0.0/16")]);
    assert_eq!(c.proxy.masquerade_bit, 13);
    assert_eq!(c.proxy.detect_local, DetectLocal::NodeCidr);
    let warnings = c.warnings.clone();
    let run = run_settings(c);
    assert_eq!(run.kubeconfig, Some(PathBuf::from("/etc/k/kubeconfig")));
    assert_eq!(run.periods.sync_period, Duration::from_secs(45));
    assert_eq!(run.periods.min_sync_period, Duration::from_secs(2));
    assert_eq!(
        run.metrics_bind_address,
        Some("0.0.0.0:10249".parse().unwrap())
    );
    assert_eq!(
        warnings,
        [
            "--config: accepted and not applied: iptables.masqueradeBit (another proxy mode's setting)"
        ]
    );
}

#[test]
fn flags_on_the_command_line_win_over_the_config_file_wherever_they_are_written() {
    let f = config_file(FILE);
    let path = f.path().to_str().unwrap();
    let c = validate(&[
        "--cluster-cidr",
        "10.8.0.0/16",
        "run",
        "--config",
        path,
        "--sync-period=5s",
        "--masquerade-bit=14",
    ])
    .unwrap();
    assert_eq!(c.proxy.cluster_cidrs, vec![net("10.8.0.0/16")]);
    assert_eq!(c.proxy.masquerade_bit, 14, "even when equal to the default");
    let run = run_settings(c);
    assert_eq!(run.periods.sync_period, Duration::from_secs(5));
    assert_eq!(
        run.periods.min_sync_period,
        Duration::from_secs(2),
        "from the file"
    );
}

#[test]
fn a_bad_config_file_is_a_configuration_error_naming_the_problem() {
    let f = config_file(&FILE.replace("NodeCIDR", "PodCIDR"));
    assert_eq!(
        error(&["run", "--config", f.path().to_str().unwrap()]),
        "--config: detectLocalMode: \"PodCIDR\" is not one of ClusterCIDR, NodeCIDR, \
         BridgeInterface, InterfaceNamePrefix"
    );
    let f = config_file(&FILE.replace("syncPeriod: 45s", "syncPeriod: 45"));
    assert_eq!(
        error(&["run", "--config", f.path().to_str().unwrap()]),
        format!(
            "--config: {}:7: nftables.syncPeriod: expected a string, found the number 45",
            f.path().display()
        )
    );
    assert!(
        error(&["run", "--config", "/nonexistent/kubenft.yaml"])
            .starts_with("--config: reading /nonexistent/kubenft.yaml")
    );
}

#[test]
fn conntrack_settings_take_kube_proxys_defaults_flags_and_file_values_flags_first() {
    use crate::conntrack::tuning::ConntrackSettings;
    let run = run_settings(validate(&["run"]).unwrap());
    assert_eq!(run.conntrack, ConntrackSettings::default());
    assert_eq!(run.conntrack.max_per_core, 32768);
    assert_eq!(run.conntrack.min, 131072);
    assert_eq!(
        run.conntrack.tcp_established_timeout,
        Duration::from_secs(86400)
    );
    assert_eq!(
        run.conntrack.tcp_close_wait_timeout,
        Duration::from_secs(3600)
    );
    assert!(!run.init_only);

    let f = config_file(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
  min: 1000
  tcpEstablishedTimeout: null
  tcpCloseWaitTimeout: 0s
  tcpBeLiberal: true
  udpTimeout: 10s
  udpStreamTimeout: 0s
",
    );
    let path = f.path().to_str().unwrap();
    let run = run_settings(validate(&["run", "--config", path]).unwrap());
    assert_eq!(
        run.conntrack,
        ConntrackSettings {
            max_per_core: 0,
            min: 1000,
            tcp_established_timeout: Duration::from_secs(86400),
            tcp_close_wait_timeout: Duration::ZERO,
            tcp_be_liberal: true,
            udp_timeout: Duration::from_secs(10),
            udp_stream_timeout: Duration::ZERO,
        }
    );
    let run = validate(&[
        "run",
        "--config",
        path,
        "--conntrack-max-per-core=32768",
        "--conntrack-udp-timeout",
        "0",
        "--conntrack-udp-timeout-stream=2m",
        "--conntrack-tcp-timeout-close-wait=1h",
        "--init-only",
    ])
    .unwrap();
    let run = run_settings(run);
    assert_eq!(run.conntrack.max_per_core, 32768, "even when the default");
    assert_eq!(run.conntrack.min, 1000, "from the file");
    assert_eq!(run.conntrack.udp_timeout, Duration::ZERO);
    assert_eq!(run.conntrack.udp_stream_timeout, Duration::from_secs(120));
    assert_eq!(
        run.conntrack.tcp_close_wait_timeout,
        Duration::from_secs(3600)
    );
    assert!(run.init_only);

    assert_eq!(
        error(&["run", "--conntrack-udp-timeout=500ms"]),
        "--conntrack-udp-timeout: \"500ms\" must be 0 (leave the kernel's value) or at least 1s"
    );
    assert!(
        error(&["run", "--conntrack-tcp-timeout-established=1d"])
            .starts_with("--conntrack-tcp-timeout-established: \"1d\" is not a duration")
    );
}

/// kubeadm's kube-proxy ConfigMap (`config.conf`), with the nftables mode chosen.
const KUBEADM: &str = include_str!("../../examples/kubeadm/config.conf");

#[test]
fn kubeadms_kube_proxy_configuration_validates_unchanged_and_without_warnings() {
    let f = config_file(KUBEADM);
    let c = validate(&["run", "--config", f.path().to_str().unwrap()]).unwrap();
    assert_eq!(c.warnings, Vec::<String>::new());
    assert_eq!(c.proxy.cluster_cidrs, vec![net("10.244.0.0/16")]);
    assert!(c.proxy.node_ips.is_empty(), "0.0.0.0 means ask the Node");
    assert!(c.proxy.use_node_hints);
    let run = run_settings(c);
    assert_eq!(
        run.kubeconfig,
        Some(PathBuf::from("/var/lib/kube-proxy/kubeconfig.conf"))
    );
    assert_eq!(run.periods, crate::sync::Periods::default());
    assert_eq!(
        run.healthz_bind_address,
        Some("0.0.0.0:10256".parse().unwrap())
    );
}

#[test]
fn a_proxy_mode_other_than_nftables_is_refused_saying_what_kubenft_is() {
    for args in [
        &["run", "--proxy-mode", "ipvs"][..],
        &["run", "--proxy-mode=iptables"][..],
    ] {
        let e = error(args);
        assert!(
            e.starts_with("--proxy-mode \"")
                && e.contains("kubenft is a Kubernetes service proxy that implements kube-proxy's nftables mode only"),
            "{e}"
        );
    }
    assert!(validate(&["run", "--proxy-mode", "nftables"]).is_ok());
    let f = config_file(&KUBEADM.replace("mode: nftables", "mode: ipvs"));
    let e = error(&["run", "--config", f.path().to_str().unwrap()]);
    assert!(e.starts_with("--proxy-mode \"ipvs\": kubenft is"), "{e}");
    // The flag wins over the file, as every flag does.
    assert!(
        validate(&[
            "run",
            "--config",
            f.path().to_str().unwrap(),
            "--proxy-mode=nftables"
        ])
        .is_ok()
    );
}

#[test]
fn kube_proxys_flags_win_over_the_file() {
    let f = config_file(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clusterCIDR: 10.244.0.0/16
hostnameOverride: from-file
bindAddress: 10.0.0.1
healthzBindAddress: 0.0.0.0:1111
metricsBindAddress: 0.0.0.0:2222
nodePortAddresses: [10.0.0.0/8]
featureGates: {PreferSameTrafficDistribution: true, WinDSR: true}
logging: {verbosity: 2, format: json}
",
    );
    let path = f.path().to_str().unwrap();
    let c = validate(&["run", "--config", path]).unwrap();
    assert_eq!(c.proxy.hostname, "from-file");
    assert_eq!(c.proxy.node_ips, vec![ip("10.0.0.1")]);
    assert!(c.proxy.use_node_hints);
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(
        c.warnings,
        ["feature gates that change nothing in kubenft: WinDSR=true"]
    );
    let c = validate(&[
        "run",
        "--config",
        path,
        "--hostname-override=from-flag",
        "--bind-address=10.0.0.2",
        "--healthz-bind-address=127.0.0.1:3333",
        "--metrics-bind-address=127.0.0.1:4444",
        "--nodeport-addresses=primary",
        "--feature-gates=PreferSameTrafficDistribution=false",
        "--v=4",
        "--log-format=text",
    ])
    .unwrap();
    assert_eq!(c.proxy.hostname, "from-flag");
    assert_eq!(c.proxy.node_ips, vec![ip("10.0.0.2")]);
    assert_eq!(c.proxy.nodeport_addresses, NodePortAddresses::primary());
    assert!(
        !c.proxy.use_node_hints,
        "the flag's gate wins over the file's"
    );
    assert_eq!(
        c.log,
        LogSettings {
            format: LogFormat::Text,
            verbosity: 1
        }
    );
    let run = run_settings(c);
    assert_eq!(
        run.healthz_bind_address,
        Some("127.0.0.1:3333".parse().unwrap())
    );
    assert_eq!(
        run.metrics_bind_address,
        Some("127.0.0.1:4444".parse().unwrap())
    );
    assert_eq!(
        run.feature_gates,
        BTreeMap::from([
            ("PreferSameTrafficDistribution".to_string(), false),
            ("WinDSR".to_string(), true)
        ])
    );
}

#[test]
fn an_ipv6_bind_address_moves_the_servers_defaults_to_ipv6() {
    let c = validate(&["run", "--bind-address", "fd00::1"]).unwrap();
    assert_eq!(c.proxy.node_ips, vec![ip("fd00::1")]);
    let run = run_settings(c);
    assert_eq!(
        run.healthz_bind_address,
        Some("[::]:10256".parse().unwrap())
    );
    assert_eq!(
        run.metrics_bind_address,
        Some("[::1]:10249".parse().unwrap())
    );
    assert!(
        error(&["run", "--bind-address", "node-a"])
            .starts_with("--bind-address: \"node-a\" is not an IP address")
    );
    assert_eq!(
        error(&["run", "--feature-gates", "A=maybe"]),
        "--feature-gates: \"A=maybe\": \"maybe\" is not true or false"
    );
}

#[test]
fn cleanup_and_write_config_to_are_what_run_does_instead_of_the_daemon() {
    assert_eq!(validate(&["run", "--cleanup"]).unwrap().task, Task::Cleanup);
    let c = validate(&["run", "--write-config-to", "/tmp/x.yaml"]).unwrap();
    assert!(
        matches!(c.task, Task::WriteConfig { ref path, .. } if path == Path::new("/tmp/x.yaml"))
    );
}

#[test]
fn the_written_configuration_reads_back_to_the_same_settings() {
    let f = config_file(KUBEADM);
    let args = [
        "run",
        "--config",
        f.path().to_str().unwrap(),
        "--hostname-override=node-a",
        "--bind-address=10.0.0.5",
        "--masquerade-all",
        "--masquerade-bit=3",
        "--detect-local-mode=InterfaceNamePrefix",
        "--pod-interface-name-prefix=veth",
        "--nodeport-addresses=10.0.0.0/8,fd00::/64",
        "--sync-period=1m30s",
        "--min-sync-period=250ms",
        "--conntrack-min=1000",
        "--conntrack-tcp-timeout-close-wait=0",
        "--conntrack-tcp-be-liberal",
        "--feature-gates=PreferSameTrafficDistribution=false",
        "--metrics-bind-address=0.0.0.0:10249",
        "--v=6",
        "--log-format=json",
    ];
    let mut written = args.to_vec();
    written.extend(["--write-config-to", "/unused"]);
    let Task::WriteConfig { yaml, .. } = validate(&written).unwrap().task else {
        panic!("--write-config-to writes");
    };
    let direct = validate(&args).unwrap();
    let out = config_file(&yaml);
    let read_back = validate(&["run", "--config", out.path().to_str().unwrap()]).unwrap();
    assert_eq!(read_back, direct, "{yaml}");
    assert!(yaml.contains("mode: nftables"), "{yaml}");
}

#[test]
fn the_configuration_reference_lists_every_field_of_the_file() {
    // Only the table of fields counts: the flags table above it names fields too.
    let reference = include_str!("../../docs/configuration.md");
    let table: String = reference
        .lines()
        .skip_while(|line| !line.starts_with("| field | kubenft |"))
        .take_while(|line| line.starts_with('|'))
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(
        !table.is_empty(),
        "docs/configuration.md has no table headed | field | kubenft |"
    );
    for (path, _) in super::fields::all() {
        assert!(
            table.contains(&format!("| `{path}` |")),
            "docs/configuration.md's table of file fields lacks {path}"
        );
    }
}

/// kube-proxy 1.37's `nodePortAddresses` validation cases (keywords alone, combined with each
/// other and with CIDRs; a keyword twice and a keyword in the wrong case refused), and what
/// each means here: which node addresses take NodePorts and where loopback is proxied.
#[test]
fn nodeport_addresses_take_keywords_and_cidrs_in_any_combination() {
    let v4_loopback = net("127.0.0.0/8");
    let v6_loopback = net("::1/128");
    let accepted: [(&str, bool, Vec<IpNet>); 8] = [
        ("primary", true, vec![]),
        ("localhost", false, vec![v4_loopback, v6_loopback]),
        ("all", false, vec![net("0.0.0.0/0"), net("::/0")]),
        ("primary,localhost", true, vec![v4_loopback, v6_loopback]),
        ("primary,127.0.0.1/32", true, vec![net("127.0.0.1/32")]),
        (
            "all,localhost",
            false,
            vec![net("0.0.0.0/0"), net("::/0"), v4_loopback, v6_loopback],
        ),
        ("10.0.0.0/8, primary", true, vec![net("10.0.0.0/8")]),
        (
            "0.0.0.0/0,127.0.0.1/32",
            false,
            vec![net("0.0.0.0/0"), net("127.0.0.1/32")],
        ),
    ];
    for (value, primary, cidrs) in accepted {
        let c = validate(&["cleanup", "--nodeport-addresses", value]).unwrap();
        let want = NodePortAddresses { primary, cidrs };
        assert_eq!(c.proxy.nodeport_addresses, want, "{value}");
    }
    for (value, message) in [
        (
            "localhost,localhost",
            "the keyword localhost is given twice",
        ),
        ("primary,all,primary", "the keyword primary is given twice"),
        (
            "Localhost",
            "\"Localhost\" is neither a CIDR nor one of the keywords",
        ),
        ("primary,", "empty entry"),
    ] {
        let e = error(&["cleanup", "--nodeport-addresses", value]);
        assert!(e.contains(message), "{value}: {e}");
    }
}

/// Loopback NodePorts are proxied in the families whose loopback range is named, and only
/// with the gate; naming loopback without the gate is warned about.
#[test]
fn loopback_nodeports_need_the_gate_and_a_loopback_range_of_the_family() {
    let gate = "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true";
    let proxied = |args: &[&str]| {
        let mut argv = vec!["run"];
        argv.extend_from_slice(args);
        let c = validate(&argv).unwrap();
        IpFamily::BOTH.map(|f| c.proxy.localhost_proxy(f))
    };
    let cases: [(&[&str], [bool; 2]); 7] = [
        (&[gate], [false, false]),
        (&[gate, "--nodeport-addresses=primary"], [false, false]),
        (&[gate, "--nodeport-addresses=all"], [false, false]),
        (
            &[gate, "--nodeport-addresses=primary,localhost"],
            [true, true],
        ),
        (
            &[gate, "--nodeport-addresses=primary,127.0.0.1/32"],
            [true, false],
        ),
        (&[gate, "--nodeport-addresses=all,localhost"], [true, true]),
        (&["--nodeport-addresses=primary,localhost"], [false, false]),
    ];
    for (args, want) in cases {
        assert_eq!(proxied(args), want, "{args:?}");
    }
    let warned = |args: &[&str]| {
        let mut argv = vec!["run"];
        argv.extend_from_slice(args);
        let c = validate(&argv).unwrap();
        c.warnings
            .iter()
            .any(|w| w.contains("KubeProxyNFTablesLocalhostNodePorts"))
    };
    assert!(warned(&["--nodeport-addresses=primary,localhost"]));
    assert!(!warned(&[gate, "--nodeport-addresses=primary,localhost"]));
    assert!(
        !warned(&[gate]),
        "the gate alone is honoured: loopback NodePorts are rejected"
    );
}

/// AllowServiceExternalIPs reaches the planner from the file or the flag (the flag winning),
/// and setting it, either way, is warned about as a deprecated gate.
#[test]
fn the_external_ips_gate_reaches_the_planner_with_its_deprecation_warning() {
    let c = validate(&["run", "--cluster-cidr=10.244.0.0/16"]).unwrap();
    assert!(c.proxy.serve_external_ips, "on by default");
    assert_eq!(c.warnings, Vec::<String>::new());

    let f = config_file(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clusterCIDR: 10.244.0.0/16
featureGates: {AllowServiceExternalIPs: false}
",
    );
    let path = f.path().to_str().unwrap();
    let c = validate(&["run", "--config", path]).unwrap();
    assert!(!c.proxy.serve_external_ips);
    assert_eq!(
        c.warnings,
        [
            "feature gate AllowServiceExternalIPs=false is deprecated: kube-proxy will remove it \
          in a future release"
        ]
    );
    let c = validate(&[
        "run",
        "--config",
        path,
        "--feature-gates=AllowServiceExternalIPs=true",
    ])
    .unwrap();
    assert!(
        c.proxy.serve_external_ips,
        "the flag's gate wins over the file's"
    );
}
