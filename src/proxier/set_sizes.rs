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

/// No set is declared smaller (its table: 1,024 buckets, 8 KiB of kernel memory).
pub(crate) const MIN_SET_SIZE: u32 = 3 << 8;

/// The largest size declared: the kernel computes its table from four times the size in 32
/// bits.
const MAX_SET_SIZE: u32 = 3 << 28;

/// The size to declare for a set the parts of a table put `elements` in: half as much again,
/// rounded up to three quarters of a power of two. The kernel gives a set of size `s` a table
/// of `s × 4/3` buckets rounded up to a power of two, so such a size fills its table to the
/// bucket (a power of two itself would get twice as many buckets as it asked for), and sizes
/// still double from one to the next.
pub(crate) fn size_for(elements: usize) -> u32 {
    let wanted = (elements as u64).saturating_add(elements as u64 / 2);
    let quarter = wanted.max(u64::from(MIN_SET_SIZE)).div_ceil(3);
    let size = quarter
        .checked_next_power_of_two()
        .map(|q| q.saturating_mul(3));
    size.map_or(MAX_SET_SIZE, |s| s.min(u64::from(MAX_SET_SIZE)) as u32)
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

    /// The kernel's table for a hash set of size `size` (`nft_hash_buckets`), in buckets.
    fn kernel_buckets(size: u32) -> u64 {
        (u64::from(size) * 4 / 3).next_power_of_two()
    }

    #[test]
    fn a_set_is_declared_with_room_to_grow_by_half() {
        assert_eq!(size_for(0), MIN_SET_SIZE);
        assert_eq!(size_for(512), 768, "512 + 256 = 768");
        assert_eq!(size_for(513), 1536, "513 + 256 = 769");
        assert_eq!(
            size_for(44_000),
            98_304,
            "not 131,072: a table of 131,072 buckets"
        );
        assert_eq!(size_for(300_000), 786_432);
        assert_eq!(size_for(usize::MAX), MAX_SET_SIZE);
        for n in [0, 1, 1000, 44_000, 300_000, 3_000_000] {
            let size = size_for(n);
            assert!(size as usize >= n + n / 2, "{n}: {size}");
            let buckets = kernel_buckets(size);
            assert_eq!(
                buckets * 3,
                u64::from(size) * 4,
                "{n}: {size} fills its table"
            );
            // As few buckets as declaring exactly the room wanted would get.
            let wanted = MIN_SET_SIZE.max((n + n / 2) as u32);
            assert_eq!(buckets, kernel_buckets(wanted), "{n}: {size}");
        }
        assert!(u64::from(MAX_SET_SIZE) * 4 <= u64::from(u32::MAX));
    }

    #[test]
    fn a_size_is_kept_while_the_elements_fit_and_it_is_not_four_times_too_large() {
        let size = size_for(300_000);
        assert!(keeps(size, 300_000));
        assert!(keeps(size, size as usize), "full is still kept");
        assert!(!keeps(size, size as usize + 1));
        // Down to where a set half as large again would be a quarter of it.
        assert!(keeps(size, 70_000));
        assert!(!keeps(size, 60_000));
        assert!(
            keeps(MIN_SET_SIZE, 0),
            "the smallest size is never too large"
        );
    }
}
