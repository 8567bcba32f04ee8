#!/usr/bin/env bash
# Run the same workload against ojsd (its OJS port and its Faktory port), BullMQ 5 on
# Redis 7, and a bare Redis list queue, and print jobs/s side by side with the ratios
# against the issue's targets; then a pickup-latency table at fixed offered rates.
#
# Workload (ojsd-bench `one`/`batch` modes; bench/peer-bench.js for the Redis peers):
# COMPARE_JOBS jobs with ~300 bytes of args. Settings (SETTINGS="equal usual batch latency"):
#   equal  every system at the same concurrency, one job per command: P producer
#          connections with one add in flight each, C workers taking one job at a time
#          (PRODUCERS=16 WORKERS=16).
#   usual  each system as its users run it: BullMQ with one Queue keeping 64 adds in flight
#          and one Worker of concurrency 50 (its documented way to scale a worker); the
#          Redis list with 4 connections x 16 LPUSH in flight and 50 BRPOP connections;
#          ojsd (OJS port) with 4 producer connections x 16 pipelined PUSH and 50 worker
#          connections; the Faktory port as Faktory clients use it, one command in flight
#          per connection (the Faktory protocol has no pipelining): 64 producer connections
#          x 1 PUSH and 50 worker connections.
#   batch  BATCH (100) jobs per push and per fetch, BATCH_PRODUCERS x BATCH_WORKERS (4 x 4)
#          connections: ojsd PUSHB + FETCH COUNT + one ACKB per batch; the Redis list LPUSH of
#          100 values + BLMPOP COUNT 100; the Faktory port PUSHB of 100, but FETCH is one
#          job per command in Faktory, so its workers fetch one at a time, WORKERS (16) of
#          them. BullMQ has no batch fetch; it is not in this setting.
#   latency offered rates LAT_RATES (2000 5000) jobs/s for
#          LAT_SECONDS (15) each, 16 producers x 1 in flight, 16 workers, one job per
#          command: ojsd (OJS port), the Faktory port, and the Redis list with
#          appendfsync always (the durable one).
# Pickup latency, everywhere: the producer writes its wall-clock time into the job as it
# builds the command (just before the write to the socket); the worker takes the time
# when the FETCH / BRPOP / BLMPOP reply has been read, before parsing the job; latency is
# the difference (same machine, same clock). It therefore includes the push's own trip
# and durable commit, not only the time the job waited once acknowledged; the latency
# table also shows the pickups counted from the push *reply* (the producer has read it;
# 0 when the worker had the job first), the definition of the 2026-11-26 latency note.
# Redis persistence: AOF on, RDB snapshots off; REDIS_FSYNC="always everysec" runs each
# peer once per appendfsync policy (`always` fsyncs before replying, like ojsd, which
# fsyncs every group commit: the durable peer the targets name; `everysec` may lose the
# last second on a crash).
# Slow engine iterations: ojsd logs iterations >= 10 ms as "slow engine iteration", at most
# one line a second with the count of the others since (also_slow_since_last_report); the
# count shown is lines + those counts (a lower bound: slow iterations after the last line
# of a run are not reported).
# ACK_FETCH=1 (the default) has ojsd's workers on the OJS port ACK with `fetch`, taking the
# next job from the ACK's reply (one round trip per job, as ojsd's own clients and BullMQ's
# worker do); ACK_FETCH=0 measures FETCH then ACK.
# RUNS=N repeats the whole set back to back; the tables then show min–max over the runs.
# Installs what is missing: redis-server (apt) and bullmq (npm, pinned in bench/peers/).
# OJSD_BIN / BENCH_BIN use prebuilt binaries instead of `cargo build --release`.
# OUT_DIR=dir keeps every raw JSON result and server log there.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${COMPARE_JOBS:-50000}
PRODUCERS=${PRODUCERS:-16}
WORKERS=${WORKERS:-16}
SETTINGS=${SETTINGS:-"equal usual batch latency"}
REDIS_FSYNC=${REDIS_FSYNC:-"always everysec"}
BATCH=${BATCH:-100}
BATCH_JOBS=${BATCH_JOBS:-$((JOBS * 2))}
BATCH_PRODUCERS=${BATCH_PRODUCERS:-4}
BATCH_WORKERS=${BATCH_WORKERS:-4}
LAT_RATES=${LAT_RATES:-"2000 5000"}
LAT_SECONDS=${LAT_SECONDS:-15}
AF=""
[ "${ACK_FETCH:-1}" = 1 ] && AF=--ack-fetch
RUNS=${RUNS:-1}
OUT_DIR=${OUT_DIR:-}
BULLMQ_VERSION=5.81.5
PEERS=$ROOT/bench/peers

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ojsd-compare.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    sleep 0.5
    for p in "${PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- peers ---------------------------------------------------------------------------
