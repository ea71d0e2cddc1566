#!/usr/bin/env bash
# Checks the dependency graph with cargo-deny: licenses, bans (duplicate versions, yanked
# crates, wildcards) and sources, as deny.toml says. Installs the pinned cargo-deny from
# crates.io into a cache outside the repository the first time (a few minutes of compiling):
#
#   ${SWITCHBOARD_TOOL_CACHE:-$HOME/.cache/switchboard/tools}/cargo-deny-<version>/bin/cargo-deny
#
#   scripts/deny.sh               licenses, bans and sources (what CI runs; offline)
#   scripts/deny.sh advisories    the RustSec advisories too (fetches the advisory database,
#                                 so it needs the network: run it by hand)
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/cargo-tool.sh
cargo_tool cargo-deny 0.20.2

case "${1:-}" in
  "") checks=(licenses bans sources) ;;
  advisories) checks=(advisories licenses bans sources) ;;
  *) echo "deny: unknown argument $1 (none, or advisories)" >&2; exit 2 ;;
esac
exec "$tool_bin" deny --workspace check "${checks[@]}"
