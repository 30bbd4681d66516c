//! The daemon against a hostile node: another program squatting on our table name (the kernel
//! refuses every sync), or flushing and deleting our table behind our back. Refused syncs are
//! atomic (nothing half-applied in either family), logged and counted, retried, and the first
//! sync that can succeed restores service; tampering is repaired by the next sync, brought forward
//! when our base chains lost rules.

use crate::harness;

use std::sync::mpsc;
use std::time::Duration;

use harness::*;
use kubenft::netlink::NetlinkSocket;
use kubenft::netlink::attr::AttrWriter;
use kubenft::netlink::socket::{NLM_F_ACK, NLM_F_CREATE, NfHeader};
use kubenft::nft::kernel::requests;
use kubenft::nft::kernel::sys::*;

/// Creates `ip kubenft` with the OWNER flag from a socket of this test's: while that socket is
/// open the kernel refuses every change to the table by anyone else (EPERM), and it deletes the
/// table when the socket closes. Returns a sender; dropping it closes the socket.
fn squat_on_our_table(node: &kubenft::netns::Netns) -> mpsc::Sender<()> {
    let (release, released) = mpsc::channel::<()>();
    let (ready_tx, ready) = mpsc::channel();
    node.spawn(move || {
        let mut sock = NetlinkSocket::open().expect("netlink socket");
        let mut out = Vec::new();
        NfHeader::batch_begin(NFNL_SUBSYS_NFTABLES, 1).encode(&[], &mut out);
        let mut table = AttrWriter::new();
        table
            .string(NFTA_TABLE_NAME, "kubenft")
            .be32(NFTA_TABLE_FLAGS, NFT_TABLE_F_OWNER);
        requests::header(NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_ACK, NFPROTO_IPV4, 2)
            .encode(&table.buf, &mut out);
        NfHeader::batch_end(NFNL_SUBSYS_NFTABLES, 3).encode(&[], &mut out);
        sock.send(&out).expect("batch sent");
        let acked = sock
            .recv()
            .expect("reply")
            .iter()
            .any(|m| m.error().ok().flatten().is_some_and(|e| e.is_ack()));
        ready_tx.send(acked).unwrap();
        // Hold the socket (and so the table) until released.
        let _ = released.recv();
        drop(sock);
    })
    .expect("thread joins the node namespace");
    assert!(ready.recv().unwrap(), "the squatting table was created");
    release
}

#[test]
fn a_table_owned_by_another_program_fails_syncs_atomically_until_it_goes_away() {
    let Some((topo, api)) = lab("fltOwn") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let squatter = squat_on_our_table(&topo.node);
    let daemon = start_daemon(&topo, &api, &["--sync-period", "1s"]);

    eventually(Duration::from_secs(20), "two refused syncs", || {
        (daemon.log().matches("sync failed").count() >= 2).then_some(())
    });
    let log = daemon.log();
    assert!(
        log.contains("Operation not permitted"),
        "the kernel's reason is logged:\n{log}"
    );
    let (_, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics").unwrap();
    assert!(
        metric(
            &page,
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
        )
        .unwrap()
            >= 2.0,
        "{page}"
    );
    let ip6 = topo
        .node
        .exec_unchecked(&["nft", "list", "table", "ip6", "kubenft"])
        .unwrap();
    assert!(
        !ip6.status.success(),
        "the refused transaction left nothing behind in the other family either"
    );
    assert_eq!(backend(&topo, WEB), None, "nothing programmed yet");

    // The squatter exits; the kernel removes its table; the next retry programs ours.
    drop(squatter);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(10));
}

#[test]
fn a_flushed_or_deleted_table_is_repaired_by_the_next_periodic_sync() {
    let Some((topo, api)) = lab("fltTmp") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1, 2]));
    let daemon = start_daemon(&topo, &api, &["--sync-period", "1s"]);
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(20));

    topo.node
        .exec(&["nft", "flush", "table", "ip", "kubenft"])
        .unwrap();
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(10));

    topo.node
        .exec(&["nft", "delete", "table", "ip", "kubenft"])
        .unwrap();
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(10));
    let log = daemon.log();
    assert!(
        log.contains("nftables changed since our last commit"),
        "the tampering was noticed:\n{log}"
    );
    assert!(
        !log.contains("sync failed"),
        "and repaired without a failure:\n{log}"
    );
}

