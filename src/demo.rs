//! `kubenft demo`: a throw-away cluster of network namespaces (a node, two pods answering
//! with their name, an external client), the example Services programmed by kubenft over
//! netlink, real requests, and the resulting table. Everything is removed at the end, also on
//! Ctrl-C (the namespaces are guards; SIGINT only sets a flag checked between steps).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cluster::ClusterState;
use crate::lab::{Outcome, Topology, try_request};
use crate::netns::can_create;
use crate::nft::kernel::Nftables;
use crate::proxier::ProxyConfig;

/// The demo cluster's manifests (also in `examples/demo/`).
pub(crate) const MANIFESTS: &str = include_str!("../examples/demo/cluster.yaml");

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the demo needs root to create network namespaces")]
    NotRoot,
    #[error("interrupted; the lab was removed")]
    Interrupted,
    #[error("setting up the lab: {0}")]
    Lab(#[from] crate::netns::NetnsError),
    #[error("reading the demo manifests: {0}")]
    Manifests(String),
    #[error("programming the node: {0}")]
    Apply(String),
}

fn step(n: usize, text: &str) -> Result<(), DemoError> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(DemoError::Interrupted);
    }
    println!("[{n}/7] {text}");
    Ok(())
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Answered { backend, source } => {
            format!("answered by {backend} (it saw the client as {source})")
        }
        Outcome::Refused => "refused (rejected: no endpoints)".into(),
        Outcome::TimedOut => "timed out (dropped)".into(),
        Outcome::Other(e) => format!("failed: {e}"),
    }
}

/// Runs the demo, printing a progress line per step.
pub(crate) fn run() -> Result<(), DemoError> {
    if !can_create() {
        return Err(DemoError::NotRoot);
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };

    step(1, "creating namespaces: node-a, client, pod-1, pod-2")?;
    let lab = Topology::build("demo")?;
    let (node, client) = (&lab.node, &lab.client);
    step(
        2,
        "backends running: pod-1 and pod-2 answer on :8080 with their name",
    )?;

    step(
        3,
        "planning the example Services (examples/demo/cluster.yaml) and applying them in one netlink transaction",
    )?;
    let mut docs = crate::source::manifests::Manifests::default();
    let mut warnings = Vec::new();
    crate::source::manifests::parse_file(
        std::path::Path::new("examples/demo/cluster.yaml"),
        MANIFESTS,
        &mut docs,
        &mut warnings,
    );
    if let Some(w) = warnings.first() {
        return Err(DemoError::Manifests(w.reason.clone()));
    }
    let node_obj = docs.nodes.first();
    let (state, _rejected) =
        ClusterState::from_objects(&docs.services, &docs.endpoint_slices, node_obj);
    let config = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec!["10.244.0.0/16".parse().expect("literal")],
        service_cidrs: vec!["10.96.0.0/16".parse().expect("literal")],
        ..ProxyConfig::default()
    };
    let tables = crate::proxier::build(&state, &config);
    let tx = crate::sync::reconcile_transaction(&[], &tables, None);
    let ops = tx.ops.len();
    node.run(move || {
        Nftables::open()
            .map_err(|e| e.to_string())?
            .apply(&tx)
            .map_err(|e| e.to_string())
    })?
    .map_err(DemoError::Apply)?;
    println!("      {ops} operations applied atomically");

    step(4, "sending requests from the client")?;
    let ask = |label: &str, to: &str| {
        let addr: SocketAddr = to.parse().expect("literal");
        println!(
            "      {label:<34} {to:<16} → {}",
            describe(&try_request(client, addr))
        );
    };
    for i in 1..=6 {
        ask(&format!("web ClusterIP, request {i}"), "10.96.0.10:80");
    }
    for i in 1..=3 {
        ask(
            &format!("sticky (ClientIP affinity), req {i}"),
            "10.96.0.12:80",
        );
    }
    ask("api NodePort on the node's IP", "10.0.0.1:30080");
    ask("empty (no endpoints)", "10.96.0.14:80");

    step(5, "the resulting table, as an operator would list it")?;
    match node.exec_unchecked(&["nft", "list", "table", "ip", "kubenft"]) {
        Ok(out) if out.status.success() => print!("{}", String::from_utf8_lossy(&out.stdout)),
        _ => {
            for t in &tables {
                print!("{}", crate::nft::render::render_table(t));
            }
        }
    }

    step(
        6,
        "where a new connection from the client to demo/web goes, as `kubenft explain 10.96.0.10:80 --from 10.0.0.2` reads it from the kernel",
    )?;
    let flags = crate::explain::ExplainFlags {
        target: Some("10.96.0.10:80".into()),
        service: None,
        from: Some("10.0.0.2".parse().expect("literal")),
        hook: None,
        iif: None,
        table: None,
        output: crate::explain::OutputFormat::Text,
    };
    match node.run(move || crate::explain::run(&flags, "kubenft"))? {
        Ok(answer) => print!("{}", answer.to_text()),
        Err(e) => println!("      explain failed: {e}"),
    }

    step(7, "removing the lab")?;
    Ok(())
}
