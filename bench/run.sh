#!/usr/bin/env bash
# Benchmark scenarios for ojsd. Each starts its own ojsd (release build) on a temp data dir
# and a free loopback port, drives it with ojsd-bench, reads the server's memory and CPU from
# /proc, prints a table, and cleans up after itself.
#
#   bench/run.sh steady|latency|million|restart|idle|bigjobs|disk|all
#
# Sizes (env vars; defaults are the issue's full sizes):
#   STEADY_ONE_JOBS=100000   STEADY_BATCH_JOBS=300000   BATCH=100
#   PRODUCERS / WORKERS      connections for `one` mode (16 / 16); batch mode uses 4 / 4
#   LAT_CALIB_JOBS=20000     short `one` run that finds the max rate (skipped if LAT_RATE set)
#   LAT_RATE                 offered jobs/s for the latency run (default: half the max)
#   LAT_SECONDS=30           length of the latency run
#   MILLION_JOBS=1000000     jobs queued for `million` and `restart`
#   IDLE_CONNS=1000 IDLE_SECONDS=30
#   BIG_JOBS=1000 BIG_BYTES=1000000   `bigjobs`: RSS per MiB of large jobs queued
#   DISK_JOBS=1000000 LIVE_JOBS=100000 DISK_RETENTION=5 DISK_WATCH=120   `disk`: size on
#                            disk against live data after churn (see scenario_disk)
#   DISK_STEADY_S=600 DISK_RATE=2000  `disk`: a steady run's size curve (0 skips it)
#   REPEAT=1                 runs of each steady and latency measurement, each on a fresh
#                            server; with more than one, the table shows the median and
#                            the range (min–max), and the verdict is the median's
# Tools: OJSD_BIN / BENCH_BIN use prebuilt binaries instead of `cargo build --release`.
# OUT_DIR=dir also keeps every raw JSON result there.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCENARIO=${1:-all}
case "$SCENARIO" in
steady | latency | million | restart | idle | bigjobs | disk | all) ;;
*)
    echo "usage: $0 steady|latency|million|restart|idle|bigjobs|disk|all" >&2
    exit 2
    ;;
esac

STEADY_ONE_JOBS=${STEADY_ONE_JOBS:-100000}
STEADY_BATCH_JOBS=${STEADY_BATCH_JOBS:-300000}
BATCH=${BATCH:-100}
PRODUCERS=${PRODUCERS:-16}
WORKERS=${WORKERS:-16}
LAT_CALIB_JOBS=${LAT_CALIB_JOBS:-20000}
LAT_RATE=${LAT_RATE:-}
LAT_SECONDS=${LAT_SECONDS:-30}
MILLION_JOBS=${MILLION_JOBS:-1000000}
IDLE_CONNS=${IDLE_CONNS:-1000}
IDLE_SECONDS=${IDLE_SECONDS:-30}
BIG_JOBS=${BIG_JOBS:-1000}
BIG_BYTES=${BIG_BYTES:-1000000}
DISK_JOBS=${DISK_JOBS:-1000000}
LIVE_JOBS=${LIVE_JOBS:-100000}
DISK_RETENTION=${DISK_RETENTION:-5}
DISK_WATCH=${DISK_WATCH:-120}
DISK_STEADY_S=${DISK_STEADY_S:-600}
DISK_RATE=${DISK_RATE:-2000}
OUT_DIR=${OUT_DIR:-}
REPEAT=${REPEAT:-1}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ojsd-bench.XXXXXX")
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1000 idle connections need about as many descriptors on each side.
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

. "$ROOT/bench/bins.sh"

RESULTS=$TMP/results.tsv
: >"$RESULTS"
# row SCENARIO METRIC VALUE TARGET VERDICT
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; }

