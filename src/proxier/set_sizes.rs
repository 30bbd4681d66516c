//! The sizes declared for the planner's hash sets and maps.
//!
//! A set created with a declared size gets a hash table sized for it at once. An undeclared
//! one starts at four buckets and is rehashed, in a kernel worker, each time it grows past
//! three quarters full; a cold sync inserting while it rehashes takes the slow path for nearly
//! every element (half the kernel's time at 30,000 services × 10 endpoints). The price of a
//! size: the kernel refuses elements beyond it, and a larger size needs a larger table, so the
//! set is recreated. So a set is declared with room to grow by half at least, and declared
//! larger (recreated and filled again in the same transaction) only when a plan needs more
//! than it holds.

use crate::nft::model::Set;

/// No set is declared smaller (its table: 2,048 buckets, 16 KiB of kernel memory).
pub(crate) const MIN_SET_SIZE: u32 = 1024;

/// The largest size declared: the kernel counts elements in 32 bits.
const MAX_SET_SIZE: u32 = 1 << 31;

/// The size to declare for a set the parts of a table put `elements` in: half as much again,
/// rounded up to a power of two (the kernel's table has twice as many buckets).
pub(crate) fn size_for(elements: usize) -> u32 {
    let wanted = elements.saturating_add(elements / 2);
    let size = wanted
        .max(MIN_SET_SIZE as usize)
        .checked_next_power_of_two();
    size.and_then(|n| u32::try_from(n).ok())
        .map_or(MAX_SET_SIZE, |n| n.min(MAX_SET_SIZE))
}

/// Whether a set declared `size` can stay so when its parts put `elements` in it: they fit, and
/// the size is at most four times `size_for(elements)`, so a set that shrank that much gives
/// its memory back at the next whole plan.
pub(crate) fn keeps(size: u32, elements: usize) -> bool {
    elements <= size as usize && u64::from(size) <= 4 * u64::from(size_for(elements))
}

/// Whether the planner declares `set`'s size: a set or map of elements it puts there itself,
/// kept in a hash table. Interval sets are trees; the sets rules add to (ClientIP affinity)
/// carry their own size.
pub(crate) fn is_sized(set: &Set) -> bool {
    !set.interval && !set.dynamic && set.timeout.is_none()
}

/// The size to declare for `set` if it `is_sized`, its parts putting `elements` in it: `kept`
/// (the size it has) where that `keeps`, else `size_for`.
pub(crate) fn chosen(set: &Set, elements: usize, kept: Option<u32>) -> Option<u32> {
    is_sized(set).then(|| match kept {
        Some(size) if keeps(size, elements) => size,
        _ => size_for(elements),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_declared_with_room_to_grow_by_half() {
        assert_eq!(size_for(0), MIN_SET_SIZE);
        assert_eq!(size_for(683), 1024, "683 + 341 = 1,024");
        assert_eq!(size_for(684), 2048, "684 + 342 = 1,026");
        assert_eq!(size_for(300_000), 1 << 19);
        assert_eq!(size_for(350_000), 1 << 20);
        assert_eq!(size_for(usize::MAX), MAX_SET_SIZE);
        for n in [0, 1, 1000, 44_000, 300_000, 3_000_000] {
            let size = size_for(n) as usize;
            assert!(size >= n + n / 2 && size.is_power_of_two(), "{n}: {size}");
        }
    }

    #[test]
    fn a_size_is_kept_while_the_elements_fit_and_it_is_not_four_times_too_large() {
        let size = size_for(300_000);
        assert!(keeps(size, 300_000));
        assert!(keeps(size, size as usize), "full is still kept");
        assert!(!keeps(size, size as usize + 1));
        // Down to where a set half as large again would be a quarter of it.
        assert!(keeps(size, 50_000));
        assert!(!keeps(size, 40_000));
        assert!(
            keeps(MIN_SET_SIZE, 0),
            "the smallest size is never too large"
        );
    }
}
