//! Packet-flow tables run as real traffic. A table is a cluster (Services and EndpointSlices as
//! YAML, the node's settings) and flows: from a source address to a destination, the outcome
//! kube-proxy gives (endpoints it may reach and whether the source is masqueraded, or drop,
//! reject, or not proxied at all). The harness builds a node namespace and one namespace per
//! other address behind it (a veth and a host route each, as a CNI node routes its pods), so
//! every packet crosses the node's hooks; programs kubenft's tables for the cluster; sends real
//! connections; and compares. Tables are written with IPv4 addresses and also run in IPv6 by
//! embedding each address in `fd00::/96` (prefix lengths grow by 96, so containment holds).
//!
//! Every endpoint answers with the address it was reached at and the source it saw, so one
//! answer tells the endpoint and whether the source was masqueraded. An address that a flow
//! targets and some namespace owns (the node's IPs) answers the same way: a packet that should
//! have been translated, dropped or rejected and was not shows up as answered there. Packets to
//! addresses nobody owns leave the node towards an upstream router that answers "prohibited",
//! so a missing drop is visible too.
//!
//! Each flow is also asked of `kubenft explain` in the node namespace before it is sent, and the
//! connections must end as it predicted (the same endpoints, masquerading, drop or reject), so
//! `explain` is checked against the kernel for every flow of every table, in both families.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubenft::cluster::ClusterState;
use kubenft::netns::Netns;
use kubenft::nft::kernel::Nftables;
use kubenft::nft::model::{MapData, Table, Value};
use kubenft::proxier::{DetectLocal, NodePortAddresses, ProxyConfig};
use kubenft::source::manifests::{Manifests, parse_file};
use kubenft::sync::{Observed, reconcile_transaction};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::explain_harness;
use explain_harness::Fate;

/// How long a connection may take before it counts as dropped (see `lab::CONNECT_TIMEOUT`).
const CONNECT_TIMEOUT: Duration = kubenft::lab::CONNECT_TIMEOUT;
/// Connections tried per flow that may reach several endpoints: enough that missing one of
/// three equally likely endpoints by chance has a probability below 1e-6.
const MAX_ATTEMPTS: usize = 40;
/// An endpoint `explain` gives at least this share of connections must answer one of the
/// `MAX_ATTEMPTS` (missing it by chance: below 1e-5).
const MIN_SEEN: f64 = 0.25;

/// The node every table runs on, as kube-proxy's own tests set it up.
pub const NODE_NAME: &str = "test-node";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
    /// Not available in this kernel: checked on the planned ruleset only.
    Sctp,
}

/// What kube-proxy does with a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// DNAT to one of these endpoints (`address:port`, each reached within `MAX_ATTEMPTS`),
    /// with the source masqueraded or kept.
    Reach {
        endpoints: &'static [&'static str],
        masquerade: bool,
    },
    Drop,
    Reject,
    /// Not touched: the packet reaches its destination address itself (or, for an address no
    /// namespace owns, is routed on past the node).
    NotProxied,
}

/// Reaches one of `endpoints`, the source kept.
pub const fn reach(endpoints: &'static [&'static str]) -> Expect {
    Expect::Reach {
        endpoints,
        masquerade: false,
    }
}

/// Reaches one of `endpoints`, the source masqueraded.
pub const fn reach_masqueraded(endpoints: &'static [&'static str]) -> Expect {
    Expect::Reach {
        endpoints,
        masquerade: true,
    }
}

/// One case of a table: a connection from `from` to `to` (`address:port`).
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub name: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    pub proto: Proto,
    pub expect: Expect,
    /// kubenft answers this flow differently today, for this reason; the harness asserts that
    /// it still does (so the marker goes once the difference is fixed).
    pub known_difference: Option<&'static str>,
}

impl Flow {
    pub const fn tcp(
        name: &'static str,
        from: &'static str,
        to: &'static str,
        expect: Expect,
    ) -> Flow {
        Flow {
            name,
            from,
            to,
            proto: Proto::Tcp,
            expect,
            known_difference: None,
        }
    }

    pub const fn udp(
        name: &'static str,
        from: &'static str,
        to: &'static str,
        expect: Expect,
    ) -> Flow {
        Flow {
            proto: Proto::Udp,
            ..Flow::tcp(name, from, to, expect)
        }
    }

    pub const fn sctp(
        name: &'static str,
        from: &'static str,
        to: &'static str,
        expect: Expect,
    ) -> Flow {
        Flow {
            proto: Proto::Sctp,
            ..Flow::tcp(name, from, to, expect)
        }
    }

    /// Marks a flow kubenft answers differently today (docs/parity.md lists each one). No flow
    /// carries a marker right now; the next difference a port finds is marked this way.
    #[allow(dead_code)]
    pub const fn known_difference(self, why: &'static str) -> Flow {
        Flow {
            known_difference: Some(why),
            ..self
        }
    }
}

