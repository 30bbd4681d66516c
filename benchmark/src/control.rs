//! The control plane: cold full syncs three ways (kubenft over netlink, `nft -f` of the same
//! ruleset, `iptables-restore` of kube-proxy's iptables-mode chains), partial syncs in the
//! loaded state split into the daemon's phases, and a restart's read-back.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use kubenft::cluster::{ClusterState, ConsistentEndpoint, ServicePortName};
use kubenft::daemon::full_sync::{plan_as_held, read_differing_sets};
use kubenft::netlink::NetlinkSocket;
use kubenft::netlink::attr::AttrWriter;
use kubenft::netns::Netns;
use kubenft::nft::kernel::sys::{
    NFPROTO_IPV4, NFT_MSG_GETSETELEM, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE,
};
use kubenft::nft::kernel::{Nftables, requests};
use kubenft::nft::model::Table;
use kubenft::nft::render::render_table;
use kubenft::proxier::{Planner, build};
use kubenft::sync::{
    Observed, Syncer, changes_transaction, cleanup_transaction, reconcile_transaction,
};

use crate::synthetic::{self, add_service, cluster, config};

/// One partial sync through the incremental planner: replan the changed service, diff its
/// parts, send the difference as one batch.
#[derive(Default, Clone, Copy)]
pub struct Partial {
    /// Replanning when told which service changed (what a change-tracking source gives).
    pub plan: Duration,
    /// Replanning when every service is compared with its last plan (what the daemon does now).
    pub plan_compare_all: Duration,
    pub diff: Duration,
    /// Encoding plus the kernel's commit.
    pub commit: Duration,
    pub ops: usize,
}

impl Partial {
    pub fn total(&self) -> Duration {
        self.plan + self.diff + self.commit
    }
}

#[derive(Default, Clone)]
pub struct ControlRow {
    pub services: usize,
    pub endpoints: usize,
    pub chains: usize,
    pub rules: usize,
    pub elements: usize,
    pub build: Duration,
    pub netlink: Duration,
    pub nft_text: Duration,
    pub iptables: Option<Duration>,
    pub add_endpoint: Partial,
    pub add_service: Partial,
    /// A restarted daemon's first sync on an unchanged kernel: read back, diff, no operation.
    pub restart: Duration,
    pub restart_ops: usize,
    /// That restart phase by phase, and the same restart reading every element back.
    pub restart_phases: RestartPhases,
    /// The sets whose elements took longest to read back, slowest first.
    pub slowest_sets: Vec<SetRead>,
}

/// A restart's full sync on an unchanged kernel, phase by phase.
#[derive(Default, Clone, Copy)]
pub struct RestartPhases {
    /// Reading our tables back, trusting the kernel's records of the large sets' digests.
    pub read: Duration,
    /// Planning the cluster with the endpoint-map blocks read back.
    pub plan: Duration,
    /// Checking the large sets' planned digests against the records, the diff and the commit.
    pub sync: Duration,
    /// The same restart reading every element back (what the daemon's later full syncs do,
    /// and what every restart did before the records).
    pub every_element: Duration,
    pub every_element_ops: usize,
}

/// Reading one set's elements back (one element dump), and the same elements split round-robin
/// into `SHARDS` sets of a scratch table, read one after another.
#[derive(Clone)]
pub struct SetRead {
    pub name: String,
    pub elements: usize,
    /// Netlink messages of the dump (each at most 32 KiB).
    pub messages: usize,
    pub time: Duration,
    pub sharded: Duration,
}

/// Into how many sets `SetRead::sharded` splits a set.
pub const SHARDS: usize = 16;

/// How many of the slowest sets are reported.
const SLOWEST: usize = 2;

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median of `f` over `repeats` runs, each in a fresh namespace.
fn in_fresh_ns(
    tag: &str,
    repeats: usize,
    f: impl Fn(&Netns) -> Duration + Send + Sync + Clone + 'static,
) -> Duration {
    median(
        (0..repeats)
            .map(|_| f(&Netns::create(tag).expect("namespace")))
            .collect(),
    )
}

/// Runs `program args` inside `ns` with `input` on stdin; the wall time it took.
pub fn run_with_stdin(ns: &Netns, program: &str, args: &[&str], input: &str) -> Duration {
    let start = Instant::now();
    let argv: Vec<&str> = std::iter::once(program)
        .chain(args.iter().copied())
        .collect();
    if let Err(e) = ns.exec_with_stdin(&argv, input) {
        panic!("{program}: {e}");
    }
    start.elapsed()
}

