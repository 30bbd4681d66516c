//! Which fragments put each key of a shared set in the table: one entry per key of every
//! shared set (690,000 at 30,000 services of 10 endpoints), so it is kept in 9 bytes a slot.
//!
//! Keys are known by a 32-bit hash of set and key, owners by a small id while they own a key.
//! Keys whose hashes collide share an entry and list every owner of either: the planner looks
//! into each owner's fragment for the exact key, so a collision costs a look, never a wrong
//! answer.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, btree_map};
use std::sync::Arc;

use crate::cluster::ServicePortName;

/// An owner's place in `Names::held`.
type OwnerId = u32;

/// In `KeyOwners::one`: the key has several owners, listed in `KeyOwners::many`.
const MANY: OwnerId = OwnerId::MAX;

#[derive(Debug, Clone, Default)]
pub(super) struct KeyOwners {
    /// The owner of each key, by hash, or `MANY`. Nearly every key has one.
    one: foldhash::HashMap<u32, OwnerId>,
    /// The owners of keys with several (two services with one address and port, or hashes
    /// that collide), in service order: the table holds the first one's element.
    many: foldhash::HashMap<u32, Vec<OwnerId>>,
    names: Names,
}

impl KeyOwners {
    /// The owners of the key of `hash`, in service order.
    pub(super) fn of(&self, hash: u64) -> impl Iterator<Item = &Arc<ServicePortName>> {
        let hash = short(hash);
        let ids = match self.one.get(&hash) {
            Some(&MANY) => self.many.get(&hash).map_or(&[][..], Vec::as_slice),
            Some(id) => std::slice::from_ref(id),
            None => &[],
        };
        ids.iter().map(|&id| self.names.name(id))
    }

    /// Whether the key of `hash` may have several owners (it has, or its hash is shared with
    /// another key's): false means one at most, found without looking into the large table.
    pub(super) fn may_be_several(&self, hash: u64) -> bool {
        self.many.contains_key(&short(hash))
    }

    /// Adds `name` to the owners of the key of `hash`, unless it is one already.
    pub(super) fn add(&mut self, hash: u64, name: &Arc<ServicePortName>) {
        let hash = short(hash);
        if let Entry::Vacant(entry) = self.one.entry(hash) {
            entry.insert(self.names.hold(name));
            return;
        }
        let mut ids = self.take(hash);
        if let Err(at) = ids.binary_search_by(|&id| (**self.names.name(id)).cmp(&**name)) {
            ids.insert(at, self.names.hold(name));
        }
        self.put(hash, ids);
    }

    /// Removes `name` from the owners of the key of `hash`, and the key once it has none.
    pub(super) fn remove(&mut self, hash: u64, name: &ServicePortName) {
        let hash = short(hash);
        let mut ids = self.take(hash);
        if let Some(at) = ids.iter().position(|&id| **self.names.name(id) == *name) {
            self.names.release(ids.remove(at));
        }
        self.put(hash, ids);
    }

    /// The owners of the key of `hash`, taken out.
    fn take(&mut self, hash: u32) -> Vec<OwnerId> {
        match self.one.remove(&hash) {
            None => Vec::new(),
            Some(MANY) => self.many.remove(&hash).unwrap_or_default(),
            Some(id) => vec![id],
        }
    }

    /// Keeps `ids` (sorted) as the owners of the key of `hash`; none: the key goes.
    fn put(&mut self, hash: u32, ids: Vec<OwnerId>) {
        match ids.len() {
            0 => {}
            1 => {
                self.one.insert(hash, ids[0]);
            }
            _ => {
                self.one.insert(hash, MANY);
                self.many.insert(hash, ids);
            }
        }
    }
}

/// The entry's hash: 32 bits of the planner's 64. Collisions are handled (module comment);
/// at 690,000 keys a few dozen keys share one.
fn short(hash: u64) -> u32 {
    hash as u32
}

/// The names of the owners, by id, each held while it owns a key.
#[derive(Debug, Clone, Default)]
struct Names {
    /// By id: the name and how many keys it owns; `None`: free for the next new owner.
    held: Vec<Option<(Arc<ServicePortName>, usize)>>,
    ids: BTreeMap<Arc<ServicePortName>, OwnerId>,
    free: Vec<OwnerId>,
    /// The owner held last, known by its `Arc`: a fragment adds its keys one after another,
    /// so nearly every `hold` is this one's and needs no lookup by name.
    last: Option<(Arc<ServicePortName>, OwnerId)>,
}