/// The node's side of a table: kube-proxy's flags that the upstream tests vary.
#[derive(Debug, Clone, Default)]
pub struct NodeSettings {
    /// `--masquerade-all`.
    pub masquerade_all: bool,
    /// No way to tell pod traffic apart (no cluster CIDR): upstream's no-op local detector.
    pub no_local_detector: bool,
    /// `--nodeport-addresses` CIDRs as written; None is the default (the node's primary IP).
    pub nodeport_addresses: Option<Vec<&'static str>>,
    /// `--detect-local-mode InterfaceNamePrefix` with `POD_INTERFACE_PREFIX`: pod traffic is
    /// what arrives on a pod's veth, whatever its source address.
    pub detect_local_by_interface: bool,
}

/// The node's veths towards addresses inside the cluster CIDR are named with this prefix (the
/// others `h…`), so a table can tell pods apart by interface as a CNI's naming lets
/// kube-proxy do.
pub const POD_INTERFACE_PREFIX: &str = "pod";

/// A cluster and the flows to send through it.
#[derive(Debug, Clone)]
pub struct FlowTable {
    /// The upstream test (and subtest) it restates.
    pub name: String,
    /// Services and EndpointSlices, as `kubectl get -o yaml` would print them.
    pub manifests: String,
    pub node: NodeSettings,
    pub flows: Vec<Flow>,
}

/// The family a table's addresses are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Run as written and again in IPv6 (addresses embedded in `fd00::/96`).
    V4,
    /// Run as written only (tables upstream writes out for both families).
    V4Only,
    /// Run as written only (upstream's own IPv6 variants).
    V6,
}

/// The addresses of one run: a table as written, or its IPv6 image.
#[derive(Debug, Clone, Copy)]
struct Run {
    written: Written,
    to_v6: bool,
}

/// `v4` embedded in `fd00::/96`.
pub fn v6_of(v4: Ipv4Addr) -> Ipv6Addr {
    Ipv6Addr::from((0xfd00u128 << 112) | u128::from(u32::from(v4)))
}

impl Run {
    fn label(self) -> &'static str {
        if self.v6() { "IPv6" } else { "IPv4" }
    }

    fn v6(self) -> bool {
        self.to_v6 || self.written == Written::V6
    }

    /// An address, CIDR or `address:port` of the table as this run reads it (surrounding
    /// whitespace kept: upstream writes some source ranges with a leading space on purpose).
    fn text(self, s: &str) -> String {
        if !self.to_v6 {
            return s.to_string();
        }
        let t = s.trim();
        let image = if let Ok(ip) = t.parse::<Ipv4Addr>() {
            v6_of(ip).to_string()
        } else if let Ok(net) = t.parse::<Ipv4Net>() {
            Ipv6Net::new(v6_of(net.addr()), net.prefix_len() + 96)
                .expect("a v4 prefix plus 96 fits")
                .to_string()
        } else if let Ok(SocketAddr::V4(sa)) = t.parse::<SocketAddr>() {
            SocketAddr::new(IpAddr::V6(v6_of(*sa.ip())), sa.port()).to_string()
        } else {
            return s.to_string();
        };
        let start = s.len() - s.trim_start().len();
        format!("{}{image}{}", &s[..start], &s[start + t.len()..])
    }

    fn ip(self, s: &str) -> IpAddr {
        self.text(s)
            .parse()
            .unwrap_or_else(|e| panic!("address {s:?}: {e}"))
    }

    fn sock(self, s: &str) -> SocketAddr {
        self.text(s)
            .parse()
            .unwrap_or_else(|e| panic!("address:port {s:?}: {e}"))
    }

    fn net(self, s: &str) -> IpNet {
        self.text(s)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("CIDR {s:?}: {e}"))
    }

    /// Upstream's fake node: its IPs (the first is the primary one), pod and service ranges.
    fn node_addresses(self) -> Vec<IpAddr> {
        match self.written {
            Written::V4 | Written::V4Only => ["192.168.0.2", "192.168.1.2", "192.168.99.11"]
                .iter()
                .map(|a| self.ip(a))
                .collect(),
            Written::V6 => ["2001:db8::1", "2001:db8:1::2"]
                .iter()
                .map(|a| self.ip(a))
                .collect(),
        }
    }

    fn cluster_cidr(self) -> IpNet {
        match self.written {
            Written::V4 | Written::V4Only => self.net("10.0.0.0/8"),
            Written::V6 => self.net("fd00:10::/64"),
        }
    }

    fn service_cidr(self) -> IpNet {
        match self.written {
            Written::V4 | Written::V4Only => self.net("172.30.0.0/16"),
            Written::V6 => self.net("fd00:10:96::/112"),
        }
    }

    /// The table's Services and EndpointSlices, addresses as this run reads them.
    fn manifests(self, table: &FlowTable) -> Manifests {
        let mut m = Manifests::default();
        let mut warnings = Vec::new();
        parse_file(
            Path::new(&table.name),
            &table.manifests,
            &mut m,
            &mut warnings,
        );
        assert!(warnings.is_empty(), "{}: {warnings:?}", table.name);
        if !self.to_v6 {
            return m;
        }
        let map = |v: &mut String| *v = self.text(v);
        for svc in &mut m.services {
            if let Some(spec) = &mut svc.spec {
                spec.cluster_ip.iter_mut().for_each(map);
                spec.cluster_ips.iter_mut().flatten().for_each(map);
                spec.external_ips.iter_mut().flatten().for_each(map);
                spec.load_balancer_source_ranges
                    .iter_mut()
                    .flatten()
                    .for_each(map);
                spec.ip_families = Some(vec!["IPv6".into()]);
            }
            let ingress = svc
                .status
                .as_mut()
                .and_then(|s| s.load_balancer.as_mut())
                .and_then(|lb| lb.ingress.as_mut());
            for ing in ingress.into_iter().flatten() {
                ing.ip.iter_mut().for_each(map);
            }
        }
        for slice in &mut m.endpoint_slices {
            slice.address_type = "IPv6".into();
            for ep in &mut slice.endpoints {
                ep.addresses.iter_mut().for_each(map);
            }
        }
        m
    }

    /// kubenft's tables for `table` on the test node.
    fn plan(self, table: &FlowTable) -> Vec<Table> {
        let m = self.manifests(table);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(NODE_NAME.into()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: self.node_addresses()[0].to_string(),
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        let (state, rejected) =
            ClusterState::from_objects(&m.services, &m.endpoint_slices, Some(&node));
        assert!(rejected.is_empty(), "{}: {rejected:?}", table.name);
        let settings = &table.node;
        let config = ProxyConfig {
            hostname: NODE_NAME.into(),
            cluster_cidrs: if settings.no_local_detector {
                Vec::new()
            } else {
                vec![self.cluster_cidr()]
            },
            service_cidrs: vec![self.service_cidr()],
            nodeport_addresses: match &settings.nodeport_addresses {
                None => NodePortAddresses::primary(),
                Some(cidrs) => {
                    NodePortAddresses::cidrs(cidrs.iter().map(|c| self.net(c)).collect())
                }
            },
            local_addresses: self.node_addresses(),
            masquerade_all: settings.masquerade_all,
            detect_local: if settings.detect_local_by_interface {
                DetectLocal::InterfaceNamePrefix(POD_INTERFACE_PREFIX.into())
            } else {
                DetectLocal::ClusterCidr
            },
            ..ProxyConfig::default()
        };
        kubenft::proxier::build(&state, &config)
    }
}