/// kube-proxy's iptables mode for the same services, in `state.services` order: KUBE-SERVICES
/// → KUBE-SVC (random probability cascade) → KUBE-SEP (DNAT), with the masquerade mark chain.
pub fn iptables_ruleset(state: &ClusterState) -> String {
    let mut chains = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
         :KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n",
    );
    let mut rules = String::from(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A POSTROUTING -j KUBE-POSTROUTING\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
         -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
         -A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n\
         -A KUBE-POSTROUTING -j MASQUERADE --random-fully\n",
    );
    for (i, (name, sp)) in state.services.iter().enumerate() {
        let svc = format!("KUBE-SVC-{i:016X}");
        let _ = writeln!(chains, ":{svc} - [0:0]");
        let ip = sp.cluster_ips[0];
        let _ = writeln!(
            rules,
            "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"{name}\" -m tcp --dport {} -j {svc}",
            sp.port
        );
        let _ = writeln!(
            rules,
            "-A {svc} ! -s {} -d {ip}/32 -p tcp -m tcp --dport {} -j KUBE-MARK-MASQ",
            synthetic::CLUSTER_CIDR,
            sp.port
        );
        let eps = &state.endpoints[name];
        for (j, ep) in eps.iter().enumerate() {
            let sep = format!("KUBE-SEP-{i:08X}{j:08X}");
            let _ = writeln!(chains, ":{sep} - [0:0]");
            let left = eps.len() - j;
            if left > 1 {
                let _ = writeln!(
                    rules,
                    "-A {svc} -m statistic --mode random --probability {:.11} -j {sep}",
                    1.0 / left as f64
                );
            } else {
                let _ = writeln!(rules, "-A {svc} -j {sep}");
            }
            let _ = writeln!(
                rules,
                "-A {sep} -s {}/32 -j KUBE-MARK-MASQ\n-A {sep} -p tcp -m tcp -j DNAT --to-destination {}:{}",
                ep.ip, ep.ip, ep.port
            );
        }
    }
    chains + &rules + "COMMIT\n"
}

/// A cold full sync of one cluster: the size of the planned tables, planning them, and the
/// daemon's first sync of them over netlink (median of the repeats, each in a fresh namespace).
#[derive(Default, Clone)]
pub struct Cold {
    pub chains: usize,
    pub rules: usize,
    /// Elements of every set and map.
    pub elements: usize,
    pub build: Duration,
    pub netlink: Duration,
}

/// Plans `state` and cold-syncs it over netlink; the tables too, for the other ways to load them.
pub fn cold(state: &ClusterState, repeats: usize) -> (Cold, Vec<Table>) {
    let started = Instant::now();
    let tables = build(state, &config());
    let build_time = started.elapsed();
    let count = |f: &dyn Fn(&Table) -> usize| tables.iter().map(f).sum::<usize>();
    let chains = count(&|t| t.chains.len());
    let rules = count(&|t| t.chains.values().map(|c| c.rules.len()).sum());
    let elements = count(&|t| t.sets.values().map(|s| s.elements.len()).sum());

    // kubenft: what the daemon's first sync does (read back, plan, one batch).
    let t = tables.clone();
    let netlink = in_fresh_ns("bnl", repeats, move |ns| {
        let t = t.clone();
        ns.run(move || {
            let mut s = Syncer::new(Nftables::open().unwrap(), "kubenft");
            let start = Instant::now();
            s.sync(t, true).expect("cold sync");
            start.elapsed()
        })
        .unwrap()
    });
    let cold = Cold {
        chains,
        rules,
        elements,
        build: build_time,
        netlink,
    };
    (cold, tables)
}

/// One cluster cold-synced with every Service as it is (`None`) or annotated with a
/// consistent endpoint choice.
pub struct ConsistentRow {
    pub services: usize,
    pub endpoints: usize,
    pub mode: Option<ConsistentEndpoint>,
    pub cold: Cold,
}

/// The synthetic cluster cold-synced twice: as it is (endpoints drawn by `numgen random`), then
/// with every Service annotated `client` (drawn by a hash, from larger slot tables).
pub fn consistent(services: usize, endpoints: usize, repeats: usize) -> Vec<ConsistentRow> {
    [None, Some(ConsistentEndpoint::Client)]
        .into_iter()
        .map(|mode| {
            let mut state = cluster(services, endpoints);
            if let Some(mode) = mode {
                synthetic::choose_consistently(&mut state, mode);
            }
            ConsistentRow {
                services,
                endpoints,
                mode,
                cold: cold(&state, repeats).0,
            }
        })
        .collect()
}

