//! Which services are planned and how their addresses and ports reach the dispatch maps:
//! service types, bad input, families, protocols, masquerading and source ranges.

use super::*;

#[test]
fn a_node_port_service_with_two_ready_endpoints_picks_one_by_a_random_slot_of_its_block() {
    let t = plan(
        &[service(WEB_NODEPORT)],
        &[slice("web", "IPv4", 8080, TWO_ELSEWHERE)],
        &config(),
    );
    let t = v4(&t);
    let Some(Verdict::Jump(chain)) = verdict_for(&t.sets["service-ips"], &ip("10.96.0.10")) else {
        panic!("no service-ips entry")
    };
    let rules = &t.chains[&chain].rules;
    assert_eq!(
        rules[rules.len() - 2].stmts[..],
        [
            Stmt::Match {
                left: Selector::L4Proto,
                mask: None,
                op: CmpOp::Eq,
                right: Value::Proto(6)
            },
            Stmt::DnatNumgenMap {
                modulus: SLOTS_PER_BLOCK,
                offset: 0,
                map: "service-endpoints-000".into()
            }
        ]
    );
    // A block dropped while a packet was on its way here: the first endpoint.
    assert_eq!(
        rules.last().unwrap().stmts,
        [Stmt::DnatMap {
            key: vec![Selector::IpDaddr, Selector::L4Proto, Selector::ThDport],
            map: "pick-fallback".into()
        }]
    );
    // Half the block each; no endpoint chains.
    assert_eq!(slot_ranges(t), [(0, 32767), (32768, 65535)]);
    assert_eq!(slot_endpoints(t), ["10.244.0.11:8080", "10.244.1.12:8080"]);
    assert!(!t.chains.keys().any(|c| c.starts_with("endpoint-")));
    assert_eq!(
        t.sets["hairpin-endpoints"].elements.len(),
        2,
        "each endpoint is masqueraded when it reaches itself"
    );
    assert!(
        t.sets["cluster-ips"]
            .elements
            .iter()
            .any(|e| e.key == vec![ip("10.96.0.10")])
    );
}

#[test]
fn a_service_without_endpoints_is_rejected_not_dispatched() {
    let t = plan(&[service(WEB)], &[], &config());
    let t = v4(&t);
    assert_eq!(chain_for(t, &ip("10.96.0.10")), None);
    assert_eq!(
        verdict_for(&t.sets["no-endpoint-services"], &ip("10.96.0.10")),
        Some(Verdict::Goto("reject-chain".into()))
    );
}

#[test]
fn load_balancer_source_ranges_gate_the_lb_ip_before_dnat() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {type: LoadBalancer, clusterIP: 10.96.0.10, loadBalancerSourceRanges: [203.0.113.0/24], ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.10}]}}
",
    );
    let t = plan(&[svc], &[slice("web", "IPv4", 8080, TWO_READY)], &config());
    let t = v4(&t);
    let Some(Verdict::Goto(fw)) = verdict_for(&t.sets["firewall-ips"], &ip("192.0.2.10")) else {
        panic!("no firewall entry")
    };
    let last = t.chains[&fw].rules.last().unwrap();
    assert_eq!(last.stmts, vec![Stmt::Verdict(Verdict::Drop)]);
    assert!(
        verdict_for(&t.sets["firewall-ips"], &ip("10.96.0.10")).is_none(),
        "ClusterIPs are not subject to source ranges"
    );
}

#[test]
fn a_dual_stack_service_gets_an_entry_in_each_family_table() {
    let svc = service(
        "
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, 'fd00:96::10'], ports: [{name: http, port: 80, protocol: TCP}]}
",
    );
    let v6eps = "[{addresses: ['fd00:244::11'], nodeName: node-a, conditions: {ready: true}}]";
    let tables = plan(
        &[svc],
        &[
            slice("web", "IPv4", 8080, TWO_READY),
            slice("web6", "IPv6", 8080, v6eps),
        ],
        &config(),
    );
    assert_eq!(tables.len(), 2);
    let t6 = tables.iter().find(|t| t.family == Family::Ip6).unwrap();
    let v6ip = Value::Ipv6("fd00:96::10".parse().unwrap());
    assert!(
        verdict_for(&t6.sets["service-ips"], &v6ip).is_some()
            || verdict_for(&t6.sets["no-endpoint-services"], &v6ip).is_some()
    );
}

