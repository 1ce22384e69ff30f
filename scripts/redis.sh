#!/usr/bin/env bash
# Makes redis-server available for the integration tests, which start their
# own throwaway servers on loopback (internal/tags/redistest). Installs the
# Debian package if the binary is missing and stops the system service the
# package may start, so no shared Redis is left listening on 6379.
# Idempotent; run as root (CI runs as root).
set -euo pipefail

if ! command -v redis-server >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi

# The package's service is of no use to the tests; stop it if it runs.
if command -v service >/dev/null 2>&1; then
  service redis-server stop >/dev/null 2>&1 || true
fi

redis-server --version
