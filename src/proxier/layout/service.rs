//! What one service port adds to a table: its addresses in the dispatch maps, and its chains.

use super::pick::SlotCounts;
use super::*;

/// What the parts of one service port's rules share: its endpoints by traffic policy, the
/// names of its chains, and the values its map elements are made of.
struct PortRules<'a> {
    sp: &'a ServicePort,
    /// Its ClusterIPs of the table's family (never empty).
    cluster_ips: Vec<IpAddr>,
    /// The endpoints ClusterIP traffic goes to (internalTrafficPolicy).
    internal: &'a [Endpoint],
    /// The endpoints external traffic goes to (externalTrafficPolicy).
    external: &'a [Endpoint],
    /// The endpoints of the Cluster policy; they also serve pods and the host under eTP Local.
    cluster: &'a [Endpoint],
    /// This node's endpoints, for the Local policy.
    local: &'a [Endpoint],
    proto: Value,
    port: Value,
    label: String,
    /// Where traffic finds no endpoint of its policy, and the comment saying so.
    no_endpoints: (Verdict, &'static str),
    /// The shared pick chains' slot counts, when the port may use them.
    shared: Option<SlotCounts>,
}

impl PortRules<'_> {
    /// Whether ClusterIP traffic has a chain apart from `service-…`: under iTP Local with
    /// external traffic, `service-…` serves that traffic's Cluster policy, so the ClusterIPs
    /// go to `local-…`. (Without external traffic, `service-…` is free to serve a Local
    /// internal policy itself.)
    fn internal_is_local(&self) -> bool {
        self.sp.internal_policy == TrafficPolicy::Local && self.sp.has_external()
    }

    /// The port's own chain for ClusterIP traffic, where no shared pick chain takes it, named
    /// as kube-proxy names it: `service-…` picks among the cluster endpoints, `local-…` among
    /// the local ones. Named only where needed: most ports have no chain of their own, and
    /// each name costs a SHA-256.
    fn internal_chain(&self) -> String {
        if self.internal_is_local() {
            local_chain(&self.sp.name)
        } else {
            service_chain(&self.sp.name)
        }
    }
}