# json FILE EXPR: evaluate a Python expression over the JSON object `d` read from FILE.
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# verdict VALUE OP LIMIT -> met / NOT met
verdict() { python3 -c "import sys; v,op,l=float(sys.argv[1]),sys.argv[2],float(sys.argv[3]); print('met' if (v>=l if op=='>=' else v<l if op=='<' else v<=l) else 'NOT met')" "$@"; }
keep() { if [ -n "$OUT_DIR" ]; then mkdir -p "$OUT_DIR" && cp "$1" "$OUT_DIR/$2-$(date +%Y%m%dT%H%M%S).json"; fi; }

stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}

kib() { awk -v f="$2:" '$1==f {print $2}' "/proc/$1/status"; }
mib() { python3 -c "print(round(int('${1:-0}')/1024, 1))"; }

bench_run() { # NAME ARGS...: run ojsd-bench --json, keep its output in $TMP/NAME.json
    local name=$1
    shift
    if ! "$BENCH" --addr "$ADDR" --json --server-pid "$SERVER_PID" "$@" >"$TMP/$name.json"; then
        echo "ojsd-bench $name failed:" >&2
        cat "$TMP/$name.json" >&2
        exit 1
    fi
    keep "$TMP/$name.json" "$name"
}

# runs NAME ARGS...: $REPEAT ojsd-bench runs, each on a fresh server: $TMP/NAME-<i>.json.
runs() {
    local name=$1 i
    shift
    for i in $(seq 1 "$REPEAT"); do
        start_server "$TMP/$name-$i.db"
        bench_run "$name-$i" "$@"
        stop_server
        rm -rf "$TMP/$name-$i.db"
    done
}

# summary NAME EXPR: EXPR (Python, over the JSON object `d`) of NAME's runs: the value of a
# single run, else "median (min–max)". `median NAME EXPR` prints the median alone.
summary() { python3 "$ROOT/bench/summary.py" "$TMP" "$1" "$REPEAT" "$2"; }
median() { python3 "$ROOT/bench/summary.py" "$TMP" "$1" "$REPEAT" "$2" median; }

scenario_steady() {
    echo "== steady: one mode, $STEADY_ONE_JOBS jobs, P=$PRODUCERS C=$WORKERS, $REPEAT run(s)" >&2
    runs steady-one --mode one --jobs "$STEADY_ONE_JOBS" --producers "$PRODUCERS" --workers "$WORKERS"
    local v
    v=$(median steady-one "d['jobs_per_s']")
    row steady "one: jobs/s end to end" "$(summary steady-one "round(d['jobs_per_s'])")" ">= 15000" "$(verdict "$v" '>=' 15000)"
    row steady "one: push/s" "$(summary steady-one "round(d['push_per_s'])")" "" ""
    row steady "one: pickup p50 ms (unthrottled)" "$(summary steady-one "d['latency_ms']['p50']")" "" ""
    row steady "one: pickup p99 ms (unthrottled)" "$(summary steady-one "d['latency_ms']['p99']")" "" ""
    row steady "one: server CPU % (of one core)" "$(summary steady-one "d.get('server_cpu_pct')")" "" ""
    row steady "one: engine thread µs per job" "$(summary steady-one "d.get('engine_us_per_job')")" "" ""
    row steady "one: exactly once" "$(summary steady-one "d['exactly_once']['ok']")" "" ""

    echo "== steady: batch mode, $STEADY_BATCH_JOBS jobs, batch $BATCH, $REPEAT run(s)" >&2
    runs steady-batch --mode batch --jobs "$STEADY_BATCH_JOBS" --batch "$BATCH"
    v=$(median steady-batch "d['jobs_per_s']")
    row steady "batch($BATCH): jobs/s end to end" "$(summary steady-batch "round(d['jobs_per_s'])")" ">= 100000" "$(verdict "$v" '>=' 100000)"
    row steady "batch($BATCH): push/s" "$(summary steady-batch "round(d['push_per_s'])")" "" ""
    row steady "batch($BATCH): server CPU %" "$(summary steady-batch "d.get('server_cpu_pct')")" "" ""
    row steady "batch($BATCH): engine thread µs per job" "$(summary steady-batch "d.get('engine_us_per_job')")" "" ""
    row steady "batch($BATCH): exactly once" "$(summary steady-batch "d['exactly_once']['ok']")" "" ""
}

