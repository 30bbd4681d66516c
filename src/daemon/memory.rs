//! The daemon's settings of glibc's allocator, made once before any other thread exists, and
//! the trim that hands freed pages back (after the first list, and around full syncs); each with
//! the reason for it beside it. Built against another C library, they do nothing.

/// glibc gives each allocating thread its own arena, and memory freed in one is not reused by
/// another: the source's parsing and the sync's planning, on different runtime threads, would
/// each keep their own high-water mark resident. One arena holds one. The daemon allocates
/// mostly on its sync loop, so the shared lock costs nothing measurable.
pub(super) fn share_one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes the allocator's tuning; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Allocations from this size up are mapped on their own and unmapped when freed. Left to
/// itself, glibc raises this threshold to the size of each mapped block freed (up to 32 MiB):
/// once the list pages' response bodies are freed, the first sync's large buffers (the batch,
/// growing by doubling) come from the heap instead, where each outgrown copy stays resident.
/// A fixed threshold also stops glibc raising the heap's trim threshold along with it: left at
/// 128 KiB, the top of the heap would be handed back and faulted in again all through planning.
/// The daemon trims explicitly around full syncs instead (`release_freed_memory`).
pub(super) fn map_large_allocations_alone() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes the allocator's tuning; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 * 1024 * 1024);
    }
}

/// Without fast bins, small freed blocks go to the thread cache and then straight to the
/// ordinary bins. With them, decoding a list page frees thousands of small blocks into the
/// fast bins, and every larger request then merges them all first (`malloc_consolidate`): 16%
/// of the listing's time at 30,000 Services × 10. Measured side by side: the listing 0.1–0.3 s
/// shorter, a churn sync's median 0.058 → 0.046 s, the same memory.
pub(super) fn no_fast_bins() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes the allocator's tuning; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MXFAST, 0);
    }
}

/// A full sync frees a whole plan, its transaction and its encoded batch at once, but glibc
/// keeps freed heap pages mapped, so the daemon's resident memory would stay at the peak of
/// its largest sync. Handing them back keeps RSS near what the daemon actually holds. Only
/// around full syncs: a partial sync frees little, and trimming after each one made the next
/// fault its pages back in (2–4 ms of a one-endpoint sync at 10,000 services on this VM).
pub(super) fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free pages to the kernel; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}