impl Builder<'_> {
    pub(super) fn service(&mut self, sp: &ServicePort, endpoints: &[Endpoint]) {
        let f = self.fam;
        let cluster_ips: Vec<IpAddr> = sp
            .cluster_ips
            .iter()
            .copied()
            .filter(|ip| f.has(ip))
            .collect();
        if cluster_ips.is_empty() {
            return; // a single-stack service of the other family
        }
        let all = of_family(endpoints, f, self.config.use_node_hints);
        let node = self.state.node.as_ref();
        let hostname = self.config.hostname.as_str();
        let eps = categorize(sp, &all, hostname, node.and_then(|n| n.zone.as_deref()));
        // ClusterIP traffic follows internalTrafficPolicy, external traffic
        // externalTrafficPolicy; `cluster` also serves pods and the host under eTP Local.
        let internal = eps.internal(sp);
        let external = eps.external(sp);
        // Where traffic finds no endpoint of its policy: dropped if endpoints exist elsewhere
        // (a Local policy), rejected if none exists at all.
        let no_endpoints = if eps.has_any {
            (Verdict::Drop, "has no local endpoints")
        } else {
            (Verdict::Goto(REJECT_CHAIN.into()), "has no endpoints")
        };
        let p = PortRules {
            sp,
            cluster_ips,
            internal,
            external,
            cluster: eps.cluster.as_deref().unwrap_or_default(),
            local: eps.local.as_deref().unwrap_or_default(),
            proto: Value::Proto(sp.name.protocol.number()),
            port: Value::Port(sp.port),
            label: sp.name.to_string(),
            no_endpoints,
            shared: self.shared_pick(sp, internal.len(), external.len()),
        };

        self.cluster_ip_rules(&p);
        if !sp.has_external() {
            return;
        }
        self.localhost_node_port(&p);
        self.external_rules(&p);
        self.source_ranges(&p);
    }

    /// ClusterIP traffic: through a shared pick chain, a chain of the port's own, or to the
    /// no-endpoint verdict.
    fn cluster_ip_rules(&mut self, p: &PortRules) {
        let f = self.fam;
        let (sp, label) = (p.sp, &p.label);
        for ip in &p.cluster_ips {
            self.out
                .push_element(CLUSTER_IPS, Element::new(vec![ip_value(*ip)]));
        }
        let cluster_frontends: Vec<(IpAddr, u16)> =
            p.cluster_ips.iter().map(|ip| (*ip, sp.port)).collect();
        if let (false, Some(slots)) = (p.internal.is_empty(), p.shared) {
            // The shared pick chain masquerades off-cluster sources and draws a slot.
            self.fill_slots(sp, label, slots.internal, &cluster_frontends, p.internal);
            self.hairpin(p.internal);
            for ip in &p.cluster_ips {
                self.out.push_element(
                    &pick_set(slots.internal),
                    Element::new(vec![ip_value(*ip), p.proto.clone(), p.port.clone()])
                        .with_comment(label.clone()),
                );
            }
        } else if !p.internal.is_empty() {
            // The internal chain: masquerade off-cluster sources, then pick an endpoint.
            let mut rules = Vec::new();
            for ip in &p.cluster_ips {
                if let Some(cond) = self.cluster_masquerade() {
                    let mut s = vec![Stmt::match_eq(f.daddr(), ip_value(*ip))];
                    s.extend(cond);
                    s.push(Stmt::jump(MARK_FOR_MASQUERADE));
                    rules.push(Rule::new(s));
                }
            }
            let internal_chain = p.internal_chain();
            rules.extend(self.dispatch(sp, &internal_chain, p.internal));
            self.chain(
                Chain::new(&internal_chain)
                    .with_comment(label)
                    .with_rules(rules),
            );
            self.fallback(sp, label, &cluster_frontends, p.internal);
            for ip in &p.cluster_ips {
                self.out.push_element(
                    SERVICE_IPS,
                    Element::map(
                        vec![ip_value(*ip), p.proto.clone(), p.port.clone()],
                        Verdict::Jump(internal_chain.clone()),
                    )
                    .with_comment(label.clone()),
                );
            }
        } else {
            self.no_endpoint_ips(p, &p.cluster_ips);
        }
    }

    /// Each of `ips` with the port's service port in `no-endpoint-services`, with the verdict
    /// for traffic that finds no endpoint.
    fn no_endpoint_ips(&mut self, p: &PortRules, ips: &[IpAddr]) {
        let (verdict, why) = &p.no_endpoints;
        for ip in ips {
            let key = vec![ip_value(*ip), p.proto.clone(), p.port.clone()];
            self.out.push_element(
                NO_ENDPOINT_SERVICES,
                Element::map(key, verdict.clone()).with_comment(format!("{} {why}", p.label)),
            );
        }
    }

    /// The NodePort on loopback, with the KubeProxyNFTablesLocalhostNodePorts gate: TCP is
    /// the userspace proxy's where it serves this family (`ProxyConfig::localhost_proxy`),
    /// anything else is rejected.
    fn localhost_node_port(&mut self, p: &PortRules) {
        let Some(np) = p.sp.node_port.filter(|_| self.config.localhost_nodeports) else {
            return;
        };
        if p.sp.name.protocol == Protocol::Tcp && self.config.localhost_proxy(self.fam) {
            return;
        }
        self.out.push_element(
            LOCALHOST_NODEPORT_REJECTS,
            Element::new(vec![p.proto.clone(), Value::Port(np)])
                .with_comment(format!("{} NodePort", p.label)),
        );
    }

    /// External traffic (NodePorts, external IPs, load-balancer IPs): through a shared
    /// external pick chain, the port's `external-…` chain, or to the no-endpoint verdict.
    fn external_rules(&mut self, p: &PortRules) {
        let f = self.fam;
        let (sp, label) = (p.sp, &p.label);
        let external_ips: Vec<IpAddr> = sp
            .external_ips
            .iter()
            .chain(&sp.load_balancer_ips)
            .copied()
            .filter(|ip| f.has(ip))
            .collect();
        let node_port_here = sp.node_port.filter(|_| !self.nodeport_ips().is_empty());
        // Where external traffic arrives: each external or LB IP with the service port, then
        // each NodePort address with the NodePort.
        let mut frontends: Vec<(IpAddr, u16)> =
            external_ips.iter().map(|ip| (*ip, sp.port)).collect();
        if let Some(np) = node_port_here {
            frontends.extend(self.nodeport_ips().into_iter().map(|ip| (ip, np)));
        }
        // Under eTP Local without a local endpoint, pods and the host still reach the cluster
        // endpoints through the external chain's short-circuits (as upstream, whose no-endpoint
        // drop runs after DNAT and so sees only the traffic from outside left untranslated).
        let short_circuit_only = p.external.is_empty()
            && sp.external_policy == TrafficPolicy::Local
            && !p.cluster.is_empty();
        let external_chain_needed = !p.external.is_empty() || short_circuit_only;
        if p.external.is_empty() {
            self.no_endpoint_ips(p, &external_ips);
            let (verdict, why) = p.no_endpoints.clone();
            if let Some(np) = node_port_here {
                self.out.push_element(
                    NO_ENDPOINT_NODEPORTS,
                    Element::map(vec![p.proto.clone(), Value::Port(np)], verdict)
                        .with_comment(format!("{label} {why}")),
                );
            }
        }
        if let (true, Some(slots)) = (external_chain_needed, p.shared) {
            // externalTrafficPolicy Cluster: the shared external pick chain masquerades and
            // draws among the cluster endpoints, keyed by the address the traffic arrived at.
            self.fill_slots(sp, label, slots.external, &frontends, p.external);
            self.hairpin(p.external);
            for (i, (ip, port)) in frontends.into_iter().enumerate() {
                let comment = if i < external_ips.len() {
                    format!("{label} external IP")
                } else {
                    format!("{label} NodePort")
                };
                self.out.push_element(
                    &external_pick_set(slots.external),
                    Element::new(vec![ip_value(ip), p.proto.clone(), Value::Port(port)])
                        .with_comment(comment),
                );
            }
        } else if external_chain_needed {
            let ext_chain = external_chain(&sp.name);
            let rules = self.external_chain_rules(p);
            self.chain(Chain::new(&ext_chain).with_comment(label).with_rules(rules));
            // The fallback serves what the chain serves traffic from outside: nothing without
            // a local endpoint, so that traffic is not translated by `pick-retry` either.
            self.fallback(sp, label, &frontends, p.external);
            for ip in &external_ips {
                self.out.push_element(
                    SERVICE_IPS,
                    Element::map(
                        vec![ip_value(*ip), p.proto.clone(), p.port.clone()],
                        Verdict::Jump(ext_chain.clone()),
                    )
                    .with_comment(format!("{label} external IP")),
                );
            }
            if let Some(np) = node_port_here {
                self.out.push_element(
                    SERVICE_NODEPORTS,
                    Element::map(
                        vec![p.proto.clone(), Value::Port(np)],
                        Verdict::Jump(ext_chain.clone()),
                    )
                    .with_comment(label.clone()),
                );
            }
        }
    }

    /// The rules of the port's `external-…` chain, after creating the endpoint chains they go
    /// to that the internal chain is not.
    fn external_chain_rules(&mut self, p: &PortRules) -> Vec<Rule> {
        let (sp, label) = (p.sp, &p.label);
        let svc_chain = &service_chain(&sp.name);
        // The cluster endpoints' chain, unless the internal chain is it.
        if p.internal_is_local() && !p.cluster.is_empty() {
            let dispatch = self.dispatch(sp, svc_chain, p.cluster);
            self.chain(
                Chain::new(svc_chain)
                    .with_comment(label)
                    .with_rules(dispatch),
            );
        }
        let mut rules = Vec::new();
        if sp.external_policy == TrafficPolicy::Cluster {
            rules.push(
                Rule::new(vec![Stmt::jump(MARK_FOR_MASQUERADE)])
                    .with_comment("masquerade traffic from outside the cluster"),
            );
            rules.push(Rule::new(vec![Stmt::goto(svc_chain)]));
            return rules;
        }
        // Pods and the node itself may use every endpoint; the node's own traffic is
        // masqueraded so replies come back through it.
        if let (Some(local_pod), false) = (self.is_local(), p.cluster.is_empty()) {
            rules.push(
                Rule::new(vec![local_pod, Stmt::goto(svc_chain)])
                    .with_comment("short-circuit pod traffic"),
            );
        }
        if !p.cluster.is_empty() {
            let host = Stmt::match_eq(Selector::FibSaddrType, Value::AddrType(AddrType::Local));
            rules.push(
                Rule::new(vec![host.clone(), Stmt::jump(MARK_FOR_MASQUERADE)])
                    .with_comment("masquerade host traffic"),
            );
            rules.push(
                Rule::new(vec![host, Stmt::goto(svc_chain)])
                    .with_comment("short-circuit host traffic"),
            );
        }
        // Traffic from outside takes the local endpoints; without any it falls through
        // to the no-endpoint drop.
        if !p.local.is_empty() {
            let local_chain = local_chain(&sp.name);
            // Under iTP Local too, the internal chain picks among the local endpoints.
            if !p.internal_is_local() {
                let dispatch = self.dispatch(sp, &local_chain, p.local);
                self.chain(
                    Chain::new(&local_chain)
                        .with_comment(label)
                        .with_rules(dispatch),
                );
            }
            rules.push(Rule::new(vec![Stmt::goto(&local_chain)]));
        }
        rules
    }

    /// LoadBalancerSourceRanges: only listed sources reach the load-balancer IPs.
    fn source_ranges(&mut self, p: &PortRules) {
        let f = self.fam;
        let (sp, label) = (p.sp, &p.label);
        let lb_ips: Vec<IpAddr> = sp
            .load_balancer_ips
            .iter()
            .copied()
            .filter(|ip| f.has(ip))
            .collect();
        if sp.source_ranges.is_empty() || lb_ips.is_empty() {
            return;
        }
        let fw = firewall_chain(&sp.name);
        let ranges: Vec<IpNet> = sp
            .source_ranges
            .iter()
            .copied()
            .filter(|r| f.has_net(r))
            .collect();
        let mut rules: Vec<Rule> = ranges
            .iter()
            .map(|r| {
                Rule::new(vec![
                    Stmt::match_eq(f.saddr(), net_value(*r)),
                    Stmt::Verdict(Verdict::Return),
                ])
            })
            .collect();
        // A node inside an allowed range may reach the LB through its own IPs (hairpin).
        if self
            .node_ips()
            .iter()
            .any(|ip| ranges.iter().any(|r| r.contains(ip)))
        {
            for ip in &lb_ips {
                rules.push(Rule::new(vec![
                    Stmt::match_eq(f.saddr(), ip_value(*ip)),
                    Stmt::Verdict(Verdict::Return),
                ]));
            }
        }
        rules.push(
            Rule::new(vec![Stmt::Verdict(Verdict::Drop)])
                .with_comment("source not in loadBalancerSourceRanges"),
        );
        self.chain(Chain::new(&fw).with_comment(label).with_rules(rules));
        for ip in &lb_ips {
            self.out.push_element(
                FIREWALL_IPS,
                Element::map(
                    vec![ip_value(*ip), p.proto.clone(), p.port.clone()],
                    Verdict::Goto(fw.clone()),
                )
                .with_comment(label.clone()),
            );
        }
    }
}
