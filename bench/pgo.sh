#!/usr/bin/env bash
# bench/pgo.sh: regenerates cmd/graygate/default.pgo, the CPU profile that
# `go build ./cmd/graygate` uses for profile-guided optimization (Go picks
# up a main package's default.pgo by itself: -pgo=auto).
#
# The profile is of graygate-100 (bench/run.sh's goal configuration) under
# the benchmark's load: wrk -t1 -c64 with a random X-User-Id, pinned as in
# bench/run.sh (graygate alone on CPU 1; wrk and the upstream on CPU 0),
# for SECS seconds (default 20). Run it on a quiet machine after a change
# to the request path, and commit the new profile with the change. A stale
# profile still builds: it only guides the compiler less well.
#
#   bench/pgo.sh [SECS]
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
SECS=${1:-20}
BASE=${BENCH_PORT_BASE:-38100}
STABLE=127.0.0.1:$((BASE + 1)) GRAY=127.0.0.1:$((BASE + 2))
PROXY=127.0.0.1:$((BASE + 80)) ADMIN=127.0.0.1:$((BASE + 81)) PPROF=127.0.0.1:$((BASE + 90))
command -v wrk >/dev/null || { echo "bench/pgo.sh needs wrk (apt-get install -y wrk)" >&2; exit 1; }
WORK=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

go -C "$BENCH/upstream" build -o "$WORK/benchup" .
printf '{"Replace":{"%s":"%s"}}\n' "$ROOT/cmd/graygate/zz_bench_pprof.go" "$BENCH/pprof/pprof.go.in" >"$WORK/overlay.json"
go -C "$ROOT" build -overlay "$WORK/overlay.json" -o "$WORK/graygate-pprof" ./cmd/graygate
"$BENCH/conf/gen-graygate.sh" 100 100000 "$STABLE" "$GRAY" >"$WORK/graygate-100.yaml"

taskset -c 0 "$WORK/benchup" serve -stable "$STABLE" -gray "$GRAY" >"$WORK/upstream.log" 2>&1 &
PIDS+=($!)
GRAYGATE_BENCH_PPROF=$PPROF taskset -c 1 "$WORK/graygate-pprof" serve --config "$WORK/graygate-100.yaml" \
	--listen "$PROXY" --admin-listen "$ADMIN" --data-dir "$WORK/data" --admin-token bench \
	--access-log >"$WORK/access.log" 2>"$WORK/graygate.log" &
PIDS+=($!)
for _ in $(seq 600); do
	[ "$(curl -s -o /dev/null -m 1 -H 'X-User-Id: 1' -w '%{http_code}' "http://$PROXY/api/x")" = 200 ] && break
	sleep 0.1
done
BENCH_PATH=/api/x taskset -c 0 wrk -t1 -c64 -d$((SECS + 3))s -s "$BENCH/conf/uid.lua" "http://$PROXY/api/x" >"$WORK/wrk.out" 2>&1 &
WRK=$!
PIDS+=($WRK)
sleep 1
curl -sf -m $((SECS + 30)) -o "$WORK/cpu.pprof" "http://$PPROF/debug/pprof/profile?seconds=$SECS"
wait "$WRK" || true
go tool pprof -top -nodecount=1 "$WORK/graygate-pprof" "$WORK/cpu.pprof" >/dev/null # a readable profile
cp "$WORK/cpu.pprof" "$ROOT/cmd/graygate/default.pgo"
echo "wrote cmd/graygate/default.pgo ($(wc -c <"$ROOT/cmd/graygate/default.pgo") bytes); load: $(grep Requests/sec "$WORK/wrk.out" || echo '?')"
