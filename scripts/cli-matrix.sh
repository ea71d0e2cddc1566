#!/usr/bin/env bash
# Runs the project's capture scenarios through real Claude Code CLIs against the test kit's
# fake Anthropic API, and writes a drift report: types, fields and field shapes that not every
# version writes, and every line the protocol model did not read cleanly.
#
#   scripts/cli-matrix.sh [--out DIR] [--strict] [--json] [--only SCENARIOS] [VERSION...]
#
# Without versions: the pinned list in scripts/cli-versions. The CLIs are installed into the
# cache outside the repository (scripts/install-clis.sh). Transcripts go to
# DIR/<version>/<scenario>.ndjson and the report to DIR/report.md (DIR defaults to
# target/cli-matrix). --strict exits 1 when a scenario fails or a line is not read cleanly;
# --json prints the summary as JSON. docs/cli-drift.md is this report for the pinned list.
set -euo pipefail
cd "$(dirname "$0")/.."

out="target/cli-matrix"
options=()
versions=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --out)
      [ "$#" -ge 2 ] || { echo "cli-matrix: --out needs a directory" >&2; exit 2; }
      out="$2"; shift 2 ;;
    --only)
      [ "$#" -ge 2 ] || { echo "cli-matrix: --only needs a list of scenarios" >&2; exit 2; }
      options+=("$1" "$2"); shift 2 ;;
    --strict|--json) options+=("$1"); shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cli-matrix: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) versions+=("$1"); shift ;;
  esac
done
if [ "${#versions[@]}" -eq 0 ]; then
  mapfile -t versions < <(grep -Ev '^[[:space:]]*(#|$)' scripts/cli-versions)
fi

./scripts/install-clis.sh "${versions[@]}" >&2
cargo build -q -p switchboard-testkit --bin cli-matrix -p switchboard-cli --bin switchboard
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
status=0
"$target_dir/debug/cli-matrix" --out "$out" "${options[@]}" "${versions[@]}" || status=$?
# The same transcripts through `switchboard decode`, as a user checks a CLI's output: every
# line decoded, none malformed, each typed reading re-encoding to the same value.
shopt -s nullglob
transcripts=("$out"/*/*.ndjson)
if [ "${#transcripts[@]}" -gt 0 ]; then
  if ! "$target_dir/debug/switchboard" decode --capture --strict --roundtrip "${transcripts[@]}" \
      > "$out/decode.txt"; then
    echo "cli-matrix: switchboard decode --strict --roundtrip found problems ($out/decode.txt)" >&2
    [ "$status" -ne 0 ] || status=1
  fi
  tail -n 1 "$out/decode.txt" >&2
fi
exit "$status"
