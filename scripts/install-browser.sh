#!/usr/bin/env bash
# What the browser tests need: Debian's Chromium (Playwright never downloads a browser) and
# playwright-core, pinned in e2e/package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/.."

chromium=${SWITCHBOARD_CHROMIUM:-/usr/bin/chromium}
if [[ ! -x "$chromium" ]]; then
  echo "install-browser: installing Debian's chromium" >&2
  if [[ $(id -u) == 0 ]]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
    echo "install-browser: $chromium is missing and this user cannot install packages: install chromium (apt-get install chromium) or set SWITCHBOARD_CHROMIUM" >&2
    exit 1
  fi
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >&2
fi

if [[ ! -d e2e/node_modules/playwright-core ]] || ! cmp -s e2e/package-lock.json e2e/node_modules/.package-lock.json 2>/dev/null; then
  echo "install-browser: installing playwright-core (e2e/package-lock.json)" >&2
  (cd e2e && npm ci --ignore-scripts --no-audit --no-fund --silent)
fi
