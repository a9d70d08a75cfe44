//! A cheap monotonic clock for timing commands.
//!
//! Every command is timed when latency tracking is on (Redis's default), one clock read
//! per command. `Instant::now()` is a vDSO `clock_gettime`: ~35 ns in a tight loop and
//! 4-5% of a shard's CPU at PING/GET -P 16 (perf), more than the command itself. When
//! the kernel itself keeps time with the TSC (its clocksource is `tsc`, which it only
//! picks when the TSC is invariant and in step across CPUs), a stamp is one `rdtsc`
//! (~12 ns, no memory access) and ticks become nanoseconds with a factor measured
//! once at start (`calibrate`), as Redis's monotonic clock does with
//! `USE_PROCESSOR_CLOCK`. Anywhere else stamps are nanoseconds since a process-wide
//! origin taken from `Instant`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds per TSC tick in 32.32 fixed point; 0 while stamps come from `Instant`.
static NS_PER_TICK_FP: AtomicU64 = AtomicU64::new(0);

/// Origin of `Instant`-based stamps.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// A point in time, only meaningful against another stamp from this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// Now.
    #[inline]
    pub fn now() -> Stamp {
        if NS_PER_TICK_FP.load(Ordering::Relaxed) != 0 {
            return Stamp(read_tsc());
        }
        let origin = *ORIGIN.get_or_init(Instant::now);
        Stamp(origin.elapsed().as_nanos() as u64)
    }

    /// Nanoseconds from `earlier` to this stamp (0 if `earlier` is later).
    #[inline]
    pub fn ns_since(self, earlier: Stamp) -> u64 {
        let delta = self.0.saturating_sub(earlier.0);
        match NS_PER_TICK_FP.load(Ordering::Relaxed) {
            0 => delta,
            fp => ((delta as u128 * fp as u128) >> 32) as u64,
        }
    }
}

/// Switches stamps to the TSC when the kernel's clocksource is `tsc`, measuring its
/// rate against `Instant` over `window`. Call once at start, before any stamp is
/// taken (stamps from before and after would not compare). Returns whether the TSC
/// is in use.
pub fn calibrate(window: Duration) -> bool {
    if !kernel_uses_tsc() {
        return false;
    }
    match measure_ns_per_tick(window) {
        Some(fp) => {
            NS_PER_TICK_FP.store(fp, Ordering::Relaxed);
            tracing::debug!(
                ns_per_tick = fp as f64 / 4294967296.0,
                "command timing uses the TSC"
            );
            true
        }
        None => false,
    }
}

fn kernel_uses_tsc() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

/// The TSC's period in nanoseconds (32.32 fixed point), or None if it looks wrong
/// (not advancing, or slower than 10 MHz / faster than 100 GHz).
fn measure_ns_per_tick(window: Duration) -> Option<u64> {
    let (t0, c0) = (Instant::now(), read_tsc());
    std::thread::sleep(window);
    let (t1, c1) = (Instant::now(), read_tsc());
    let ns = t1.duration_since(t0).as_nanos();
    let ticks = c1.checked_sub(c0)? as u128;
    if ticks == 0 {
        return None;
    }
    let fp = (ns << 32) / ticks;
    let plausible = (1u128 << 32) / 100..=(100u128 << 32);
    plausible.contains(&fp).then_some(fp as u64)
}

#[inline]
fn read_tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; x86-64 always has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_measure_elapsed_time_in_either_mode() {
        let a = Stamp::now();
        std::thread::sleep(Duration::from_millis(20));
        let b = Stamp::now();
        let before = b.ns_since(a);
        assert!((15_000_000..2_000_000_000).contains(&before), "{before}");
        assert_eq!(a.ns_since(b), 0);
        // After calibration (when the TSC is usable) fresh stamps still agree with
        // Instant to within a few percent.
        calibrate(Duration::from_millis(20));
        let (i0, s0) = (Instant::now(), Stamp::now());
        std::thread::sleep(Duration::from_millis(30));
        let (s1, i1) = (Stamp::now(), Instant::now());
        let want = i1.duration_since(i0).as_nanos() as f64;
        let got = s1.ns_since(s0) as f64;
        assert!(
            (got - want).abs() / want < 0.05,
            "stamp {got} ns vs Instant {want} ns"
        );
    }
}