/// What one connection attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    /// Answered by whoever owns `at` (an endpoint, or the destination itself), which saw the
    /// connection come from `source`.
    Answered {
        at: SocketAddr,
        source: IpAddr,
    },
    Refused,
    TimedOut,
    /// Routed past the node untranslated, to the upstream router.
    Unreachable,
    Other(String),
}

fn classify(e: &io::Error) -> Probe {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Probe::Refused,
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Probe::TimedOut,
        io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable
        | io::ErrorKind::PermissionDenied => Probe::Unreachable,
        _ => Probe::Other(e.to_string()),
    }
}

/// Parses a backend's answer: "<address:port it was reached at> <source it saw>".
fn answer(line: &str) -> Probe {
    let mut parts = line.split_whitespace();
    match (
        parts.next().and_then(|a| a.parse().ok()),
        parts.next().and_then(|s| s.parse().ok()),
    ) {
        (Some(at), Some(source)) => Probe::Answered { at, source },
        _ => Probe::Other(format!("unexpected answer {line:?}")),
    }
}

/// A node namespace, one namespace per other address of the tables, the upstream router,
/// and the servers answering on each of them.
struct Lab {
    run: Run,
    node: Netns,
    hosts: BTreeMap<IpAddr, Netns>,
    /// The node's veth towards each host: the interface its packets arrive on.
    host_devices: BTreeMap<IpAddr, String>,
    _upstream: Netns,
    runtime: tokio::runtime::Runtime,
}

/// Sets a sysctl of the namespace the calling thread is in.
fn sysctl(path: &str, value: &str) {
    std::fs::write(format!("/proc/sys/{path}"), value)
        .unwrap_or_else(|e| panic!("sysctl {path}: {e}"));
}

/// Runs `ip` commands in `ns` as one batch, addresses and rules of the run's family.
fn batch(ns: &Netns, v6: bool, commands: &[String]) {
    let mut script = commands.join("\n");
    script.push('\n');
    let family = if v6 { "-6" } else { "-4" };
    ns.exec_with_stdin(&["ip", family, "-batch", "-"], &script)
        .unwrap_or_else(|e| panic!("{}: {e}", ns.name()));
}

