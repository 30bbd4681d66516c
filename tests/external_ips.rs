//! `Service.spec.externalIPs` under KEP-5707 (kube-proxy 1.36 and 1.37), against the real
//! daemon, the test API server and real connections: with the AllowServiceExternalIPs gate on
//! (its default) the external IP is proxied and nothing but the `Starting` event is written,
//! as kube-proxy writes no Event and logs nothing for such a Service (the deprecation warning
//! is the API server's, to whoever writes the field); with the gate off the external IP is not
//! proxied at all while the ClusterIP still is, and setting the deprecated gate is warned about
//! once, at start.

use crate::harness;

use std::time::Duration;

use crate::common::{Outcome, Topology, try_request};
use harness::*;
use kubenft_testkit::Kind;
use serde_json::json;

/// Routed by the lab's client through the node; nobody owns it, so a packet the node does not
/// translate goes to the upstream router, which drops it.
const EXTERNAL: &str = "192.0.2.30:80";

const DEPRECATED_GATE: &str = "feature gate AllowServiceExternalIPs";

/// `web` on 10.96.0.10:80 with the external IP 192.0.2.30.
fn web_with_external_ip() -> serde_json::Value {
    let mut web = service("web", "10.96.0.10", 80);
    web["spec"]["externalIPs"] = json!(["192.0.2.30"]);
    web
}

/// The node's ruleset, as `nft` lists it.
fn ruleset(topo: &Topology) -> String {
    let out = topo.node.exec(&["nft", "list", "ruleset"]).unwrap().stdout;
    String::from_utf8(out).unwrap()
}

/// The reasons of every stored event, with what each is about.
fn events(api: &ApiServer) -> Vec<(String, String, String)> {
    api.server
        .objects(Kind::Event)
        .into_iter()
        .map(|e| {
            let field = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (
                field(&e["reason"]),
                field(&e["regarding"]["kind"]),
                field(&e["regarding"]["name"]),
            )
        })
        .collect()
}

/// The only event is kube-proxy's `Starting` on the Node (given time to write any other).
fn assert_only_the_starting_event(api: &ApiServer) {
    eventually(Duration::from_secs(10), "the Starting event", || {
        (!events(api).is_empty()).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        events(api),
        [("Starting".to_string(), "Node".to_string(), NODE.to_string())],
        "kube-proxy records nothing about a Service with externalIPs"
    );
}

#[test]
fn by_default_a_services_external_ip_is_proxied_with_no_event_or_warning() {
    let Some((topo, api)) = lab("xipOn") else {
        return;
    };
    api.apply(web_with_external_ip());
    api.apply(slice("web", &[1]));
    let daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, EXTERNAL, &["pod-1"], Duration::from_secs(20));
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(5));
    assert_only_the_starting_event(&api);
    assert!(
        !daemon.log().contains(DEPRECATED_GATE),
        "an unset deprecated gate is not mentioned:\n{}",
        daemon.log()
    );
}

#[test]
fn with_the_gate_off_the_external_ip_is_not_proxied_and_the_gate_is_warned_about() {
    let Some((topo, api)) = lab("xipOff") else {
        return;
    };
    api.apply(web_with_external_ip());
    api.apply(slice("web", &[1]));
    let daemon = start_daemon(
        &topo,
        &api,
        &["--feature-gates", "AllowServiceExternalIPs=false"],
    );
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    assert_eq!(
        try_request(&topo.client, addr(EXTERNAL)),
        Outcome::TimedOut,
        "forwarded untranslated to the upstream router, which drops it"
    );
    let table = ruleset(&topo);
    assert!(
        !table.contains("192.0.2.30"),
        "no rule or element names the external IP:\n{table}"
    );

    // A change to the Service keeps the external IP out (the daemon's incremental path).
    let mut changed = web_with_external_ip();
    changed["spec"]["externalIPs"] = json!(["192.0.2.30", "192.0.2.31"]);
    changed["spec"]["ports"][0]["port"] = json!(81);
    api.apply(changed);
    wait_for_backends(&topo, "10.96.0.10:81", &["pod-1"], Duration::from_secs(10));
    let table = ruleset(&topo);
    assert!(!table.contains("192.0.2.3"), "{table}");
    assert_eq!(
        try_request(&topo.client, addr("192.0.2.31:81")),
        Outcome::TimedOut
    );

    assert_only_the_starting_event(&api);
    let log = daemon.log();
    assert_eq!(
        log.matches(DEPRECATED_GATE).count(),
        1,
        "warned once, at start:\n{log}"
    );
    assert!(
        log.contains("AllowServiceExternalIPs=false is deprecated"),
        "{log}"
    );
}