scenario_latency() {
    local rate=$LAT_RATE
    if [ -z "$rate" ]; then
        echo "== latency: calibrating max rate with $LAT_CALIB_JOBS jobs, $REPEAT run(s)" >&2
        runs latency-calib --mode one --jobs "$LAT_CALIB_JOBS" --producers "$PRODUCERS" --workers "$WORKERS"
        local max
        max=$(median latency-calib "d['jobs_per_s']")
        rate=$(python3 -c "print(max(1, int($max / 2)))")
        row latency "max rate (calibration run)" "$(summary latency-calib "round(d['jobs_per_s'])")" "" ""
    fi
    local jobs
    jobs=$(python3 -c "print(max(100, int($rate * $LAT_SECONDS)))")
    echo "== latency: $jobs jobs offered at $rate jobs/s, $REPEAT run(s)" >&2
    runs latency --mode one --jobs "$jobs" --rate "$rate" --producers "$PRODUCERS" --workers "$WORKERS"
    local p99
    p99=$(median latency "d['latency_ms']['p99']")
    row latency "offered rate (jobs/s)" "$rate" "" ""
    row latency "achieved jobs/s" "$(summary latency "round(d['jobs_per_s'])")" "" ""
    row latency "pickup p50 ms" "$(summary latency "d['latency_ms']['p50']")" "" ""
    row latency "pickup p90 ms" "$(summary latency "d['latency_ms']['p90']")" "" ""
    row latency "pickup p99 ms" "$(summary latency "d['latency_ms']['p99']")" "< 2" "$(verdict "$p99" '<' 2)"
    row latency "pickup max ms" "$(summary latency "d['latency_ms']['max']")" "" ""
}

# fill DIR: start a server on DIR and queue $MILLION_JOBS jobs (leaves it running).
fill() {
    start_server "$1"
    echo "== filling $MILLION_JOBS jobs" >&2
    bench_run fill --fill "$MILLION_JOBS" --batch 500 --producers 4
}

scenario_million() {
    fill "$TMP/million"
    sleep 2
    local rss hwm disk
    rss=$(kib "$SERVER_PID" VmRSS)
    hwm=$(kib "$SERVER_PID" VmHWM)
    disk=$(du -sb "$TMP/million" | cut -f1)
    row million "fill rate (PUSHB 500, 4 conns) jobs/s" "$(json "$TMP/fill.json" "round(d['push_per_s'])")" "" ""
    row million "server VmRSS MiB ($MILLION_JOBS queued)" "$(mib "$rss")" "<= 1024" "$(verdict "$(mib "$rss")" '<=' 1024)"
    row million "server VmHWM MiB (peak)" "$(mib "$hwm")" "<= 1024" "$(verdict "$(mib "$hwm")" '<=' 1024)"
    row million "on-disk MiB (du -sb data dir)" "$(mib $((disk / 1024)))" "" ""
    row million "on-disk bytes per queued job" "$((disk / MILLION_JOBS))" "" ""
    if [ "$SCENARIO" = all ]; then
        restart_measure "$TMP/million" # reuse the filled server
    else
        stop_server
    fi
}