impl Lab {
    /// `listeners`: (protocol, address:port) to answer on, wherever the address lives.
    /// `senders_to_self`: host addresses that also send to themselves through the node.
    fn build(
        tag: &str,
        run: Run,
        addresses: &BTreeSet<IpAddr>,
        listeners: &BTreeSet<(bool, SocketAddr)>,
        senders_to_self: &BTreeSet<IpAddr>,
    ) -> Lab {
        let v6 = run.v6();
        let node = Netns::create(&format!("{tag}n")).unwrap();
        let upstream = Netns::create(&format!("{tag}u")).unwrap();
        let node_addresses = run.node_addresses();
        let hosts: BTreeMap<IpAddr, Netns> = addresses
            .iter()
            .filter(|a| !node_addresses.contains(a))
            .enumerate()
            .map(|(i, a)| (*a, Netns::create(&format!("{tag}h{i}")).unwrap()))
            .collect();
        node.run(move || {
            sysctl("net/ipv4/ip_forward", "1");
            sysctl("net/ipv6/conf/all/forwarding", "1");
            for conf in ["all", "default"] {
                sysctl(&format!("net/ipv4/conf/{conf}/rp_filter"), "0");
            }
        })
        .unwrap();
        let host_len = if v6 { 128 } else { 32 };
        let nodad = if v6 { " nodad" } else { "" };
        // The node: its IPs on loopback (no dummy devices in every kernel); a default route to the upstream router, so
        // packets nobody translates are forwarded (through the filter hooks) and refused
        // there; one veth and host route per other address.
        let mut cmds = vec![
            format!(
                "link add to-up type veth peer name eth0 netns {}",
                upstream.name()
            ),
            "link set to-up up".into(),
        ];
        for a in &node_addresses {
            cmds.push(format!("addr add {a}/{host_len} dev lo{nodad}"));
        }
        if v6 {
            cmds.push("addr add fe80::1/64 dev to-up nodad".into());
            cmds.push("route add default via fe80::2 dev to-up".into());
        } else {
            cmds.push("addr add 100.64.0.1/30 dev to-up".into());
            cmds.push("route add default via 100.64.0.2".into());
        }
        let host_devices: BTreeMap<IpAddr, String> = hosts
            .keys()
            .enumerate()
            .map(|(i, a)| {
                let prefix = if run.cluster_cidr().contains(a) {
                    POD_INTERFACE_PREFIX
                } else {
                    "h"
                };
                (*a, format!("{prefix}{i}"))
            })
            .collect();
        for (a, host) in &hosts {
            let dev = &host_devices[a];
            cmds.push(format!(
                "link add {dev} type veth peer name eth0 netns {}",
                host.name()
            ));
            cmds.push(format!("link set {dev} up"));
            // The gateway the pod routes through, and an address of the node's own on the
            // link: a masqueraded connection arrives from it, never from a tested source.
            if v6 {
                cmds.push(format!("addr add fe80::1/64 dev {dev} nodad"));
                cmds.push(format!("addr add fd00:ffff::1/128 dev {dev} nodad"));
            } else {
                cmds.push(format!("addr add 169.254.1.1/32 dev {dev}"));
            }
            cmds.push(format!("route add {a}/{host_len} dev {dev}"));
        }
        batch(&node, v6, &cmds);

        let up = if v6 {
            vec![
                "link set eth0 up".to_string(),
                "addr add fe80::2/64 dev eth0 nodad".into(),
                // Its "prohibited" answers need a source the node forwards (not link-local).
                "addr add fd00:fff0::2/128 dev eth0 nodad".into(),
                "route add default via fe80::1 dev eth0".into(),
                "rule add pref 10 iif eth0 lookup 10".into(),
                "route add prohibit default table 10".into(),
            ]
        } else {
            vec![
                "link set eth0 up".to_string(),
                "addr add 100.64.0.2/30 dev eth0".into(),
                "route add default via 100.64.0.1".into(),
                "rule add pref 10 iif eth0 lookup 10".into(),
                "route add prohibit default table 10".into(),
            ]
        };
        batch(&upstream, v6, &up);
        // A router: without forwarding on, the kernel drops what it may not forward without
        // answering "prohibited", and a new namespace starts with the host's setting.
        upstream
            .run(|| {
                sysctl("net/ipv4/ip_forward", "1");
                sysctl("net/ipv6/conf/all/forwarding", "1");
            })
            .unwrap();

        for (a, host) in &hosts {
            let mut cmds = vec![
                "link set eth0 up".to_string(),
                format!("addr add {a}/{host_len} dev eth0{nodad}"),
            ];
            let gateway = if v6 {
                "fe80::1"
            } else {
                cmds.push("route add 169.254.1.1 dev eth0 scope link".into());
                "169.254.1.1"
            };
            cmds.push(format!("route add default via {gateway} dev eth0"));
            if senders_to_self.contains(a) {
                // Connections to its own address leave through the node (upstream's "node
                // SNATted to the LB IP" case): local delivery is looked up after them.
                cmds.push(format!("rule add pref 10 iif lo to {a} lookup 10"));
                cmds.push(format!("route add default via {gateway} dev eth0 table 10"));
                cmds.push("rule del pref 0 lookup local".into());
                cmds.push("rule add pref 100 lookup local".into());
            }
            batch(host, v6, &cmds);
            if senders_to_self.contains(a) {
                host.run(|| {
                    for conf in ["all", "eth0"] {
                        sysctl(&format!("net/ipv4/conf/{conf}/accept_local"), "1");
                    }
                })
                .unwrap();
            }
        }

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let lab = Lab {
            run,
            node,
            hosts,
            host_devices,
            _upstream: upstream,
            runtime,
        };
        for &(udp, at) in listeners {
            lab.listen(udp, at);
        }
        lab
    }