if ! command -v redis-server >/dev/null; then
    echo "installing redis-server (apt)..." >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
mkdir -p "$PEERS"
if [ ! -f "$PEERS/package.json" ]; then
    cat >"$PEERS/package.json" <<EOF
{
  "name": "ojsd-bench-peers",
  "private": true,
  "description": "Peers for bench/compare.sh; installed by it, not committed",
  "dependencies": { "bullmq": "$BULLMQ_VERSION" }
}
EOF
fi
if [ ! -d "$PEERS/node_modules/bullmq" ]; then
    echo "installing bullmq@$BULLMQ_VERSION (npm)..." >&2
    (cd "$PEERS" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
export NODE_PATH=$PEERS/node_modules

# --- ojsd --------------------------------------------------------------------------------
. "$ROOT/bench/bins.sh"

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }

RESULTS=$TMP/results.tsv
: >"$RESULTS"
RUN=0
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u +%Y-%m-%dT%H:%MZ)

keep() { # FILE: copy into OUT_DIR
    if [ -n "$OUT_DIR" ]; then mkdir -p "$OUT_DIR" && cp "$1" "$OUT_DIR/"; fi
}

# record SETTING SYSTEM DURABILITY CONCURRENCY JSON [SLOW]
record() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$RUN" "$1" "$2" "$3" "$4" "$5" "${6:--}" >>"$RESULTS"
    keep "$5"
}

# slow_count LOG: slow engine iterations the server reported (lines + their "also" counts).
slow_count() {
    python3 - "$1" <<'EOF'
import re, sys
n = 0
for line in open(sys.argv[1], errors="replace"):
    if "slow engine iteration" in line:
        m = re.search(r"also_slow_since_last_report=(\d+)", line)
        n += 1 + (int(m.group(1)) if m else 0)
print(n)
EOF
}

