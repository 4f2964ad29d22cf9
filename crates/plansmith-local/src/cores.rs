//! How many cores the model may use: the physical cores among the CPUs this process may run on
//! (its affinity), and no more than its CPU quota (cgroup) allows.
//!
//! llama.cpp's threads each keep a core busy through a whole matrix product, so two threads on
//! the two hyperthreads of one core run no faster than one, and a thread beyond the process's
//! quota only waits at every barrier. `std::thread::available_parallelism` already counts the
//! affinity and the quota, but in logical CPUs; the physical cores come from Linux's CPU
//! topology (`/sys/devices/system/cpu/cpuN/topology`). Elsewhere, or when that cannot be read,
//! the logical count stands.
//!
//! Generation takes the cores other work leaves idle ([`idle_physical`]). Measured on a 2-core
//! machine with `llama-bench -n 64` (0.5B Q4_K_M): idle, 2 threads generate 27.7 tok/s against
//! 17.6 for 1; with both cores kept busy by two other processes, 2 threads fall to 7.6 tok/s
//! and 1 thread keeps 11.2, because each of llama.cpp's threads waits at every barrier for the
//! slowest, and a thread that shares its core with another process is slow.

use std::collections::HashSet;

/// Logical CPUs this process may use (affinity and cgroup quota counted), at least 1.
pub(crate) fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Physical cores this process may use, at least 1 (see the module docs).
pub(crate) fn physical() -> usize {
    let logical = available();
    let allowed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
                .and_then(|list| cpu_list(list.trim()))
        });
    let Some(allowed) = allowed else {
        return logical;
    };
    let mut cores = HashSet::new();
    for cpu in allowed {
        let read = |what: &str| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
                .ok()
                .map(|text| text.trim().to_owned())
        };
        match (read("physical_package_id"), read("core_id")) {
            (Some(package), Some(core)) => {
                cores.insert((package, core));
            }
            _ => return logical,
        }
    }
    cores.len().clamp(1, logical)
}

/// The physical cores that other work leaves idle: [`physical`] less the system's load
/// average over the last minute (`/proc/loadavg`, rounded down), at least 1. Read once, when
/// a model loads.
pub(crate) fn idle_physical() -> usize {
    let cores = physical();
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok())
        .filter(|load| load.is_finite() && *load >= 0.0);
    match load {
        // Truncation is the rounding down meant here; the value is small and positive.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some(load) => cores.saturating_sub(load as usize).max(1),
        None => cores,
    }
}

/// The CPUs of a Linux CPU list (`0-3,8,10-11`); `None` when it does not read as one.
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (from.parse::<usize>().ok()?, to.parse::<usize>().ok()?);
                // A list longer than any machine's CPUs is not a CPU list.
                if to < from || to - from > 65_536 {
                    return None;
                }
                cpus.extend(from..=to);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_linux_writes_them() {
        assert_eq!(cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(cpu_list("0-2,8,10-11"), Some(vec![0, 1, 2, 8, 10, 11]));
        assert_eq!(cpu_list("5"), Some(vec![5]));
        for bad in ["", "a", "3-1", "0-", "0-99999999"] {
            assert_eq!(cpu_list(bad), None, "{bad}");
        }
    }

    #[test]
    fn physical_cores_are_at_least_one_and_at_most_the_logical_cpus() {
        let cores = physical();
        assert!(cores >= 1 && cores <= available(), "{cores}");
        let idle = idle_physical();
        assert!(idle >= 1 && idle <= cores, "{idle} of {cores}");
    }
}
