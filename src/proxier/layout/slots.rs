//! Which endpoint sits in which slot of the shared `pick-M-slots` maps, kept across plans so a
//! change of endpoints rewrites only the slots it must.
//!
//! A laid-out service of n endpoints fills slots 0..n-1 of its frontend in `pick-M-slots`, none
//! above, whatever came before. Against a previous layout in the same map: an endpoint that
//! stays keeps its slot; endpoints above the new count move into the slots freed below it, in
//! slot order, then new endpoints take the remaining free slots, in address order. Without a
//! previous layout in that map (a new service, one whose count crossed a power of two, a plan
//! from scratch) endpoint i in address order takes slot i. So replacing one endpoint rewrites
//! one slot, where address order would shift every slot after the newcomer's place.

use std::borrow::Borrow;
use std::collections::HashMap;

use super::ip_value;
use crate::cluster::Endpoint;
use crate::nft::model::{Element, MapData, Table, Value};
use crate::proxier::names::is_pick_slots;

/// An endpoint as slot elements hold it: `address . port`.
type Target = [Value; 2];
/// A frontend key (`address . protocol . port`) in a slot map.
type Frontend = Vec<Value>;

/// For each frontend (`address . protocol . port`) of each shared slot map, the endpoint in
/// each slot: the layout the next plan keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotLayouts {
    /// By slot map, then frontend key (nested, so both are looked up borrowed); the slots in
    /// the order they were found. A replan of hundreds of services builds and drops one of
    /// these per sync, so a slot holds its target inline.
    by_frontend: HashMap<String, HashMap<Frontend, Vec<(u32, Target)>>>,
}

impl SlotLayouts {
    /// The layouts the shared slot maps of `tables` hold (what the kernel holds, after a
    /// restart). Any contents are accepted: a layout is only ever a preference, and each plan
    /// fills exactly the slots its endpoints need.
    pub fn of_tables(tables: &[Table]) -> Self {
        let mut layouts = SlotLayouts::default();
        for set in tables.iter().flat_map(|t| t.sets.values()) {
            if is_pick_slots(&set.name) {
                layouts.add(&set.name, &set.elements);
            }
        }
        layouts
    }

    /// Adds the slot elements `elements` of map `set`.
    pub(crate) fn add(&mut self, set: &str, elements: impl IntoIterator<Item: Borrow<Element>>) {
        for e in elements {
            let e = e.borrow();
            // A target of another shape is no endpoint's: no endpoint could keep its slot.
            let ([frontend @ .., Value::Mark(slot)], Some(MapData::Values(target))) =
                (e.key.as_slice(), &e.data)
            else {
                continue;
            };
            let [address, port] = target.as_slice() else {
                continue;
            };
            if !self.by_frontend.contains_key(set) {
                self.by_frontend.insert(set.to_string(), HashMap::new());
            }
            let map = self.by_frontend.get_mut(set).expect("inserted above");
            let slot = (*slot, [address.clone(), port.clone()]);
            match map.get_mut(frontend) {
                Some(slots) => slots.push(slot),
                None => {
                    map.insert(frontend.to_vec(), vec![slot]);
                }
            }
        }
    }

    /// `eps` in slot order for `frontend` in slot map `set`: as the layout held there now
    /// moves them least (see the module header), or in address order without one.
    pub(crate) fn lay_out<'e>(
        &self,
        set: &str,
        frontend: &[Value],
        eps: &'e [Endpoint],
    ) -> Vec<&'e Endpoint> {
        match self.by_frontend.get(set).and_then(|m| m.get(frontend)) {
            Some(previous) => stable_layout(previous, eps),
            None => eps.iter().collect(),
        }
    }
}

/// The target `ep` is in a slot element.
pub(super) fn target_of(ep: &Endpoint) -> Target {
    [ip_value(ep.ip), Value::Port(ep.port)]
}

/// `eps` (in address order) laid out over slots 0..n-1, keeping `previous` (slot, endpoint)
/// pairs where it can; see the module header. Of an endpoint found in several slots, the lowest
/// counts.
fn stable_layout<'e>(previous: &[(u32, Target)], eps: &'e [Endpoint]) -> Vec<&'e Endpoint> {
    let n = eps.len();
    let mut was: HashMap<&Target, u32> = HashMap::with_capacity(previous.len());
    for (slot, target) in previous {
        was.entry(target)
            .and_modify(|s| *s = (*s).min(*slot))
            .or_insert(*slot);
    }
    let mut slots: Vec<Option<&Endpoint>> = vec![None; n];
    // Endpoints that must move: kept ones above the new count (by their old slot), then new ones.
    let mut movers: Vec<(u32, &Endpoint)> = Vec::new();
    let mut newcomers: Vec<&Endpoint> = Vec::new();
    for ep in eps {
        match was.get(&target_of(ep)) {
            Some(&slot) if (slot as usize) < n && slots[slot as usize].is_none() => {
                slots[slot as usize] = Some(ep);
            }
            Some(&slot) => movers.push((slot, ep)),
            None => newcomers.push(ep),
        }
    }
    movers.sort_by_key(|(slot, _)| *slot);
    let mut placing = movers.into_iter().map(|(_, ep)| ep).chain(newcomers);
    slots
        .into_iter()
        .map(|s| {
            s.or_else(|| placing.next())
                .expect("one endpoint per free slot")
        })
        .collect()
}

