#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: the real services the
# integration tests start on loopback (etcd, redis, prometheus) and the
# browser the console's tests drive (installed from Debian if missing),
# formatting, vet, the shipped alert rules (promtool), then every test
# with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/redis.sh >/dev/null
bash scripts/etcd.sh >/dev/null
bash scripts/chromium.sh >/dev/null
# The TLS and HTTP/2 tests drive curl (--http2, --http2-prior-knowledge).
# (grep reads all of curl's output: with -q, curl could die of SIGPIPE
# and pipefail would take that for a missing curl.)
if ! curl --version 2>/dev/null | grep HTTP2 >/dev/null; then
  apt-get install -y curl >/dev/null || { apt-get update >/dev/null && apt-get install -y curl >/dev/null; }
fi
bash scripts/prometheus.sh >/dev/null
# The console's browser tests fail, not skip, without chromium.
export GRAYGATE_REQUIRE_BROWSER=1

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" $unformatted >&2
  exit 1
fi
go vet ./...
# The shipped alert rules: valid, and their unit tests pass.
promtool check rules deploy/prometheus/alerts.yaml
promtool test rules deploy/prometheus/alerts_test.yaml
go test -race -count=1 -timeout 15m "$@" ./...
# Memory bounds (RSS, which -race's shadow memory distorts): the //go:build !race TestMemory* tests, without -race.
go test -count=1 -timeout 10m -run 'TestMemory' ./internal/limit/... ./internal/gateway/...
