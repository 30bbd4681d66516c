//! `kubenft explain` checked against the kernel: run the binary inside a lab's node namespace,
//! then make real connections and assert they end as it predicted (endpoint set, source address
//! the backend saw, refused or timed out). Include with
//! `#[path = "common/explain.rs"] mod explain_harness;`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::Command;

use kubenft::lab::{Outcome, try_request};
use kubenft::netns::Netns;
use serde_json::Value;

/// `kubenft explain TO [--from FROM] --output json EXTRA…` run inside `node`, parsed. Panics
/// with the command's stderr when it fails.
pub fn explain(node: &Netns, to: &str, from: Option<&str>, extra: &[&str]) -> Value {
    let out = explain_command(node, &[], to, from, extra);
    assert!(
        out.status.success(),
        "explain {to}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "explain {to}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `kubenft explain --service NS/NAME --output json` run inside `node`, parsed.
pub fn explain_service(node: &Netns, service: &str) -> Value {
    let out = Command::new("ip")
        .args(["netns", "exec", node.name()])
        .arg(env!("CARGO_BIN_EXE_kubenft"))
        .args(["explain", "--service", service, "--output", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "explain --service {service}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The raw run of `WRAPPER… kubenft explain TO [--from FROM] --output json EXTRA…` inside `node`.
pub fn explain_command(
    node: &Netns,
    wrapper: &[&str],
    to: &str,
    from: Option<&str>,
    extra: &[&str],
) -> std::process::Output {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", node.name()])
        .args(wrapper)
        .arg(env!("CARGO_BIN_EXE_kubenft"))
        .args(["explain", to, "--output", "json"]);
    if let Some(from) = from {
        cmd.args(["--from", from]);
    }
    cmd.args(extra).output().unwrap()
}

/// What `tries` real connections came to: per backend name, the source addresses it saw.
#[derive(Debug, Default)]
pub struct Observed {
    pub answered: BTreeMap<String, BTreeSet<String>>,
    pub refused: usize,
    pub timed_out: usize,
}

pub fn observe(client: &Netns, to: &str, tries: usize) -> Observed {
    let addr: SocketAddr = to.parse().unwrap();
    let mut seen = Observed::default();
    for _ in 0..tries {
        match try_request(client, addr) {
            Outcome::Answered { backend, source } => {
                seen.answered.entry(backend).or_default().insert(source);
            }
            Outcome::Refused => seen.refused += 1,
            Outcome::TimedOut => seen.timed_out += 1,
            Outcome::Other(e) => panic!("{to}: {e}"),
        }
    }
    seen
}

/// Asks `explain` (in `node`) about a connection from `from` (the address of `client`) to `to`,
/// makes `tries` real ones, and asserts they agree: an accepted connection reaches exactly the
/// predicted endpoints (each predicted with probability ≥ `min_seen` must be seen), with the
/// client's address kept or masqueraded as predicted per endpoint; a rejected one is refused;
/// a dropped one times out. `backend_of` names the backend serving an endpoint address.
/// Returns the prediction.
pub fn assert_explained(
    node: &Netns,
    client: &Netns,
    from: &str,
    to: &str,
    tries: usize,
    min_seen: f64,
    backend_of: &dyn Fn(&str) -> String,
) -> Value {
    let predicted = explain(node, to, Some(from), &[]);
    let seen = observe(client, to, tries);
    let verdict = predicted["verdict"].as_str().unwrap();
    let context = format!("{from} -> {to}: predicted {predicted:#}\nobserved {seen:?}");
    match verdict {
        "accept" => {
            let endpoints = predicted["endpoints"].as_array().unwrap();
            assert!(!endpoints.is_empty(), "accepted untranslated: {context}");
            let mut expected = BTreeMap::new();
            for e in endpoints {
                let name = backend_of(e["address"].as_str().unwrap());
                expected.insert(
                    name,
                    (
                        e["probability"].as_f64().unwrap(),
                        e["masquerade"].as_bool().unwrap(),
                    ),
                );
            }
            assert_eq!(seen.refused + seen.timed_out, 0, "{context}");
            for (backend, sources) in &seen.answered {
                let Some((_, masquerade)) = expected.get(backend) else {
                    panic!("{backend} answered but was not predicted: {context}");
                };
                let kept = sources.iter().all(|s| s == from);
                let rewritten = sources.iter().all(|s| s != from);
                if *masquerade {
                    assert!(
                        rewritten,
                        "{backend} should see a masqueraded source: {context}"
                    );
                } else {
                    assert!(kept, "{backend} should see the client's address: {context}");
                }
            }
            for (backend, (p, _)) in &expected {
                if *p >= min_seen {
                    assert!(
                        seen.answered.contains_key(backend),
                        "{backend} (p = {p}) never answered: {context}"
                    );
                }
            }
        }
        "reject" => assert_eq!(seen.refused, tries, "{context}"),
        "drop" => assert_eq!(seen.timed_out, tries, "{context}"),
        other => panic!("verdict {other}: {context}"),
    }
    predicted
}
