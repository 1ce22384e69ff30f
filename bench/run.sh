#!/usr/bin/env bash
# bench/run.sh: graygate against nginx, haproxy and no proxy at all, on
# loopback, as in the performance issue. One command does everything:
#
#   bench/run.sh            full run (~12 min): writes bench/results.md,
#                           bench/results/*, bench/scaling.png
#   bench/run.sh --quick    1 round, short runs, no files in the repo touched
#
# It installs wrk, nginx-light and haproxy from Debian when missing, builds
# graygate, the upstream (bench/upstream) and the tools (bench/tools: vegeta,
# plotscaling), then runs, each phase bounded in time:
#   1. throughput: direct, nginx, nginx-headers (nginx adding the request
#      headers graygate adds: X-Forwarded-For/-Proto/-Host, X-Request-Id and
#      Via, and X-Request-Id and Via on the answer), haproxy, fasthttp-min
#      (a minimal fasthttp proxy, the floor graygate stands on), graygate-1, graygate-100,
#      graygate-1000, graygate-ab (an experiment with two metrics), graygate-trace
#      (graygate-1 with tracing at sample_ratio 0.01), interleaved for --rounds rounds, pinned and unpinned;
#   2. latency at a fixed rate (open loop: benchup pace, or vegeta) at 50% of
#      nginx's capacity;
#   3. a 10 s CPU profile of graygate-100 under load (profiling build);
#   4. the decision/memory scaling benchmarks (bench/scaling) and the plot;
#   5. HTTP/2: h2load (Debian nghttp2-client) at 64 connections x 16
#      streams against graygate and nginx (listen ... http2, proxy_pass to
#      the same HTTP/1.1 upstream), over TLS and h2c, interleaved with
#      each other, in the same run: bench/results-h2.md.
# It is a benchmark, not a test: it prints numbers and exits 0 whatever they
# are. bench/README.md explains every column.
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)

usage() {
	cat <<'EOF'
usage: bench/run.sh [options]
  --quick              1 round, 3 s runs, short latency and scaling runs; results stay in the work dir
  --rounds N           interleaved rounds per arrangement (default 3)
  --duration S         seconds per measured wrk run (default 5)
  --warmup S           seconds of wrk warmup before each measured run (default 1)
  --arrangements LIST  "pinned unpinned" (default both)
  --targets LIST       subset of "direct nginx nginx-headers haproxy fasthttp-min graygate-1 graygate-100 graygate-1000 graygate-ab graygate-trace"
  --skip-install       don't apt-get install missing tools
  --latency-tool T     pace (default: bench/upstream's open-loop generator) or vegeta
  --skip-latency | --skip-profile | --skip-scaling | --skip-h2
  --h2-rounds N        interleaved rounds of the HTTP/2 arrangement (default 3)
  --nice N             run the measurements at this nice level (default -19 as root; 0 = don't renice)
  --keep               keep the work dir (generated configs, logs, raw wrk output)
  --out DIR            where results.md, results/ and scaling.png go (default: bench/, or the work dir with --quick)
Environment: BENCH_PORT_BASE (default 38100) picks the loopback ports.
EOF
}

ROUNDS=3 DURATION=5 WARMUP=1 LAT_SECS=8 LAT_ROUNDS=3 PROF_SECS=10
SCALING_COUNT=3 SCALING_BENCHTIME=300ms
ARRANGEMENTS="pinned unpinned"
TARGETS="direct nginx nginx-headers haproxy fasthttp-min graygate-1 graygate-100 graygate-1000 graygate-ab graygate-trace"
LAT_TOOL=pace NICE=-19 INSTALL=1 DO_LATENCY=1 DO_PROFILE=1 DO_SCALING=1 DO_H2=1 H2_ROUNDS=3 KEEP=0 QUICK=0 OUT=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) QUICK=1 ROUNDS=1 DURATION=3 WARMUP=1 LAT_SECS=5 LAT_ROUNDS=1 PROF_SECS=5 SCALING_COUNT=1 SCALING_BENCHTIME=100ms H2_ROUNDS=1 ;;
	--rounds) ROUNDS=$2; shift ;;
	--duration) DURATION=$2; shift ;;
	--warmup) WARMUP=$2; shift ;;
	--arrangements) ARRANGEMENTS=$2; shift ;;
	--targets) TARGETS=$2; shift ;;
	--skip-install) INSTALL=0 ;;
	--skip-latency) DO_LATENCY=0 ;;
	--skip-profile) DO_PROFILE=0 ;;
	--skip-scaling) DO_SCALING=0 ;;
	--skip-h2) DO_H2=0 ;;
	--h2-rounds) H2_ROUNDS=$2; shift ;;
	--keep) KEEP=1 ;;
	--latency-tool) LAT_TOOL=$2; shift ;;
	--nice) NICE=$2; shift ;;
	--out) OUT=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

BASE=${BENCH_PORT_BASE:-38100}
STABLE_ADDR=127.0.0.1:$((BASE + 1))
GRAY_ADDR=127.0.0.1:$((BASE + 2))
PROXY_PORT=$((BASE + 80))
ADMIN_PORT=$((BASE + 81))
H2_TLS_PORT=$((BASE + 82))
PPROF_ADDR=127.0.0.1:$((BASE + 90))
BENCH_PATH=/api/x
VIP=wl-0000050 # a whitelisted user of graygate-100/-1000 (see conf/gen-graygate.sh)
WL_SIZE=100000

WORK=$(mktemp -d /tmp/graygate-bench.XXXXXX)
BIN=$WORK/bin CONF=$WORK/conf RAW=$WORK/raw
mkdir -p "$BIN" "$CONF" "$RAW"
if [ -z "$OUT" ]; then
	if [ "$QUICK" = 1 ]; then OUT=$WORK; else OUT=$BENCH; fi
fi
mkdir -p "$OUT/results"

