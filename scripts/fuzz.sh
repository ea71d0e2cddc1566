#!/usr/bin/env bash
# Runs the fuzz targets (fuzz/fuzz_targets/) with libFuzzer, each for a bounded time, on the
# stable toolchain: no nightly, no cargo-fuzz.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     # default: 60 seconds of each target
#
# The workspace's crates are built with coverage instrumentation (scripts/fuzz-rustc); the
# dependencies are the test build's own. Each target starts from seeds made from the repo's
# own examples (protocol fixtures, the example policy, the notify examples in the docs, and
# fuzz/regressions/TARGET/: inputs an earlier run failed on) and
# keeps what it finds in target/fuzz/corpus/TARGET, so a later run goes on from there.
# A crash, a panic, a hang past 10 s on one input, or 2 GiB of memory fails the run, leaves
# the input in target/fuzz/artifacts/TARGET/, and prints the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
all=(decode wire policy notify link webhook)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=("${all[@]}"); fi
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac
for target in "${targets[@]}"; do
  case " ${all[*]} " in
    *" $target "*) ;;
    *) echo "fuzz.sh: no target '$target' (there are: ${all[*]})" >&2; exit 2 ;;
  esac
done

echo "== fuzz: building ${targets[*]} with coverage"
bins=()
for target in "${targets[@]}"; do bins+=(--bin "$target"); done
RUSTC_WORKSPACE_WRAPPER="$PWD/scripts/fuzz-rustc" \
  cargo build --quiet -p switchboard-fuzz --features fuzz "${bins[@]}"
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

work=target/fuzz
seeds() {
  local target=$1 dir=$work/seeds/$1
  rm -rf "$dir"
  mkdir -p "$dir"
  local n=0
  case "$target" in
    decode)
      # A fixture's lines, after the byte that picks the decoder's chunk size.
      for file in crates/protocol/tests/fixtures/*/*.ndjson; do
        n=$((n + 1))
        { printf '\x07'; head -c 16384 "$file"; } >"$dir/$n"
      done ;;
    wire)
      for file in crates/protocol/tests/fixtures/*/*.ndjson; do
        while IFS= read -r line; do
          n=$((n + 1))
          printf '%s' "$line" >"$dir/$n"
        done <"$file"
      done ;;
    policy)
      for call in 'Bash\0{"command":"rm -rf /"}' 'Bash\0{"command":"git status && curl x"}' \
        'Read\0{"file_path":"../.env"}' 'Edit\0{"file_path":"src/main.rs"}' \
        'WebFetch\0{"url":"https://example.com/"}' 'Grep\0{"path":"secrets"}\0/work' \
        'Bash\0{"command":"cat < .env 2>&1 > src/x; grep -r K . | xargs rm; sh -c \x27cd ~/s && sed -i s/a/b/ $F\x27"}'; do
        n=$((n + 1))
        { cat examples/policy.toml; printf '\0'; printf "$call"; } >"$dir/$n"
      done ;;
    notify)
      # Every TOML example in the notifications guide.
      awk -v dir="$dir" '/^```toml/ { n++; inside = 1; next } /^```/ { inside = 0 }
        inside { print > (dir "/" n) }' docs/notifications.md ;;
    link)
      printf 'eyJzIjoiczEiLCJyIjoicjEiLCJlIjoxLCJjIjoiYXBpIn0.AAAA' >"$dir/1"
      printf 's1\0r1\0webhook:ops\0\x10A\x80.\xf0_' >"$dir/2"
      printf 'decision=deny&message=not%%20now&decision=allow' >"$dir/3" ;;
    webhook)
      # An event picked by the first byte, a template, a NUL, a payload.
      printf '\x00Fix {{check_run.name}} on {{check_run.check_suite.head_branch?}}\0{"action":"completed","check_run":{"name":"test","conclusion":"failure","output":{"title":"t","summary":"s"},"check_suite":{"head_branch":"feature"}}}' >"$dir/1"
      printf '\x02{{review.body}}\0{"action":"submitted","review":{"state":"changes_requested","body":"x","user":{"login":"a"}},"pull_request":{"number":1,"head":{"ref":"b"}}}' >"$dir/2"
      printf '\x04{{pull_request.labels.0.name}}\0{"action":"synchronize","pull_request":{"number":2,"head":{"ref":"c"},"mergeable":false}}' >"$dir/3" ;;
  esac
  # Every input a run once failed on stays a seed, so each later run replays it first.
  if [ -d "fuzz/regressions/$target" ]; then
    for file in fuzz/regressions/"$target"/*; do
      n=$((n + 1))
      cp "$file" "$dir/$n"
    done
  fi
}

# One target's run; its outcome in $work/TARGET.status (0: nothing found).
run() {
  local target=$1
  local corpus=$work/corpus/$target artifacts=$work/artifacts/$target log=$work/$target.log
  # This run's findings only (an earlier run's stay in the corpus, not here).
  rm -rf "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  local status=0
  "$target_dir/debug/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$corpus" "$work/seeds/$target" >"$log" 2>&1 || status=$?
  echo "$status" >"$work/$target.status"
}

# Targets run side by side, as many at once as there are cores (two on CI's machine).
jobs=$(nproc)
echo "== fuzz: ${targets[*]}, ${seconds}s each, $jobs at a time (corpus in $work/corpus)"
for target in "${targets[@]}"; do
  seeds "$target"
  rm -f "$work/$target.status"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run "$target" &
done
wait

failed=()
for target in "${targets[@]}"; do
  log=$work/$target.log
  if [ "$(cat "$work/$target.status" 2>/dev/null)" = 0 ]; then
    stats=$(grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" |
      sed -E 's/^stat::([a-z_]+): +/\1=/' | tr '\n' ' ' || true)
    echo "   $target: nothing found ($stats)"
  else
    tail -n 40 "$log"
    artifacts=$work/artifacts/$target
    found=$(find "$artifacts" -type f -printf '%f\n' 2>/dev/null | head -n 1 || true)
    if [ -n "$found" ]; then
      echo "fuzz: $target failed; replay with: $target_dir/debug/$target $artifacts/$found"
    else
      echo "fuzz: $target failed and left no input (killed? see $log)"
    fi
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s), ${seconds}s each, nothing found"