#[test]
fn a_malformed_service_is_rejected_and_the_others_still_planned() {
    let bad = service(
        "metadata: {name: bad, namespace: default}\nspec: {clusterIP: not-an-ip, ports: [{port: 80}]}",
    );
    let (state, rejected) = cluster(
        &[bad, service(WEB)],
        &[slice("web", "IPv4", 8080, TWO_READY)],
    );
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].name, "bad");
    assert!(rejected[0].reason.contains("not-an-ip"));
    let t = build(&state, &config());
    assert!(chain_for(v4(&t), &ip("10.96.0.10")).is_some());
}

#[test]
fn two_services_with_one_name_are_both_rejected_whatever_their_order() {
    let other = service(&WEB.replace("10.96.0.10", "10.96.0.99"));
    for services in [[service(WEB), other.clone()], [other.clone(), service(WEB)]] {
        let (state, rejected) = cluster(&services, &[]);
        assert!(state.services.is_empty(), "neither copy is proxied");
        assert_eq!(rejected.len(), 2);
        assert!(rejected[0].reason.contains("2 Services share this name"));
    }
}

#[test]
fn headless_and_external_name_services_are_not_proxied() {
    for yaml in [
        "metadata: {name: h, namespace: default}\nspec: {clusterIP: None, ports: [{port: 80}]}",
        "metadata: {name: ext, namespace: default}\nspec: {type: ExternalName, externalName: example.invalid}",
    ] {
        let (state, rejected) = cluster(&[service(yaml)], &[]);
        assert!(rejected.is_empty() && state.services.is_empty(), "{yaml}");
    }
}

#[test]
fn nodeports_never_listen_on_loopback_even_inside_the_configured_cidrs() {
    let mut c = config();
    c.nodeport_addresses = NodePortAddresses::cidrs(vec!["0.0.0.0/0".parse().unwrap()]);
    c.local_addresses = vec![
        "127.0.0.1".parse().unwrap(),
        "10.0.0.10".parse().unwrap(),
        "192.168.5.1".parse().unwrap(),
    ];
    let t = plan(&[service(WEB)], &[], &c);
    let ips: Vec<&Vec<Value>> = v4(&t).sets["nodeport-ips"]
        .elements
        .iter()
        .map(|e| &e.key)
        .collect();
    assert_eq!(ips, vec![&vec![ip("10.0.0.10")], &vec![ip("192.168.5.1")]]);
}

/// The tables for WEB with two ready endpoints.
fn plan_web(config: &ProxyConfig) -> Vec<Table> {
    plan(
        &[service(WEB)],
        &[slice("web", "IPv4", 8080, TWO_READY)],
        config,
    )
}

/// The chain WEB's ClusterIP traffic goes to (two ready endpoints), and its first rule.
fn web_chain_and_first_rule(config: &ProxyConfig) -> (String, Vec<Stmt>) {
    let t = plan_web(config);
    let t = v4(&t);
    let chain = chain_for(t, &ip("10.96.0.10")).unwrap();
    let first = t.chains[&chain].rules[0].stmts.clone();
    (chain, first)
}

#[test]
fn masquerade_all_marks_every_cluster_ip_connection() {
    let mut c = config();
    c.masquerade_all = true;
    let (chain, first) = web_chain_and_first_rule(&c);
    assert_eq!(
        chain, "pick-2",
        "a ClusterIP-only service uses the shared chain"
    );
    assert_eq!(
        first[..],
        [Stmt::Verdict(Verdict::Jump("mark-for-masquerade".into()))],
        "no source condition"
    );
}

#[test]
fn the_same_input_renders_byte_for_byte_the_same() {
    let a = plan_web(&config());
    let b = plan_web(&config());
    let text = |t: &[Table]| {
        t.iter()
            .map(crate::nft::render::render_table)
            .collect::<String>()
    };
    assert_eq!(text(&a), text(&b));
}

#[test]
fn detect_local_modes_decide_which_sources_are_not_masqueraded() {
    let source_condition = |detect: DetectLocal| {
        let mut c = config();
        c.detect_local = detect;
        let (_, first) = web_chain_and_first_rule(&c);
        first
            .into_iter()
            .find(|s| matches!(s, Stmt::Match { op: CmpOp::Ne, .. }))
            .expect("a source condition")
    };
    let cond = |left, right| Stmt::Match {
        left,
        mask: None,
        op: crate::nft::model::CmpOp::Ne,
        right,
    };
    use crate::nft::model::Selector;
    assert_eq!(
        source_condition(DetectLocal::ClusterCidr),
        cond(
            Selector::IpSaddr,
            Value::Ipv4Net("10.244.0.0/16".parse().unwrap())
        )
    );
    assert_eq!(
        source_condition(DetectLocal::NodeCidr),
        cond(
            Selector::IpSaddr,
            Value::Ipv4Net("10.244.0.0/24".parse().unwrap())
        )
    );
    assert_eq!(
        source_condition(DetectLocal::BridgeInterface("cbr0".into())),
        cond(Selector::IifName, Value::IfName("cbr0".into()))
    );
    assert_eq!(
        source_condition(DetectLocal::InterfaceNamePrefix("veth".into())),
        cond(Selector::IifName, Value::IfName("veth*".into()))
    );
}

