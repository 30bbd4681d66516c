//! A process on the node listening on a NodePort's port is reported: a warning naming the
//! Service and port, and the `kubenft_nodeport_conflicts` gauge, which falls back once the
//! process closes its socket.

use crate::common;
use crate::harness;

use std::time::Duration;

use harness::*;

fn conflicts_gauge(topo: &common::Topology) -> Option<f64> {
    let (_, page) = http_get(&topo.node, addr("127.0.0.1:10249"), "/metrics")?;
    metric(&page, "kubenft_nodeport_conflicts")
}

#[test]
fn a_listener_on_a_nodeport_is_warned_about_and_counted_until_it_closes() {
    let Some((topo, api)) = lab("npC") else {
        return;
    };
    let mut np = service("np", "10.96.0.20", 80);
    np["spec"]["type"] = "NodePort".into();
    np["spec"]["ports"][0]["nodePort"] = 30080.into();
    api.apply(np);
    api.apply(slice("np", &[1]));
    // A process in the node's namespace holding the NodePort's port on every address.
    let listener = topo
        .node
        .run(|| std::net::TcpListener::bind("0.0.0.0:30080"))
        .unwrap()
        .expect("port 30080 free in the test namespace");
    let daemon = start_daemon(&topo, &api, &[]);
    eventually(Duration::from_secs(20), "the conflict is counted", || {
        (conflicts_gauge(&topo) == Some(1.0)).then_some(())
    });
    let log = daemon.log();
    let warning = log
        .lines()
        .find(|l| l.contains("listens on a NodePort"))
        .unwrap_or_else(|| panic!("a warning:\n{log}"));
    assert!(warning.contains("demo/np:http"), "{warning}");
    assert!(warning.contains("30080"), "{warning}");
    assert_eq!(
        log.matches("listens on a NodePort").count(),
        1,
        "warned once"
    );

    drop(listener);
    // The next sync finds the port free again.
    api.apply(slice("np", &[1, 2]));
    eventually(Duration::from_secs(10), "the conflict is gone", || {
        (conflicts_gauge(&topo) == Some(0.0)).then_some(())
    });
}
