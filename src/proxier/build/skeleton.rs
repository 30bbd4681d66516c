//! The fixed part of a table: base chains, shared chains, and the shared sets and maps.

use super::*;

/// A base chain: name, type, hook, priority, the chains it jumps to, and why it exists.
type BaseRow = (
    &'static str,
    ChainType,
    Hook,
    i32,
    &'static [&'static str],
    &'static str,
);
/// The base chains, in the order the table lists them.
const BASE_CHAINS: [BaseRow; 8] = [
    (
        FILTER_PREROUTING_PRE_DNAT,
        ChainType::Filter,
        Hook::Prerouting,
        -110,
        &[FIREWALL_CHECK],
        "source ranges of load balancers, before DNAT rewrites the destination",
    ),
    (
        FILTER_OUTPUT_PRE_DNAT,
        ChainType::Filter,
        Hook::Output,
        -110,
        &[FIREWALL_CHECK],
        "source ranges for traffic from this host",
    ),
    (
        NAT_PREROUTING,
        ChainType::Nat,
        Hook::Prerouting,
        -100,
        &[SERVICES],
        "DNAT of traffic arriving at the node",
    ),
    (
        NAT_OUTPUT,
        ChainType::Nat,
        Hook::Output,
        -100,
        &[SERVICES],
        "DNAT of traffic from this host",
    ),
    (
        FILTER_FORWARD,
        ChainType::Filter,
        Hook::Forward,
        0,
        &[SERVICE_ENDPOINTS_CHECK, CLUSTER_IPS_CHECK],
        "services without endpoints, unused ClusterIP ports",
    ),
    (
        FILTER_INPUT,
        ChainType::Filter,
        Hook::Input,
        0,
        &[NODEPORT_ENDPOINTS_CHECK, SERVICE_ENDPOINTS_CHECK],
        "NodePorts and services without endpoints",
    ),
    (
        FILTER_OUTPUT,
        ChainType::Filter,
        Hook::Output,
        0,
        &[SERVICE_ENDPOINTS_CHECK, CLUSTER_IPS_CHECK],
        "services without endpoints, unused ClusterIP ports",
    ),
    (
        NAT_POSTROUTING,
        ChainType::Nat,
        Hook::Postrouting,
        100,
        &[MASQUERADING],
        "masquerade what was marked for it",
    ),
];