    /// The namespace that owns `a`: the node for its IPs, else the host of `a`.
    fn owner(&self, a: IpAddr) -> &Netns {
        if self.run.node_addresses().contains(&a) {
            &self.node
        } else {
            self.hosts
                .get(&a)
                .unwrap_or_else(|| panic!("no namespace holds {a}"))
        }
    }

    /// Answers every connection or datagram to `at` with `at` and the peer's address.
    fn listen(&self, udp: bool, at: SocketAddr) {
        let ns = self.owner(at.ip());
        let _rt = self.runtime.enter();
        if udp {
            let socket = ns
                .run(move || {
                    let s = UdpSocket::bind(at).unwrap();
                    s.set_nonblocking(true).unwrap();
                    s
                })
                .unwrap();
            let socket = tokio::net::UdpSocket::from_std(socket).unwrap();
            self.runtime.spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok((_, peer)) = socket.recv_from(&mut buf).await {
                    let line = format!("{at} {}\n", peer.ip().to_canonical());
                    let _ = socket.send_to(line.as_bytes(), peer).await;
                }
            });
        } else {
            let listener = ns
                .run(move || {
                    let l = std::net::TcpListener::bind(at).unwrap();
                    l.set_nonblocking(true).unwrap();
                    l
                })
                .unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            self.runtime.spawn(async move {
                while let Ok((mut stream, peer)) = listener.accept().await {
                    let line = format!("{at} {}\n", peer.ip().to_canonical());
                    tokio::spawn(async move {
                        let _ = stream.write_all(line.as_bytes()).await;
                    });
                }
            });
        }
    }

    /// Programs `tables` over what `previous` put in the node.
    fn program(&self, previous: &[Table], tables: &[Table]) {
        let observed: Vec<_> = previous
            .iter()
            .map(|t| (t.table_ref(), Observed::Read(t.clone())))
            .collect();
        let tx = reconcile_transaction(&observed, tables, None);
        self.node
            .run(move || Nftables::open().unwrap().apply(&tx).unwrap())
            .unwrap();
        // Connections of the previous table must not decide the next one's.
        let _ = self.node.exec_unchecked(&["conntrack", "-F"]);
    }

    /// One connection (or datagram exchange) from `from` to `to`.
    fn probe(&self, from: IpAddr, to: SocketAddr, proto: Proto) -> Probe {
        let ns = self.owner(from);
        let bind = SocketAddr::new(from, 0);
        match proto {
            Proto::Tcp => {
                let socket = ns
                    .run(move || {
                        let s = if from.is_ipv4() {
                            tokio::net::TcpSocket::new_v4()
                        } else {
                            tokio::net::TcpSocket::new_v6()
                        }?;
                        s.bind(bind)?;
                        Ok::<_, io::Error>(s)
                    })
                    .unwrap()
                    .unwrap_or_else(|e| panic!("bind {bind}: {e}"));
                self.runtime.block_on(async move {
                    let stream =
                        match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(to)).await {
                            Err(_) => return Probe::TimedOut,
                            Ok(Err(e)) => return classify(&e),
                            Ok(Ok(s)) => s,
                        };
                    let mut line = String::new();
                    let mut reader = BufReader::new(stream);
                    let read = reader.read_line(&mut line);
                    match tokio::time::timeout(Duration::from_secs(2), read).await {
                        Ok(Ok(_)) => answer(&line),
                        Ok(Err(e)) => Probe::Other(format!("read: {e}")),
                        Err(_) => Probe::Other("connected, no answer".into()),
                    }
                })
            }
            Proto::Udp => ns
                .run(move || {
                    let s = UdpSocket::bind(bind).unwrap();
                    s.connect(to).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    let mut buf = [0u8; 128];
                    // Resent while unanswered: the first datagram may wait on neighbour
                    // discovery. A drop stays silent for the whole timeout.
                    let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
                    loop {
                        if let Err(e) = s.send(b"?") {
                            return classify(&e);
                        }
                        match s.recv(&mut buf) {
                            Ok(n) => return answer(&String::from_utf8_lossy(&buf[..n])),
                            Err(e) if classify(&e) == Probe::TimedOut => {
                                if std::time::Instant::now() >= deadline {
                                    return Probe::TimedOut;
                                }
                            }
                            Err(e) => return classify(&e),
                        }
                    }
                })
                .unwrap(),
            Proto::Sctp => unreachable!("SCTP flows are checked on the ruleset"),
        }
    }
}