PIDS=()
cleanup() {
	local p
	[ -n "${AG_OLD:-}" ] && echo "$AG_OLD" >/proc/$$/autogroup 2>/dev/null
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	sleep 0.2
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	if [ "$KEEP" = 0 ] && [ "$OUT" != "$WORK" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

T0=$SECONDS
log() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*" >&2; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
CLK_TCK=$(getconf CLK_TCK)
NCPU=$(nproc)
if [ "$NCPU" -lt 2 ]; then
	log "only $NCPU CPU: the pinned arrangement needs 2; running unpinned only"
	ARRANGEMENTS=unpinned
fi

# ---------------------------------------------------------------- install
need_pkgs=()
command -v wrk >/dev/null || need_pkgs+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need_pkgs+=(nginx-light)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need_pkgs+=(haproxy)
command -v curl >/dev/null || need_pkgs+=(curl)
command -v ss >/dev/null || need_pkgs+=(iproute2)
command -v taskset >/dev/null || need_pkgs+=(util-linux)
command -v pgrep >/dev/null || need_pkgs+=(procps)
if [ "$DO_H2" = 1 ]; then
	command -v h2load >/dev/null || need_pkgs+=(nghttp2-client)
	command -v openssl >/dev/null || need_pkgs+=(openssl)
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
	if [ "$INSTALL" = 0 ]; then
		echo "run.sh: missing ${need_pkgs[*]} and --skip-install given" >&2
		exit 1
	fi
	log "apt-get install ${need_pkgs[*]}"
	# Keep the packages' init scripts from starting system-wide nginx/haproxy.
	made_policy=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
	fi
	timeout 300 apt-get update -qq >"$WORK/apt.log" 2>&1 || true
	DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >>"$WORK/apt.log" 2>&1 ||
		{ cat "$WORK/apt.log" >&2; echo "run.sh: apt-get install failed" >&2; exit 1; }
	[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

# ---------------------------------------------------------------- build
log "building graygate, the upstream and the tools"
timeout 300 go -C "$BENCH/upstream" build -o "$BIN/benchup" . 
# graygate is built from a copy of the source taken once (go.mod, go.sum,
# cmd/, internal/ and bench/scaling/), so that the measured binary, the
# profiling binary and the scaling benchmark all come from one state of the
# tree even while people keep editing it. A copy that does not build (caught
# mid-edit) is taken again, up to 3 times.
SRC=$WORK/src
snapshot_src() {
	rm -rf "$SRC" && mkdir -p "$SRC/bench"
	cp -r "$ROOT/go.mod" "$ROOT/go.sum" "$ROOT/cmd" "$ROOT/internal" "$SRC/"
	cp -r "$BENCH/scaling" "$SRC/bench/"
	printf '{"Replace":{"%s":"%s"}}\n' "$SRC/cmd/graygate/zz_bench_pprof.go" "$BENCH/pprof/pprof.go.in" >"$WORK/overlay.json"
}
GG_OK=0
for attempt in 1 2 3; do
	snapshot_src
	if (cd "$SRC" && timeout 300 go build -buildvcs=false -o "$BIN/graygate" ./cmd/graygate &&
		{ [ "$DO_PROFILE" = 0 ] || timeout 300 go build -buildvcs=false -overlay "$WORK/overlay.json" -o "$BIN/graygate-pprof" ./cmd/graygate; }) >"$WORK/build-graygate.log" 2>&1; then
		GG_OK=1
		break
	fi
	log "graygate does not build from the working tree (attempt $attempt of 3):"
	head -8 "$WORK/build-graygate.log" >&2
	[ "$attempt" = 3 ] || sleep 20
done
if [ "$GG_OK" = 0 ]; then
	log "measuring direct, nginx and haproxy only"
else
	SRC_SUM=$(cd "$SRC" && find go.mod go.sum cmd internal -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
fi
TOOLS_OK=1
if ! (timeout 600 go -C "$BENCH/tools" build -o "$BIN/vegeta" github.com/tsenart/vegeta/v12 &&
	timeout 600 go -C "$BENCH/tools" build -o "$BIN/plotscaling" ./plotscaling) >"$WORK/build-tools.log" 2>&1; then
	TOOLS_OK=0
	log "bench/tools does not build: no latency run and no plot"
	head -20 "$WORK/build-tools.log" >&2
fi
[ "$GG_OK" = 1 ] || TARGETS=$(echo "$TARGETS" | tr ' ' '\n' | grep -v '^graygate' | tr '\n' ' ')

# ---------------------------------------------------------------- configs
gen_conf() { # gen_conf ARR → nginx/haproxy configs for that arrangement
	local arr=$1 workers=2
	[ "$arr" = pinned ] && workers=1
	sed -e "s|@WORKERS@|$workers|g" -e "s|@RUN@|$WORK/run|g" -e "s|@LISTEN@|127.0.0.1:$PROXY_PORT|g" \
		-e "s|@STABLE@|$STABLE_ADDR|g" -e "s|@GRAY@|$GRAY_ADDR|g" -e "s|@ACCESS_LOG@|$WORK/run/access.log|g" \
		"$BENCH/conf/nginx.conf.tmpl" >"$CONF/nginx-$arr.conf"
	# nginx-headers: the same, adding the headers graygate adds by default.
	awk '{ print } /add_header X-Gray-Group/ {
		print "            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;"
		print "            proxy_set_header X-Forwarded-Proto $scheme;"
		print "            proxy_set_header X-Forwarded-Host $http_host;"
		print "            proxy_set_header X-Request-Id $request_id;"
		print "            proxy_set_header Via \"1.1 graygate\";"
		print "            add_header X-Request-Id $request_id;"
		print "            add_header Via \"1.1 graygate\";"
	}' "$CONF/nginx-$arr.conf" >"$CONF/nginx-headers-$arr.conf"
	grep -q 'proxy_set_header Via' "$CONF/nginx-headers-$arr.conf"
	sed -e "s|@WORKERS@|$workers|g" -e "s|@LISTEN@|127.0.0.1:$PROXY_PORT|g" \
		-e "s|@STABLE@|$STABLE_ADDR|g" -e "s|@GRAY@|$GRAY_ADDR|g" \
		"$BENCH/conf/haproxy.cfg.tmpl" >"$CONF/haproxy-$arr.cfg"
}
for arr in $ARRANGEMENTS; do gen_conf "$arr"; done
"$BENCH/conf/gen-graygate.sh" 1 0 "$STABLE_ADDR" "$GRAY_ADDR" >"$CONF/graygate-1.yaml"
"$BENCH/conf/gen-graygate.sh" 100 "$WL_SIZE" "$STABLE_ADDR" "$GRAY_ADDR" >"$CONF/graygate-100.yaml"
"$BENCH/conf/gen-graygate.sh" 1000 "$WL_SIZE" "$STABLE_ADDR" "$GRAY_ADDR" >"$CONF/graygate-1000.yaml"
"$BENCH/conf/gen-graygate.sh" ab 0 "$STABLE_ADDR" "$GRAY_ADDR" >"$CONF/graygate-ab.yaml"
# graygate-1 with tracing at sample_ratio 0.01, exporting to the upstream
# (bench/upstream answers OTLP/HTTP's /v1/traces).
{ cat "$CONF/graygate-1.yaml"; printf 'tracing: {otlp_endpoint: "http://%s", sample_ratio: 0.01}\n' "$STABLE_ADDR"; } >"$CONF/graygate-trace.yaml"
mkdir -p "$WORK/run"
"$NGINX" -t -q -p "$WORK/run/" -e "$WORK/run/nginx-error.log" -c "$CONF/nginx-pinned.conf" 2>/dev/null ||
	"$NGINX" -t -p "$WORK/run/" -e "$WORK/run/nginx-error.log" -c "$CONF/nginx-unpinned.conf"
"$HAPROXY" -c -q -f "$CONF/haproxy-$(echo $ARRANGEMENTS | cut -d' ' -f1).cfg"
if [ "$GG_OK" = 1 ]; then
	for c in 1 100 1000; do "$BIN/graygate" validate "$CONF/graygate-$c.yaml" >/dev/null; done
fi

# ---------------------------------------------------------------- priority
# Other people's jobs may share this machine. From here on everything this
# script starts (proxies, upstream, wrk, vegeta, the scaling benchmark)
# inherits a high priority, so that they yield the CPU to the measurement
# rather than the other way round. The quiet gate below and the "other load"
# column show what is left of the interference.
# With autogroup scheduling (kernel.sched_autogroup_enabled=1) a nice value
# only counts within its session, so the session's autogroup is reniced too,
# and put back on exit.
AG_OLD=""
if [ "$NICE" != 0 ] && [ "$(id -u)" = 0 ]; then
	renice -n "$NICE" -p $$ >/dev/null && log "measuring at nice $NICE"
	if [ -w /proc/$$/autogroup ] && [ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" = 1 ]; then
		AG_OLD=$(sed -n 's/.* nice //p' /proc/$$/autogroup)
		echo "$NICE" >/proc/$$/autogroup 2>/dev/null && log "  and its session's autogroup at nice $NICE (was $AG_OLD)" || AG_OLD=""
	fi
fi

# ---------------------------------------------------------------- helpers
start_bg() { # start_bg CMD... (redirect at the call site); sets LAST_PID
	"$@" &
	LAST_PID=$!
	PIDS+=("$LAST_PID")
}

forget_pid() { # forget_pid PID: no longer ours to clean up (it was reaped)
	local keep=() q
	for q in "${PIDS[@]}"; do [ "$q" = "$1" ] || keep+=("$q"); done
	PIDS=("${keep[@]}")
}

stop_pid() { # stop_pid PID: TERM, up to 5 s, then KILL; reaps it
	local p=$1 i
	if kill -TERM "$p" 2>/dev/null; then
		for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
	fi
	wait "$p" 2>/dev/null || true
	forget_pid "$p"
}

port_pids() { # port_pids PORT: every process holding the listening socket
	ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u | tr '\n' ' '
}

port_free() { [ -z "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]; }

wait_port() { # wait_port PORT SECONDS
	local end=$((SECONDS + $2))
	while [ $SECONDS -le $end ]; do
		port_free "$1" || return 0
		sleep 0.05
	done
	return 1
}

wait_http() { # wait_http URL SECONDS: until it answers 200
	local end=$((SECONDS + $2))
	while [ $SECONDS -le $end ]; do
		[ "$(curl -s ${WAIT_CURL:-} -o /dev/null -m 2 -H 'X-User-Id: 1' -w '%{http_code}' "$1" 2>/dev/null)" = 200 ] && return 0
		sleep 0.05
	done
	return 1
}

ticks() { # ticks PID...: utime+stime in clock ticks, summed
	local both
	both=$(ticks2 "$@")
	echo "${both%% *}"
}

ticks2() { # ticks2 PID...: "utime+stime utime" in clock ticks, summed (the
	# CPU time, and the user-space part of it; the rest is the kernel's)
	local p s=0 u=0 rest
	for p in "$@"; do
		[ -r "/proc/$p/stat" ] || continue
		rest=$(<"/proc/$p/stat")
		rest=${rest##*) } # drop "pid (comm) ": field 3 is now $1
		set -- $rest
		s=$((s + ${12} + ${13}))
		u=$((u + ${12}))
	done
	echo "$s $u"
}

rss_kb() { # rss_kb PID...: VmRSS summed, in kB
	local p s=0 k v u
	for p in "$@"; do
		[ -r "/proc/$p/status" ] || continue
		while read -r k v u; do
			[ "$k" = VmRSS: ] && s=$((s + v)) && break
		done <"/proc/$p/status"
	done
	echo "$s"
}

busy_ticks() { # machine-wide user+nice+system ticks, plus steal (time the VM's host took), all CPUs
	local cpu user nice system idle iowait irq softirq steal rest
	read -r cpu user nice system idle iowait irq softirq steal rest </proc/stat
	echo $((user + nice + system + ${steal:-0}))
}

# quiet_gate: other people's jobs may share this machine. Before a
# measurement, wait (up to QUIET_WAIT s per run, QUIET_BUDGET s per whole
# run) until the rest of the machine uses less than QUIET_MAX_PCT of one core
# over 0.5 s. When the measurement runs at a raised priority (above) there is
# no need to wait, and QUIET_WAIT defaults to 0.
QUIET_MAX_PCT=${QUIET_MAX_PCT:-25} QUIET_BUDGET=${QUIET_BUDGET:-90}
if [ -z "${QUIET_WAIT:-}" ]; then
	QUIET_WAIT=10
	[ -n "$AG_OLD" ] && QUIET_WAIT=0
fi
QUIET_SPENT=0
quiet_gate() {
	local start=$SECONDS b0 b1 pct
	while :; do
		b0=$(busy_ticks); sleep 0.5; b1=$(busy_ticks)
		pct=$(((b1 - b0) * 100 * 2 / CLK_TCK)) # % of one core
		[ "$pct" -le "$QUIET_MAX_PCT" ] && break
		if [ $((SECONDS - start)) -ge "$QUIET_WAIT" ] || [ $((QUIET_SPENT + SECONDS - start)) -ge "$QUIET_BUDGET" ]; then
			[ "$QUIET_WAIT" = 0 ] || log "  machine still busy (${pct}% of a core used by others): measuring anyway"
			break
		fi
		sleep 1
	done
	QUIET_SPENT=$((QUIET_SPENT + SECONDS - start))
}

# machine_hiccup: the worse of the two CPUs' p99 wakeup lateness (µs) over
# 1 s, probed at this script's priority with nothing of ours running.
machine_hiccup() {
	local a b
	a=$(taskset -c 0 "$BIN/benchup" hiccup -duration 1s >"$WORK/hic0" 2>&1 &
		taskset -c 1 "$BIN/benchup" hiccup -duration 1s 2>&1; wait)
	b=$(cat "$WORK/hic0")
	printf '%s\n%s\n' "$a" "$b" | sed -n 's/.*late_p99_us=\([0-9]*\).*/\1/p' | sort -n | tail -1
}

# parse_wrk FILE → "rps p50_us p99_us requests non2xx sock_err"
parse_wrk() {
	awk '
	function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /m$/) return v * 60e6; if (v ~ /s$/) return v * 1e6; return v + 0 }
	/^ +50% / { p50 = us($2) } /^ +99% / { p99 = us($2) }
	/requests in/ { req = $1 }
	/^Requests\/sec:/ { rps = $2 }
	/Non-2xx or 3xx responses:/ { bad = $NF }
	/Socket errors:/ { gsub(/,/, ""); err = $4 + $6 + $8 + $10 }
	END { printf "%s %.0f %.0f %s %d %d\n", (rps == "" ? "nan" : rps), p50, p99, (req == "" ? 0 : req), bad, err }' "$1"
}

# pins for an arrangement: PROXY_PIN (proxy), LOAD_PIN (wrk, vegeta, the
# upstream and the checker). Direct puts the upstream in the proxy's seat.
set_pins() { # set_pins ARR TARGET
	if [ "$1" = pinned ]; then
		PROXY_PIN=(taskset -c 1) LOAD_PIN=(taskset -c 0) UP_PIN=(taskset -c 0)
		[ "$2" = direct ] && UP_PIN=(taskset -c 1)
	else
		PROXY_PIN=() LOAD_PIN=() UP_PIN=()
	fi
}

# start_target ARR TARGET TAG: starts the upstream and the proxy, waits until
# both serve. Sets UP_PID, PROXY_MAIN, URL, MEASURE_PIDS. Returns 1 on failure.
start_target() {
	local arr=$1 t=$2 tag=$3 bin=${4:-$BIN/graygate}
	rm -rf "$WORK/run" && mkdir -p "$WORK/run"
	for p in $((BASE + 1)) $((BASE + 2)) $PROXY_PORT $ADMIN_PORT $H2_TLS_PORT; do
		port_free "$p" || { log "  port $p is in use by another process: skipping $t"; return 1; }
	done
	set_pins "$arr" "$t"
	start_bg "${UP_PIN[@]}" "$BIN/benchup" serve -stable "$STABLE_ADDR" -gray "$GRAY_ADDR" >"$WORK/run/upstream.log" 2>&1
	UP_PID=$LAST_PID PROXY_MAIN=""
	wait_port $((BASE + 1)) 10 && wait_port $((BASE + 2)) 10 || { log "  upstream did not start"; return 1; }
	URL=http://127.0.0.1:$PROXY_PORT$BENCH_PATH
	case "$t" in
	direct)
		URL=http://$STABLE_ADDR$BENCH_PATH
		;;
	nginx | nginx-headers)
		start_bg "${PROXY_PIN[@]}" "$NGINX" -p "$WORK/run/" -e "$WORK/run/nginx-error.log" -c "$CONF/$t-$arr.conf" -g 'daemon off;' >"$WORK/run/proxy.log" 2>&1
		PROXY_MAIN=$LAST_PID
		;;
	nginx-h2 | nginx-h2c)
		start_bg "${PROXY_PIN[@]}" "$NGINX" -p "$WORK/run/" -e "$WORK/run/nginx-error.log" -c "$CONF/nginx-h2-$arr.conf" -g 'daemon off;' >"$WORK/run/proxy.log" 2>&1
		PROXY_MAIN=$LAST_PID
		;;
	graygate-h2 | graygate-h2c)
		start_bg "${PROXY_PIN[@]}" env ${GG_ENV:-} "$bin" serve --config "$CONF/graygate-h2.yaml" \
			--listen "127.0.0.1:$PROXY_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" \
			--data-dir "$WORK/run/data" --admin-token bench --access-log >"$WORK/run/access.log" 2>"$WORK/run/proxy.log"
		PROXY_MAIN=$LAST_PID
		wait_http "http://127.0.0.1:$ADMIN_PORT/healthz" 60 || { log "  graygate /healthz never answered 200"; tail -5 "$WORK/run/proxy.log" >&2; return 1; }
		;;
	fasthttp-min)
		start_bg "${PROXY_PIN[@]}" "$BIN/benchup" minproxy -listen "127.0.0.1:$PROXY_PORT" \
			-stable "$STABLE_ADDR" -gray "$GRAY_ADDR" >"$WORK/run/proxy.log" 2>&1
		PROXY_MAIN=$LAST_PID
		;;
	haproxy)
		start_bg "${PROXY_PIN[@]}" "$HAPROXY" -db -f "$CONF/haproxy-$arr.cfg" >"$WORK/run/access.log" 2>"$WORK/run/proxy.log"
		PROXY_MAIN=$LAST_PID
		;;
	graygate-*)
		start_bg "${PROXY_PIN[@]}" env ${GG_ENV:-} "$bin" serve --config "$CONF/$t.yaml" \
			--listen "127.0.0.1:$PROXY_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" \
			--data-dir "$WORK/run/data" --admin-token bench --access-log >"$WORK/run/access.log" 2>"$WORK/run/proxy.log"
		PROXY_MAIN=$LAST_PID
		wait_http "http://127.0.0.1:$ADMIN_PORT/healthz" 60 || { log "  graygate /healthz never answered 200"; tail -5 "$WORK/run/proxy.log" >&2; return 1; }
		;;
	esac
	WAIT_CURL=""
	case "$t" in nginx-h2*) WAIT_CURL=--http2-prior-knowledge ;; esac # its cleartext port is HTTP/2 only
	wait_http "$URL" 30 || { log "  $t never answered 200 on $URL"; tail -5 "$WORK/run/proxy.log" >&2 2>/dev/null; return 1; }
	WAIT_CURL=""
	if [ "$t" = direct ]; then
		MEASURE_PIDS=$UP_PID
	else
		MEASURE_PIDS=$(port_pids "$PROXY_PORT")
		[ -n "$MEASURE_PIDS" ] || MEASURE_PIDS="$PROXY_MAIN $(pgrep -P "$PROXY_MAIN" | tr '\n' ' ')"
	fi
}

