#!/usr/bin/env bash
# The web UI's third-party libraries, copied from the npm registry into
# crates/server/ui/vendor/ (committed, so `cargo build` needs no Node).
#
#   scripts/vendor-ui.sh          fetch the pinned versions and copy them in
#   scripts/vendor-ui.sh --check  fail if the committed copies differ from the packages (CI)
set -euo pipefail

cd "$(dirname "$0")/.."
vendor=crates/server/ui/vendor

# package@version  file in the package  name in vendor/
files=(
  "marked@18.2.1 lib/marked.esm.js marked.esm.js"
  "dompurify@3.4.18 dist/purify.es.mjs purify.es.mjs"
  "@highlightjs/cdn-assets@11.12.0 es/highlight.min.js highlight.min.js"
  "@highlightjs/cdn-assets@11.12.0 styles/github.min.css highlight-github.min.css"
  "@highlightjs/cdn-assets@11.12.0 styles/github-dark.min.css highlight-github-dark.min.css"
  "diff@9.0.0 dist/diff.min.js diff.min.js"
  "uplot@1.6.32 dist/uPlot.esm.js uPlot.esm.js"
  "uplot@1.6.32 dist/uPlot.min.css uPlot.min.css"
  "@xterm/xterm@6.0.0 lib/xterm.mjs xterm.mjs"
  "@xterm/xterm@6.0.0 css/xterm.css xterm.css"
  "@xterm/addon-fit@0.11.0 lib/addon-fit.mjs addon-fit.mjs"
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
packages=$(printf '%s\n' "${files[@]}" | cut -d' ' -f1 | sort -u)
echo "vendor-ui: installing $(echo $packages | tr '\n' ' ')" >&2
(cd "$work" && npm init -y >/dev/null && npm install --ignore-scripts --no-audit --no-fund --silent $packages)

status=0
for entry in "${files[@]}"; do
  read -r spec path name <<<"$entry"
  package=${spec%@*}
  source="$work/node_modules/$package/$path"
  if [[ "${1:-}" == "--check" ]]; then
    if ! cmp -s "$source" "$vendor/$name"; then
      echo "vendor-ui: $vendor/$name is not $spec's $path (run scripts/vendor-ui.sh)" >&2
      status=1
    fi
  else
    cp "$source" "$vendor/$name"
    echo "vendor-ui: $vendor/$name <- $spec $path" >&2
  fi
done
if [[ "${1:-}" == "--check" && $status == 0 ]]; then
  echo "vendor-ui: the vendored libraries match their packages" >&2
fi
exit $status
