//! What the benches share (each includes this file as `mod support`): this process's CPU
//! time, a `/proc/PID/status` field, and a median.

#![allow(dead_code)] // each bench uses its part

/// This process's CPU time so far, in µs (user + system, every thread's, exited ones too).
pub(crate) fn own_cpu_micros() -> u64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    let micros =
        |time: nix::sys::time::TimeVal| time.tv_sec() as u64 * 1_000_000 + time.tv_usec() as u64;
    micros(usage.user_time()) + micros(usage.system_time())
}

/// A KiB field of `/proc/PROCESS/status` (`VmRSS:`, `VmHWM:`), `process` a pid or `self`; 0
/// when it cannot be read.
pub(crate) fn status_kib(process: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{process}/status")).unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// The median of `values` (sorted in place); 0 for none.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
