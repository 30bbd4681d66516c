//! Consistent endpoint choice (`kubenft.io/consistent-endpoint`): a service's chain draws its
//! slot with `jhash` of the client's address (or of the connection's 5-tuple) instead of
//! `numgen random`, and the slots are filled from the endpoints' addresses alone. Every node
//! given the same endpoints builds the same table and hashes with the same seed, so a client
//! reaches the same endpoint through any node, and an endpoint change moves few clients.
//!
//! The fill is rendezvous hashing over a table of M slots: each slot goes to the endpoint with
//! the highest weight `jhash(endpoint . slot)`. A slot's owner therefore depends only on which
//! endpoints exist, never on their order, and:
//! - removing an endpoint moves exactly the clients of its slots, to the others;
//! - adding one moves exactly the clients of the slots it wins, each with probability
//!   1/(n+1), so its share is Binomial(M, 1/(n+1))/M: with M = 64·2^⌈log2 n⌉ slots the
//!   standard deviation of what moves is below 1% of all clients (0.9% from 10 to 11
//!   endpoints, M = 1,024).
//!
//! (Maglev's permutation fill balances the slots exactly but moves other endpoints' slots too:
//! 2-5% of all clients beyond the new endpoint's share at these table sizes, and so does a
//! removal. No fill computed from the endpoint set alone has both exact balance and moves
//! only the changed endpoint's slots; this one keeps the second.)
//!
//! The M slots cover the chain's 65,536-number block in equal runs, so the rule never changes
//! with the endpoints: only the elements of the slots that move do, except when the endpoint
//! count crosses a power of two, which resizes the table and refills it.

use std::net::IpAddr;

use crate::cluster::{ConsistentEndpoint, Endpoint};
use crate::nft::jhash::jhash;
use crate::nft::model::{Selector, Stmt};

/// The `jhash` seed of every consistent draw: a constant, so every node agrees.
pub(crate) const SEED: u32 = 0x6b75_6265;
/// Slots per endpoint (per power of two at or above the endpoint count).
pub(crate) const SLOTS_PER_ENDPOINT: u32 = 64;
/// The largest table: past 256 endpoints the slots per endpoint shrink, to bound the map
/// elements and the planner's work (slots × endpoints weights per build).
pub(crate) const MAX_SLOTS: u32 = 1 << 14;
/// Seeds the slot weights; any constant works, as long as every node uses the same.
const WEIGHT_SEED: u32 = 0x736c_6f74;

/// The table size for `n` endpoints: `SLOTS_PER_ENDPOINT` per power of two at or above `n`,
/// at most `MAX_SLOTS` (a power of two, so it divides a block of 65,536).
pub(crate) fn table_size(n: usize) -> u32 {
    let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    n.checked_next_power_of_two()
        .and_then(|p| p.checked_mul(SLOTS_PER_ENDPOINT))
        .map_or(MAX_SLOTS, |m| m.min(MAX_SLOTS))
}

/// The bytes an endpoint is known by: its address and port.
fn identity(ip: IpAddr, port: u16) -> Vec<u8> {
    let mut b = match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    b.extend(port.to_be_bytes());
    b
}

/// The owner of each of `slots` slots, as an index into `endpoints` (address, port); empty
/// without endpoints. Independent of the order of `endpoints`.
pub(crate) fn fill(endpoints: &[(IpAddr, u16)], slots: u32) -> Vec<usize> {
    if endpoints.is_empty() {
        return Vec::new();
    }
    let keys: Vec<u32> = endpoints
        .iter()
        .map(|&(ip, port)| jhash(&identity(ip, port), WEIGHT_SEED))
        .collect();
    (0..slots)
        .map(|slot| {
            let weight = |i: usize| {
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&keys[i].to_le_bytes());
                b[4..].copy_from_slice(&slot.to_le_bytes());
                // Equal weights (a hash collision) go to the lower address, not the earlier one.
                (jhash(&b, WEIGHT_SEED), std::cmp::Reverse(endpoints[i]))
            };
            (0..endpoints.len())
                .max_by_key(|&i| weight(i))
                .expect("not empty")
        })
        .collect()
}

/// The runs of the block starting at `base` (of `block` numbers) that each endpoint of `eps`
/// owns: `(first, last, endpoint)`, one per slot of `table_size(eps.len())`, in order.
pub(crate) fn slot_ranges(base: u32, block: u32, eps: &[Endpoint]) -> Vec<(u32, u32, &Endpoint)> {
    let slots = table_size(eps.len()).min(block);
    let width = block / slots;
    let ids: Vec<(IpAddr, u16)> = eps.iter().map(|e| (e.ip, e.port)).collect();
    fill(&ids, slots)
        .into_iter()
        .enumerate()
        .map(|(s, owner)| {
            let first = base + s as u32 * width;
            (first, first + width - 1, &eps[owner])
        })
        .collect()
}

