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

VERSION="0.20.2"
CACHE="${SWITCHBOARD_TOOL_CACHE:-$HOME/.cache/switchboard/tools}"
root="$CACHE/cargo-deny-$VERSION"
bin="$root/bin/cargo-deny"

if [ ! -x "$bin" ]; then
  echo "deny: installing cargo-deny $VERSION into $root (once) ..." >&2
  # Installed into a fresh folder beside the final one, then swapped in: an interrupted
  # install leaves no half copy where the next run would take it for whole.
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.install-cargo-deny.XXXXXX")"
  if ! cargo install cargo-deny --version "=$VERSION" --locked --root "$tmp" --quiet; then
    rm -rf "$tmp"
    echo "deny: cargo could not install cargo-deny $VERSION" >&2
    exit 1
  fi
  rm -rf "$root"
  mv "$tmp" "$root"
fi

case "${1:-}" in
  "") checks=(licenses bans sources) ;;
  advisories) checks=(advisories licenses bans sources) ;;
  *) echo "deny: unknown argument $1 (none, or advisories)" >&2; exit 2 ;;
esac
exec "$bin" deny --workspace check "${checks[@]}"
