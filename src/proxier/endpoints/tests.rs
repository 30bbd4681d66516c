//! Endpoint categorisation against the cases of kube-proxy's own table of them
//! (kubernetes/kubernetes `pkg/proxy/topology_test.go`, `TestCategorizeEndpoints`), restated as
//! data, in upstream's order. `upstream` numbers the rows: 1-26 those of the table before
//! Kubernetes 1.33; 101-103 the PreferSameNode rows 1.33 added (node hints, the
//! PreferSameTrafficDistribution gate on: GA and locked on since 1.35); 0 this project's own.

use super::*;
use crate::cluster::{Protocol, ServicePortName};

/// This node: `node-1`, in the zone each case gives.
const NODE: &str = "node-1";

#[derive(Clone, Copy)]
enum State {
    Ready,
    /// Neither ready nor serving, not terminating.
    Unready,
    /// Not ready, still serving, terminating.
    ServingTerminating,
}
use State::*;

/// An endpoint `10.x.y.z:80` in a case.
struct Ep {
    ip: &'static str,
    state: State,
    on_this_node: bool,
    zones: &'static [&'static str],
    nodes: &'static [&'static str],
}

const fn ep(ip: &'static str, state: State) -> Ep {
    Ep {
        ip,
        state,
        on_this_node: false,
        zones: &[],
        nodes: &[],
    }
}

impl Ep {
    const fn local(self) -> Ep {
        Ep {
            on_this_node: true,
            ..self
        }
    }
    const fn zones(self, zones: &'static [&'static str]) -> Ep {
        Ep { zones, ..self }
    }
    const fn nodes(self, nodes: &'static [&'static str]) -> Ep {
        Ep { nodes, ..self }
    }

    fn endpoint(&self) -> Endpoint {
        let (ready, serving, terminating) = match self.state {
            Ready => (true, true, false),
            Unready => (false, false, false),
            ServingTerminating => (false, true, true),
        };
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect();
        Endpoint {
            ip: self.ip.parse().unwrap(),
            port: 80,
            ready,
            serving,
            terminating,
            node_name: Some(if self.on_this_node { NODE } else { "node-far" }.into()),
            zone: None,
            hint_zones: names(self.zones),
            hint_nodes: names(self.nodes),
        }
    }
}

/// The service port's policies; `external` gives it a NodePort.
#[derive(Clone, Copy, Default)]
struct Svc {
    internal_local: bool,
    external_local: bool,
    external: bool,
}

impl Svc {
    fn port(self) -> ServicePort {
        let policy = |local| {
            if local {
                TrafficPolicy::Local
            } else {
                TrafficPolicy::Cluster
            }
        };
        ServicePort {
            name: ServicePortName {
                namespace: "ns".into(),
                name: "svc".into(),
                port: "p".into(),
                protocol: Protocol::Tcp,
            }
            .into(),
            cluster_ips: vec!["10.96.0.1".parse().unwrap()],
            port: 80,
            node_port: self.external.then_some(30080),
            external_ips: Vec::new(),
            load_balancer_ips: Vec::new(),
            source_ranges: Vec::new(),
            external_policy: policy(self.external_local),
            internal_policy: policy(self.internal_local),
            affinity_timeout: None,
            health_check_node_port: None,
            traffic_distribution: None,
            consistent: None,
        }
    }
}

const CLUSTER: Svc = Svc {
    internal_local: false,
    external_local: false,
    external: false,
};
const ITP_LOCAL: Svc = Svc {
    internal_local: true,
    ..CLUSTER
};
const ITP_LOCAL_NODEPORT: Svc = Svc {
    external: true,
    ..ITP_LOCAL
};
const ETP_LOCAL: Svc = Svc {
    external_local: true,
    external: true,
    ..CLUSTER
};
const BOTH_LOCAL: Svc = Svc {
    internal_local: true,
    external_local: true,
    external: true,
};

struct Case {
    upstream: u8,
    what: &'static str,
    zone: Option<&'static str>,
    node: &'static str,
    svc: Svc,
    eps: &'static [Ep],
    /// `None`: the port never uses that policy.
    cluster: Option<&'static [&'static str]>,
    local: Option<&'static [&'static str]>,
    /// `None`: the one list given (or, with both given, their union).
    reachable: Option<&'static [&'static str]>,
    /// Some endpoint could serve although none is reachable from here.
    only_elsewhere: bool,
}

