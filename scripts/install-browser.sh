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

# Installed already when every package the lockfile pins is there at its pinned version (npm's
# own hidden lockfile never equals package-lock.json byte for byte, so it is not compared).
installed() {
  node -e '
    const fs = require("fs");
    const lock = JSON.parse(fs.readFileSync("e2e/package-lock.json", "utf8"));
    for (const [path, entry] of Object.entries(lock.packages || {})) {
      if (!path.startsWith("node_modules/")) continue;
      let found;
      try { found = JSON.parse(fs.readFileSync(`e2e/${path}/package.json`, "utf8")).version; } catch { process.exit(1); }
      if (found !== entry.version) process.exit(1);
    }
  ' 2>/dev/null
}
if ! installed; then
  echo "install-browser: installing playwright-core and the ACP client (e2e/package-lock.json)" >&2
  (cd e2e && npm ci --ignore-scripts --no-audit --no-fund --silent)
fi
