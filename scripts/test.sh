#!/usr/bin/env bash
# The test suite: every crate's unit, integration and doc tests.
# Uses cargo-nextest when it is installed (faster, parallel per test), cargo test otherwise.
# Ends with one line counting every test run: `tests: N passed, N failed`.
set -euo pipefail
cd "$(dirname "$0")/.."

# The real Claude Code CLIs the integration tests run (cached outside the repo).
./scripts/install-clis.sh
# Chromium and playwright-core for the web UI's browser tests.
./scripts/install-browser.sh
# grpcio-tools (PyPI), for the Python client of the gRPC API (in a venv outside the repo).
./scripts/install-python.sh
# Debian's PostgreSQL and NATS for the fleet's tests (each test starts its own instance).
./scripts/install-servers.sh

suite_log="$(mktemp)"
doc_log="$(mktemp)"
trap 'rm -f "$suite_log" "$doc_log"' EXIT
set +e
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --lib --bins --tests --no-fail-fast 2>&1 | tee "$suite_log"
  suite=${PIPESTATUS[0]}
  # Its closing line: "Summary [...] N tests run: P passed, F failed, S skipped".
  summary=$(grep -E '^ *Summary \[' "$suite_log" | tail -n 1)
else
  cargo test --workspace --lib --bins --tests --no-fail-fast 2>&1 | tee "$suite_log"
  suite=${PIPESTATUS[0]}
  summary=$(grep -E '^test result:' "$suite_log")
fi
cargo test --workspace --doc 2>&1 | tee "$doc_log"
docs=${PIPESTATUS[0]}
set -e

# Adds up "N passed" (or "N failed") over the given lines.
count() {
  grep -oE "[0-9]+ $1" | awk '{ total += $1 } END { print total + 0 }'
}
lines="$summary
$(grep -E '^test result:' "$doc_log")"
passed=$(printf '%s\n' "$lines" | count passed)
failed=$(printf '%s\n' "$lines" | count failed)
echo "tests: $passed passed, $failed failed"
if [ "$suite" -ne 0 ] || [ "$docs" -ne 0 ]; then
  exit 1
fi
