//! Consistent endpoint choice with real traffic: two nodes programmed by `kubenft sync --once`
//! from the same manifests send each of 200 clients to the same endpoint, the one the slots
//! read back from each kernel name for the client's hash; an endpoint added or removed moves
//! only the clients it should, computed from the slots read back after the change.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{link, sh};
use kubenft::netns::{Netns, can_create};
use kubenft::nft::jhash;
use kubenft::nft::kernel::Nftables;
use kubenft::nft::model::{Family, MapData, Stmt, Table, Value};

const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 20);

/// Both nodes, the Service (annotated `mode`) and its endpoints 10.244.0.N for N in `eps`.
fn manifests(mode: &str, eps: &[u8]) -> String {
    let endpoints: String = eps
        .iter()
        .map(|n| {
            format!(
                "  - {{addresses: [10.244.0.{n}], nodeName: node-{}, conditions: {{ready: true}}}}\n",
                if n % 2 == 0 { "a" } else { "b" }
            )
        })
        .collect();
    format!(
        r#"
apiVersion: v1
kind: Node
metadata: {{name: node-a}}
status: {{addresses: [{{type: InternalIP, address: 10.10.1.1}}]}}
---
apiVersion: v1
kind: Node
metadata: {{name: node-b}}
status: {{addresses: [{{type: InternalIP, address: 10.10.2.1}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: sticky, namespace: demo, annotations: {{kubenft.io/consistent-endpoint: {mode}}}}}
spec: {{clusterIP: {SERVICE_IP}, ports: [{{name: http, port: 80, protocol: TCP}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: sticky-1, namespace: demo, labels: {{kubernetes.io/service-name: sticky}}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
{endpoints}"#
    )
}

/// A client namespace holding 10.1.0.0/24 (every address of it local, on loopback) with a link
/// to each of two nodes, and a pods namespace holding the endpoints 10.244.0.0/24 linked to
/// both nodes. Each node routes the clients and the pods; the client routes the service range
/// through node a until `via` says otherwise.
struct Lab {
    client: Netns,
    nodes: [Netns; 2],
    _pods: Netns,
    stop: Arc<AtomicBool>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Lab {
    fn build() -> Lab {
        let client = Netns::create("conCli").unwrap();
        let pods = Netns::create("conPods").unwrap();
        let nodes = [
            Netns::create("conNodeA").unwrap(),
            Netns::create("conNodeB").unwrap(),
        ];
        sh(&client, "ip addr add 10.1.0.1/24 dev lo");
        sh(&pods, "ip addr add 10.244.0.1/24 dev lo");
        for (i, node) in nodes.iter().enumerate() {
            let n = i + 1;
            sh(node, "sysctl -qw net.ipv4.ip_forward=1");
            link(node, "to-cli", &client, &format!("node{n}"));
            link(node, "to-pods", &pods, &format!("node{n}"));
            sh(node, &format!("ip addr add 10.10.{n}.1/24 dev to-cli"));
            sh(node, &format!("ip addr add 10.20.{n}.1/24 dev to-pods"));
            sh(node, &format!("ip route add 10.1.0.0/24 via 10.10.{n}.2"));
            sh(node, &format!("ip route add 10.244.0.0/24 via 10.20.{n}.2"));
            sh(&client, &format!("ip addr add 10.10.{n}.2/24 dev node{n}"));
            sh(&pods, &format!("ip addr add 10.20.{n}.2/24 dev node{n}"));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let listener = pods
            .run(|| {
                let l = TcpListener::bind("0.0.0.0:8080").unwrap();
                l.set_nonblocking(true).unwrap();
                l
            })
            .unwrap();
        let flag = stop.clone();
        // Answers with the endpoint address the connection reached, then closes first, so the
        // client's side of a connection leaves no TIME_WAIT behind and its port is free again.
        std::thread::spawn(move || {
            use std::io::Write;
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let local = s.local_addr().map(|a| a.ip().to_string());
                        let _ = writeln!(s, "{}", local.unwrap_or_default());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        let lab = Lab {
            client,
            nodes,
            _pods: pods,
            stop,
        };
        lab.via(0);
        lab
    }

    /// Sends the client's service traffic through node `i`.
    fn via(&self, i: usize) {
        sh(
            &self.client,
            &format!("ip route replace 10.96.0.0/16 via 10.10.{}.1", i + 1),
        );
    }

    /// `kubenft sync --once` of `text` on node `i`.
    fn sync(&self, i: usize, text: &str) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cluster.yaml"), text).unwrap();
        let node = ["node-a", "node-b"][i];
        let out = Command::new("ip")
            .args(["netns", "exec", self.nodes[i].name()])
            .arg(env!("CARGO_BIN_EXE_kubenft"))
            .args(["sync", "--once", "--manifests"])
            .arg(dir.path())
            .args([
                "--hostname-override",
                node,
                "--cluster-cidr",
                "10.244.0.0/16",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn sync_both(&self, text: &str) {
        self.sync(0, text);
        self.sync(1, text);
    }

    /// The service's slots as node `i`'s kernel holds them, read back over netlink.
    fn slots(&self, i: usize) -> Slots {
        let table = self.nodes[i]
            .run(|| {
                Nftables::open()
                    .unwrap()
                    .dump_table(Family::Ip, "kubenft")
                    .unwrap()
                    .expect("our table")
            })
            .unwrap();
        Slots::of(&table)
    }

    /// The endpoint that answers a connection from `src` (address, port 0 for any).
    fn reached(&self, src: SocketAddrV4) -> Result<IpAddr, String> {
        self.client
            .run(move || connect_from(src, SocketAddrV4::new(SERVICE_IP, 80)))
            .unwrap()
    }
}

/// The one hash draw of a table and the endpoints of its block, as the kernel holds them.
#[derive(Debug, PartialEq)]
struct Slots {
    fields: usize,
    seed: u32,
    modulus: u32,
    offset: u32,
    /// (first, last, endpoint) of each run of the block.
    runs: Vec<(u32, u32, IpAddr)>,
}

impl Slots {
    fn of(t: &Table) -> Slots {
        let draws: Vec<&Stmt> = t
            .chains
            .values()
            .flat_map(|c| c.rules.iter().flat_map(|r| &r.stmts))
            .filter(|s| matches!(s, Stmt::DnatHashMap { .. }))
            .collect();
        assert_eq!(draws.len(), 1, "one service hashes");
        let Stmt::DnatHashMap {
            fields,
            seed,
            modulus,
            offset,
            map,
        } = draws[0]
        else {
            unreachable!()
        };
        let mut runs: Vec<(u32, u32, IpAddr)> = t.sets[map]
            .elements
            .iter()
            .filter_map(|e| match (&e.key[..], &e.data) {
                ([Value::IntRange { first, last }], Some(MapData::Values(v))) => match v[0] {
                    Value::Ipv4(a) if *first >= *offset && *last < offset + modulus => {
                        Some((*first, *last, IpAddr::V4(a)))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        runs.sort();
        Slots {
            fields: fields.len(),
            seed: *seed,
            modulus: *modulus,
            offset: *offset,
            runs,
        }
    }

    /// The endpoint the kernel picks for a packet whose hashed fields hold `values`.
    fn endpoint(&self, values: &[Value]) -> IpAddr {
        let n = jhash::draw(values, self.seed, self.modulus, self.offset).unwrap();
        let i = self.runs.partition_point(|r| r.1 < n);
        let run = self.runs[i];
        assert!(run.0 <= n && n <= run.1, "{n} is in no run");
        run.2
    }

    /// The endpoint of a client at `addr` (client mode).
    fn of_client(&self, addr: Ipv4Addr) -> IpAddr {
        assert_eq!(self.fields, 1);
        self.endpoint(&[Value::Ipv4(addr)])
    }
}

/// One TCP connection from `src` to `dst`: the endpoint address the server reports.
fn connect_from(src: SocketAddrV4, dst: SocketAddrV4) -> Result<IpAddr, String> {
    let sockaddr = |a: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a plain socket, bound and connected with valid sockaddr_in values; its fd is
    // handed to TcpStream once, which closes it.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        // Bounds the connect as well as writes (Linux honours SO_SNDTIMEO in connect).
        stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        let from = sockaddr(src);
        if libc::bind(fd, (&from as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(format!("bind {src}: {}", std::io::Error::last_os_error()));
        }
        let to = sockaddr(dst);
        if libc::connect(fd, (&to as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(format!(
                "connect from {src}: {}",
                std::io::Error::last_os_error()
            ));
        }
        stream
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    line.trim().parse().map_err(|_| format!("answer {line:?}"))
}

fn clients(n: u32) -> Vec<Ipv4Addr> {
    (0..n)
        .map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 10)) + i))
        .collect()
}

/// Synthetic clients spread over 10.128.0.0/9 (outside any lab address).
fn synthetic_clients(n: u32) -> Vec<Ipv4Addr> {
    (0..n)
        .map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 0)) + i * 797))
        .collect()
}

/// Pearson's χ² of `counts` against an even spread, with its degrees of freedom.
fn chi_squared(counts: &BTreeMap<IpAddr, usize>, endpoints: usize) -> (f64, usize) {
    let total: usize = counts.values().sum();
    let expected = total as f64 / endpoints as f64;
    let observed: Vec<f64> = (0..endpoints)
        .map(|i| *counts.values().nth(i).unwrap_or(&0) as f64)
        .collect();
    let chi = observed
        .iter()
        .map(|o| (o - expected).powi(2) / expected)
        .sum();
    (chi, endpoints - 1)
}

#[test]
fn each_client_reaches_the_same_endpoint_through_either_node_and_changes_move_few() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let lab = Lab::build();
    let ten: Vec<u8> = (2..12).collect();
    lab.sync_both(&manifests("client", &ten));
    let slots = lab.slots(0);
    assert_eq!(slots, lab.slots(1), "both nodes hold the same slots");

    // 200 clients through node a, then node b: the same endpoint, the one the slots name.
    let mut through: [BTreeMap<Ipv4Addr, IpAddr>; 2] = Default::default();
    for (i, seen) in through.iter_mut().enumerate() {
        lab.via(i);
        for c in clients(200) {
            let got = lab
                .reached(SocketAddrV4::new(c, 0))
                .unwrap_or_else(|e| panic!("via node {i}: {e}"));
            assert_eq!(got, slots.of_client(c), "client {c} via node {i}");
            seen.insert(c, got);
        }
    }
    assert_eq!(
        through[0], through[1],
        "a client reached different endpoints"
    );
    let mut counts: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for ep in through[0].values() {
        *counts.entry(*ep).or_default() += 1;
    }
    assert_eq!(counts.len(), 10, "every endpoint is used: {counts:?}");
    let (chi, dof) = chi_squared(&counts, 10);
    println!(
        "200 clients over 10 endpoints: {counts:?}; chi-squared {chi:.2} with {dof} degrees of freedom"
    );
    // The 0.1% critical value of χ² with 9 degrees of freedom.
    assert!(chi < 27.88, "chi-squared {chi:.2}");

    // One endpoint more: only clients of the new endpoint move, at most 1/11 + 3% of them.
    let synthetic = synthetic_clients(10_000);
    let before: Vec<IpAddr> = synthetic.iter().map(|c| slots.of_client(*c)).collect();
    let eleven: Vec<u8> = (2..13).collect();
    lab.sync_both(&manifests("client", &eleven));
    let added = lab.slots(0);
    assert_eq!(added, lab.slots(1));
    assert_eq!(
        (added.offset, added.seed),
        (slots.offset, slots.seed),
        "the rule stayed"
    );
    let new_endpoint: IpAddr = "10.244.0.12".parse().unwrap();
    let after: Vec<IpAddr> = synthetic.iter().map(|c| added.of_client(*c)).collect();
    let moved: Vec<usize> = (0..synthetic.len())
        .filter(|&i| before[i] != after[i])
        .collect();
    assert!(
        moved.iter().all(|&i| after[i] == new_endpoint),
        "a client moved elsewhere"
    );
    let share = moved.len() as f64 / synthetic.len() as f64;
    println!(
        "adding an 11th endpoint moved {share:.4} of 10,000 clients (1/11 = {:.4})",
        1.0 / 11.0
    );
    assert!(share > 0.0 && share <= 1.0 / 11.0 + 0.03, "{share}");

    // One endpoint less: only its clients move.
    let gone: IpAddr = "10.244.0.5".parse().unwrap();
    let without: Vec<u8> = eleven.iter().copied().filter(|n| *n != 5).collect();
    lab.sync_both(&manifests("client", &without));
    let removed = lab.slots(0);
    assert_eq!(removed, lab.slots(1));
    let last: Vec<IpAddr> = synthetic.iter().map(|c| removed.of_client(*c)).collect();
    let mut moved_clients = 0;
    for i in 0..synthetic.len() {
        if after[i] == gone {
            assert_ne!(last[i], gone);
            moved_clients += 1;
        } else {
            assert_eq!(
                last[i], after[i],
                "client {} of {} moved",
                synthetic[i], after[i]
            );
        }
    }
    println!(
        "removing an endpoint moved {:.4} of 10,000 clients, all of them its own",
        moved_clients as f64 / synthetic.len() as f64
    );
    // And the kernel still sends the real clients where the slots say.
    lab.via(1);
    for c in clients(40) {
        assert_eq!(
            lab.reached(SocketAddrV4::new(c, 0)).unwrap(),
            removed.of_client(c)
        );
    }
}

#[test]
fn a_connection_reaches_the_same_endpoint_through_either_node() {
    if !can_create() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let lab = Lab::build();
    let eps: Vec<u8> = (2..8).collect();
    lab.sync_both(&manifests("connection", &eps));
    let slots = lab.slots(0);
    assert_eq!(slots, lab.slots(1));
    assert_eq!(slots.fields, 5);
    let client = Ipv4Addr::new(10, 1, 0, 50);
    let mut seen = BTreeSet::new();
    for port in 40_000..40_060u16 {
        let want = slots.endpoint(&[
            Value::Ipv4(client),
            Value::Port(port),
            Value::Ipv4(SERVICE_IP),
            Value::Port(80),
            Value::Proto(6),
        ]);
        for node in 0..2 {
            lab.via(node);
            let got = lab.reached(SocketAddrV4::new(client, port)).unwrap();
            assert_eq!(got, want, "port {port} via node {node}");
        }
        seen.insert(want);
    }
    // One client's connections spread over the endpoints.
    assert!(seen.len() > 1, "{seen:?}");
}
