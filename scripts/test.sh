#!/usr/bin/env bash
# The test suite: every crate's unit, integration and doc tests.
# Uses cargo-nextest when it is installed (faster, parallel per test), cargo test otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

# The real Claude Code CLIs the integration tests run (cached outside the repo).
./scripts/install-clis.sh
# Chromium and playwright-core for the web UI's browser tests.
./scripts/install-browser.sh

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --lib --bins --tests --no-fail-fast
else
  cargo test --workspace --lib --bins --tests --no-fail-fast
fi
cargo test --workspace --doc