/// Whether `layouts` fill slots 0..n-1 of each frontend with n distinct endpoints, none above
/// (what every plan must leave in the slot maps).
#[cfg(test)]
pub(crate) fn is_valid(layouts: &SlotLayouts) -> bool {
    use std::collections::BTreeSet;
    layouts
        .by_frontend
        .values()
        .flat_map(|m| m.values())
        .all(|slots| {
            let taken: BTreeSet<u32> = slots.iter().map(|(s, _)| *s).collect();
            let targets: BTreeSet<&Target> = slots.iter().map(|(_, t)| t).collect();
            taken.len() == slots.len()
                && targets.len() == slots.len()
                && taken.iter().copied().eq(0..slots.len() as u32)
        })
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn ep(last: u8) -> Endpoint {
        Endpoint::ready(IpAddr::from([10, 244, 0, last]), 8080)
    }

    fn eps(lasts: &[u8]) -> Vec<Endpoint> {
        lasts.iter().map(|l| ep(*l)).collect()
    }

    /// A previous layout: the endpoint ending in `lasts[i]` in slot i.
    fn slots(lasts: &[u8]) -> Vec<(u32, Target)> {
        lasts
            .iter()
            .enumerate()
            .map(|(i, l)| (i as u32, target_of(&ep(*l))))
            .collect()
    }

    fn lasts(layout: &[&Endpoint]) -> Vec<u8> {
        layout
            .iter()
            .map(|e| match e.ip {
                IpAddr::V4(a) => a.octets()[3],
                IpAddr::V6(_) => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_replaced_endpoint_leaves_every_other_endpoint_in_its_slot() {
        let now = eps(&[1, 2, 4, 5, 9]);
        let laid = stable_layout(&slots(&[1, 2, 3, 4, 5]), &now);
        assert_eq!(lasts(&laid), [1, 2, 9, 4, 5]);
    }

    #[test]
    fn a_shrinking_service_moves_only_the_endpoints_above_its_new_count() {
        // 3 and 6 leave; 5 (slot 4) and 6's slot are above the new count 4, so 5 moves into
        // the lowest freed slot.
        let now = eps(&[1, 2, 4, 5]);
        let laid = stable_layout(&slots(&[1, 2, 3, 4, 5, 6]), &now);
        assert_eq!(lasts(&laid), [1, 2, 5, 4]);
    }

    #[test]
    fn a_growing_service_keeps_its_endpoints_and_puts_new_ones_in_address_order() {
        let now = eps(&[1, 2, 3, 4, 5, 6]);
        let laid = stable_layout(&slots(&[5, 1, 3]), &now);
        assert_eq!(lasts(&laid), [5, 1, 3, 2, 4, 6]);
    }

    #[test]
    fn any_previous_contents_give_each_endpoint_exactly_one_slot_below_the_count() {
        // Duplicates, holes and slots far above the count, as a hand-edited map might hold.
        let previous = vec![
            (7, target_of(&ep(1))),
            (0, target_of(&ep(2))),
            (2, target_of(&ep(2))),
            (1, target_of(&ep(8))),
            (3, target_of(&ep(3))),
        ];
        let now = eps(&[1, 2, 3, 4]);
        let laid = stable_layout(&previous, &now);
        assert_eq!(lasts(&laid), [2, 1, 4, 3]);
    }

    #[test]
    fn layouts_read_from_a_table_are_kept_and_others_are_in_address_order() {
        let frontend = vec![
            Value::Ipv4("10.96.0.1".parse().unwrap()),
            Value::Proto(6),
            Value::Port(80),
        ];
        let element = |slot: u32, last: u8| {
            let mut key = frontend.clone();
            key.push(Value::Mark(slot));
            Element::map(key, MapData::Values(target_of(&ep(last)).into()))
        };
        let mut layouts = SlotLayouts::default();
        layouts.add(
            "pick-4-slots",
            &[element(0, 4), element(1, 3), element(2, 1)],
        );
        assert!(is_valid(&layouts));
        let now = eps(&[1, 3, 4]);
        assert_eq!(
            lasts(&layouts.lay_out("pick-4-slots", &frontend, &now)),
            [4, 3, 1]
        );
        assert_eq!(
            lasts(&layouts.lay_out("pick-8-slots", &frontend, &now)),
            [1, 3, 4],
            "another map: laid out anew"
        );
        layouts.add("pick-4-slots", &[element(4, 5)]);
        assert!(!is_valid(&layouts), "a slot above the count");
    }
}