impl explain_harness::Lab for Lab {
    /// Every owned address answers with where it was reached; an address no namespace owns
    /// is routed past the node to the upstream router, which refuses it.
    fn fate_at(&self, to: SocketAddr, masqueraded: bool) -> Fate {
        let owned =
            self.run.node_addresses().contains(&to.ip()) || self.hosts.contains_key(&to.ip());
        if owned {
            Fate::Answered {
                by: to.to_string(),
                masqueraded,
            }
        } else {
            Fate::PassedOn
        }
    }
}

/// A flow with this run's addresses.
#[derive(Debug, Clone)]
struct Case {
    flow: Flow,
    from: IpAddr,
    to: SocketAddr,
    endpoints: BTreeSet<SocketAddr>,
}

impl Case {
    fn new(run: Run, flow: Flow) -> Case {
        let endpoints = match flow.expect {
            Expect::Reach { endpoints, .. } => endpoints.iter().map(|e| run.sock(e)).collect(),
            _ => BTreeSet::new(),
        };
        Case {
            flow,
            from: run.ip(flow.from),
            to: run.sock(flow.to),
            endpoints,
        }
    }

    fn describe(&self) -> String {
        let proto = match self.flow.proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        };
        format!("{:?}: {} -> {} {proto}", self.flow.name, self.from, self.to)
    }

    fn expected(&self) -> String {
        match self.flow.expect {
            Expect::Reach { masquerade, .. } => {
                let eps: Vec<String> = self.endpoints.iter().map(|e| e.to_string()).collect();
                let masq = if masquerade {
                    "masqueraded"
                } else {
                    "source kept"
                };
                format!("reach {{{}}}, {masq}", eps.join(", "))
            }
            Expect::Drop => "drop".into(),
            Expect::Reject => "reject".into(),
            Expect::NotProxied => "not proxied".into(),
        }
    }

    /// What kube-proxy would make of one probe's outcome: Ok if it fits.
    fn judge(&self, p: &Probe) -> Result<(), String> {
        let fits = match (self.flow.expect, p) {
            (Expect::Reach { masquerade, .. }, Probe::Answered { at, source }) => {
                self.endpoints.contains(at) && (*source != self.from) == masquerade
            }
            (Expect::NotProxied, Probe::Answered { at, source }) => {
                *at == self.to && *source == self.from
            }
            // Nobody here owns the destination: it went on, untranslated, to the upstream.
            (Expect::NotProxied, Probe::Unreachable) => true,
            (Expect::Drop, Probe::TimedOut) | (Expect::Reject, Probe::Refused) => true,
            _ => false,
        };
        if fits {
            Ok(())
        } else {
            Err(describe_probe(p, self.from))
        }
    }

    /// Sends the flow until every endpoint kube-proxy lists and every fate `explain` gives at
    /// least `MIN_SEEN` of connections happened, or `MAX_ATTEMPTS` (once when both expect one
    /// fixed fate). Stops at the first connection explain did not predict, or that kube-proxy
    /// would not give (unless the flow has a known difference).
    fn observe(&self, lab: &Lab, predicted: &BTreeMap<Fate, f64>) -> Vec<Probe> {
        let several = matches!(self.flow.expect, Expect::Reach { .. }) || predicted.len() > 1;
        let attempts = if several { MAX_ATTEMPTS } else { 1 };
        let drop_expected =
            self.flow.expect == Expect::Drop || predicted.contains_key(&Fate::TimedOut);
        let mut probes = Vec::new();
        for _ in 0..attempts {
            let mut p = lab.probe(self.from, self.to, self.flow.proto);
            // A timeout where no drop is expected may be a loaded machine: it must happen
            // twice in a row to count.
            if p == Probe::TimedOut && !drop_expected {
                p = lab.probe(self.from, self.to, self.flow.proto);
            }
            let as_kube_proxy = self.judge(&p).is_ok() || self.flow.known_difference.is_some();
            // (No prediction when explain failed: that is reported on its own.)
            let as_explained =
                predicted.is_empty() || self.fate(&p).is_some_and(|f| predicted.contains_key(&f));
            probes.push(p);
            if !as_kube_proxy || !as_explained || self.covered(&probes, predicted) {
                break;
            }
        }
        probes
    }

    /// A probe in the terms `explain`'s prediction is compared in.
    fn fate(&self, p: &Probe) -> Option<Fate> {
        Some(match p {
            Probe::Answered { at, source } => Fate::Answered {
                by: at.to_string(),
                masqueraded: *source != self.from,
            },
            Probe::Refused => Fate::Refused,
            Probe::TimedOut => Fate::TimedOut,
            Probe::Unreachable => Fate::PassedOn,
            Probe::Other(_) => return None,
        })
    }

    fn answered_at(probes: &[Probe]) -> BTreeSet<SocketAddr> {
        probes
            .iter()
            .filter_map(|p| match p {
                Probe::Answered { at, .. } => Some(*at),
                _ => None,
            })
            .collect()
    }

    fn covered(&self, probes: &[Probe], predicted: &BTreeMap<Fate, f64>) -> bool {
        let fates: Vec<Fate> = probes.iter().filter_map(|p| self.fate(p)).collect();
        self.endpoints.is_subset(&Self::answered_at(probes))
            && predicted
                .iter()
                .all(|(f, share)| *share < MIN_SEEN || fates.contains(f))
    }

    /// Whether the probes are what kube-proxy gives: Ok, or what was observed instead.
    fn against_kube_proxy(&self, probes: &[Probe]) -> Result<(), String> {
        for p in probes {
            self.judge(p)?;
        }
        let seen = Self::answered_at(probes);
        if seen.len() < self.endpoints.len() {
            let seen: Vec<String> = seen.iter().map(|e| e.to_string()).collect();
            return Err(format!(
                "only {{{}}} answered in {} connections",
                seen.join(", "),
                probes.len()
            ));
        }
        Ok(())
    }

    /// Whether the probes are what `explain` predicted.
    fn against_explain(
        &self,
        probes: &[Probe],
        predicted: &BTreeMap<Fate, f64>,
    ) -> Result<(), String> {
        let mut fates = Vec::new();
        for p in probes {
            match self.fate(p) {
                Some(f) => fates.push(f),
                None => {
                    return Err(format!(
                        "no outcome to compare: {}",
                        describe_probe(p, self.from)
                    ));
                }
            }
        }
        explain_harness::agrees(predicted, &fates, MIN_SEEN)
    }

    /// `explain`'s answer for this flow, asked in the node.
    fn explain(&self, lab: &Lab) -> Result<serde_json::Value, String> {
        let proto = match self.flow.proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        };
        // Where the connection arrives, for rules that tell pods apart by interface; the
        // node's own connections arrive on none.
        let iif = lab.host_devices.get(&self.from);
        let extra: Vec<&str> = iif.map_or_else(Vec::new, |dev| vec!["--iif", dev.as_str()]);
        explain_harness::try_explain(
            &lab.node,
            &format!("{}/{proto}", self.to),
            Some(&self.from.to_string()),
            &extra,
        )
    }

    /// The flow, sent: (against kube-proxy's outcome, against explain's prediction).
    fn check(&self, lab: &Lab) -> (Result<(), String>, Result<(), String>) {
        let answer = match self.explain(lab) {
            Ok(a) => a,
            Err(e) => {
                let probes = self.observe(lab, &BTreeMap::new());
                return (self.against_kube_proxy(&probes), Err(e));
            }
        };
        let predicted = explain_harness::predicted(&answer, lab);
        let probes = self.observe(lab, &predicted);
        (
            self.against_kube_proxy(&probes),
            self.against_explain(&probes, &predicted),
        )
    }

    /// An SCTP flow (no SCTP sockets in this kernel, so no traffic to compare with): kube-proxy's
    /// outcome on the planned tables, and explain's prediction, read from the kernel's tables,
    /// against the same expectation.
    fn check_sctp(&self, lab: &Lab, planned: &[Table]) -> (Result<(), String>, Result<(), String>) {
        let explained = self.explain(lab).and_then(|answer| {
            let Expect::Reach { masquerade, .. } = self.flow.expect else {
                return Err("only reachable SCTP flows are checked".into());
            };
            let expected: BTreeMap<Fate, f64> = self
                .endpoints
                .iter()
                .map(|e| (explain_harness::Lab::fate_at(lab, *e, masquerade), 0.0))
                .collect();
            let predicted = explain_harness::predicted(&answer, lab);
            if predicted.keys().eq(expected.keys()) {
                Ok(())
            } else {
                Err(format!(
                    "SCTP, no traffic possible: explain predicted {:?}, kube-proxy gives {:?}",
                    predicted.keys().collect::<Vec<_>>(),
                    expected.keys().collect::<Vec<_>>()
                ))
            }
        });
        (check_sctp(self, planned), explained)
    }
}

