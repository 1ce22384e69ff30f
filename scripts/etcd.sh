#!/usr/bin/env bash
# Makes the etcd server binary available for the integration tests of
# internal/store/etcdstore, which start their own throwaway servers on
# loopback (etcdtest). Installs Debian's etcd-server if the binary is
# missing and stops the system service the package may start, so no shared
# etcd is left listening on 2379. Idempotent; run as root (CI runs as root).
set -euo pipefail

if ! command -v etcd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
fi

# The package's service is of no use to the tests; stop it if it runs.
if command -v service >/dev/null 2>&1; then
  service etcd stop >/dev/null 2>&1 || true
fi

etcd --version | sed -n 1p
