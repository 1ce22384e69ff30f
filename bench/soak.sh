#!/usr/bin/env bash
# bench/soak.sh: a soak of a real `graygate serve` (bench/tools/soak): well-
# behaved HTTP/1.1, h2c and TLS clients, abusive raw clients, and an
# operator changing rules, rolling back, reloading and rotating the
# certificate, all at once on loopback; then checks of every answer, of the
# request after each change, and of goroutines and fds coming back.
#
#   bench/soak.sh                 45 s, seed 1
#   bench/soak.sh -d 2m -seed 7   any of the soak's flags
#   bench/soak.sh -fleet          rules in a throwaway etcd, a second gateway,
#                                 and etcd killed and hung now and then
#
# It builds the profiling build (bench/run.sh's overlay, for the goroutine
# count) and the soak into a temporary directory, and exits as the soak
# does: 0 when every check passed, 1 when one failed. It is not part of CI
# (it runs for a minute and more); bench/README.md says what it found.
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

printf '{"Replace":{"%s":"%s"}}\n' "$ROOT/cmd/graygate/zz_bench_pprof.go" "$BENCH/pprof/pprof.go.in" >"$WORK/overlay.json"
(cd "$ROOT" && go build -buildvcs=false -overlay "$WORK/overlay.json" -o "$WORK/graygate-pprof" ./cmd/graygate)
go -C "$BENCH/tools" build -o "$WORK/soak" ./soak
"$WORK/soak" -bin "$WORK/graygate-pprof" "$@"