pub fn measure(services: usize, endpoints: usize, repeats: usize, iptables: bool) -> ControlRow {
    let state = cluster(services, endpoints);
    let (
        Cold {
            chains,
            rules,
            elements,
            build: build_time,
            netlink,
        },
        tables,
    ) = cold(&state, repeats);

    let text: String = tables.iter().map(render_table).collect();
    let nft_text = in_fresh_ns("bnft", repeats, move |ns| {
        run_with_stdin(ns, "nft", &["-f", "-"], &text)
    });

    let iptables = iptables.then(|| {
        let rules = iptables_ruleset(&state);
        in_fresh_ns("bipt", repeats, move |ns| {
            run_with_stdin(ns, "iptables-restore", &[], &rules)
        })
    });

    let (add_endpoint, add_service, (restart_phases, restart_ops, slowest_sets)) =
        partial_syncs(&state, endpoints);
    let restart = restart_phases.read + restart_phases.plan + restart_phases.sync;
    ControlRow {
        services,
        endpoints,
        chains,
        rules,
        elements,
        build: build_time,
        netlink,
        nft_text,
        iptables,
        add_endpoint,
        add_service,
        restart,
        restart_ops,
        restart_phases,
        slowest_sets,
    }
}

/// The time of one element dump of `set` in `table`, and its message count.
fn read_elements(sock: &mut NetlinkSocket, table: &str, set: &str) -> (Duration, usize) {
    let mut w = AttrWriter::new();
    w.string(NFTA_SET_ELEM_LIST_TABLE, table)
        .string(NFTA_SET_ELEM_LIST_SET, set);
    let start = Instant::now();
    let messages = requests::dump(sock, "GETSETELEM", NFT_MSG_GETSETELEM, NFPROTO_IPV4, &w.buf)
        .expect("element dump")
        .len();
    (start.elapsed(), messages)
}

/// The sets of `table` (loaded in the calling thread's namespace) whose elements take longest
/// to read back, each also split into `SHARDS` sets and read again: the kernel walks a set
/// from its first element for every message of a dump, so one set of n elements costs
/// O(n²) and the same elements in k sets O(n²/k).
fn slowest_sets(nl: &mut Nftables, table: &Table) -> Vec<SetRead> {
    let mut sock = NetlinkSocket::open().expect("netlink socket");
    let mut reads: Vec<SetRead> = table
        .sets
        .values()
        .filter(|s| !s.dynamic)
        .map(|s| {
            let (time, messages) = read_elements(&mut sock, &table.name, &s.name);
            SetRead {
                name: s.name.clone(),
                elements: s.elements.len(),
                messages,
                time,
                sharded: Duration::ZERO,
            }
        })
        .collect();
    reads.sort_by_key(|r| std::cmp::Reverse(r.time));
    reads.truncate(SLOWEST);
    for read in &mut reads {
        let whole = &table.sets[&read.name];
        let mut scratch = Table {
            name: "bench-shards".into(),
            chains: Default::default(),
            sets: Default::default(),
            ..table.clone()
        };
        for k in 0..SHARDS {
            let mut shard = whole.clone();
            shard.name = format!("{}-{k}", whole.name);
            shard.elements = whole
                .elements
                .iter()
                .skip(k)
                .step_by(SHARDS)
                .cloned()
                .collect();
            scratch.sets.insert(shard.name.clone(), shard);
        }
        nl.apply(&reconcile_transaction(
            &[(scratch.table_ref(), Observed::Absent)],
            std::slice::from_ref(&scratch),
            None,
        ))
        .expect("loading the shards");
        let start = Instant::now();
        for name in scratch.sets.keys() {
            read_elements(&mut sock, &scratch.name, name);
        }
        read.sharded = start.elapsed();
        nl.apply(&cleanup_transaction(&scratch.name))
            .expect("removing the shards");
    }
    reads
}

/// How often each partial change is made (and undone) for its medians.
const PARTIAL_REPEATS: usize = 11;

/// In one namespace loaded with `state`: one endpoint added to a service, then one service
/// added, each as a partial sync through the incremental planner; then a restart's full sync on
/// the unchanged kernel.
type Restart = (RestartPhases, usize, Vec<SetRead>);