stop_pid() {
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# run_ojsd SETTING DIALECT CONCURRENCY-LABEL BENCH-ARGS...: a fresh ojsd (OJS and Faktory
# ports, no HTTP port) on a fresh data dir, one ojsd-bench run against the DIALECT's port.
run_ojsd() {
    local setting=$1 dialect=$2 conc=$3
    shift 3
    local tag=$RUN-$setting-ojsd-$dialect addr name
    echo "== [run $RUN] ojsd $dialect port ($setting): $conc $*" >&2
    : >"$TMP/ojsd.err"
    rm -rf "$TMP/data"
    start_server "$TMP/data" 127.0.0.1:0 warn --faktory-listen 127.0.0.1:0 --http-listen off
    local pid=$SERVER_PID
    PIDS+=("$pid")
    addr=$ADDR
    name=ojsd
    if [ "$dialect" = faktory ]; then
        addr=$FAKTORY_ADDR
        name="ojsd faktory port"
    fi
    "$BENCH" --addr "$addr" --dialect "$dialect" --server-pid "$pid" --json "$@" \
        >"$TMP/$tag.json" || echo "   (ojsd-bench reported a failure; kept in the table)" >&2
    stop_pid "$pid"
    cp "$TMP/ojsd.err" "$TMP/$tag.log"
    keep "$TMP/$tag.log"
    record "$setting" "$name" "fsync every commit" "$conc" "$TMP/$tag.json" "$(slow_count "$TMP/$tag.log")"
    rm -rf "$TMP/data"
}

# run_peer SETTING KIND FSYNC CONCURRENCY-LABEL PEER-ARGS...: a fresh redis-server on a
# free port and a fresh dir, one peer-bench.js run.
run_peer() {
    local setting=$1 kind=$2 fsync=$3 conc=$4
    shift 4
    local port dir tag=$RUN-$setting-$kind-$fsync
    port=$(free_port)
    dir=$TMP/redis-$tag
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "== [run $RUN] $kind ($setting) on redis (appendfsync $fsync): $conc $*" >&2
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly yes --appendfsync "$fsync" --daemonize no --logfile "$dir/redis.log" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    node "$ROOT/bench/peer-bench.js" --kind "$kind" --port "$port" "$@" >"$TMP/$tag.json" ||
        echo "   (peer-bench reported a failure; kept in the table)" >&2
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    stop_pid "$pid"
    rm -rf "$dir"
    record "$setting" "$kind" "appendfsync $fsync" "$conc" "$TMP/$tag.json"
}

one_set() {
    local setting f rate n
    for setting in $SETTINGS; do
        case $setting in
        equal)
            local c="P=$PRODUCERS x1 C=$WORKERS"
            run_ojsd equal ojs "$c" --mode one --jobs "$JOBS" --producers "$PRODUCERS" \
                --workers "$WORKERS" --pipeline 1 --worker-pipeline 1 $AF
            run_ojsd equal faktory "$c" --mode one --jobs "$JOBS" --producers "$PRODUCERS" \
                --workers "$WORKERS" --pipeline 1 --worker-pipeline 1
            for f in $REDIS_FSYNC; do
                run_peer equal bullmq "$f" "$c" --jobs "$JOBS" --producers "$PRODUCERS" --inflight 1 --workers "$WORKERS"
                run_peer equal list "$f" "$c" --jobs "$JOBS" --producers "$PRODUCERS" --inflight 1 --workers "$WORKERS"
            done
            ;;
        usual)
            run_ojsd usual ojs "P=4 x16 C=50" --mode one --jobs "$JOBS" --producers 4 \
                --workers 50 --pipeline 16 --worker-pipeline 1 $AF
            run_ojsd usual faktory "P=64 x1 C=50" --mode one --jobs "$JOBS" --producers 64 \
                --workers 50 --pipeline 1 --worker-pipeline 1
            for f in $REDIS_FSYNC; do
                run_peer usual bullmq "$f" "P=1 x64 C=50" --jobs "$JOBS" --producers 1 --inflight 64 --workers 50
                run_peer usual list "$f" "P=4 x16 C=50" --jobs "$JOBS" --producers 4 --inflight 16 --workers 50
            done
            ;;
        batch)
            run_ojsd batch ojs "P=$BATCH_PRODUCERS C=$BATCH_WORKERS, $BATCH/push $BATCH/fetch" \
                --mode batch --jobs "$BATCH_JOBS" --batch "$BATCH" \
                --producers "$BATCH_PRODUCERS" --workers "$BATCH_WORKERS"
            run_ojsd batch faktory "P=$BATCH_PRODUCERS C=$WORKERS, $BATCH/push 1/fetch" \
                --mode batch --jobs "$JOBS" --batch "$BATCH" \
                --producers "$BATCH_PRODUCERS" --workers "$WORKERS"
            for f in $REDIS_FSYNC; do
                run_peer batch list "$f" "P=$BATCH_PRODUCERS C=$BATCH_WORKERS, $BATCH/push $BATCH/fetch" \
                    --jobs "$BATCH_JOBS" --batch "$BATCH" --producers "$BATCH_PRODUCERS" --workers "$BATCH_WORKERS"
            done
            ;;
        latency)
            for rate in $LAT_RATES; do
            n=$((rate * LAT_SECONDS))
            local c="$rate/s offered, P=$PRODUCERS x1 C=$WORKERS"
            run_ojsd "latency@$rate" ojs "$c" --mode one --jobs "$n" --rate "$rate" \
                --producers "$PRODUCERS" --workers "$WORKERS" $AF
            run_ojsd "latency@$rate" faktory "$c" --mode one --jobs "$n" --rate "$rate" \
                --producers "$PRODUCERS" --workers "$WORKERS"
            run_peer "latency@$rate" list always "$c" --jobs "$n" --rate "$rate" \
                --producers "$PRODUCERS" --inflight 1 --workers "$WORKERS"
            done
            ;;
        *)
            echo "unknown setting $setting (equal, usual, batch, latency)" >&2
            exit 2
            ;;
        esac
    done
}

for RUN in $(seq 1 "$RUNS"); do
    one_set
done

echo
echo "## compare — started $STARTED, ended $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- machine: $(nproc) cores, load average $LOAD_BEFORE at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; kernel $(uname -r)"
echo "- ojsd: $("$OJSD" --version 2>/dev/null | head -1) ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')); binaries: $OJSD, $BENCH"
echo "- peers: redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-), bullmq $BULLMQ_VERSION, ioredis $(node -p "require('ioredis/package.json').version" 2>/dev/null || echo '?'), node $(node --version)"
echo "- settings: $SETTINGS; $RUNS run(s) of the whole set, back to back; $JOBS jobs per one-job run, $BATCH_JOBS per batch run (Faktory batch: $JOBS), ~300 B of args; latency runs $LAT_SECONDS s per rate"
echo
python3 "$ROOT/bench/compare_summary.py" "$RESULTS"