stop_target() {
	[ -n "${PROXY_MAIN:-}" ] && stop_pid "$PROXY_MAIN"
	[ -n "${UP_PID:-}" ] && stop_pid "$UP_PID"
	PROXY_MAIN="" UP_PID=""
	rm -rf "$WORK/run"
}

# ---------------------------------------------------------------- 1. throughput
RUNS=$WORK/runs.tsv CHECKS=$WORK/checks.log
printf 'arr\tround\ttarget\trps\tp50_us\tp99_us\tcpu_us_req\trss_idle_kb\trss_load_kb\trequests\tnon2xx\tsock_err\tgray_pct\tother_cores\tlog_lines\tuser_us_req\tsys_us_req\n' >"$RUNS"
: >"$CHECKS"

run_one() { # run_one ARR ROUND TARGET
	local arr=$1 round=$2 t=$3 id="$1-r$2-$3"
	quiet_gate
	if ! start_target "$arr" "$t" "$id"; then
		stop_target
		printf '%s\t%s\t%s\tnan\tnan\tnan\tnan\tnan\tnan\t0\t0\t0\tnan\tnan\tnan\tnan\tnan\n' "$arr" "$round" "$t" >>"$RUNS"
		return 0
	fi
	local pids=$MEASURE_PIDS rss_idle chk gray vip=""
	rss_idle=$(rss_kb $pids)
	case "$t" in graygate-100 | graygate-1000) vip="-vip $VIP" ;; esac
	chk=$("${LOAD_PIN[@]}" "$BIN/benchup" check -url "$URL" -n 2000 $vip 2>&1 || true)
	echo "$id $chk" >>"$CHECKS"
	gray=$(echo "$chk" | grep -o 'gray_pct=[0-9.]*' | cut -d= -f2)
	BENCH_PATH=$BENCH_PATH "${LOAD_PIN[@]}" wrk -t1 -c64 -d"${WARMUP}s" -s "$BENCH/conf/uid.lua" "$URL" >/dev/null 2>&1 || true
	# RSS under load: the maximum of samples taken every 0.25 s.
	(
		max=0
		while :; do
			v=$(rss_kb $pids)
			[ "$v" -gt "$max" ] && max=$v && echo "$max" >"$WORK/rss_max"
			sleep 0.25
		done
	) &
	local sampler=$!
	PIDS+=("$sampler")
	local c0 cu0 u0 b0 w0 c1 cu1 u1 b1 w1 wrk_cpu
	read -r c0 cu0 < <(ticks2 $pids)
	u0=$(ticks "$UP_PID") b0=$(busy_ticks) w0=$EPOCHREALTIME
	local TIMEFORMAT='%U %S'
	{ time BENCH_PATH=$BENCH_PATH "${LOAD_PIN[@]}" wrk -t1 -c64 -d"${DURATION}s" --latency -s "$BENCH/conf/uid.lua" "$URL" >"$RAW/$id.wrk" 2>&1; } 2>"$WORK/wrk.time" || true
	read -r c1 cu1 < <(ticks2 $pids)
	u1=$(ticks "$UP_PID") b1=$(busy_ticks) w1=$EPOCHREALTIME
	stop_pid "$sampler"
	local rss_load; rss_load=$(cat "$WORK/rss_max" 2>/dev/null || echo 0); rm -f "$WORK/rss_max"
	wrk_cpu=$(awk -v hz="$CLK_TCK" '{ printf "%d", ($1 + $2) * hz }' "$WORK/wrk.time")
	local rps p50 p99 req bad serr
	read -r rps p50 p99 req bad serr < <(parse_wrk "$RAW/$id.wrk")
	# Our own processes: the proxy (or, for direct, the upstream), the
	# upstream and wrk. What else ran on the machine is "other".
	local ours=$((c1 - c0 + wrk_cpu))
	[ "$t" != direct ] && ours=$((ours + u1 - u0))
	local cpu_req user_req sys_req other lines=nan
	per_req() { awk -v d="$1" -v hz="$CLK_TCK" -v n="$req" 'BEGIN { if (n > 0) printf "%.2f", d * 1e6 / hz / n; else print "nan" }'; }
	cpu_req=$(per_req $((c1 - c0)))
	# The same CPU time split into user space and the kernel (the kernel's
	# share is the network work, which every proxy shares).
	user_req=$(per_req $((cu1 - cu0)))
	sys_req=$(per_req $((c1 - c0 - (cu1 - cu0))))
	other=$(awk -v b=$((b1 - b0)) -v o="$ours" -v hz="$CLK_TCK" -v w0="$w0" -v w1="$w1" 'BEGIN { x = (b - o) / hz / (w1 - w0); if (x < 0) x = 0; printf "%.2f", x }')
	[ -f "$WORK/run/access.log" ] && lines=$(wc -l <"$WORK/run/access.log")
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$arr" "$round" "$t" "$rps" "$p50" "$p99" "$cpu_req" \
		"$rss_idle" "$rss_load" "$req" "$bad" "$serr" "${gray:-nan}" "$other" "$lines" "$user_req" "$sys_req" >>"$RUNS"
	log "  $id: $rps req/s, p50 ${p50}µs p99 ${p99}µs, ${cpu_req} µs CPU/req (user ${user_req}, kernel ${sys_req}), RSS ${rss_idle}→${rss_load} kB, non-2xx $bad, socket errors $serr, other load $other cores | check: $chk"
	stop_target
}