fn describe_probe(p: &Probe, from: IpAddr) -> String {
    match p {
        Probe::Answered { at, source } if *source == from => format!("{at} answered, source kept"),
        Probe::Answered { at, source } => format!("{at} answered, source {source}"),
        Probe::Refused => "rejected".into(),
        Probe::TimedOut => "dropped".into(),
        Probe::Unreachable => "not translated: routed past the node".into(),
        Probe::Other(e) => e.clone(),
    }
}

/// Checks an SCTP flow on the planned tables: the endpoints its frontend's slots and fallback
/// hold (no SCTP sockets in this kernel).
fn check_sctp(case: &Case, tables: &[Table]) -> Result<(), String> {
    let Expect::Reach { .. } = case.flow.expect else {
        return Err("only reachable SCTP flows are checked on the ruleset".into());
    };
    let key = [
        match case.to.ip() {
            IpAddr::V4(a) => Value::Ipv4(a),
            IpAddr::V6(a) => Value::Ipv6(a),
        },
        Value::Proto(132),
        Value::Port(case.to.port()),
    ];
    let mut found = BTreeSet::new();
    for set in tables.iter().flat_map(|t| t.sets.values()) {
        for e in &set.elements {
            if e.key.starts_with(&key)
                && let Some(MapData::Values(v)) = &e.data
                && let [ip, Value::Port(port)] = v.as_slice()
            {
                let ip = match ip {
                    Value::Ipv4(a) => IpAddr::V4(*a),
                    Value::Ipv6(a) => IpAddr::V6(*a),
                    _ => continue,
                };
                found.insert(SocketAddr::new(ip, *port));
            }
        }
    }
    if found == case.endpoints {
        Ok(())
    } else {
        let found: Vec<String> = found.iter().map(|e| e.to_string()).collect();
        Err(format!("the ruleset maps it to {{{}}}", found.join(", ")))
    }
}

