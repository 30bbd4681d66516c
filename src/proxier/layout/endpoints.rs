//! A service's own chains choosing an endpoint: a random slot of its block of the endpoint
//! map, or a cascade of endpoint chains (ClientIP affinity, or no block left).

use super::*;
use crate::proxier::consistent;

impl Builder<'_> {
    /// The rules of `chain` that send a new connection to one of `eps`: a random slot of the
    /// chain's block in the endpoint map, or (ClientIP affinity, or no block left) a cascade
    /// of endpoint chains.
    pub(super) fn dispatch(
        &mut self,
        sp: &ServicePort,
        chain: &str,
        eps: &[Endpoint],
    ) -> Vec<Rule> {
        if eps.is_empty() {
            return Vec::new();
        }
        if sp.affinity_timeout.is_none()
            && let Some(block) = self.blocks.block_for(chain)
        {
            return self.endpoint_slots(sp, block, eps);
        }
        self.endpoint_chains(sp, eps);
        self.cascade(sp, eps)
    }

    /// Fills `block` of the endpoint map with `eps` (each owning an equal share of the slots,
    /// give or take one) and returns the rule that draws a slot.
    pub(super) fn endpoint_slots(
        &mut self,
        sp: &ServicePort,
        block: u32,
        eps: &[Endpoint],
    ) -> Vec<Rule> {
        let n = eps.len() as u64;
        let base = block * SLOTS_PER_BLOCK;
        let share = |i: u64| (i * u64::from(SLOTS_PER_BLOCK) / n) as u32;
        let label = sp.name.to_string();
        let shard = endpoint_map(block);
        // Shards exist while some block in them is used.
        let s = self.endpoint_data_map(
            &shard,
            vec![DataType::Integer],
            "random slot to endpoint address . port; a service owns 65536 slots",
        );
        self.out.declare(s.with_interval());
        let owners: Vec<(u32, u32, &Endpoint)> = match sp.consistent {
            Some(_) => consistent::slot_ranges(base, SLOTS_PER_BLOCK, eps),
            None => (0..n)
                .map(|i| (base + share(i), base + share(i + 1) - 1, &eps[i as usize]))
                .collect(),
        };
        for (first, last, ep) in owners {
            let key = vec![Value::IntRange { first, last }];
            let data = MapData::Values(vec![ip_value(ep.ip), Value::Port(ep.port)]);
            self.out
                .push_element(&shard, Element::map(key, data).with_comment(label.clone()));
        }
        self.hairpin(eps);
        vec![
            Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, Value::Proto(sp.name.protocol.number())),
                match sp.consistent {
                    Some(mode) => consistent::draw(
                        consistent::fields(mode, self.fam.saddr(), self.fam.daddr()),
                        SLOTS_PER_BLOCK,
                        base,
                        shard,
                    ),
                    None => Stmt::DnatNumgenMap {
                        modulus: SLOTS_PER_BLOCK,
                        offset: base,
                        map: shard,
                    },
                },
            ]),
            // The block is gone if the service moved to a pick chain while this packet was on
            // its way here.
            self.pick_fallback(),
        ]
    }

    /// Endpoint chains (and affinity sets) for `eps`, then the dispatch statements.
    pub(super) fn cascade(&mut self, sp: &ServicePort, eps: &[Endpoint]) -> Vec<Rule> {
        let f = self.fam;
        let mut rules = Vec::new();
        let mut targets = Vec::new();
        for ep in eps {
            let chain = endpoint_chain(&sp.name, ep.ip, ep.port);
            if sp.affinity_timeout.is_some() {
                let set = affinity_set(&sp.name, ep.ip, ep.port);
                rules.push(Rule::new(vec![
                    Stmt::in_set(vec![f.saddr()], &set),
                    Stmt::goto(&chain),
                ]));
            }
            targets.push(chain);
        }
        match targets.as_slice() {
            [] => {}
            // One endpoint needs no random choice.
            [only] => rules.push(Rule::new(vec![Stmt::goto(only)])),
            // A few: a cascade of independent draws, the i-th taken with probability
            // 1/(n-i), which is uniform overall. Anonymous maps would do it in one lookup,
            // but every map in the table makes the kernel's loop checks slower for all of
            // it, so that cold syncs grow quadratically with the number of services.
            few if few.len() <= CASCADE_MAX_ENDPOINTS => {
                let n = few.len();
                for (i, chain) in few.iter().enumerate() {
                    let stmts = if i + 1 < n {
                        vec![
                            Stmt::NumgenIs {
                                modulus: (n - i) as u32,
                                value: 0,
                            },
                            Stmt::goto(chain),
                        ]
                    } else {
                        vec![Stmt::goto(chain)]
                    };
                    rules.push(Rule::new(stmts));
                }
            }
            // Many: one lookup instead of a long walk for every new connection.
            many => rules.push(Rule::new(vec![Stmt::NumgenVMap {
                modulus: many.len() as u32,
                map: MapRef::Anonymous(
                    many.iter()
                        .enumerate()
                        .map(|(i, c)| (vec![Value::Mark(i as u32)], Verdict::Goto(c.clone())))
                        .collect(),
                ),
            }])),
        }
        rules
    }

    pub(super) fn endpoint_chains(&mut self, sp: &ServicePort, eps: &[Endpoint]) {
        let f = self.fam;
        for ep in eps {
            let chain = endpoint_chain(&sp.name, ep.ip, ep.port);
            if self.out.chains.iter().any(|c| c.name == chain) {
                continue;
            }
            let mut rules = vec![
                Rule::new(vec![
                    Stmt::match_eq(f.saddr(), ip_value(ep.ip)),
                    Stmt::jump(MARK_FOR_MASQUERADE),
                ])
                .with_comment("hairpin: an endpoint reaching itself"),
            ];
            if let Some(timeout) = sp.affinity_timeout {
                let set = affinity_set(&sp.name, ep.ip, ep.port);
                self.out.declare(
                    Set::new(&set, vec![f.addr_type()])
                        .with_dynamic()
                        .with_timeout(timeout)
                        .with_size(AFFINITY_SET_SIZE)
                        .with_comment(format!("ClientIP affinity for {}", sp.name)),
                );
                rules.push(Rule::new(vec![Stmt::Update {
                    set,
                    key: vec![f.saddr()],
                }]));
            }
            rules.push(Rule::new(vec![
                Stmt::match_eq(Selector::L4Proto, Value::Proto(sp.name.protocol.number())),
                Stmt::Dnat {
                    addr: ep.ip,
                    port: Some(ep.port),
                },
            ]));
            self.chain(Chain::new(chain).with_rules(rules));
        }
    }
}