# restart_measure DIR: the server on DIR is running with $MILLION_JOBS queued; restart it on
# the same port and time how long until it serves again.
restart_measure() {
    local dir=$1 listen=$ADDR t0 t1
    echo "== restart with $MILLION_JOBS queued" >&2
    t0=$(date +%s%N)
    stop_server
    t1=$(date +%s%N)
    row restart "graceful stop s" "$(python3 -c "print(round(($t1-$t0)/1e9, 2))")" "" ""
    local since
    since=$(date +%s%N)
    # The probe starts first and keeps trying to connect while the server boots.
    "$BENCH" --addr "$listen" --probe-restart --expect "$MILLION_JOBS" --since-ns "$since" \
        --timeout 300 --json >"$TMP/restart.json" &
    local probe=$!
    start_server "$dir" "$listen" info
    if ! wait "$probe"; then
        echo "restart probe failed" >&2
        exit 1
    fi
    keep "$TMP/restart.json" restart
    local f=$TMP/restart.json first all
    first=$(json "$f" "d['first_fetch_s']")
    all=$(json "$f" "d['all_fetchable_s']")
    local rebuild
    rebuild=$(grep -o 'index rebuilt.*' "$TMP/ojsd.err" | tail -1 | grep -o 'ms=[0-9]*' || true)
    row restart "until first FETCH succeeds s" "$first" "<= 3" "$(verdict "$first" '<=' 3)"
    row restart "until all $MILLION_JOBS fetchable s" "$all" "<= 3" "$(verdict "$all" '<=' 3)"
    row restart "index rebuild (server log)" "${rebuild:-?}" "" ""
    row restart "VmHWM MiB after restart" "$(mib "$(kib "$SERVER_PID" VmHWM)")" "" ""
    stop_server
}

scenario_restart() {
    fill "$TMP/restart"
    restart_measure "$TMP/restart"
}

scenario_idle() {
    start_server "$TMP/idle"
    echo "== idle: $IDLE_CONNS connections blocked in FETCH for ${IDLE_SECONDS}s" >&2
    if ! "$BENCH" --addr "$ADDR" --idle "$IDLE_CONNS" --seconds "$IDLE_SECONDS" \
        --server-pid "$SERVER_PID" --json >"$TMP/idle.json"; then
        cat "$TMP/idle.json" >&2
        exit 1
    fi
    keep "$TMP/idle.json" idle
    local f=$TMP/idle.json cpu
    cpu=$(json "$f" "d['server_cpu_pct']")
    row idle "connections held" "$(json "$f" "d['connections']")" "$IDLE_CONNS" ""
    row idle "server CPU % over ${IDLE_SECONDS}s" "$cpu" "< 2" "$(verdict "$cpu" '<' 2)"
    row idle "FETCH timeouts answered /s" "$(json "$f" "d['fetch_replies_per_s']")" "" ""
    row idle "server VmRSS MiB" "$(mib "$(kib "$SERVER_PID" VmRSS)")" "" ""
    stop_server
}

# Large jobs queued: what the server holds in memory per MiB of payload (issue D4: it was
# 4.3x while the engine kept recent jobs decoded), on disk, and after a restart.
scenario_bigjobs() {
    start_server "$TMP/big"
    echo "== bigjobs: $BIG_JOBS jobs of ~$BIG_BYTES bytes" >&2
    local base
    base=$(kib "$SERVER_PID" VmRSS)
    bench_run bigfill --fill "$BIG_JOBS" --payload "$BIG_BYTES" --batch 1 --producers 2
    sleep 2
    local rss hwm disk payload_mib
    rss=$(kib "$SERVER_PID" VmRSS)
    hwm=$(kib "$SERVER_PID" VmHWM)
    disk=$(du -sb "$TMP/big" | cut -f1)
    payload_mib=$(python3 -c "print(round($BIG_JOBS*$BIG_BYTES/1048576, 1))")
    row bigjobs "payload queued MiB" "$payload_mib" "" ""
    row bigjobs "server VmRSS MiB (VmHWM)" "$(mib "$rss") ($(mib "$hwm"))" "" ""
    row bigjobs "RSS growth per MiB queued" "$(python3 -c "print(round(($rss-$base)/1024/$payload_mib, 2))")" "" ""
    row bigjobs "on-disk MiB" "$(mib $((disk / 1024)))" "" ""
    stop_server
    start_server "$TMP/big"
    bench_run bigprobe --probe-restart --expect "$BIG_JOBS" --timeout 300
    row bigjobs "VmRSS MiB after restart" "$(mib "$(kib "$SERVER_PID" VmRSS)")" "" ""
    stop_server
}