# rotate N WORD...: the words in turn, starting from the Nth (mod their
# count). Each round starts with the next target, so no target always
# runs first or last in its round.
rotate() {
	local n=$1 i
	shift
	local -a w=("$@")
	for ((i = 0; i < ${#w[@]}; i++)); do printf '%s ' "${w[(i + n) % ${#w[@]}]}"; done
}

HICCUP_START=$(machine_hiccup)
for arr in $ARRANGEMENTS; do
	for round in $(seq "$ROUNDS"); do
		log "throughput: $arr, round $round of $ROUNDS"
		# shellcheck disable=SC2086 # TARGETS is a list of words
		for t in $(rotate $((round - 1)) $TARGETS); do run_one "$arr" "$round" "$t"; done
	done
done

# ---------------------------------------------------------------- 2. latency
LAT=$WORK/latency.tsv
median_of() { # median_of ARR TARGET COLUMN from runs.tsv
	awk -F'\t' -v a="$1" -v t="$2" -v c="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
		$1 == a && $3 == t && $k != "nan" { print $k }' "$RUNS" |
		sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

vegeta_targets() { # vegeta_targets URL FILE: 20,000 requests with random user ids
	awk -v url="$1" 'BEGIN { srand(42); for (i = 0; i < 20000; i++) printf "GET %s\nX-User-Id: %d\n\n", url, int(rand() * 1e9) + 1 }' >"$2"
}

[ "$LAT_TOOL" = vegeta ] && [ "$TOOLS_OK" = 0 ] && LAT_TOOL=pace
if [ "$DO_LATENCY" = 1 ] && echo "$ARRANGEMENTS" | grep -qw pinned; then
	LAT_ARR=pinned
	nginx_rps=$(median_of pinned nginx rps)
	RATE=$(awk -v r="$nginx_rps" 'BEGIN { if (r == "nan" || r <= 0) print 0; else printf "%d", r * 0.5 }')
	printf 'round\ttarget\ttool\trate\tsecs\tn\tachieved_rps\tnon2xx\terrors\tp50_us\tp99_us\tp999_us\tsvc_p50_us\tsvc_p99_us\tsvc_p999_us\thiccup_p99_us\n' >"$LAT"
	if [ "$RATE" -gt 0 ]; then
		lat_targets="direct nginx"
		[ "$GG_OK" = 1 ] && lat_targets="$lat_targets graygate-1 graygate-100"
		for round in $(seq "$LAT_ROUNDS"); do
			log "latency: $RATE req/s (50% of nginx's $nginx_rps) with $LAT_TOOL, round $round of $LAT_ROUNDS"
			for t in $lat_targets; do
				quiet_gate
				hic=$(machine_hiccup)
				if ! start_target "$LAT_ARR" "$t" "lat-$t"; then stop_target; continue; fi
				BENCH_PATH=$BENCH_PATH "${LOAD_PIN[@]}" wrk -t1 -c64 -d"${WARMUP}s" -s "$BENCH/conf/uid.lua" "$URL" >/dev/null 2>&1 || true
				if [ "$LAT_TOOL" = vegeta ]; then
					vegeta_targets "$URL" "$WORK/targets.txt"
					"${LOAD_PIN[@]}" timeout $((LAT_SECS + 30)) "$BIN/vegeta" attack -targets="$WORK/targets.txt" -rate="$RATE/s" \
						-duration="${LAT_SECS}s" -timeout=5s -max-connections=64 -max-workers=512 >"$WORK/vegeta.bin" 2>"$WORK/vegeta.err" || true
					"$BIN/vegeta" encode --to csv <"$WORK/vegeta.bin" | awk -F, '{ print $1, $2, $3 }' |
						sort -k3,3n | awk -v r="$round" -v t="$t" -v rate="$RATE" -v s="$LAT_SECS" -v hic="$hic" '
						{ lat[NR] = $3 / 1000; ts = $1 / 1e9; if (NR == 1 || ts < t0) t0 = ts; if (ts > t1) t1 = ts
						  if ($2 == 0) err++; else if ($2 < 200 || $2 > 299) bad++ }
						function q(p,  i) { i = int(p * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; return lat[i] }
						END { if (NR == 0) exit; printf "%s\t%s\tvegeta\t%s\t%s\t%d\t%.0f\t%d\t%d\t%.0f\t%.0f\t%.0f\tnan\tnan\tnan\t%s\n", r, t, rate, s, NR, NR / (t1 - t0 + 1e-9), bad, err, q(0.5), q(0.99), q(0.999), hic }' >>"$LAT"
				else
					out=$("${LOAD_PIN[@]}" timeout $((LAT_SECS + 30)) "$BIN/benchup" pace -url "$URL" -rate "$RATE" -duration "${LAT_SECS}s" -c 64 || true)
					echo "lat-r$round-$t $out" >>"$CHECKS"
					kv() { echo "$out" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
					printf '%s\t%s\tpace\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$t" "$RATE" "$LAT_SECS" \
						"$(kv n)" "$(kv achieved_rps)" "$(kv non2xx)" "$(kv errors)" "$(kv p50_us)" "$(kv p99_us)" "$(kv p999_us)" \
						"$(kv svc_p50_us)" "$(kv svc_p99_us)" "$(kv svc_p999_us)" "$hic" >>"$LAT"
				fi
				log "  $(tail -1 "$LAT" | tr '\t' ' ')"
				stop_target
			done
		done
	else
		log "latency: skipped (no nginx capacity measured in the pinned arrangement)"
	fi
fi

# ---------------------------------------------------------------- 3. profile
PROF_TXT=$WORK/profile.txt
if [ "$DO_PROFILE" = 1 ] && [ "$GG_OK" = 1 ] && echo "$ARRANGEMENTS" | grep -qw pinned; then
	log "profile: graygate-100, pinned, ${PROF_SECS}s CPU profile under wrk load"
	quiet_gate
	if GG_ENV="GRAYGATE_BENCH_PPROF=$PPROF_ADDR" start_target pinned graygate-100 prof "$BIN/graygate-pprof"; then
		BENCH_PATH=$BENCH_PATH "${LOAD_PIN[@]}" wrk -t1 -c64 -d$((PROF_SECS + 3))s -s "$BENCH/conf/uid.lua" "$URL" >"$RAW/profile.wrk" 2>&1 &
		wrk_pid=$!
		PIDS+=("$wrk_pid")
		sleep 1
		curl -s -m $((PROF_SECS + 20)) -o "$WORK/graygate-cpu.pprof" "http://$PPROF_ADDR/debug/pprof/profile?seconds=$PROF_SECS" || true
		wait "$wrk_pid" || true
		forget_pid "$wrk_pid"
		if [ -s "$WORK/graygate-cpu.pprof" ]; then
			{
				echo "\$ go tool pprof -top -nodecount=15 graygate graygate-cpu.pprof"
				go tool pprof -top -nodecount=15 "$BIN/graygate-pprof" "$WORK/graygate-cpu.pprof" 2>/dev/null
				echo
				echo "\$ go tool pprof -top -cum -nodecount=25 graygate graygate-cpu.pprof"
				go tool pprof -top -cum -nodecount=25 "$BIN/graygate-pprof" "$WORK/graygate-cpu.pprof" 2>/dev/null | sed -n '/flat%/,$p'
			} >"$PROF_TXT"
			log "  profile: $(grep -m1 'Total samples' "$PROF_TXT" || true); wrk: $(grep Requests/sec "$RAW/profile.wrk" || true)"
		fi
	fi
	stop_target
fi

# ---------------------------------------------------------------- 4. scaling
SCALING=$WORK/scaling.txt
if [ "$DO_SCALING" = 1 ] && [ "$GG_OK" = 1 ]; then
	log "scaling: go test -bench ./bench/scaling (count $SCALING_COUNT, benchtime $SCALING_BENCHTIME)"
	quiet_gate
	(cd "$SRC" && timeout 600 go test -run '^$' -bench . -benchmem -count "$SCALING_COUNT" -benchtime "$SCALING_BENCHTIME" -timeout 10m ./bench/scaling) >"$SCALING" 2>&1 ||
		{ log "  scaling benchmark failed:"; tail -20 "$SCALING" >&2; }
	if [ "$TOOLS_OK" = 1 ] && grep -q '^Benchmark' "$SCALING"; then
		"$BIN/plotscaling" -in "$SCALING" -out "$OUT/scaling.png" && log "  wrote $OUT/scaling.png"
	fi
fi

# ---------------------------------------------------------------- 5. HTTP/2
H2RUNS=$WORK/h2runs.tsv
if [ "$DO_H2" = 1 ] && [ "$GG_OK" = 1 ] && command -v h2load >/dev/null; then
	H2_ARR=unpinned
	echo "$ARRANGEMENTS" | grep -qw pinned && H2_ARR=pinned
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=bench.test \
		-addext "subjectAltName=IP:127.0.0.1,DNS:bench.test" -keyout "$CONF/h2.key" -out "$CONF/h2.pem" >/dev/null 2>&1
	for arr in $H2_ARR; do
		workers=2
		[ "$arr" = pinned ] && workers=1
		sed -e "s|@WORKERS@|$workers|g" -e "s|@RUN@|$WORK/run|g" -e "s|@LISTEN_TLS@|127.0.0.1:$H2_TLS_PORT|g" \
			-e "s|@LISTEN_H2C@|127.0.0.1:$PROXY_PORT|g" -e "s|@CERT@|$CONF/h2.pem|g" -e "s|@KEY@|$CONF/h2.key|g" \
			-e "s|@STABLE@|$STABLE_ADDR|g" -e "s|@GRAY@|$GRAY_ADDR|g" -e "s|@ACCESS_LOG@|$WORK/run/access.log|g" \
			"$BENCH/conf/nginx-h2.conf.tmpl" >"$CONF/nginx-h2-$arr.conf"
	done
	{
		"$BENCH/conf/gen-graygate.sh" 1 0 "$STABLE_ADDR" "$GRAY_ADDR"
		printf 'h2c: true\ntls_listen: "127.0.0.1:%s"\ntls: {certificates: [{cert_file: "%s", key_file: "%s"}]}\n' "$H2_TLS_PORT" "$CONF/h2.pem" "$CONF/h2.key"
	} >"$CONF/graygate-h2.yaml"
	"$BIN/graygate" validate "$CONF/graygate-h2.yaml" >/dev/null
	# 20,000 URIs with random user ids: h2load sends one set of headers, so
	# the split goes by the user_id query argument (a default identity
	# source of graygate, split_clients' key in nginx).
	awk -v p="$BENCH_PATH" 'BEGIN { srand(7); for (i = 0; i < 20000; i++) printf "%s?user_id=%d\n", p, int(rand() * 1e9) + 1 }' >"$CONF/h2-paths.txt"
	printf 'round\ttarget\trps\tcpu_us_req\tmean_us\trequests\tfailed\tnon2xx\tgray_pct\n' >"$H2RUNS"
	for round in $(seq "$H2_ROUNDS"); do
		log "HTTP/2: $H2_ARR, round $round of $H2_ROUNDS (h2load -c64 -m16)"
		for t in nginx-h2c graygate-h2c nginx-h2 graygate-h2; do
			quiet_gate
			if ! start_target "$H2_ARR" "$t" "h2-$t"; then stop_target; continue; fi
			case "$t" in
			*-h2) base=https://127.0.0.1:$H2_TLS_PORT ;;
			*) base=http://127.0.0.1:$PROXY_PORT ;;
			esac
			sed "1s|^|$base|" "$CONF/h2-paths.txt" >"$WORK/h2-uris.txt"
			# The split, checked through the proxy itself.
			gray=$(for i in $(seq 200); do curl -sk --http2-prior-knowledge -o /dev/null -D - "http://127.0.0.1:$PROXY_PORT$BENCH_PATH?user_id=$i$round" 2>/dev/null | grep -i '^x-gray-group'; done | grep -ci 'group: gray' || true)
			pids=$(port_pids "$PROXY_PORT")
			"${LOAD_PIN[@]}" h2load -c64 -m16 -t1 -D 1 -i "$WORK/h2-uris.txt" >/dev/null 2>&1 || true
			c0=$(ticks $pids)
			"${LOAD_PIN[@]}" h2load -c64 -m16 -t1 -D "$DURATION" -i "$WORK/h2-uris.txt" >"$RAW/h2-r$round-$t.h2load" 2>&1 || true
			c1=$(ticks $pids)
			read -r rps req failed bad mean < <(awk '
				function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1e6; return v + 0 }
				/^finished in/ { rps = $4 + 0 }
				/^requests:/ { req = $8 + 0; failed = $10 + $12 + $14 }
				/^status codes:/ { bad = $5 + $7 + $9 }
				/^time for request:/ { mean = us($6) }
				END { printf "%s %d %d %d %.0f\n", (rps == "" ? "nan" : rps), req, failed, bad, mean }' "$RAW/h2-r$round-$t.h2load")
			cpu=$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { if (n > 0) printf "%.2f", d * 1e6 / hz / n; else print "nan" }')
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$t" "$rps" "$cpu" "$mean" "$req" "$failed" "$bad" "$((gray * 100 / 200))" >>"$H2RUNS"
			log "  h2-r$round-$t: $rps req/s, ${cpu} µs CPU/req, mean ${mean}µs, failed $failed, non-2xx $bad, gray ${gray}/200"
			stop_target
		done
	done
	# The report: medians over rounds, and "× nginx" the median of the
	# per-round ratios against nginx on the same transport.
	awk -F'\t' -v out="$OUT/results-h2.md" -v date="$(date -u '+%Y-%m-%d')" -v arr="$H2_ARR" -v rounds="$H2_ROUNDS" -v dur="$DURATION" '
		function median(list,   n, a, i, j, t) { n = split(list, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
			if (n == 0) return "nan"; return (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) }
		NR == 1 { next }
		{ rps[$1, $2] = $3; cpu[$1, $2] = $4; R[$2] = R[$2] " " $3; C[$2] = C[$2] " " $4; M[$2] = M[$2] " " $5; F[$2] += $7 + $8; G[$2] = G[$2] " " $9; if ($1 > maxr) maxr = $1 }
		END {
			printf "# HTTP/2: graygate against nginx\n\n" > out
			printf "h2load -c64 -m16 -t1 (64 connections x 16 streams), %s s measured after 1 s of warmup, %s interleaved rounds, %s arrangement, %s; GET with a random user_id per request, a 10%% gray split, 100-byte HTTP/1.1 upstream, access log on in both.\n\n", dur, rounds, arr, date > out
			printf "| transport | target | req/s | x nginx req/s | proxy CPU us/req | x nginx CPU/req | mean latency | failed or non-2xx | gray %% |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n" > out
			split("h2c tls", tr, " ")
			for (k = 1; k <= 2; k++) {
				sfx = (tr[k] == "tls" ? "h2" : "h2c")
				n = "nginx-" sfx; g = "graygate-" sfx
				rr = ""; cr = ""
				for (r = 1; r <= maxr; r++) if ((r, n) in rps && (r, g) in rps && rps[r, n] > 0 && cpu[r, n] > 0) { rr = rr " " rps[r, g] / rps[r, n]; cr = cr " " cpu[r, g] / cpu[r, n] }
				printf "| %s | nginx | %.0f | 1.00 | %.2f | 1.00 | %.0f us | %d | %s |\n", tr[k], median(R[n]), median(C[n]), median(M[n]), F[n], median(G[n]) > out
				printf "| %s | graygate | %.0f | %.2f | %.2f | %.2f | %.0f us | %d | %s |\n", tr[k], median(R[g]), median(rr), median(C[g]), median(cr), median(M[g]), F[g], median(G[g]) > out
			}
		}' "$H2RUNS"
	cat "$OUT/results-h2.md" >&2
fi

# ---------------------------------------------------------------- report
META=$WORK/meta.txt
{
	echo "date:        $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit:      $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo " plus uncommitted changes; the source measured (go.mod, go.sum, cmd/, internal/) hashes to ${SRC_SUM:-?}")"
	echo "machine:     $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
	echo "software:    $(go version | cut -d' ' -f3), nginx $("$NGINX" -v 2>&1 | cut -d/ -f2), haproxy $("$HAPROXY" -v | awk 'NR == 1 { print $3 }'), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), vegeta v12.13.0"
	echo "load:        wrk -t1 -c64, ${WARMUP} s warmup + ${DURATION} s measured, random X-User-Id, GET $BENCH_PATH, 100-byte upstream body"
	echo "rounds:      $ROUNDS per arrangement, interleaved ($TARGETS), each round starting one target later"
	echo "quiet gate:  waited ${QUIET_SPENT} s in total for other jobs on the machine to calm down; measured at nice $(ps -o ni= -p $$ | tr -d ' ')"
	echo "noise:       p99 lateness of a 200 µs sleep on the worse CPU: ${HICCUP_START:-?} µs before the throughput runs, $(machine_hiccup) µs at the end (lower is quieter)"
	echo "load avg:    $(cut -d' ' -f1-3 /proc/loadavg) at the end"
	echo "wall time:   $((SECONDS - T0)) s"
} >"$META"
report_args=(-runs "$RUNS" -meta "$META")
[ -s "$LAT" ] 2>/dev/null && report_args+=(-latency "$LAT")
[ -s "$SCALING" ] 2>/dev/null && report_args+=(-scaling "$SCALING")
[ -s "$PROF_TXT" ] 2>/dev/null && report_args+=(-profile "$PROF_TXT")
"$BIN/benchup" report "${report_args[@]}" >"$OUT/results.md"
for f in "$RUNS" "$LAT" "$SCALING" "$PROF_TXT" "$CHECKS" "$META" "$H2RUNS"; do
	[ -f "$f" ] && cp "$f" "$OUT/results/"
done
cat "$OUT/results.md"
log "done: $OUT/results.md (raw rows in $OUT/results/)"
