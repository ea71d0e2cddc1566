#!/usr/bin/env bash
# Installs the pinned real Claude Code CLIs the tests run, from the npm registry, into a cache
# outside the repository (so CI and repeated runs install once):
#
#   ${SWITCHBOARD_CLI_CACHE:-$HOME/.cache/switchboard/claude-code}/<version>/node_modules/.bin/claude
#
# 2.1.330: the current native CLI (stdio transport).
# 2.1.120: the last CLI that accepts a non-Anthropic --sdk-url (native).
# 2.1.37:  the older --sdk-url line, which reconnects differently (needs Node).
# Prints where each one is. Needs node and npm.
set -euo pipefail

VERSIONS=("2.1.330" "2.1.120" "2.1.37")
CACHE="${SWITCHBOARD_CLI_CACHE:-$HOME/.cache/switchboard/claude-code}"

if ! command -v npm >/dev/null 2>&1; then
  echo "install-clis: npm is not installed; install Node.js (20 or newer) and npm first" >&2
  exit 1
fi

for version in "${VERSIONS[@]}"; do
  dir="$CACHE/$version"
  bin="$dir/node_modules/.bin/claude"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$version "; then
    echo "claude $version: $bin (cached)"
    continue
  fi
  echo "claude $version: installing into $dir ..."
  mkdir -p "$dir"
  # Install into a fresh folder, then swap it in, so an interrupted install leaves no half copy.
  tmp="$(mktemp -d "$CACHE/.install-$version.XXXXXX")"
  if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$version" >&2; then
    rm -rf "$tmp"
    echo "install-clis: npm could not install @anthropic-ai/claude-code@$version" >&2
    exit 1
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  if ! "$bin" --version 2>/dev/null | grep -q "^$version "; then
    echo "install-clis: $bin does not report version $version" >&2
    exit 1
  fi
  echo "claude $version: $bin"
done
