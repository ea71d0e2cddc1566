#!/usr/bin/env bash
# The soak: sessions started, streamed, approved and stopped, two at a time, against a real
# `switchboard serve` and the real CLI, for SECONDS (default 600), with the daemon's memory
# and open descriptors sampled every 5 s and printed. It fails when memory is not flat at the
# end (the last fifth's median more than 1.25x the second fifth's plus 8 MiB), when
# descriptors do not come back to their idle count (within 8), when a subscriber missed or
# repeated an event, or when a process a session started is left.
#
#   scripts/soak.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
case "$seconds" in
  '' | *[!0-9]*) echo "soak.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac
./scripts/install-clis.sh >/dev/null
echo "== soak: ${seconds}s of sessions against switchboard serve"
export SWITCHBOARD_SOAK_SECS=$seconds
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run -p switchboard-cli --test it --run-ignored only -E 'test(/^soak::/)' \
    --no-capture --status-level fail --final-status-level fail
else
  cargo test -p switchboard-cli --test it soak:: -- --ignored --nocapture
fi
