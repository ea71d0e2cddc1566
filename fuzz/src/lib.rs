//! Fuzz targets for what Switchboard reads from hostile hands: the CLI's NDJSON stream, the
//! typed messages, a policy file, a notify file, and a one-tap link with its form. Each target
//! is a binary under `fuzz_targets/`; `scripts/fuzz.sh` builds them with coverage and runs each
//! for a bounded time (CI runs a minute of each), from seeds it makes of the repo's own
//! examples into `target/fuzz/seeds/`.
