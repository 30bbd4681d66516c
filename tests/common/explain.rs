//! `kubenft explain` checked against the kernel: run the binary inside a lab's node namespace,
//! then make real connections and assert they end as it predicted (endpoint set, source address
//! the backend saw, refused or timed out). Every real-traffic test goes through `agrees` (the
//! standard lab's tests through `assert_explained`, the flow tables through their runner).
//! Used as `crate::explain_harness` (declared once in tests/integration.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;

use kubenft::lab::{Outcome, try_request};
use kubenft::netns::Netns;
use serde_json::Value;

/// `kubenft explain TO [--from FROM] --output json EXTRA…` run inside `node`, parsed. Panics
/// with the command's stderr when it fails.
pub fn explain(node: &Netns, to: &str, from: Option<&str>, extra: &[&str]) -> Value {
    try_explain(node, to, from, extra).unwrap_or_else(|e| panic!("{e}"))
}

/// `explain`, reporting a failed run or an answer that is not JSON as an error.
pub fn try_explain(
    node: &Netns,
    to: &str,
    from: Option<&str>,
    extra: &[&str],
) -> Result<Value, String> {
    let out = explain_command(node, &[], to, from, extra);
    if !out.status.success() {
        return Err(format!(
            "explain {to}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
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

/// How one connection ended, as a client in the lab sees it. `explain`'s prediction is turned
/// into the same terms (`predicted`), so the two compare directly.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    /// Answered by `by` (an endpoint, or the destination itself when not translated), which
    /// saw the client's own address (`masqueraded: false`) or another one.
    Answered {
        by: String,
        masqueraded: bool,
    },
    Refused,
    TimedOut,
    /// Routed past the node untranslated and refused by a router beyond it: the source the
    /// far side saw is not known.
    PassedOn,
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fate::Answered {
                by,
                masqueraded: false,
            } => write!(f, "{by} answered, source kept"),
            Fate::Answered {
                by,
                masqueraded: true,
            } => write!(f, "{by} answered, source masqueraded"),
            Fate::Refused => write!(f, "refused"),
            Fate::TimedOut => write!(f, "timed out"),
            Fate::PassedOn => write!(f, "routed past the node"),
        }
    }
}

/// What a lab does with a connection that leaves the node (translated or not) towards an
/// address: who answers it there, or how it ends when no namespace of the lab owns it.
pub trait Lab {
    fn fate_at(&self, to: SocketAddr, masqueraded: bool) -> Fate;
}

/// The fates `answer` (one `explain --output json` connection) predicts, with probabilities.
/// A translated connection ends where the lab says its endpoint is; an untranslated one where
/// the lab says its destination is; a drop times out and a reject is refused.
pub fn predicted(answer: &Value, lab: &dyn Lab) -> BTreeMap<Fate, f64> {
    let mut fates = BTreeMap::new();
    let ip = |v: &Value| -> IpAddr {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an address: {v}"))
    };
    for e in answer["endpoints"].as_array().into_iter().flatten() {
        let to = SocketAddr::new(ip(&e["address"]), e["port"].as_u64().unwrap() as u16);
        let fate = lab.fate_at(to, e["masquerade"].as_bool().unwrap());
        *fates.entry(fate).or_default() += e["probability"].as_f64().unwrap();
    }
    let connection = &answer["connection"];
    if let Some(u) = answer["untranslated"].as_object() {
        let to = SocketAddr::new(
            ip(&connection["destination"]),
            connection["port"].as_u64().unwrap() as u16,
        );
        let fate = lab.fate_at(to, u["masquerade"].as_bool().unwrap());
        *fates.entry(fate).or_default() += u["probability"].as_f64().unwrap();
    }
    for (key, fate) in [("dropped", Fate::TimedOut), ("rejected", Fate::Refused)] {
        if let Some(p) = answer[key]["probability"].as_f64() {
            *fates.entry(fate).or_default() += p;
        }
    }
    fates
}

/// Whether real connections ended as `explain` said: every observed fate was predicted, and
/// every fate predicted with probability ≥ `min_seen` was observed.
pub fn agrees(
    predicted: &BTreeMap<Fate, f64>,
    observed: &[Fate],
    min_seen: f64,
) -> Result<(), String> {
    let shown = || {
        let p: Vec<String> = predicted
            .iter()
            .map(|(f, p)| format!("{f} (p = {p:.3})"))
            .collect();
        let o: BTreeSet<String> = observed.iter().map(Fate::to_string).collect();
        format!(
            "explain predicted {{{}}}; the kernel did {{{}}}",
            p.join(", "),
            o.into_iter().collect::<Vec<_>>().join(", ")
        )
    };
    if predicted.is_empty() {
        return Err(format!("explain predicted nothing: {}", shown()));
    }
    if let Some(o) = observed.iter().find(|o| !predicted.contains_key(o)) {
        return Err(format!("{o} was not predicted: {}", shown()));
    }
    for (p, share) in predicted {
        if *share >= min_seen && !observed.contains(p) {
            return Err(format!("{p} (p = {share:.3}) never happened: {}", shown()));
        }
    }
    Ok(())
}

/// What `tries` real connections came to: per backend name, the source addresses it saw.
#[derive(Debug, Default)]
pub struct Observed {
    pub answered: BTreeMap<String, BTreeSet<String>>,
    pub refused: usize,
    pub timed_out: usize,
}

impl Observed {
    /// The distinct fates seen, for a client at `from`.
    pub fn fates(&self, from: &str) -> Vec<Fate> {
        let mut fates: Vec<Fate> = self
            .answered
            .iter()
            .flat_map(|(by, sources)| {
                sources.iter().map(move |s| Fate::Answered {
                    by: by.clone(),
                    masqueraded: s != from,
                })
            })
            .collect();
        if self.refused > 0 {
            fates.push(Fate::Refused);
        }
        if self.timed_out > 0 {
            fates.push(Fate::TimedOut);
        }
        fates
    }
}

pub fn observe(client: &Netns, to: &str, tries: usize) -> Observed {
    let mut seen = Observed::default();
    seen.observe_more(client, to, tries);
    seen
}

impl Observed {
    /// Adds what `tries` more connections to `to` came to.
    pub fn observe_more(&mut self, client: &Netns, to: &str, tries: usize) {
        let addr: SocketAddr = to.parse().unwrap();
        for _ in 0..tries {
            match try_request(client, addr) {
                Outcome::Answered { backend, source } => {
                    self.answered.entry(backend).or_default().insert(source);
                }
                Outcome::Refused => self.refused += 1,
                Outcome::TimedOut => self.timed_out += 1,
                Outcome::Other(e) => panic!("{to}: {e}"),
            }
        }
    }
}

/// Connections needed so that each fate predicted with a share of at least `min_seen` goes
/// unseen with probability below one in a million: (1 - p)^n < 1e-6.
pub fn tries_to_see(predicted: &BTreeMap<Fate, f64>, min_seen: f64) -> usize {
    predicted
        .values()
        .filter(|&&p| p >= min_seen && p < 1.0)
        .map(|&p| ((1e-6f64).ln() / (1.0 - p).ln()).ceil() as usize)
        .max()
        .unwrap_or(1)
}

/// The backend of the standard lab (`kubenft::lab::Topology`) serving `ip`: `pod-N` for
/// 10.244.N.x and fd00:244:N::x (pods 1 and 2, whatever extra addresses a test gives them).
pub fn pod_backend(ip: &str) -> Option<String> {
    let n = match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => match a.octets() {
            [10, 244, n, _] => u16::from(n),
            _ => return None,
        },
        IpAddr::V6(a) => match a.segments() {
            [0xfd00, 0x244, n, ..] => n,
            _ => return None,
        },
    };
    matches!(n, 1 | 2).then(|| format!("pod-{n}"))
}

