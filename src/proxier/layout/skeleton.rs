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
                        vec![Stmt::ct_new()]
                    } else {
                        vec![]
                    };
                    s.push(Stmt::jump(*j));
                    Rule::new(s)
                })
                .collect();
            self.chain(
                Chain::base(name, kind, hook, prio)
                    .with_comment(why)
                    .with_rules(rules),
            );
        }
        // On the input hook, as the no-endpoint NodePort verdicts: the client's packet has
        // looped back, so it sees a refusal rather than a send error of its own hook.
        if self.config.localhost_nodeports {
            let check = Rule::new(vec![Stmt::ct_new(), Stmt::jump(LOCALHOST_NODEPORTS_CHECK)]);
            if let Some(input) = self.out.chains.iter_mut().find(|c| c.name == FILTER_INPUT) {
                input.rules.push(check);
            }
        }
    }

    /// `mark-for-masquerade` and `masquerading`: packets are marked on the way in and
    /// masqueraded (mark cleared) on the way out.
    fn masquerading_chains(&mut self) {
        let f = self.fam;
        let mark = self.config.masquerade_mark();
        self.chain(
            Chain::new(MARK_FOR_MASQUERADE)
                .with_rules(vec![Rule::new(vec![Stmt::SetMark(MarkOp::Or(mark))])]),
        );
        self.chain(Chain::new(MASQUERADING).with_rules(vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::CtStatus, Value::CtStatus(CtStatus::DNAT)),
                Stmt::in_set(vec![f.saddr(), f.daddr()], HAIRPIN_ENDPOINTS),
                Stmt::jump(MARK_FOR_MASQUERADE),
            ])
            .with_comment("hairpin: an endpoint reaching itself through a service"),
            Rule::new(vec![
                Stmt::match_masked(Selector::Mark, mark, Value::Mark(0)),
                Stmt::Verdict(Verdict::Return),
            ]),
            Rule::new(vec![Stmt::SetMark(MarkOp::Xor(mark))]),
            Rule::new(vec![Stmt::Masquerade { fully_random: true }]),
        ]));
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
        dispatch.push(
            self.frontend_in(PICK_FALLBACK_FRONTENDS, PICK_RETRY)
                .with_comment("the dispatch changed while this packet was looked up"),
        );
        self.chain(Chain::new(SERVICES).with_rules(dispatch));
        // Not `service-ips`: a chain created by the commit is empty to a packet that entered
        // the table before it, so a service that moved to a chain of its own gets the fallback.
        let mut retry = self.pick_dispatch();
        // Its own chain's masquerade rule is out of reach: masquerade, as external traffic
        // needs, at the cost of a pod's source address for this one connection.
        retry.push(
            Rule::new(vec![Stmt::jump(MARK_FOR_MASQUERADE)])
                .with_comment("the service moved to a chain of its own"),
        );
        retry.push(self.pick_fallback());
        self.chain(
            Chain::new(PICK_RETRY)
                .with_comment("the dispatch again, once its commit is complete")
                .with_rules(retry),
        );
    }

    /// The filter chains: services without endpoints, load-balancer source ranges, and
    /// ClusterIP ports no service uses.
    fn check_chains(&mut self) {
        let f = self.fam;
        self.chain(
            Chain::new(REJECT_CHAIN)
                .with_comment("helper for services with no endpoints")
                .with_rules(vec![Rule::new(vec![Stmt::Reject(RejectKind::Default)])]),
        );
        self.chain(
            Chain::new(SERVICE_ENDPOINTS_CHECK)
                .with_rules(vec![self.by_destination(NO_ENDPOINT_SERVICES)]),
        );
        self.chain(
            Chain::new(NODEPORT_ENDPOINTS_CHECK)
                .with_rules(vec![self.by_node_port(NO_ENDPOINT_NODEPORTS)]),
        );
        self.chain(Chain::new(FIREWALL_CHECK).with_rules(vec![self.by_destination(FIREWALL_IPS)]));
        let mut checks = vec![
            Rule::new(vec![
                Stmt::in_set(vec![f.daddr()], CLUSTER_IPS),
                Stmt::Reject(RejectKind::Default),
            ])
            .with_comment("reject traffic to an active ClusterIP on a port no service uses"),
        ];
        let service_cidrs = dropped_service_cidrs(self.state, self.config);
        for cidr in service_cidrs.iter().filter(|c| f.has_net(c)) {
            checks.push(
                Rule::new(vec![
                    Stmt::match_eq(f.daddr(), net_value(*cidr)),
                    Stmt::Verdict(Verdict::Drop),
                ])
                .with_comment("drop traffic to unallocated ClusterIPs"),
            );
        }
        self.chain(Chain::new(CLUSTER_IPS_CHECK).with_rules(checks));
        if self.config.localhost_nodeports {
            self.localhost_nodeports_check();
        }
    }

    /// With the KubeProxyNFTablesLocalhostNodePorts gate, loopback NodePorts that the
    /// userspace proxy does not serve (every protocol but TCP, and TCP too where
    /// `nodePortAddresses` names no loopback range of this family) are rejected and counted,
    /// as kube-proxy 1.37 does, so a client learns at once that nothing answers there.
    fn localhost_nodeports_check(&mut self) {
        let f = self.fam;
        let loopback: IpNet = match f {
            IpFamily::V4 => "127.0.0.0/8",
            IpFamily::V6 => "::1/128",
        }
        .parse()
        .expect("a valid CIDR");
        self.out.declare(
            Set::new(
                LOCALHOST_NODEPORT_REJECTS,
                vec![DataType::InetProto, DataType::InetService],
            )
            .with_comment("NodePorts rejected on loopback: no userspace proxy serves them"),
        );
        // One rule per protocol, so each protocol's count is its rule's counter.
        let rules = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .map(|protocol| {
                Rule::new(vec![
                    Stmt::match_eq(f.daddr(), net_value(loopback)),
                    Stmt::match_eq(Selector::L4Proto, Value::Proto(protocol.number())),
                    Stmt::in_set(
                        vec![Selector::L4Proto, Selector::ThDport],
                        LOCALHOST_NODEPORT_REJECTS,
                    ),
                    Stmt::Counter,
                    Stmt::Reject(RejectKind::Default),
                ])
                .with_comment(localhost_reject_comment(protocol))
            })
            .to_vec();
        self.chain(Chain::new(LOCALHOST_NODEPORTS_CHECK).with_rules(rules));
    }

    /// The sets and maps every service shares (the pick chains' own are declared with them).
    fn shared_maps(&mut self) {
        let f = self.fam;
        let key3 = self.frontend_types();
        let key2 = vec![DataType::InetProto, DataType::InetService];
        let set = Set::new(CLUSTER_IPS, vec![f.addr_type()]).with_comment("active ClusterIPs");
        self.out.declare(set);
        self.out.declare(
            Set::new(NODEPORT_IPS, vec![f.addr_type()])
                .with_comment("IPs that accept NodePort traffic"),
        );
        self.out.declare(
            Set::verdict_map(SERVICE_IPS, key3.clone())
                .with_comment("ClusterIP, ExternalIP and LoadBalancer IP traffic"),
        );
        self.out.declare(
            Set::new(HAIRPIN_ENDPOINTS, vec![f.addr_type(), f.addr_type()]).with_comment(
                "endpoint . itself: a service connection from an endpoint to itself is masqueraded",
            ),
        );
        self.out.declare(
            Set::verdict_map(SERVICE_NODEPORTS, key2.clone()).with_comment("NodePort traffic"),
        );
        self.out.declare(
            Set::verdict_map(NO_ENDPOINT_SERVICES, key3.clone())
                .with_comment("vmap to drop or reject packets to services with no endpoints"),
        );
        self.out.declare(
            Set::verdict_map(NO_ENDPOINT_NODEPORTS, key2).with_comment(
                "vmap to drop or reject packets to service nodeports with no endpoints",
            ),
        );
        self.out.declare(
            Set::verdict_map(FIREWALL_IPS, key3)
                .with_comment("destinations that are subject to LoadBalancerSourceRanges"),
        );
    }
}