# Disk under churn: LIVE_JOBS jobs stay queued while DISK_JOBS jobs are pushed, completed
# and pruned (--retention DISK_RETENTION s) through another queue; then the data dir's size
# is sampled every 5 s for DISK_WATCH s (the curve), and once stopped the live records are
# counted (ojsd-bench --store-stats). Target: on disk <= 2x the live bytes a minute after
# the churn. Then DISK_STEADY_S seconds of steady load at DISK_RATE jobs/s, sampled every
# 30 s: the size must level off, not grow with the jobs processed.
du_b() { du -sb "$1" | cut -f1; }
scenario_disk() {
    local dir=$TMP/disk curve="" t size at60="" i
    export OJSD_RETENTION=$DISK_RETENTION
    start_server "$dir"
    echo "== disk: $LIVE_JOBS live jobs, then $DISK_JOBS pushed, completed and pruned" >&2
    bench_run disk-live --fill "$LIVE_JOBS" --batch 500 --producers 2 --queue live
    bench_run disk-churn --mode batch --jobs "$DISK_JOBS" --batch 100
    row disk "churn jobs/s (batch 100)" "$(json "$TMP/disk-churn.json" "round(d['jobs_per_s'])")" "" ""
    for t in $(seq 0 5 "$DISK_WATCH"); do
        [ "$t" -gt 0 ] && sleep 5
        size=$(du_b "$dir")
        curve="$curve $t:$(mib $((size / 1024)))"
        [ "$t" -eq 60 ] && at60=$size
    done
    [ -n "$at60" ] || at60=$size
    row disk "MiB on disk at +s after the churn" "${curve# }" "" ""
    if [ "$DISK_STEADY_S" -gt 0 ]; then
        echo "== disk: ${DISK_STEADY_S}s steady at $DISK_RATE jobs/s" >&2
        local n=$((DISK_RATE * DISK_STEADY_S)) steady="" pid
        "$BENCH" --addr "$ADDR" --json --mode one --jobs "$n" --rate "$DISK_RATE" \
            --timeout $((DISK_STEADY_S * 3)) >"$TMP/disk-steady.json" &
        pid=$!
        i=0
        while kill -0 "$pid" 2>/dev/null; do
            if [ $((i % 30)) -eq 0 ]; then
                steady="$steady ${i}:$(mib $(($(du_b "$dir") / 1024)))"
            fi
            sleep 1
            i=$((i + 1))
        done
        wait "$pid" || { cat "$TMP/disk-steady.json" >&2; exit 1; }
        row disk "steady: MiB on disk at +s" "${steady# }" "" ""
        row disk "steady: jobs/s offered / done" "$DISK_RATE / $(json "$TMP/disk-steady.json" "round(d['jobs_per_s'])")" "" ""
    fi
    stop_server
    unset OJSD_RETENTION
    "$BENCH" --store-stats "$dir" --json >"$TMP/disk-stats.json"
    keep "$TMP/disk-stats.json" disk-stats
    local live ratio
    live=$(json "$TMP/disk-stats.json" "d['live_bytes']")
    ratio=$(python3 -c "print(round($at60/max(1,$live), 2))")
    row disk "live bytes after stop (records: jobs, events, ...)" "$(json "$TMP/disk-stats.json" "', '.join(f\"{k} {v['records']}/{round(v['bytes']/1048576,1)} MiB\" for k,v in d['spaces'].items())")" "" ""
    row disk "on disk / live, a minute after the churn" "$ratio" "<= 2" "$(verdict "$ratio" '<=' 2)"
}

case "$SCENARIO" in
bigjobs) scenario_bigjobs ;;
disk) scenario_disk ;;
steady) scenario_steady ;;
latency) scenario_latency ;;
million) scenario_million ;;
restart) scenario_restart ;;
idle) scenario_idle ;;
all)
    scenario_steady
    scenario_latency
    scenario_million # includes the restart measurement on the same data
    scenario_idle
    ;;
esac

echo
echo "ojsd benchmark — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load avg $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$RESULTS" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = ["scenario", "metric", "value", "target", "verdict"]
w = [max(len(r[i]) for r in rows + [head]) for i in range(5)]
line = lambda r: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
print(line(head))
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for r in rows:
    print(line(r))
EOF
