//! What the store's benches share: the process's CPU time from `/proc`, and their flags.

#![allow(dead_code)]

/// CPU time (ns) of this process (Linux; user + system of every thread).
pub(crate) fn process_cpu_ns() -> u64 {
    stat_cpu_ns(std::path::Path::new("/proc/self/stat"))
}

/// CPU time (ns), user + system, in a `/proc` `stat` file (0 if unreadable).
pub(crate) fn stat_cpu_ns(path: &std::path::Path) -> u64 {
    let Ok(stat) = std::fs::read_to_string(path) else { return 0 };
    // Fields after the command name (which may hold spaces) start at `)`.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |times| times.iter().filter_map(|value| value.parse::<u64>().ok()).sum());
    // Clock ticks are 1/100 s on Linux.
    ticks * 10_000_000
}

/// The value after flag `name` on the command line, or `default`.
pub(crate) fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