const BASE: Case = Case {
    upstream: 0,
    what: "",
    zone: Some("zone-a"),
    node: NODE,
    svc: CLUSTER,
    eps: &[],
    cluster: None,
    local: None,
    reachable: None,
    only_elsewhere: false,
};

const FOUR_ZONED: &[Ep] = &[
    ep("10.1.2.3", Ready).zones(&["zone-a"]),
    ep("10.1.2.4", Ready).zones(&["zone-b"]),
    ep("10.1.2.5", Ready).zones(&["zone-c"]),
    ep("10.1.2.6", Ready).zones(&["zone-a"]),
];
const FOUR_ZONED_TWO_LOCAL: &[Ep] = &[
    ep("10.1.2.3", Ready).zones(&["zone-a"]).local(),
    ep("10.1.2.4", Ready).zones(&["zone-b"]).local(),
    ep("10.1.2.5", Ready).zones(&["zone-c"]),
    ep("10.1.2.6", Ready).zones(&["zone-a"]),
];
const ONE_HINTED_ZONE_A: &[Ep] = &[ep("10.1.2.3", Ready).zones(&["zone-a"])];
const ZONED_AND_NODED: &[Ep] = &[
    ep("10.1.2.3", Ready).zones(&["zone-a"]).nodes(&["node-1"]),
    ep("10.1.2.4", Ready).zones(&["zone-b"]).nodes(&["node-2"]),
    ep("10.1.2.5", Ready).zones(&["zone-a"]).nodes(&["node-3"]),
    ep("10.1.2.6", Ready).zones(&["zone-c"]).nodes(&["node-4"]),
];
const LOCAL_AND_REMOTE: &[Ep] = &[ep("10.0.0.0", Ready).local(), ep("10.0.0.1", Ready)];
const TWO_REMOTE: &[Ep] = &[ep("10.0.0.0", Ready), ep("10.0.0.1", Ready)];

/// Upstream's cases 2 and 3: whichever policy is Local, the local list ignores the zone
/// hints while the cluster list follows them.
const ZONED_AND_LOCAL_LISTS: Case = Case {
    eps: FOUR_ZONED_TWO_LOCAL,
    cluster: Some(&["10.1.2.3", "10.1.2.6"]),
    local: Some(&["10.1.2.3", "10.1.2.4"]),
    reachable: Some(&["10.1.2.3", "10.1.2.4", "10.1.2.6"]),
    ..BASE
};
/// Upstream's cases 19 to 21: whichever policies are Local, with a NodePort the cluster list
/// has every endpoint and the local list the local one.
const EVERY_ENDPOINT_OR_THE_LOCAL_ONE: Case = Case {
    zone: None,
    eps: LOCAL_AND_REMOTE,
    cluster: Some(&["10.0.0.0", "10.0.0.1"]),
    local: Some(&["10.0.0.0"]),
    reachable: Some(&["10.0.0.0", "10.0.0.1"]),
    ..BASE
};

