#!/usr/bin/env bash
# The soak: sessions started, streamed, approved and stopped, two at a time, against a real
# `switchboard serve` and the real CLI, for SECONDS (default 600), with the daemon's memory
# and open descriptors sampled every 5 s and printed. It fails when memory is not flat at the
# end (the last fifth's median more than 1.25x the second fifth's plus 8 MiB), when
# descriptors do not come back to their idle count (within 8), when a subscriber missed or
# repeated an event, or when a process a session started is left.
#
#   scripts/soak.sh [SECONDS]     # 60 to 1080 (the runner ends a test after 20 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
case "$seconds" in
  '' | *[!0-9]*) echo "soak.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac
if [ "$seconds" -lt 60 ] || [ "$seconds" -gt 1080 ]; then
  echo "soak.sh: SECONDS must be from 60 (enough samples to judge memory) to 1080, not $seconds" >&2
  exit 2
fi
./scripts/install-clis.sh >/dev/null
echo "== soak: ${seconds}s of sessions against switchboard serve"
export SWITCHBOARD_SOAK_SECS=$seconds
# The whole workspace's selection, as scripts/test.sh builds it: the same features, so the
# test build is reused, not built again for one package.
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --lib --bins --tests --run-ignored only \
    -E 'package(switchboard-cli) & test(/^soak::/)' \
    --no-capture --status-level fail --final-status-level fail
else
  timeout $((seconds + 600)) cargo test -p switchboard-cli --test it soak:: -- --ignored --nocapture
fi