#[test]
fn tcp_udp_and_sctp_on_one_port_number_are_distinct_entries() {
    let svc = service(
        "
metadata: {name: multi, namespace: default}
spec: {clusterIP: 10.96.0.10, ports: [{name: t, port: 53, protocol: TCP}, {name: u, port: 53, protocol: UDP}, {name: s, port: 53, protocol: SCTP}]}
",
    );
    let t = plan(&[svc], &[], &config());
    let protos: Vec<&Value> = v4(&t).sets["no-endpoint-services"]
        .elements
        .iter()
        .map(|e| &e.key[1])
        .collect();
    assert_eq!(
        protos,
        vec![&Value::Proto(6), &Value::Proto(17), &Value::Proto(132)]
    );
}

/// An address that is both an external IP and the load balancer's yields each key once in
/// the service's fragment (the planner relies on keys being unique within a fragment).
#[test]
fn an_address_a_service_is_reached_at_twice_yields_its_elements_once() {
    let svc = service(
        "metadata: {name: web, namespace: default}\nspec: {type: LoadBalancer, clusterIP: 10.96.0.10, externalIPs: [192.0.2.10], ports: [{name: http, port: 80, protocol: TCP, nodePort: 30080}]}\nstatus: {loadBalancer: {ingress: [{ip: 192.0.2.10}]}}",
    );
    let (state, _) = cluster(&[svc], &[slice("web", "IPv4", 8080, TWO_READY)]);
    let config = config();
    let sp = state.services.values().next().unwrap();
    let fragment = layout::FragmentBuilder::new(&config, &state, layout::IpFamily::V4).service(
        sp,
        state.endpoints_of(&sp.name),
        &mut layout::BlockAllocator::new(Default::default()),
        &layout::SlotLayouts::default(),
    );
    for (set, elements) in &fragment.elements {
        let keys: BTreeSet<&Vec<Value>> = elements.iter().map(|e| &e.key).collect();
        assert_eq!(keys.len(), elements.len(), "{set}: {elements:?}");
    }
    // ClusterIP, the shared address and the node IP with the NodePort.
    assert_eq!(fragment.elements_of("pick-fallback").len(), 3);
    assert_eq!(fragment.elements_of("pick-2-slots").len(), 3 * 2);
}

/// kube-proxy 1.36 (kubernetes#135800, #136499): the masquerade mark is cleared once it has done
/// its work, so a packet the node forwards again (a VXLAN tunnel reusing the buffer) is not
/// masqueraded twice, and hairpin connections are found by their (source, destination) pair
/// after DNAT rather than marked on the way in.
#[test]
fn the_masquerading_chain_masquerades_hairpins_and_marked_packets_and_clears_the_mark() {
    let tables = plan(
        &[service(WEB_NODEPORT)],
        &[slice("web", "IPv4", 8080, TWO_ELSEWHERE)],
        &config(),
    );
    let rules = &v4(&tables).chains["masquerading"].rules;
    let stmts: Vec<&[Stmt]> = rules.iter().map(|r| &r.stmts[..]).collect();
    let [hairpin, unmarked, clear, masquerade] = stmts[..] else {
        panic!("masquerading has {} rules: {stmts:?}", stmts.len())
    };
    assert!(
        hairpin.contains(&Stmt::in_set(
            vec![Selector::IpSaddr, Selector::IpDaddr],
            "hairpin-endpoints"
        )) && hairpin.last() == Some(&Stmt::jump("mark-for-masquerade")),
        "{hairpin:?}"
    );
    assert_eq!(
        unmarked,
        [
            Stmt::Match {
                left: Selector::Mark,
                mask: Some(0x4000),
                op: CmpOp::Eq,
                right: Value::Mark(0)
            },
            Stmt::Verdict(Verdict::Return)
        ]
    );
    assert_eq!(
        clear,
        [Stmt::SetMark(crate::nft::model::MarkOp::Xor(0x4000))]
    );
    assert_eq!(masquerade, [Stmt::Masquerade { fully_random: true }]);
}
