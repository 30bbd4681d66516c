//! Taking a node over from kube-proxy, and handing it back, with real traffic. kube-proxy's
//! rules are the ones upstream's own tests expect it to write for one cluster
//! (`tests/fixtures/kube-proxy/`: nftables mode from `TestOverallNFTablesRules`, iptables mode
//! from `TestOverallIPTablesRules`, loaded with `nft -f` and with `iptables-restore` through
//! iptables-nft), on a node that also holds kubelet's chains, a Docker-style nat and a host
//! firewall. kubenft programs the same cluster (`cluster/`).
//!
//! For each mode: a TCP connection and a UDP flow opened through kube-proxy's rules keep
//! working after `sync --once --replace-kube-proxy`; new connections sent back to back across
//! the switch (pod → ClusterIP, external → NodePort) all succeed; afterwards nothing of
//! kube-proxy's is left and everything else is as it was (`nft -j list ruleset`, counters
//! aside); a second run removes nothing. Then the way back: kube-proxy's rules loaded again,
//! `kubenft cleanup`, and again no connection fails.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::harness::Traffic;
use kubenft::lab::{link, sh};
use kubenft::netns::{Netns, can_create};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kube-proxy")
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Nftables,
    Iptables,
}

/// kube-proxy's chains as upstream names them in the iptables fixture's tables (kubelet's
/// `KUBE-FIREWALL`, `KUBE-KUBELET-CANARY` and `KUBE-IPTABLES-HINT` are not among them).
fn is_kube_proxy_chain(name: &str) -> bool {
    [
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
        "KUBE-PROXY-CANARY",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-PROXY-FIREWALL",
    ]
    .contains(&name)
        || [
            "KUBE-SVC-",
            "KUBE-SVL-",
            "KUBE-EXT-",
            "KUBE-FW-",
            "KUBE-SEP-",
        ]
        .iter()
        .any(|p| name.starts_with(p))
}

/// The upstream tests' node (192.168.0.2) with a pod client (10.0.0.2, inside the cluster
/// CIDR), an external client (192.168.0.3) and the endpoints the flows reach (10.180.0.1 for
/// svc1, .3 for svc3's NodePort, .7 for svc7's UDP port), each routed through the node.
struct Node {
    node: Netns,
    pod: Netns,
    external: Netns,
    _endpoints: Vec<Netns>,
    _udp_backends: Vec<kubenft::lab::Backend>,
    stop: Arc<AtomicBool>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Node {
    fn build(tag: &str) -> Node {
        let node = Netns::create(&format!("{tag}Node")).unwrap();
        let pod = Netns::create(&format!("{tag}Pod")).unwrap();
        let external = Netns::create(&format!("{tag}Ext")).unwrap();
        sh(&node, "sysctl -qw net.ipv4.ip_forward=1");
        link(&node, "to-pod", &pod, "eth0");
        sh(&node, "ip addr add 10.0.0.1/24 dev to-pod");
        sh(&pod, "ip addr add 10.0.0.2/24 dev eth0");
        sh(&pod, "ip route add default via 10.0.0.1");
        link(&node, "to-ext", &external, "eth0");
        sh(&node, "ip addr add 192.168.0.2/24 dev to-ext");
        sh(&external, "ip addr add 192.168.0.3/24 dev eth0");
        sh(&external, "ip route add 172.30.0.0/16 via 192.168.0.2");
        let stop = Arc::new(AtomicBool::new(false));
        let mut endpoints = Vec::new();
        let mut udp_backends = Vec::new();
        for (n, name) in [(1, "ep1"), (3, "ep3"), (7, "ep7")] {
            let ep = Netns::create(&format!("{tag}Ep{n}")).unwrap();
            link(&node, &format!("to-ep{n}"), &ep, "eth0");
            sh(&node, &format!("ip addr add 169.254.1.1/32 dev to-ep{n}"));
            sh(&node, &format!("ip route add 10.180.0.{n}/32 dev to-ep{n}"));
            sh(&ep, &format!("ip addr add 10.180.0.{n}/32 dev eth0"));
            sh(&ep, "ip route add 169.254.1.1 dev eth0 scope link");
            sh(&ep, "ip route add default via 169.254.1.1 dev eth0");
            serve_tcp(&ep, name, stop.clone());
            udp_backends.push(kubenft::lab::serve_udp_on(&ep, name, 53));
            endpoints.push(ep);
        }
        Node {
            node,
            pod,
            external,
            _endpoints: endpoints,
            _udp_backends: udp_backends,
            stop,
        }
    }

    fn nft_json(&self) -> Value {
        let out = self.node.exec(&["nft", "-j", "list", "ruleset"]).unwrap();
        serde_json::from_slice(&out.stdout).expect("nft -j output")
    }

    /// The text `iptables-save` prints in the node, comments and counters left out.
    fn iptables_save(&self) -> String {
        let out = self.node.exec(&["iptables-save"]).unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(" [").next().unwrap_or(l).to_owned() + "\n")
            .collect()
    }

