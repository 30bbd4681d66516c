//! The shared `pick-M` chains and their slot maps, which services with few endpoints and no
//! ClientIP affinity use instead of chains of their own.

use super::slots::target_of;
use super::*;

/// Slot counts of the shared pick chains: 1, 2, 4 … MAX_SHARED_PICK_ENDPOINTS.
fn pick_sizes() -> impl Iterator<Item = u32> {
    std::iter::successors(Some(1u32), |m| Some(m * 2))
        .take_while(|m| *m <= MAX_SHARED_PICK_ENDPOINTS)
}

/// The slot counts of the shared pick chains a service port's ClusterIPs and its external
/// addresses use (their endpoints differ when the two traffic policies do).
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotCounts {
    pub(super) internal: u32,
    pub(super) external: u32,
}
impl Builder<'_> {
    /// A rule per pick set (ClusterIPs, then external addresses) sending its keys to its chain.
    pub(super) fn pick_dispatch(&self) -> Vec<Rule> {
        pick_sizes()
            .map(|m| (pick_set(m), pick_chain(m)))
            .chain(pick_sizes().map(|m| (external_pick_set(m), external_pick_chain(m))))
            .map(|(set, chain)| self.frontend_in(&set, &chain))
            .collect()
    }

    /// The last rule of the chains that draw endpoints from maps: the first endpoint for the
    /// packet's destination (slot 0's, for a service in a pick chain), for a packet whose draws all missed because its service moved to
    /// another chain meanwhile.
    pub(super) fn pick_fallback(&self) -> Rule {
        Rule::new(vec![Stmt::DnatMap {
            key: self.frontend(),
            map: PICK_FALLBACK.into(),
        }])
        .with_comment("the service moved to another chain during the draws")
    }

    /// The shared `pick-M` chains (M = 1, 2, 4 … MAX_SHARED_PICK_ENDPOINTS), the sets of the
    /// services each serves, and their slot map.
    pub(super) fn pick_chains(&mut self) {
        let masquerade = self.cluster_masquerade();
        let frontend_key = self.frontend_types();
        let key = self.frontend();
        let draw = |modulus: u32, slots: u32| {
            Rule::new(vec![Stmt::DnatSlotMap {
                key: key.clone(),
                modulus,
                map: pick_slots(slots),
            }])
        };
        for slots in pick_sizes() {
            let mut rules = Vec::new();
            if let Some(cond) = masquerade.clone() {
                let mut s: Vec<Stmt> = cond.into_iter().collect();
                s.push(Stmt::jump(MARK_FOR_MASQUERADE));
                rules.push(Rule::new(s));
            }
            let mut draws = Vec::new();
            if slots <= 2 {
                draws.push(draw(slots, slots));
            } else {
                draws.extend((1..SLOT_DRAWS).map(|_| draw(slots, slots)));
                draws.push(draw(slots / 2, slots));
            }
            draws.push(self.pick_fallback());
            rules.extend(draws.iter().cloned());
            // nft keeps comments to 128 bytes.
            let comment = match slots {
                1 => "ClusterIPs of services with 1 endpoint, in slot 0".to_string(),
                2 => "ClusterIPs of services with 2 endpoints, in slots 0 and 1".to_string(),
                _ => format!(
                    "ClusterIPs of services with {}-{slots} endpoints in slots 0..n-1: an empty \
                     slot draws again; the last draw is among slots 0-{}",
                    slots / 2 + 1,
                    slots / 2 - 1
                ),
            };
            self.chain(
                Chain::new(pick_chain(slots))
                    .with_comment(comment)
                    .with_rules(rules),
            );
            let mut external = vec![
                Rule::new(vec![Stmt::jump(MARK_FOR_MASQUERADE)])
                    .with_comment("masquerade traffic from outside the cluster"),
            ];
            external.extend(draws);
            self.chain(
                Chain::new(external_pick_chain(slots))
                    .with_comment(format!(
                        "external traffic of services with externalTrafficPolicy Cluster, drawn as in {}",
                        pick_chain(slots)
                    ))
                    .with_rules(external),
            );
            self.out.declare(
                Set::new(external_pick_set(slots), frontend_key.clone()).with_comment(format!(
                    "external IP, LB IP or node IP . protocol . port of the services {} serves",
                    external_pick_chain(slots)
                )),
            );
            self.out.declare(
                Set::new(pick_set(slots), frontend_key.clone()).with_comment(format!(
                    "ClusterIP . protocol . port of the services {} serves",
                    pick_chain(slots)
                )),
            );
            let mut slot_key = frontend_key.clone();
            slot_key.push(DataType::Integer);
            self.out.declare(self.endpoint_data_map(
                &pick_slots(slots),
                slot_key,
                "ClusterIP . protocol . port . slot to endpoint address . port",
            ));
        }
        self.out.declare(
            Set::new(PICK_FALLBACK_FRONTENDS, frontend_key.clone()).with_comment(format!(
                "the service addresses . protocols . ports in {PICK_FALLBACK}"
            )),
        );
        self.out.declare(self.endpoint_data_map(
            PICK_FALLBACK,
            frontend_key,
            "service address . protocol . port to its first endpoint, for connections racing a commit",
        ));
    }

    /// The shared pick chains' slot counts for a service port whose internal traffic goes to
    /// `internal` endpoints and external traffic to `external` ones, if it may use them:
    /// without ClientIP affinity (which remembers the endpoint chain a client used) and, if
    /// reached from outside, with externalTrafficPolicy Cluster (Local picks among other
    /// endpoints and short-circuits pod and host traffic, in chains of the service's own).
    pub(super) fn shared_pick(
        &self,
        sp: &ServicePort,
        internal: usize,
        external: usize,
    ) -> Option<SlotCounts> {
        let fits = |n: usize| {
            u32::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_SHARED_PICK_ENDPOINTS)
                .map(u32::next_power_of_two)
        };
        let external_ok = !sp.has_external() || sp.external_policy == TrafficPolicy::Cluster;
        // A consistent choice hashes in a chain of its own (`consistent.rs`).
        if sp.affinity_timeout.is_some() || sp.consistent.is_some() || !external_ok {
            return None;
        }
        Some(SlotCounts {
            internal: fits(internal)?,
            external: if sp.has_external() {
                fits(external)?
            } else {
                1
            },
        })
    }

    /// Lays `eps` out over slots 0..n-1 of each of `frontends` (address and port, with the
    /// service port's protocol) in the slot map of `pick_chain(slots)`, keeping the slots the
    /// previous plan gave them (`slots.rs`), and puts each frontend in `PICK_FALLBACK` with the
    /// endpoint of its slot 0.
    pub(super) fn fill_slots(
        &mut self,
        sp: &ServicePort,
        label: &str,
        slots: u32,
        frontends: &[(IpAddr, u16)],
        eps: &[Endpoint],
    ) {
        let map = pick_slots(slots);
        let proto = Value::Proto(sp.name.protocol.number());
        for &(ip, port) in frontends {
            let frontend = vec![ip_value(ip), proto.clone(), Value::Port(port)];
            let laid_out = self.layouts.lay_out(&map, &frontend, eps);
            // Slot 0 is filled in every layout and changes hands only when its endpoint goes,
            // so the fallback churns no more than the slots do.
            self.fallback_element(&frontend, laid_out[0], label);
            for (slot, ep) in laid_out.into_iter().enumerate() {
                let mut key = Vec::with_capacity(frontend.len() + 1);
                key.extend_from_slice(&frontend);
                key.push(Value::Mark(slot as u32));
                let data = MapData::Values(target_of(ep).into());
                self.out.push_element(
                    &map,
                    Element::map(key, data).with_comment(label.to_string()),
                );
            }
        }
    }

    /// Puts each of `frontends` in `PICK_FALLBACK` with the first of `eps`, the endpoints
    /// traffic arriving there may use.
    pub(super) fn fallback(
        &mut self,
        sp: &ServicePort,
        label: &str,
        frontends: &[(IpAddr, u16)],
        eps: &[Endpoint],
    ) {
        let Some(first) = eps.first() else {
            return;
        };
        let proto = Value::Proto(sp.name.protocol.number());
        for &(ip, port) in frontends {
            let frontend = vec![ip_value(ip), proto.clone(), Value::Port(port)];
            self.fallback_element(&frontend, first, label);
        }
    }

    /// `frontend` (`address . protocol . port`) in `PICK_FALLBACK`, sent to `ep`, and in
    /// `PICK_FALLBACK_FRONTENDS`.
    fn fallback_element(&mut self, frontend: &[Value], ep: &Endpoint, label: &str) {
        self.out.push_element(
            PICK_FALLBACK_FRONTENDS,
            Element::new(frontend.to_vec()).with_comment(label.to_string()),
        );
        let data = MapData::Values(target_of(ep).into());
        self.out.push_element(
            PICK_FALLBACK,
            Element::map(frontend.to_vec(), data).with_comment(label.to_string()),
        );
    }
}
