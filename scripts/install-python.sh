#!/usr/bin/env bash
# The Python packages the gRPC client test needs (e2e/requirements-grpc.txt: grpcio-tools from
# PyPI), in a virtual environment outside the repo: $SWITCHBOARD_PYTHON_VENV, else
# ~/.cache/switchboard/python-grpc. Prints nothing when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${SWITCHBOARD_PYTHON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/python-grpc}
requirements=e2e/requirements-grpc.txt
if ! command -v python3 >/dev/null; then
  echo "install-python: python3 is not installed; install Python 3.9 or newer (with its venv module)" >&2
  exit 1
fi
# Installed already when the venv says it holds exactly these requirements.
if [[ -x "$venv/bin/python" ]] && cmp -s "$requirements" "$venv/requirements-grpc.txt"; then
  exit 0
fi
echo "install-python: installing $(grep -vE '^(#|$)' "$requirements" | tr '\n' ' ')into $venv" >&2
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
cp "$requirements" "$venv/requirements-grpc.txt"