/// The standard lab (`kubenft::lab::Topology` and the like): echo backends named by
/// `backend_of` (None: nobody answers there), and a connection leaving the node towards any
/// other address is dropped beyond it, so it times out.
struct Backends<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Lab for Backends<'_> {
    fn fate_at(&self, to: SocketAddr, masqueraded: bool) -> Fate {
        match (self.0)(&to.ip().to_string()) {
            Some(by) => Fate::Answered { by, masqueraded },
            None => Fate::TimedOut,
        }
    }
}

/// Asks `explain` (in `node`) about a connection from `from` (the address of `client`) to `to`,
/// makes at least `tries` real ones, and asserts they agree (`agrees`). `backend_of` names the backend
/// serving an endpoint address (its echo server answers with that name), None where no
/// backend listens. `to` may end in `/tcp` (the only protocol the echo backends speak here).
/// Returns the prediction.
pub fn assert_explained(
    node: &Netns,
    client: &Netns,
    from: &str,
    to: &str,
    tries: usize,
    min_seen: f64,
    backend_of: &dyn Fn(&str) -> Option<String>,
) -> Value {
    let answer = explain(node, to, Some(from), &[]);
    let expected = predicted(&answer, &Backends(backend_of));
    // A drop costs a connect timeout per try; one shows it.
    let only_drops = expected.keys().all(|f| *f == Fate::TimedOut);
    let tries = if only_drops { tries.min(1) } else { tries };
    // `tries` alone would miss a fate of share p with probability (1 - p)^tries (0.4 % for
    // p = ½ and 8 tries: a flake somewhere in a suite of many such checks), so while one is
    // missing, more connections are made, up to the one-in-a-million bound.
    let bound = if only_drops {
        tries
    } else {
        tries_to_see(&expected, min_seen).max(tries)
    };
    let target = to.trim_end_matches("/tcp");
    let mut seen = observe(client, target, tries);
    let mut made = tries;
    while made < bound && agrees(&expected, &seen.fates(from), min_seen).is_err() {
        seen.observe_more(client, target, tries);
        made += tries;
    }
    if let Err(e) = agrees(&expected, &seen.fates(from), min_seen) {
        panic!("{from} -> {to}: {e}\nexplain said {answer:#}\nobserved {seen:?}");
    }
    answer
}
