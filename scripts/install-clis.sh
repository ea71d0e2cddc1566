#!/usr/bin/env bash
# Installs real Claude Code CLIs from the npm registry into a cache outside the repository
# (so CI and repeated runs install once):
#
#   ${SWITCHBOARD_CLI_CACHE:-$HOME/.cache/switchboard/claude-code}/<version>/node_modules/.bin/claude
#
#   scripts/install-clis.sh              the pinned versions in scripts/cli-versions
#   scripts/install-clis.sh 2.1.200 ...  the versions named
#
# Prints where each one is. Needs node and npm (the older CLIs are Node programs; newer ones
# ship a native binary that npm picks for this platform). Installs run two at a time.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SWITCHBOARD_CLI_CACHE:-$HOME/.cache/switchboard/claude-code}"

if [ "$#" -gt 0 ]; then
  requested=("$@")
else
  mapfile -t requested < <(grep -Ev '^[[:space:]]*(#|$)' scripts/cli-versions)
fi
# Each version once: two installs of one version would race for its folder.
mapfile -t VERSIONS < <(printf '%s\n' "${requested[@]}" | awk 'NF && !seen[$0]++')

if ! command -v npm >/dev/null 2>&1; then
  echo "install-clis: npm is not installed; install Node.js (20 or newer) and npm first" >&2
  exit 1
fi

install_one() {
  local version="$1"
  if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "install-clis: $version is not a version number (like 2.1.330)" >&2
    return 1
  fi
  local dir="$CACHE/$version"
  local bin="$dir/node_modules/.bin/claude"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$version "; then
    echo "claude $version: $bin (cached)"
    return 0
  fi
  echo "claude $version: installing into $dir ..."
  mkdir -p "$CACHE"
  # Install into a fresh folder, then swap it in, so an interrupted install leaves no half copy.
  local tmp
  tmp="$(mktemp -d "$CACHE/.install-$version.XXXXXX")"
  if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$version" >&2; then
    rm -rf "$tmp"
    echo "install-clis: npm could not install @anthropic-ai/claude-code@$version" >&2
    return 1
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  if ! "$bin" --version 2>/dev/null | grep -q "^$version "; then
    echo "install-clis: $bin does not report version $version" >&2
    return 1
  fi
  echo "claude $version: $bin"
}

# Two at a time: the downloads overlap, and a failure still names its version.
status=0
pids=()
for version in "${VERSIONS[@]}"; do
  install_one "$version" &
  pids+=("$!")
  if [ "${#pids[@]}" -ge 2 ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
exit "$status"
