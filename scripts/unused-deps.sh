#!/usr/bin/env bash
# Fails when a crate of the workspace names a dependency its code never uses (cargo-machete,
# which reads the sources: fast, and no build). A dependency that is used in a way it cannot
# see (a derive's runtime crate, say) is listed under `[package.metadata.cargo-machete]
# ignored` in that crate's Cargo.toml, with the reason beside it.
#
#   scripts/unused-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/cargo-tool.sh
cargo_tool cargo-machete 0.9.2
exec "$tool_bin"