#[test]
fn rules_taken_away_on_an_idle_node_are_repaired_in_seconds_not_at_the_periodic_sync() {
    let Some((topo, api)) = lab("fltIdle") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1, 2]));
    // No periodic sync within the test: only the ruleset watch can repair in time.
    let daemon = start_daemon(&topo, &api, &["--sync-period", "5m"]);
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(20));
    let noticed = |log: &str| {
        log.matches("another program removed kubenft's rules")
            .count()
    };

    // A host firewall's reload (`flush ruleset` heads Debian's /etc/nftables.conf).
    topo.node.exec(&["nft", "flush", "ruleset"]).unwrap();
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    assert_eq!(noticed(&daemon.log()), 1, "{}", daemon.log());

    // Another program's table comes and goes: looked at, nothing to repair.
    let full_syncs = |log: &str| {
        log.matches("nftables changed since our last commit")
            .count()
    };
    let before = full_syncs(&daemon.log());
    topo.node
        .exec(&["nft", "add", "table", "inet", "firewall"])
        .unwrap();
    topo.node
        .exec(&["nft", "delete", "table", "inet", "firewall"])
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let log = daemon.log();
    assert_eq!(noticed(&log), 1, "{log}");
    assert_eq!(
        full_syncs(&log),
        before,
        "no sync for another program's table:\n{log}"
    );

    topo.node
        .exec(&["nft", "flush", "table", "ip", "kubenft"])
        .unwrap();
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    topo.node
        .exec(&["nft", "delete", "table", "ip", "kubenft"])
        .unwrap();
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    let log = daemon.log();
    assert_eq!(noticed(&log), 3, "{log}");
    assert!(!log.contains("sync failed"), "{log}");
}

/// One connection from `port` of the client to `to`: the backend's answer line, or why not.
fn connect_from_port(topo: &kubenft::lab::Topology, port: u16, to: &str) -> Result<String, String> {
    let to: std::net::SocketAddr = to.parse().unwrap();
    topo.client
        .run(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async move {
                use tokio::io::AsyncBufReadExt;
                let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
                socket.set_reuseaddr(true).map_err(|e| e.to_string())?;
                socket
                    .bind(([0, 0, 0, 0], port).into())
                    .map_err(|e| format!("bind: {e}"))?;
                let stream = tokio::time::timeout(Duration::from_secs(1), socket.connect(to))
                    .await
                    .map_err(|_| "connect: timed out".to_string())?
                    .map_err(|e| format!("connect: {e}"))?;
                let mut line = String::new();
                tokio::time::timeout(
                    Duration::from_secs(2),
                    tokio::io::BufReader::new(stream).read_line(&mut line),
                )
                .await
                .map_err(|_| "read: timed out".to_string())?
                .map_err(|e| format!("read: {e}"))?;
                Ok(line)
            })
        })
        .map_err(|e| e.to_string())?
}

#[test]
fn a_connection_tried_while_the_table_was_flushed_is_served_after_the_repair() {
    let Some((topo, api)) = lab("fltCt") else {
        return;
    };
    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    // A flush is repaired within about a second (the ruleset watch), or by the periodic sync:
    // time enough to try a connection in between, and the loop below flushes again if not.
    let daemon = start_daemon(&topo, &api, &["--sync-period", "4s"]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    // Another agent's rule keeps conntrack tracking the node's flows while kubenft's table is
    // empty, as a CNI's does on a real node.
    topo.node
        .exec_with_stdin(
            &["nft", "-f", "-"],
            "table ip other-agent {\n  chain forward {\n    type filter hook forward priority 10;\n    ct state invalid counter\n  }\n}\n",
        )
        .unwrap();

    // Tried while the rules are gone: the SYN leaves the node un-NATed, toward the upstream
    // router, and conntrack keeps that flow (SYN_SENT, 120 s).
    const PORT: u16 = 47_001;
    let mut tried = false;
    for _ in 0..5 {
        topo.node
            .exec(&["nft", "flush", "table", "ip", "kubenft"])
            .unwrap();
        if connect_from_port(&topo, PORT, WEB).is_err() {
            tried = true;
            break;
        }
    }
    assert!(
        tried,
        "no connection attempt fell between a flush and its repair"
    );
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(15));
    // The repair's cleanup follows its commit; the rules may answer a moment before.
    let cleaned = "TCP conntrack entries begun while the rules were missing deleted";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !daemon.log().contains(cleaned) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }

    // The same client port again, well within that entry's lifetime: DNATed like any other.
    let answer = connect_from_port(&topo, PORT, WEB);
    assert!(
        answer.as_deref().is_ok_and(|a| a.contains("pod-1")),
        "from the port tried during the flush: {answer:?}\n{}",
        daemon.log()
    );
    assert!(daemon.log().contains(cleaned), "{}", daemon.log());
}