fn partial_syncs(state: &ClusterState, endpoints: usize) -> (Partial, Partial, Restart) {
    let ns = Netns::create("bpart").unwrap();
    let state = state.clone();
    ns.run(move || {
        let mut nl = Nftables::open().unwrap();
        let mut planner = Planner::new();
        // Loaded and changed as the daemon does, so the kernel's records of the large sets'
        // digests stay in step and the changes' commits carry their cost.
        let mut syncer = Syncer::new(Nftables::open().unwrap(), "kubenft");
        syncer
            .sync(planner.plan(&state, &config()), false)
            .expect("loading the state");
        syncer.release_tables();

        let mut change = |state: &ClusterState, service: &ServicePortName| {
            // Compared against every service first, on a copy, so both ways start equal.
            let mut comparing = planner.clone();
            let start = Instant::now();
            let all = comparing.changes(state, &config(), None);
            let plan_compare_all = start.elapsed();
            drop(comparing);
            let scope = BTreeSet::from([(service.namespace.clone(), service.name.clone())]);
            let start = Instant::now();
            let changes = planner.changes(state, &config(), Some(&scope));
            let plan = start.elapsed();
            assert_eq!(all, changes, "both ways plan the same change");
            // The engine's own transaction is timed as part of its commit: this is the
            // difference alone, on a copy.
            let copy = changes.clone();
            let start = Instant::now();
            drop(changes_transaction(copy, None));
            let diff = start.elapsed();
            let report = syncer
                .sync_changes(changes)
                .expect("partial sync")
                .expect("nothing else commits here");
            Partial {
                plan,
                plan_compare_all,
                diff,
                commit: report.kernel_time,
                ops: report.ops,
            }
        };
        // Each change is made and undone PARTIAL_REPEATS times (its phases are medians), then
        // made again.
        let mut repeated = |from: &ClusterState, to: &ClusterState, service: &ServicePortName| {
            let runs: Vec<Partial> = (0..PARTIAL_REPEATS)
                .map(|_| {
                    let forward = change(to, service);
                    change(from, service);
                    forward
                })
                .collect();
            change(to, service); // left made
            let med = |f: fn(&Partial) -> Duration| median(runs.iter().map(f).collect());
            Partial {
                plan: med(|p| p.plan),
                plan_compare_all: med(|p| p.plan_compare_all),
                diff: med(|p| p.diff),
                commit: med(|p| p.commit),
                ops: runs[0].ops,
            }
        };
        let mut more = state.clone();
        let first = more.services.keys().next().unwrap().clone();
        let eps = more.endpoints.get_mut(&first).unwrap();
        eps.push(synthetic::endpoint(
            IpAddr::V4(Ipv4Addr::new(10, 255, 255, 254)),
            8080,
            1,
        ));
        let endpoint = repeated(&state, &more, &first);
        let base = more.clone();
        add_service(&mut more, 999_999, endpoints.max(1));
        let service = repeated(&base, &more, &synthetic::service_name(999_999));

        drop(syncer);
        // A restarted daemon, as `kubenft run` does it: read the kernel, plan keeping its
        // blocks and slots, send the difference; trusting the records, then reading every element.
        let restart = |every_element: bool| {
            let mut restarted = Syncer::new(Nftables::open().unwrap(), "kubenft");
            if every_element {
                restarted = restarted.reading_every_element();
            }
            let start = Instant::now();
            restarted.read_back().expect("restart read");
            let read = start.elapsed();
            let start = Instant::now();
            let mut planner = Planner::new();
            let mut tables = plan_as_held(&restarted, &mut planner, &more, &config());
            let plan = start.elapsed();
            let start = Instant::now();
            read_differing_sets(&mut restarted, &mut planner, &mut tables, &more, &config())
                .expect("restart read of the sets that differ");
            let report = restarted
                .sync_filling(tables, &planner, false)
                .expect("restart sync");
            let sync = start.elapsed();
            (read, plan, sync, report.ops, planner)
        };
        let (read, plan, sync, ops, planner) = restart(false);
        let (r, p, s, every_element_ops, _) = restart(true);
        let phases = RestartPhases {
            read,
            plan,
            sync,
            every_element: r + p + s,
            every_element_ops,
        };
        let tables = planner.tables();
        let slowest = slowest_sets(&mut nl, &tables[0]);
        (endpoint, service, (phases, ops, slowest))
    })
    .unwrap()
}
