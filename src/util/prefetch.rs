//! Software prefetch: a hint that some memory is about to be read, so the cache miss
//! overlaps other work instead of stalling it. Never faults, never changes results.

/// Starts loading the cache line holding `p` into every cache level.
#[inline(always)]
pub fn read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint: it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts loading the cache lines of `items` (at most `max_lines` of them), e.g. a
/// buffer another core just wrote: the misses then overlap instead of coming one at a
/// time as the buffer is read.
#[inline]
pub fn read_slice<T>(items: &[T], max_lines: usize) {
    let bytes = std::mem::size_of_val(items);
    let start = items.as_ptr().cast::<u8>();
    for line in 0..bytes.div_ceil(64).min(max_lines) {
        read(start.wrapping_add(line * 64));
    }
}