impl Names {
    fn name(&self, id: OwnerId) -> &Arc<ServicePortName> {
        &self.held[id as usize]
            .as_ref()
            .expect("an owner's id is held")
            .0
    }

    /// The id of `name`, owning one more key.
    fn hold(&mut self, name: &Arc<ServicePortName>) -> OwnerId {
        let id = match &self.last {
            Some((last, id)) if Arc::ptr_eq(last, name) => *id,
            _ => {
                // One search of the tree, whether the name is new or not.
                let id = match self.ids.entry(name.clone()) {
                    btree_map::Entry::Occupied(held) => *held.get(),
                    btree_map::Entry::Vacant(new) => {
                        let id = match self.free.pop() {
                            Some(id) => id,
                            None => {
                                self.held.push(None);
                                (self.held.len() - 1) as OwnerId
                            }
                        };
                        self.held[id as usize] = Some((name.clone(), 0));
                        *new.insert(id)
                    }
                };
                self.last = Some((name.clone(), id));
                id
            }
        };
        if let Some((_, keys)) = &mut self.held[id as usize] {
            *keys += 1;
        }
        id
    }

    /// `id` owns one key less; its id is free once it owns none.
    fn release(&mut self, id: OwnerId) {
        let Some((name, keys)) = &mut self.held[id as usize] else {
            return;
        };
        *keys -= 1;
        if *keys > 0 {
            return;
        }
        self.ids.remove(&**name);
        self.held[id as usize] = None;
        self.free.push(id);
        if self.last.as_ref().is_some_and(|(_, last)| *last == id) {
            self.last = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Protocol;

    fn name(service: &str) -> Arc<ServicePortName> {
        Arc::new(ServicePortName {
            namespace: "demo".into(),
            name: service.into(),
            port: "http".into(),
            protocol: Protocol::Tcp,
        })
    }

    fn owners(index: &KeyOwners, hash: u64) -> Vec<String> {
        index.of(hash).map(|n| n.name.clone()).collect()
    }

    #[test]
    fn owners_are_listed_in_service_order_and_each_once() {
        let mut index = KeyOwners::default();
        let (web, api, db) = (name("web"), name("api"), name("db"));
        index.add(7, &web);
        index.add(7, &api);
        index.add(7, &web);
        index.add(7, &db);
        assert_eq!(owners(&index, 7), ["api", "db", "web"]);
        index.remove(7, &db);
        index.remove(7, &api);
        assert_eq!(owners(&index, 7), ["web"]);
        index.remove(7, &api);
        assert_eq!(owners(&index, 7), ["web"], "api owned it no more");
        index.remove(7, &web);
        assert!(owners(&index, 7).is_empty());
        assert!(index.one.is_empty() && index.many.is_empty());
    }

    #[test]
    fn hashes_equal_in_their_low_32_bits_share_an_entry_and_list_both_owners() {
        let mut index = KeyOwners::default();
        let (web, api) = (name("web"), name("api"));
        let (a, b) = (0x1_0000_0005, 0x2_0000_0005);
        index.add(a, &web);
        index.add(b, &api);
        assert_eq!(owners(&index, a), ["api", "web"]);
        assert_eq!(owners(&index, b), ["api", "web"]);
        index.remove(b, &api);
        assert_eq!(owners(&index, a), ["web"]);
    }

    #[test]
    fn an_owner_keeps_its_id_while_it_owns_a_key_and_frees_it_after() {
        let mut index = KeyOwners::default();
        let (web, api) = (name("web"), name("api"));
        index.add(1, &web);
        index.add(2, &web);
        index.remove(1, &web);
        assert_eq!(owners(&index, 2), ["web"], "web still owns key 2");
        index.remove(2, &web);
        assert!(index.names.ids.is_empty());
        index.add(3, &api);
        assert_eq!(index.names.held.len(), 1, "api took web's freed id");
        assert_eq!(owners(&index, 3), ["api"]);
    }

    #[test]
    fn an_owner_coming_back_after_owning_nothing_is_held_again() {
        let mut index = KeyOwners::default();
        let (web, api) = (name("web"), name("api"));
        index.add(1, &web);
        index.remove(1, &web);
        // The same `Arc` as the owner held last, whose id was freed meanwhile.
        index.add(2, &web);
        index.add(3, &api);
        assert_eq!(owners(&index, 2), ["web"]);
        assert_eq!(owners(&index, 3), ["api"]);
        assert_eq!(index.names.held.len(), 2, "web and api hold an id each");
    }
}
