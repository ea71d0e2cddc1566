#!/usr/bin/env bash
# The servers the fleet's and the metrics' tests run (docs/fleet.md, docs/observability.md):
# Debian's PostgreSQL, NATS and Prometheus packages.
# Each test starts its own instance in a temporary directory and stops it; nothing here starts
# a service. Without them those tests are skipped with a message, unless
# SWITCHBOARD_REQUIRE_SERVERS=1 (CI sets it), where they fail.
set -euo pipefail

missing=()
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && ! command -v initdb >/dev/null; then
  missing+=(postgresql)
fi
if ! command -v nats-server >/dev/null; then
  missing+=(nats-server)
fi
if ! command -v prometheus >/dev/null && [[ ! -x /usr/bin/prometheus ]]; then
  missing+=(prometheus)
fi
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) == 0 ]]; then sudo=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo"; else
  echo "install-servers: ${missing[*]} missing and this user cannot install packages: apt-get install ${missing[*]} (the fleet's tests skip without them)" >&2
  [[ ${SWITCHBOARD_REQUIRE_SERVERS:-} =~ ^(|0)$ ]] && exit 0 || exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "install-servers: ${missing[*]} missing and there is no apt-get: install them with your package manager (the fleet's tests skip without them)" >&2
  [[ ${SWITCHBOARD_REQUIRE_SERVERS:-} =~ ^(|0)$ ]] && exit 0 || exit 1
fi
echo "install-servers: installing Debian's ${missing[*]}" >&2
$sudo apt-get update -qq >&2
# The packages only: Debian's postgresql would start a cluster of its own as a service, which
# the tests never use (policy-rc.d keeps it from starting where there is no init system).
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