/// Runs `tables` (in order, reprogramming one node) in IPv4 and IPv6 as `written` allows, in
/// parallel; panics listing every flow whose outcome is not kube-proxy's (or, for a flow with
/// a known difference, every such flow that now behaves as kube-proxy does) or not what
/// `kubenft explain` predicted.
pub fn check(tag: &str, written: Written, tables: &[FlowTable]) {
    if !kubenft::netns::can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let runs: Vec<Run> = match written {
        Written::V4 => vec![
            Run {
                written,
                to_v6: false,
            },
            Run {
                written,
                to_v6: true,
            },
        ],
        Written::V4Only | Written::V6 => vec![Run {
            written,
            to_v6: false,
        }],
    };
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(i, run)| s.spawn(move || check_run(&format!("{tag}{i}"), *run, tables)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("run panicked"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} flows differ from kube-proxy or from explain's prediction:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn check_run(tag: &str, run: Run, tables: &[FlowTable]) -> Vec<String> {
    let cases: Vec<Vec<Case>> = tables
        .iter()
        .map(|t| t.flows.iter().map(|f| Case::new(run, *f)).collect())
        .collect();
    // Every address a flow comes from or an endpoint lives at, with what it answers on.
    let mut addresses = BTreeSet::new();
    let mut listeners = BTreeSet::new();
    let mut senders_to_self = BTreeSet::new();
    for table in tables {
        let m = run.manifests(table);
        for slice in &m.endpoint_slices {
            for ep in &slice.endpoints {
                let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
                    continue;
                };
                addresses.insert(ip);
                for port in slice.ports.iter().flatten() {
                    let udp = port.protocol.as_deref() == Some("UDP");
                    if let (Some(p), false) = (port.port, port.protocol.as_deref() == Some("SCTP"))
                    {
                        listeners.insert((udp, SocketAddr::new(ip, p as u16)));
                    }
                }
            }
        }
    }
    let all_cases: Vec<&Case> = cases.iter().flatten().collect();
    for c in &all_cases {
        if c.flow.proto != Proto::Sctp {
            addresses.insert(c.from);
            // The endpoints a flow expects answer even where a slice spells them oddly.
            for e in &c.endpoints {
                addresses.insert(e.ip());
                listeners.insert((c.flow.proto == Proto::Udp, *e));
            }
        }
    }
    for c in &all_cases {
        // A destination someone owns answers itself: an untranslated packet shows.
        let owned = addresses.contains(&c.to.ip()) || run.node_addresses().contains(&c.to.ip());
        if c.flow.proto != Proto::Sctp && owned {
            addresses.insert(c.to.ip());
            listeners.insert((c.flow.proto == Proto::Udp, c.to));
        }
        if c.from == c.to.ip() && !run.node_addresses().contains(&c.from) {
            senders_to_self.insert(c.from);
        }
    }
    let lab = Lab::build(tag, run, &addresses, &listeners, &senders_to_self);

    let mut failures = Vec::new();
    let mut previous: Vec<Table> = Vec::new();
    for (table, cases) in tables.iter().zip(&cases) {
        let planned = run.plan(table);
        lab.program(&previous, &planned);
        let results: Vec<(Result<(), String>, Result<(), String>)> = std::thread::scope(|s| {
            let handles: Vec<_> = cases
                .iter()
                .map(|c| {
                    let (lab, planned) = (&lab, &planned);
                    s.spawn(move || match c.flow.proto {
                        Proto::Sctp => c.check_sctp(lab, planned),
                        _ => c.check(lab),
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (case, (result, explained)) in cases.iter().zip(results) {
            let what = format!(
                "[{}] {}: {}: expected {}",
                run.label(),
                table.name,
                case.describe(),
                case.expected()
            );
            if let Err(e) = explained {
                failures.push(format!(
                    "[{}] {}: {}: explain disagrees with the kernel: {e}",
                    run.label(),
                    table.name,
                    case.describe()
                ));
            }
            match (result, case.flow.known_difference) {
                (Ok(()), None) => {}
                (Err(observed), None) => failures.push(format!("{what}; observed {observed}")),
                (Err(observed), Some(why)) => {
                    eprintln!("known difference: {what}; observed {observed} ({why})")
                }
                (Ok(()), Some(why)) => failures.push(format!(
                    "{what}: now behaves as kube-proxy; remove its known_difference ({why})"
                )),
            }
        }
        previous = planned;
    }
    failures
}