const CASES: &[Case] = &[
    Case {
        upstream: 1,
        what: "every ready endpoint has zone hints and some name this zone: only those",
        eps: FOUR_ZONED,
        cluster: Some(&["10.1.2.3", "10.1.2.6"]),
        ..BASE
    },
    Case {
        upstream: 2,
        what: "eTP Local: the local list ignores hints, the cluster list follows them",
        svc: ETP_LOCAL,
        ..ZONED_AND_LOCAL_LISTS
    },
    Case {
        upstream: 3,
        what: "iTP Local with a NodePort: the local list ignores hints, the cluster list follows them",
        svc: ITP_LOCAL_NODEPORT,
        ..ZONED_AND_LOCAL_LISTS
    },
    Case {
        upstream: 4,
        what: "a node without a zone label ignores zone hints",
        zone: None,
        eps: ONE_HINTED_ZONE_A,
        cluster: Some(&["10.1.2.3"]),
        ..BASE
    },
    Case {
        upstream: 5,
        what: "a node with an empty zone label ignores zone hints",
        zone: Some(""),
        eps: ONE_HINTED_ZONE_A,
        cluster: Some(&["10.1.2.3"]),
        ..BASE
    },
    Case {
        upstream: 6,
        what: "no endpoint hinted for this node's zone: every endpoint",
        zone: Some("zone-b"),
        eps: ONE_HINTED_ZONE_A,
        cluster: Some(&["10.1.2.3"]),
        ..BASE
    },
    Case {
        upstream: 7,
        what: "an unready endpoint hinted for this zone is left out",
        eps: &[
            ep("10.1.2.3", Ready).zones(&["zone-a"]),
            ep("10.1.2.4", Ready).zones(&["zone-b"]),
            ep("10.1.2.5", Ready).zones(&["zone-c"]),
            ep("10.1.2.6", Unready).zones(&["zone-a"]),
        ],
        cluster: Some(&["10.1.2.3"]),
        ..BASE
    },
    Case {
        upstream: 8,
        what: "only unready endpoints are hinted for this zone: every ready one, no filtering",
        eps: &[
            ep("10.1.2.3", Unready).zones(&["zone-a"]),
            ep("10.1.2.4", Ready).zones(&["zone-b"]),
            ep("10.1.2.5", Ready).zones(&["zone-c"]),
            ep("10.1.2.6", Unready).zones(&["zone-a"]),
        ],
        cluster: Some(&["10.1.2.4", "10.1.2.5"]),
        ..BASE
    },
    Case {
        upstream: 9,
        what: "one ready endpoint without zone hints: hints ignored",
        eps: &[
            ep("10.1.2.3", Ready).zones(&["zone-a"]),
            ep("10.1.2.4", Ready).zones(&["zone-b"]),
            ep("10.1.2.5", Ready),
            ep("10.1.2.6", Ready).zones(&["zone-a"]),
        ],
        cluster: Some(&["10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6"]),
        ..BASE
    },
    Case {
        upstream: 10,
        what: "an endpoint hinted for several zones serves each of them",
        zone: Some("zone-c"),
        eps: &[
            ep("10.1.2.3", Ready).zones(&["zone-a", "zone-b", "zone-c"]),
            ep("10.1.2.4", Ready).zones(&["zone-b", "zone-c"]),
            ep("10.1.2.5", Ready).zones(&["zone-b", "zone-d"]),
            ep("10.1.2.6", Ready).zones(&["zone-c"]),
        ],
        cluster: Some(&["10.1.2.3", "10.1.2.4", "10.1.2.6"]),
        ..BASE
    },
    Case {
        upstream: 101,
        what: "every ready endpoint has node hints and one names this node: only it",
        eps: ZONED_AND_NODED,
        cluster: Some(&["10.1.2.3"]),
        ..BASE
    },
    Case {
        upstream: 102,
        what: "some ready endpoint lacks node hints: zone hints decide",
        eps: &[
            ep("10.1.2.3", Ready).zones(&["zone-a"]).nodes(&["node-1"]),
            ep("10.1.2.4", Ready).zones(&["zone-b"]),
            ep("10.1.2.5", Ready).zones(&["zone-a"]).nodes(&["node-3"]),
            ep("10.1.2.6", Ready).zones(&["zone-c"]),
        ],
        cluster: Some(&["10.1.2.3", "10.1.2.5"]),
        ..BASE
    },
    Case {
        upstream: 103,
        what: "no endpoint hinted for this node: zone hints decide",
        node: "node-0",
        eps: ZONED_AND_NODED,
        cluster: Some(&["10.1.2.3", "10.1.2.5"]),
        ..BASE
    },
    Case {
        upstream: 11,
        what: "topology and locality disagree: the reachable list is the union of both",
        svc: ETP_LOCAL,
        eps: &[
            ep("10.0.0.0", Ready).zones(&["zone-a"]).local(),
            ep("10.0.0.1", Ready).zones(&["zone-b"]).local(),
            ep("10.0.0.2", Ready).zones(&["zone-a"]),
            ep("10.0.0.3", Ready).zones(&["zone-b"]),
        ],
        cluster: Some(&["10.0.0.0", "10.0.0.2"]),
        local: Some(&["10.0.0.0", "10.0.0.1"]),
        reachable: Some(&["10.0.0.0", "10.0.0.1", "10.0.0.2"]),
        ..BASE
    },
    Case {
        upstream: 12,
        what: "iTP Local without endpoints: an empty local list and nothing anywhere",
        zone: None,
        svc: ITP_LOCAL,
        local: Some(&[]),
        ..BASE
    },
    Case {
        upstream: 13,
        what: "iTP Local with remote endpoints only: nothing here, something elsewhere",
        zone: None,
        svc: ITP_LOCAL,
        eps: TWO_REMOTE,
        local: Some(&[]),
        only_elsewhere: true,
        ..BASE
    },
    Case {
        upstream: 14,
        what: "iTP Local with every endpoint local: all of them",
        zone: None,
        svc: ITP_LOCAL,
        eps: &[ep("10.0.0.0", Ready).local(), ep("10.0.0.1", Ready).local()],
        local: Some(&["10.0.0.0", "10.0.0.1"]),
        ..BASE
    },
    Case {
        upstream: 15,
        what: "iTP Local with one local endpoint: only it",
        zone: None,
        svc: ITP_LOCAL,
        eps: LOCAL_AND_REMOTE,
        local: Some(&["10.0.0.0"]),
        ..BASE
    },
    Case {
        upstream: 16,
        what: "policy Cluster, no endpoint ready or serving: nothing",
        zone: None,
        eps: &[ep("10.0.0.0", Unready), ep("10.0.0.1", Unready)],
        cluster: Some(&[]),
        ..BASE
    },
    Case {
        upstream: 17,
        what: "policy Cluster: the ready endpoints only",
        zone: None,
        eps: &[ep("10.0.0.0", Unready), ep("10.0.0.1", Ready)],
        cluster: Some(&["10.0.0.1"]),
        ..BASE
    },
    Case {
        upstream: 18,
        what: "policy Cluster, every endpoint terminating but serving: all of them, local or not",
        zone: None,
        eps: &[
            ep("10.0.0.0", ServingTerminating).local(),
            ep("10.0.0.1", ServingTerminating),
        ],
        cluster: Some(&["10.0.0.0", "10.0.0.1"]),
        ..BASE
    },
    Case {
        upstream: 19,
        what: "iTP Local, eTP Cluster: every endpoint for external traffic, the local one for internal",
        svc: ITP_LOCAL_NODEPORT,
        ..EVERY_ENDPOINT_OR_THE_LOCAL_ONE
    },
    Case {
        upstream: 20,
        what: "iTP Cluster, eTP Local: every endpoint for internal traffic, the local one for external",
        svc: ETP_LOCAL,
        ..EVERY_ENDPOINT_OR_THE_LOCAL_ONE
    },
    Case {
        upstream: 21,
        what: "iTP and eTP Local with a NodePort: the cluster list still serves pods and the host",
        svc: BOTH_LOCAL,
        ..EVERY_ENDPOINT_OR_THE_LOCAL_ONE
    },
    Case {
        upstream: 22,
        what: "iTP and eTP Local, every endpoint remote: an empty local list",
        zone: None,
        svc: BOTH_LOCAL,
        eps: TWO_REMOTE,
        cluster: Some(&["10.0.0.0", "10.0.0.1"]),
        local: Some(&[]),
        reachable: Some(&["10.0.0.0", "10.0.0.1"]),
        ..BASE
    },
    Case {
        upstream: 23,
        what: "iTP and eTP Local, every endpoint remote and terminating: the cluster list falls back to them",
        zone: None,
        svc: BOTH_LOCAL,
        eps: &[
            ep("10.0.0.0", ServingTerminating),
            ep("10.0.0.1", ServingTerminating),
        ],
        cluster: Some(&["10.0.0.0", "10.0.0.1"]),
        local: Some(&[]),
        reachable: Some(&["10.0.0.0", "10.0.0.1"]),
        only_elsewhere: true,
        ..BASE
    },
    Case {
        upstream: 24,
        what: "eTP Local: no local endpoint ready, so the local serving terminating one, while the cluster list keeps the ready one",
        zone: None,
        svc: ETP_LOCAL,
        eps: &[
            ep("10.0.0.0", Ready),
            ep("10.0.0.1", Unready).local(),
            ep("10.0.0.2", ServingTerminating).local(),
            ep("10.0.0.3", ServingTerminating),
        ],
        cluster: Some(&["10.0.0.0"]),
        local: Some(&["10.0.0.2"]),
        reachable: Some(&["10.0.0.0", "10.0.0.2"]),
        ..BASE
    },
    Case {
        upstream: 25,
        what: "eTP Local means nothing without a NodePort or external address",
        zone: None,
        svc: Svc {
            external_local: true,
            ..CLUSTER
        },
        eps: &[ep("10.0.0.0", Ready), ep("10.0.0.1", Ready).local()],
        cluster: Some(&["10.0.0.0", "10.0.0.1"]),
        ..BASE
    },
    Case {
        upstream: 26,
        what: "iTP Local without a NodePort has no cluster list",
        zone: None,
        svc: ITP_LOCAL,
        eps: &[ep("10.0.0.0", Ready), ep("10.0.0.1", Ready).local()],
        local: Some(&["10.0.0.1"]),
        ..BASE
    },
    // This project's own.
    Case {
        what: "the terminating fallback ignores hints, even those naming another zone",
        eps: &[
            ep("10.0.0.0", ServingTerminating).zones(&["zone-b"]),
            ep("10.0.0.1", ServingTerminating).zones(&["zone-a"]),
            ep("10.0.0.2", Unready).zones(&["zone-a"]),
        ],
        cluster: Some(&["10.0.0.0", "10.0.0.1"]),
        ..BASE
    },
    Case {
        what: "only ready endpoints need hints: an unready one without them does not disable topology",
        eps: &[
            ep("10.0.0.0", Ready).zones(&["zone-a"]).nodes(&["node-1"]),
            ep("10.0.0.1", Ready).zones(&["zone-a"]).nodes(&["node-2"]),
            ep("10.0.0.2", Unready),
        ],
        cluster: Some(&["10.0.0.0"]),
        ..BASE
    },
    Case {
        what: "node hints apply whatever the Service's trafficDistribution says: the hints carry it",
        svc: ITP_LOCAL_NODEPORT,
        eps: &[
            ep("10.0.0.0", Ready).zones(&["zone-a"]).nodes(&["node-2"]),
            ep("10.0.0.1", Ready).zones(&["zone-a"]).nodes(&["node-1"]),
            ep("10.0.0.2", Ready)
                .local()
                .zones(&["zone-a"])
                .nodes(&["node-1"]),
        ],
        cluster: Some(&["10.0.0.1", "10.0.0.2"]),
        local: Some(&["10.0.0.2"]),
        reachable: Some(&["10.0.0.1", "10.0.0.2"]),
        ..BASE
    },
];

