#!/usr/bin/env bash
# Lists the workspace's direct dependencies that are behind their newest stable major (for
# 0.x crates, their newest minor), read from the crates.io sparse index.
#
#   scripts/outdated.sh           a table of every direct dependency (behind ones marked)
#   scripts/outdated.sh --json    the same as JSON, for scripts
#   scripts/outdated.sh --check   exits 1 when any is behind without a reason
#
# A dependency is held, not behind, when a crate from the registry that the workspace builds
# depends on the same line (axum on tokio-tungstenite 0.29, say): moving on would build the crate
# twice. The table names who holds it, read from Cargo.lock, so the reason is checked each run.
#
# Needs cargo, curl and python3 (3.11 or newer: it reads Cargo.lock with tomllib). CRATES_INDEX overrides the index (default
# https://index.crates.io).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="table"
case "${1:-}" in
  "") ;;
  --json) mode="json" ;;
  --check) mode="check" ;;
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "outdated: unknown option $1 (try --help)" >&2; exit 2 ;;
esac

for tool in cargo curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "outdated: $tool is not installed" >&2; exit 1; }
done

metadata="$(mktemp)"
trap 'rm -f "$metadata"' EXIT
cargo metadata --format-version 1 --no-deps --locked >"$metadata"

INDEX="${CRATES_INDEX:-https://index.crates.io}" MODE="$mode" METADATA="$metadata" python3 - <<'PY'
import json, os, re, subprocess, sys

index = os.environ["INDEX"].rstrip("/")
mode = os.environ["MODE"]
with open(os.environ["METADATA"]) as f:
    metadata = json.load(f)

# Direct dependencies from the registry, with every requirement the workspace states.
wanted = {}
for package in metadata["packages"]:
    for dep in package["dependencies"]:
        source = dep.get("source") or ""
        if not source.startswith("registry+"):
            continue
        wanted.setdefault(dep["name"], set()).add(dep["req"])

def index_path(name):
    name = name.lower()
    if len(name) <= 2:
        return f"{len(name)}/{name}"
    if len(name) == 3:
        return f"3/{name[0]}/{name}"
    return f"{name[:2]}/{name[2:4]}/{name}"

def parse(version):
    core = version.split("+")[0]
    if "-" in core:
        return None  # a pre-release
    parts = core.split(".")
    try:
        return tuple(int(part) for part in parts[:3])
    except ValueError:
        return None

def line_of(version):
    """What a caret requirement keeps: the major, or for 0.x the minor (0.0.x: the patch)."""
    major, minor, patch = (list(version) + [0, 0, 0])[:3]
    if major > 0:
        return (major,)
    if minor > 0:
        return (0, minor)
    return (0, 0, patch)

def requirement_line(req):
    match = re.search(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", req)
    if not match:
        return None
    numbers = [int(group) for group in match.groups() if group is not None]
    major = numbers[0]
    minor = numbers[1] if len(numbers) > 1 else None
    if major > 0:
        return (major,)
    if minor is None or minor > 0:
        return (0, minor if minor is not None else 0)
    return (0, 0, numbers[2] if len(numbers) > 2 else 0)

def newest(name):
    url = f"{index}/{index_path(name)}"
    out = subprocess.run(["curl", "-fsS", "--max-time", "30", url], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"outdated: could not read {url}: {out.stderr.strip()}")
    best = None
    for line in out.stdout.splitlines():
        entry = json.loads(line)
        if entry.get("yanked"):
            continue
        version = parse(entry["vers"])
        if version and (best is None or version > best[0]):
            best = (version, entry["vers"])
    return best[1] if best else None

# Who else builds each crate, and at which version: registry packages of Cargo.lock whose
# dependencies name it ("name" alone when one version is locked, "name version" otherwise).
import tomllib
with open("Cargo.lock", "rb") as f:
    lock = tomllib.load(f)["package"]
locked = {}
for package in lock:
    locked.setdefault(package["name"], []).append(package["version"])
users = {}
for package in lock:
    if not (package.get("source") or "").startswith("registry+"):
        continue
    for dep in package.get("dependencies", []):
        parts = dep.split(" ")
        version = parts[1] if len(parts) > 1 else locked.get(parts[0], [None])[0]
        users.setdefault((parts[0], version), set()).add(package["name"])

def holders(name, reqs):
    """The registry crates that build `name` at the line the workspace asks for."""
    lines = {requirement_line(req) for req in reqs}
    found = set()
    for version in locked.get(name, []):
        parsed = parse(version)
        if parsed and line_of(parsed) in lines:
            found |= users.get((name, version), set())
    return sorted(found)

rows = []
for name in sorted(wanted):
    latest = newest(name)
    reqs = sorted(wanted[name])
    latest_line = line_of(parse(latest)) if latest else None
    behind = [req for req in reqs if requirement_line(req) != latest_line]
    held_by = holders(name, behind) if behind else []
    rows.append({"name": name, "requirements": reqs, "newest": latest,
                 "behind": bool(behind) and not held_by, "held_by": held_by})

if mode == "json":
    json.dump(rows, sys.stdout, indent=2)
    print()
    sys.exit(0)

width = max(len(row["name"]) for row in rows)
for row in rows:
    mark = "BEHIND" if row["behind"] else (
        f"held: {', '.join(row['held_by'])} build{'s' if len(row['held_by']) == 1 else ''} this line"
        if row["held_by"] else "ok")
    print(f"{row['name']:<{width}}  {', '.join(row['requirements']):<16}  newest {row['newest']:<10}  {mark}")
behind = [row["name"] for row in rows if row["behind"]]
held = [row["name"] for row in rows if row["held_by"]]
print(f"\n{len(behind)} of {len(rows)} direct dependencies behind their newest major" + (f": {', '.join(behind)}" if behind else "")
      + (f"; {len(held)} held where another crate builds the same line: {', '.join(held)}" if held else ""))
if mode == "check" and behind:
    sys.exit(1)
PY
