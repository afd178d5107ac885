//! Kernel timestamps are CLOCK_MONOTONIC (`bpf_ktime_get_ns`); traces need
//! wall-clock time. One anchor taken at start converts between them.

/// Pairs a CLOCK_MONOTONIC reading with a CLOCK_REALTIME reading.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    realtime_minus_monotonic_ns: i128,
}

impl WallClock {
    /// Anchors now. Wall-clock steps after this (NTP slews) are not followed;
    /// for the seconds a Pod takes to start that error is negligible.
    pub fn anchor() -> Self {
        let monotonic = clock_ns(libc::CLOCK_MONOTONIC);
        let realtime = clock_ns(libc::CLOCK_REALTIME);
        Self {
            realtime_minus_monotonic_ns: realtime - monotonic,
        }
    }

    /// A clock with a known offset (from a recording made elsewhere).
    pub fn from_offset(realtime_minus_monotonic_ns: i128) -> Self {
        Self {
            realtime_minus_monotonic_ns,
        }
    }

    /// CLOCK_MONOTONIC now, in nanoseconds: the kernel timestamps' clock.
    pub fn monotonic_now_ns() -> u64 {
        u64::try_from(clock_ns(libc::CLOCK_MONOTONIC)).unwrap_or(0)
    }

    /// CLOCK_REALTIME − CLOCK_MONOTONIC, in nanoseconds.
    pub fn realtime_minus_monotonic_ns(&self) -> i128 {
        self.realtime_minus_monotonic_ns
    }

    /// Unix time in nanoseconds of a kernel timestamp.
    pub fn unix_ns(&self, monotonic_ns: u64) -> u64 {
        (i128::from(monotonic_ns) + self.realtime_minus_monotonic_ns).clamp(0, i128::from(u64::MAX))
            as u64
    }

    /// The kernel timestamp of a unix time in nanoseconds (the inverse of
    /// [`Self::unix_ns`]).
    pub fn monotonic_ns(&self, unix_ns: u64) -> u64 {
        (i128::from(unix_ns) - self.realtime_minus_monotonic_ns).clamp(0, i128::from(u64::MAX))
            as u64
    }
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; both clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// CLOCK_MONOTONIC now, in the kernel's `bpf_ktime_get_ns` units.
pub fn monotonic_now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_now_maps_to_system_time_now() {
        let clock = WallClock::anchor();
        let unix_ns = clock.unix_ns(monotonic_now_ns());
        let system_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(
            unix_ns.abs_diff(system_ns) < 50_000_000,
            "{unix_ns} vs {system_ns}"
        );
    }
}