impl Builder<'_> {
    /// Base chains, fixed regular chains and the shared sets and maps.
    pub(super) fn skeleton(&mut self) {
        self.base_chains();
        self.masquerading_chains();
        self.dispatch_chains();
        self.check_chains();
        self.pick_chains();
        self.shared_maps();
    }

    /// The base chains, each jumping to the regular chains that do its work.
    fn base_chains(&mut self) {
        for (name, kind, hook, prio, jumps, why) in BASE_CHAINS {
            // Only new connections need checking: NAT and filter verdicts stick to the flow.
            let rules = jumps
                .iter()
                .map(|j| {
                    let mut s = if kind == ChainType::Filter {
                        vec![ct_new()]
                    } else {
                        vec![]
                    };
                    s.push(jump(j));
                    rule(s, None)
                })
                .collect();
            self.chain(name, Some((kind, hook, prio)), Some(why), rules);
        }
    }

    /// `mark-for-masquerade` and `masquerading`: packets are marked on the way in and
    /// masqueraded (mark cleared) on the way out.
    fn masquerading_chains(&mut self) {
        let f = self.fam;
        let mark = self.config.masquerade_mark();
        self.chain(
            MARK_FOR_MASQUERADE,
            None,
            None,
            vec![rule(vec![Stmt::SetMark(MarkOp::Or(mark))], None)],
        );
        self.chain(
            MASQUERADING,
            None,
            None,
            vec![
                rule(
                    vec![
                        m(
                            Selector::CtStatus,
                            CmpOp::Eq,
                            Value::CtStatus(CtStatus::DNAT),
                        ),
                        Stmt::Lookup {
                            key: vec![f.saddr(), f.daddr()],
                            set: HAIRPIN_ENDPOINTS.into(),
                            negate: false,
                        },
                        jump(MARK_FOR_MASQUERADE),
                    ],
                    Some("hairpin: an endpoint reaching itself through a service".into()),
                ),
                rule(
                    vec![
                        Stmt::Match {
                            left: Selector::Mark,
                            mask: Some(mark),
                            op: CmpOp::Eq,
                            right: Value::Mark(0),
                        },
                        Stmt::Verdict(Verdict::Return),
                    ],
                    None,
                ),
                rule(vec![Stmt::SetMark(MarkOp::Xor(mark))], None),
                rule(vec![Stmt::Masquerade { fully_random: true }], None),
            ],
        );
    }

    /// `services`, where NAT traffic is dispatched by destination, and `pick-retry`, its
    /// second chance for a packet that raced a commit.
    fn dispatch_chains(&mut self) {
        // `service-ips` and `service-nodeports` jump rather than goto: a chain the same commit
        // created is empty to a packet that entered the table before it, and that packet must
        // go on to the retry below instead of leaving untranslated.
        let mut dispatch = vec![self.by_destination(SERVICE_IPS)];
        dispatch.extend(self.pick_dispatch());
        dispatch.push(self.by_node_port(SERVICE_NODEPORTS));
        dispatch.push(self.frontend_in(
            PICK_FALLBACK,
            PICK_RETRY,
            Some("the dispatch changed while this packet was looked up".into()),
        ));
        self.chain(SERVICES, None, None, dispatch);
        // Not `service-ips`: a chain created by the commit is empty to a packet that entered
        // the table before it, so a service that moved to a chain of its own gets the fallback.
        let mut retry = self.pick_dispatch();
        // Its own chain's masquerade rule is out of reach: masquerade, as external traffic
        // needs, at the cost of a pod's source address for this one connection.
        retry.push(rule(
            vec![jump(MARK_FOR_MASQUERADE)],
            Some("the service moved to a chain of its own".into()),
        ));
        retry.push(self.pick_fallback());
        self.chain(
            PICK_RETRY,
            None,
            Some("the dispatch again, once its commit is complete"),
            retry,
        );
    }

    /// The filter chains: services without endpoints, load-balancer source ranges, and
    /// ClusterIP ports no service uses.
    fn check_chains(&mut self) {
        let f = self.fam;
        self.chain(
            REJECT_CHAIN,
            None,
            Some("helper for services with no endpoints"),
            vec![rule(vec![Stmt::Reject(RejectKind::Default)], None)],
        );
        self.chain(
            SERVICE_ENDPOINTS_CHECK,
            None,
            None,
            vec![self.by_destination(NO_ENDPOINT_SERVICES)],
        );
        self.chain(
            NODEPORT_ENDPOINTS_CHECK,
            None,
            None,
            vec![self.by_node_port(NO_ENDPOINT_NODEPORTS)],
        );
        self.chain(
            FIREWALL_CHECK,
            None,
            None,
            vec![self.by_destination(FIREWALL_IPS)],
        );
        let mut checks = vec![rule(
            vec![
                Stmt::Lookup {
                    key: vec![f.daddr()],
                    set: CLUSTER_IPS.into(),
                    negate: false,
                },
                Stmt::Reject(RejectKind::Default),
            ],
            Some("reject traffic to an active ClusterIP on a port no service uses".into()),
        )];
        let service_cidrs = dropped_service_cidrs(self.state, self.config);
        for cidr in service_cidrs.iter().filter(|c| f.has_net(c)) {
            checks.push(rule(
                vec![
                    m(f.daddr(), CmpOp::Eq, net_value(*cidr)),
                    Stmt::Verdict(Verdict::Drop),
                ],
                Some("drop traffic to unallocated ClusterIPs".into()),
            ));
        }
        self.chain(CLUSTER_IPS_CHECK, None, None, checks);
    }

    /// The sets and maps every service shares (the pick chains' own are declared with them).
    fn shared_maps(&mut self) {
        let f = self.fam;
        let key3 = self.frontend_types();
        let key2 = vec![DataType::InetProto, DataType::InetService];
        let set = map(CLUSTER_IPS, vec![f.addr_type()], false, "active ClusterIPs");
        self.out.declare(set);
        self.out.declare(map(
            NODEPORT_IPS,
            vec![f.addr_type()],
            false,
            "IPs that accept NodePort traffic",
        ));
        self.out.declare(map(
            SERVICE_IPS,
            key3.clone(),
            true,
            "ClusterIP, ExternalIP and LoadBalancer IP traffic",
        ));
        self.out.declare(map(
            HAIRPIN_ENDPOINTS,
            vec![f.addr_type(), f.addr_type()],
            false,
            "endpoint . itself: a service connection from an endpoint to itself is masqueraded",
        ));
        self.out.declare(map(
            SERVICE_NODEPORTS,
            key2.clone(),
            true,
            "NodePort traffic",
        ));
        self.out.declare(map(
            NO_ENDPOINT_SERVICES,
            key3.clone(),
            true,
            "vmap to drop or reject packets to services with no endpoints",
        ));
        self.out.declare(map(
            NO_ENDPOINT_NODEPORTS,
            key2,
            true,
            "vmap to drop or reject packets to service nodeports with no endpoints",
        ));
        self.out.declare(map(
            FIREWALL_IPS,
            key3,
            true,
            "destinations that are subject to LoadBalancerSourceRanges",
        ));
    }
}