    fn load(&self, file: &str) {
        let path = fixtures().join(file);
        let path = path.to_str().unwrap();
        if file.ends_with(".nft") {
            sh(&self.node, &format!("nft -f {path}"));
        } else {
            let rules = std::fs::read_to_string(path).unwrap();
            let out = self
                .node
                .exec_with_stdin(&["iptables-restore", "--noflush"], &rules)
                .unwrap_or_else(|e| panic!("iptables-restore {file}: {e}"));
            assert!(out.status.success(), "iptables-restore {file}: {out:?}");
        }
    }

    fn load_kube_proxy(&self, mode: Mode) {
        match mode {
            Mode::Nftables => self.load("nftables.nft"),
            Mode::Iptables => self.load("iptables.rules"),
        }
    }

    /// `kubenft ARGS…` in the node, for the fixture's cluster; its combined output.
    fn kubenft(&self, args: &[&str]) -> String {
        let flags = std::fs::read_to_string(fixtures().join("cluster/flags.txt")).unwrap();
        let cluster = fixtures().join("cluster");
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                self.node.name(),
                env!("CARGO_BIN_EXE_kubenft"),
            ])
            .args(args)
            .args(["--manifests", cluster.to_str().unwrap()])
            .args(
                flags
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .flat_map(str::split_whitespace),
            )
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "kubenft {args:?}: {text}");
        text
    }
}

/// Answers each TCP connection on :80 with "NAME\n", then echoes every line as "NAME LINE".
fn serve_tcp(ns: &Netns, name: &str, stop: Arc<AtomicBool>) {
    let listener = ns
        .run(|| {
            let l = TcpListener::bind("0.0.0.0:80").unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .unwrap();
    let name = name.to_owned();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            let name = name.clone();
            std::thread::spawn(move || {
                let _ = stream.set_nonblocking(false);
                let mut out = stream.try_clone().unwrap();
                if writeln!(out, "{name}").is_err() {
                    return;
                }
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    if writeln!(out, "{name} {line}").is_err() {
                        return;
                    }
                }
            });
        }
    });
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A TCP connection opened in `ns` and kept: each `ask` sends a line and reads the echo.
struct Held {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Held {
    fn open(ns: &Netns, to: &str) -> Held {
        let to = addr(to);
        let stream = ns
            .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(2)).unwrap())
            .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut held = Held {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        };
        let mut greeting = String::new();
        held.reader.read_line(&mut greeting).unwrap();
        assert_eq!(greeting.trim(), "ep1");
        held
    }

    fn ask(&mut self, what: &str) -> String {
        writeln!(self.writer, "{what}").expect("the held connection takes a line");
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .expect("the held connection answers");
        line.trim().to_owned()
    }
}

/// A UDP socket in `ns` talking to one address from one source port: one conntrack flow.
fn udp_flow(ns: &Netns, to: &str) -> UdpSocket {
    let to = addr(to);
    let s = ns
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect(to).unwrap();
            s
        })
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s
}

