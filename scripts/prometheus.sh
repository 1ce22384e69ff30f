#!/usr/bin/env bash
# Makes Debian's prometheus package available: its promtool checks the
# shipped alert rules (deploy/prometheus/alerts.yaml), and the rollout
# tests of internal/rollout start their own throwaway prometheus server on
# loopback that scrapes a test gateway. Installs the package if either
# binary is missing and stops the system service the package starts, so no
# shared prometheus is left listening on 9090. Idempotent; run as root (CI
# runs as root).
set -euo pipefail

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

# The package's service (and its node exporter) are of no use to the tests;
# stop them if they run.
if command -v service >/dev/null 2>&1; then
  service prometheus stop >/dev/null 2>&1 || true
  service prometheus-node-exporter stop >/dev/null 2>&1 || true
fi

prometheus --version 2>&1 | sed -n 1p