/// The packet fields a mode hashes, for a table whose addresses `saddr` and `daddr` read.
pub(crate) fn fields(mode: ConsistentEndpoint, saddr: Selector, daddr: Selector) -> Vec<Selector> {
    match mode {
        ConsistentEndpoint::Client => vec![saddr],
        ConsistentEndpoint::Connection => vec![
            saddr,
            Selector::ThSport,
            daddr,
            Selector::ThDport,
            Selector::L4Proto,
        ],
    }
}

/// `dnat to jhash <fields> mod block seed SEED offset base map @map`.
pub(crate) fn draw(fields: Vec<Selector>, block: u32, base: u32, map: String) -> Stmt {
    Stmt::DnatHashMap {
        fields,
        seed: SEED,
        modulus: block,
        offset: base,
        map,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::jhash::{draw as kernel_draw, scale};
    use crate::nft::model::Value;
    use std::net::Ipv4Addr;

    fn endpoints(n: usize) -> Vec<(IpAddr, u16)> {
        (0..n)
            .map(|i| {
                (
                    IpAddr::V4(Ipv4Addr::new(10, 244, (i / 200) as u8, (i % 200) as u8 + 2)),
                    8080,
                )
            })
            .collect()
    }

    fn owners(eps: &[(IpAddr, u16)], slots: u32) -> Vec<(IpAddr, u16)> {
        fill(eps, slots).into_iter().map(|i| eps[i]).collect()
    }

    #[test]
    fn tables_hold_64_slots_per_power_of_two_of_endpoints() {
        assert_eq!(table_size(0), 64);
        assert_eq!(table_size(1), 64);
        assert_eq!(table_size(10), 1024);
        assert_eq!(table_size(16), 1024);
        assert_eq!(table_size(17), 2048);
        assert_eq!(table_size(100_000), MAX_SLOTS);
    }

    #[test]
    fn the_table_does_not_depend_on_the_order_of_the_endpoints() {
        let eps = endpoints(10);
        let mut reversed = eps.clone();
        reversed.reverse();
        let mut shuffled = eps.clone();
        shuffled.rotate_left(3);
        let want = owners(&eps, 1024);
        assert_eq!(owners(&reversed, 1024), want);
        assert_eq!(owners(&shuffled, 1024), want);
    }

    #[test]
    fn removing_an_endpoint_moves_only_its_slots() {
        let eps = endpoints(11);
        let before = owners(&eps, 1024);
        for gone in 0..eps.len() {
            let mut rest = eps.clone();
            let removed = rest.remove(gone);
            let after = owners(&rest, 1024);
            for (b, a) in before.iter().zip(&after) {
                if *b != removed {
                    assert_eq!(a, b, "a slot of a remaining endpoint moved");
                } else {
                    assert_ne!(*a, removed);
                }
            }
        }
    }

    #[test]
    fn adding_an_endpoint_to_ten_moves_its_share_within_the_bound() {
        for first in 0..20 {
            let eps: Vec<_> = endpoints(first + 11).split_off(first);
            let before = owners(&eps[..10], 1024);
            let after = owners(&eps, 1024);
            let moved: Vec<usize> = (0..1024).filter(|&s| before[s] != after[s]).collect();
            assert!(
                moved.iter().all(|&s| after[s] == eps[10]),
                "a slot moved elsewhere"
            );
            let share = moved.len() as f64 / 1024.0;
            assert!(
                share <= 1.0 / 11.0 + 0.03,
                "endpoints {first}..: {share:.4} of the slots moved"
            );
            assert!(share > 0.0);
        }
    }

    #[test]
    fn every_endpoint_owns_slots_and_none_owns_twice_its_share() {
        for n in [2, 3, 10, 100, 256] {
            let eps = endpoints(n);
            let m = table_size(n);
            let mut count = vec![0u32; n];
            for o in fill(&eps, m) {
                count[o] += 1;
            }
            let fair = f64::from(m) / n as f64;
            for c in count {
                assert!(c > 0, "{n} endpoints: one owns no slot");
                assert!(f64::from(c) < 2.0 * fair, "{n} endpoints: {c} slots of {m}");
            }
        }
    }

    #[test]
    fn slot_ranges_cut_the_block_into_equal_runs_the_kernel_hash_selects() {
        let eps: Vec<Endpoint> = endpoints(3)
            .into_iter()
            .map(|(ip, port)| Endpoint::ready(ip, port))
            .collect();
        let base = 5 << 16;
        let ranges = slot_ranges(base, 1 << 16, &eps);
        assert_eq!(ranges.len(), 256);
        assert_eq!(ranges[0].0, base);
        assert_eq!(ranges[255].1, base + 65535);
        assert!(ranges.windows(2).all(|w| w[0].1 + 1 == w[1].0));
        // A client lands in the run the table's slot of its hash names.
        let client = [Value::Ipv4(Ipv4Addr::new(192, 0, 2, 7))];
        let n = kernel_draw(&client, SEED, 1 << 16, base).unwrap();
        let run = ranges.iter().find(|r| r.0 <= n && n <= r.1).unwrap();
        let bytes = crate::nft::jhash::fields_bytes(&client).unwrap();
        let slot = scale(jhash(&bytes, SEED), 256) as usize;
        assert_eq!(run.0, ranges[slot].0);
    }
}