fn udp_ask(s: &UdpSocket) -> String {
    s.send(b"hi").unwrap();
    let mut buf = [0u8; 64];
    let n = s.recv(&mut buf).expect("the UDP flow answers");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The ruleset without what belongs to kube-proxy or kubenft, counters zeroed: what every other
/// program holds.
fn others(ruleset: &Value) -> Vec<Value> {
    let mut objects: Vec<Value> = ruleset["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o.get("metainfo").is_none())
        .filter(|o| {
            let inner = o.as_object().unwrap().values().next().unwrap();
            let table = inner
                .get("table")
                .or_else(|| inner.get("name").filter(|_| o.get("table").is_some()))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let family = inner["family"].as_str().unwrap_or_default();
            let ours_or_kube_proxys =
                matches!(table, "kubenft" | "kube-proxy") && matches!(family, "ip" | "ip6");
            let kube_proxy_chain = (o.get("chain").and_then(|c| c["name"].as_str()))
                .or_else(|| o.get("rule").and_then(|r| r["chain"].as_str()))
                .is_some_and(is_kube_proxy_chain);
            let jump_to_kube_proxy = o.get("rule").is_some_and(|r| {
                r["expr"].as_array().unwrap().iter().any(|e| {
                    e.pointer("/jump/target")
                        .and_then(Value::as_str)
                        .is_some_and(is_kube_proxy_chain)
                })
            });
            !ours_or_kube_proxys && !kube_proxy_chain && !jump_to_kube_proxy
        })
        .cloned()
        .collect();
    for o in &mut objects {
        zero_counters(o);
    }
    objects
}

fn zero_counters(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if k == "packets" || k == "bytes" {
                    *child = Value::from(0);
                } else {
                    zero_counters(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(zero_counters),
        _ => {}
    }
}

fn kube_proxy_left(node: &Node) -> Vec<String> {
    let mut left: Vec<String> = node
        .iptables_save()
        .lines()
        .filter(|l| {
            l.strip_prefix(':')
                .or_else(|| l.strip_prefix("-A "))
                .is_some_and(|rest| {
                    is_kube_proxy_chain(rest.split_whitespace().next().unwrap_or(""))
                        || rest
                            .split(" -j ")
                            .nth(1)
                            .is_some_and(|t| is_kube_proxy_chain(t.trim()))
                })
        })
        .map(str::to_owned)
        .collect();
    let tables = node.node.exec(&["nft", "list", "tables"]).unwrap();
    left.extend(
        String::from_utf8_lossy(&tables.stdout)
            .lines()
            .filter(|l| l.ends_with(" kube-proxy"))
            .map(str::to_owned),
    );
    left
}

/// New connections back to back, pod → ClusterIP and external → NodePort, while `steps` run
/// one after the other (each once both have succeeded again); every connection must succeed.
fn connecting_across(node: &Node, what: &str, steps: &[&dyn Fn()]) {
    let cluster_ip = Traffic::start_in(&node.pod, vec!["172.30.0.41:80".into()], Some("ep1"));
    let node_port = Traffic::start_in(&node.external, vec!["192.168.0.2:3003".into()], Some("ep3"));
    let both_succeed = || {
        cluster_ip.wait_for(20);
        node_port.wait_for(20);
    };
    both_succeed();
    for step in steps {
        step();
        both_succeed();
    }
    for (kind, l) in [("ClusterIP", cluster_ip), ("NodePort", node_port)] {
        let (ok, failed) = l.finish();
        assert!(
            failed.is_empty(),
            "{what}: {kind} connections failed ({ok} succeeded): {failed:?}"
        );
    }
}

fn take_over_and_hand_back(mode: Mode, tag: &str) {
    if !can_create() {
        eprintln!("skipping: needs root to create network namespaces");
        return;
    }
    let node = Node::build(tag);
    node.load("kubelet-iptables.rules");
    node.load("docker-iptables.rules");
    node.load("host-firewall.nft");
    node.load_kube_proxy(mode);

    // kube-proxy's rules serve the cluster.
    let mut held = Held::open(&node.pod, "172.30.0.41:80");
    assert_eq!(held.ask("before"), "ep1 before");
    let udp = udp_flow(&node.pod, "172.30.0.47:53");
    assert_eq!(udp_ask(&udp), "ep7");
    let before = node.nft_json();

    connecting_across(
        &node,
        &format!("{mode:?}: the switch"),
        &[&|| {
            let log = node.kubenft(&["sync", "--once", "--replace-kube-proxy"]);
            assert!(log.contains("kube-proxy's rules removed"), "{log}");
        }],
    );
    assert_eq!(
        held.ask("after"),
        "ep1 after",
        "the established connection lives on"
    );
    assert_eq!(udp_ask(&udp), "ep7", "the UDP flow lives on");

    let after = node.nft_json();
    assert_eq!(kube_proxy_left(&node), Vec::<String>::new(), "{mode:?}");
    let (others_before, others_after) = (others(&before), others(&after));
    assert_eq!(
        serde_json::to_string_pretty(&others_before).unwrap(),
        serde_json::to_string_pretty(&others_after).unwrap(),
        "{mode:?}: everything not kube-proxy's is as it was"
    );
    assert!(
        others_before
            .iter()
            .any(|o| o.pointer("/chain/name") == Some(&Value::from("KUBE-FIREWALL"))),
        "kubelet's chains were there to keep"
    );

    let again = node.kubenft(&["sync", "--once", "--replace-kube-proxy"]);
    assert!(!again.contains("kube-proxy's rules removed"), "{again}");
    assert!(
        again.contains("ops=0"),
        "a second start sends nothing: {again}"
    );
    assert_eq!(
        serde_json::to_string(&others(&node.nft_json())).unwrap(),
        serde_json::to_string(&others_after).unwrap(),
        "a second start removes nothing"
    );

    // The way back: kube-proxy's rules first, then kubenft's go.
    connecting_across(
        &node,
        &format!("{mode:?}: the way back"),
        &[&|| node.load_kube_proxy(mode), &|| {
            node.kubenft(&["cleanup"]);
        }],
    );
    assert_eq!(held.ask("back"), "ep1 back");
    assert_eq!(udp_ask(&udp), "ep7");
    let tables = node.node.exec(&["nft", "list", "tables"]).unwrap();
    assert!(!String::from_utf8_lossy(&tables.stdout).contains("kubenft"));
}

#[test]
fn kube_proxys_nftables_rules_give_way_to_kubenfts_in_one_transaction_and_come_back() {
    take_over_and_hand_back(Mode::Nftables, "tkoNft");
}

#[test]
fn kube_proxys_iptables_nft_rules_give_way_to_kubenfts_in_one_transaction_and_come_back() {
    take_over_and_hand_back(Mode::Iptables, "tkoIpt");
}

#[test]
fn what_nf_tables_cannot_reach_is_reported_with_the_way_to_remove_it() {
    if !can_create() {
        eprintln!("skipping: needs root to create network namespaces");
        return;
    }
    let node = Node::build("tkoLeg");
    // IPVS mode's interface (a veth stands in for the dummy), and a chain kube-proxy wrote
    // through iptables-legacy.
    link(&node.node, "kube-ipvs0", &node.pod, "ipvs-peer");
    sh(&node.node, "iptables-legacy -t nat -N KUBE-SERVICES");
    let log = node.kubenft(&["sync", "--once", "--replace-kube-proxy"]);
    assert!(log.contains("kube-ipvs0 interface"), "{log}");
    assert!(
        log.contains("legacy iptables tables are in use (ip nat)"),
        "{log}"
    );
    assert!(log.contains("kube-proxy --cleanup"), "{log}");
    let legacy = node
        .node
        .exec(&["iptables-legacy-save", "-t", "nat"])
        .unwrap();
    assert!(
        String::from_utf8_lossy(&legacy.stdout).contains(":KUBE-SERVICES"),
        "reported, not removed"
    );
}

/// `table ip kube-proxy` created with `flags owner` by an `nft -i` kept running: the kernel
/// lets no other process delete it (EPERM), so its removal is refused. Table ownership came in
/// Linux 5.12: `None` on older kernels.
pub struct OwnedKubeProxyTable(std::process::Child);

impl OwnedKubeProxyTable {
    pub fn create(ns: &Netns) -> Option<OwnedKubeProxyTable> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut version = release.trim().split(['.', '-']).map(|p| p.parse::<u32>());
        if let (Some(Ok(major)), Some(Ok(minor))) = (version.next(), version.next())
            && (major, minor) < (5, 12)
        {
            eprintln!("skipping: kernel {release} has no table ownership (5.12)");
            return None;
        }
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "nft", "-i"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "add table ip kube-proxy {{ flags owner; }}").unwrap();
        stdin.flush().unwrap();
        for _ in 0..250 {
            let out = ns.exec(&["nft", "list", "tables"]).unwrap();
            if String::from_utf8_lossy(&out.stdout).contains("table ip kube-proxy") {
                return Some(OwnedKubeProxyTable(child));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("nft -i did not create the owned table");
    }
}

impl Drop for OwnedKubeProxyTable {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_removal_the_kernel_refuses_is_dropped_and_kubenfts_rules_go_in_without_it() {
    if !can_create() {
        eprintln!("skipping: needs root to create network namespaces");
        return;
    }
    let node = Node::build("tkoRef");
    let Some(_owned) = OwnedKubeProxyTable::create(&node.node) else {
        return;
    };
    let log = node.kubenft(&["sync", "--once", "--replace-kube-proxy"]);
    assert!(log.contains("kube-proxy's rules were not removed"), "{log}");
    assert!(log.contains("Operation not permitted"), "{log}");
    let tables = node.node.exec(&["nft", "list", "tables"]).unwrap();
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(
        tables.contains("table ip kube-proxy"),
        "left in place: {tables}"
    );
    assert!(
        tables.contains("table ip kubenft"),
        "ours went in: {tables}"
    );
    let mut flow = Held::open(&node.pod, "172.30.0.41:80");
    assert_eq!(flow.ask("served"), "ep1 served");
}