fn ips(eps: &[Endpoint]) -> Vec<String> {
    eps.iter().map(|e| e.ip.to_string()).collect()
}

fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// kube-proxy's third list: every endpoint either list holds, each once, in the input's order.
fn all_reachable(got: &Categorized, all: &[Endpoint]) -> Vec<Endpoint> {
    let holds = |list: &Option<Vec<Endpoint>>, e| list.as_ref().is_some_and(|l| l.contains(e));
    all.iter()
        .filter(|e| holds(&got.cluster, e) || holds(&got.local, e))
        .cloned()
        .collect()
}

#[test]
fn endpoints_are_categorised_as_kube_proxy_categorises_them() {
    let mut failed = Vec::new();
    for case in CASES {
        let all: Vec<Endpoint> = case.eps.iter().map(Ep::endpoint).collect();
        let got = categorize(&case.svc.port(), &all, case.node, case.zone);
        let want_cluster = case.cluster.map(owned);
        let want_local = case.local.map(owned);
        let want_reachable = match (case.reachable, &want_cluster, &want_local) {
            (Some(r), _, _) => owned(r),
            (None, Some(one), None) | (None, None, Some(one)) => one.clone(),
            (None, _, _) => panic!("case {:?} needs its reachable list", case.what),
        };
        let want_any = !want_reachable.is_empty() || case.only_elsewhere;
        let seen = (
            got.cluster.as_deref().map(ips),
            got.local.as_deref().map(ips),
            ips(&all_reachable(&got, &all)),
            got.has_any,
        );
        if seen != (want_cluster, want_local, want_reachable, want_any) {
            failed.push(format!(
                "#{} {}: got cluster {:?}, local {:?}, reachable {:?}, any {}",
                case.upstream, case.what, seen.0, seen.1, seen.2, seen.3
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Internal traffic takes the list of internalTrafficPolicy, external traffic the list of
/// externalTrafficPolicy: with iTP Local and eTP Cluster, a NodePort reaches every endpoint
/// while the ClusterIP reaches the local one only.
#[test]
fn each_kind_of_traffic_takes_the_list_of_its_own_policy() {
    let all: Vec<Endpoint> = LOCAL_AND_REMOTE.iter().map(Ep::endpoint).collect();
    let svc = ITP_LOCAL_NODEPORT.port();
    let got = categorize(&svc, &all, NODE, None);
    assert_eq!(ips(got.internal(&svc)), ["10.0.0.0"]);
    assert_eq!(ips(got.external(&svc)), ["10.0.0.0", "10.0.0.1"]);

    let remote: Vec<Endpoint> = TWO_REMOTE.iter().map(Ep::endpoint).collect();
    let got = categorize(&svc, &remote, NODE, None);
    assert!(got.internal(&svc).is_empty() && got.has_any);
    assert_eq!(ips(got.external(&svc)), ["10.0.0.0", "10.0.0.1"]);
}
