#!/usr/bin/env bash
# Run the same workload against ojsd, BullMQ 5 on Redis 7, and a bare Redis list queue
# (LPUSH + BRPOP), and print jobs/s side by side with the ratios ojsd/peer.
#
# Workload (ojsd-bench `one` mode): N jobs with ~300 bytes of args, pushed one job per
# command and taken one job per command, under two settings (SETTINGS="equal usual"):
#   equal  every system at the same concurrency: P producer connections with one add in
#          flight each, C workers taking one job at a time (PRODUCERS=16 WORKERS=16).
#   usual  each system as its users run it: BullMQ with one Queue keeping 64 adds in flight
#          and one Worker of concurrency 50 (its documented way to scale a worker); the
#          Redis list with 4 connections x 16 LPUSH in flight and 50 BRPOP connections;
#          ojsd with 4 producer connections x 16 pipelined PUSH and 50 worker connections.
#   COMPARE_JOBS=50000
# Redis persistence: AOF on, RDB snapshots off; REDIS_FSYNC="always everysec" runs each
# peer once per appendfsync policy (`always` fsyncs before replying, like ojsd, which fsyncs
# every group commit; `everysec` may lose the last second on a crash).
# Installs what is missing: redis-server (apt) and bullmq (npm, pinned in bench/peers/).
# OJSD_BIN / BENCH_BIN use prebuilt binaries instead of `cargo build --release`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${COMPARE_JOBS:-50000}
PRODUCERS=${PRODUCERS:-16}
WORKERS=${WORKERS:-16}
SETTINGS=${SETTINGS:-"equal usual"}
REDIS_FSYNC=${REDIS_FSYNC:-"always everysec"}
BULLMQ_VERSION=5.81.5
PEERS=$ROOT/bench/peers

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ojsd-compare.XXXXXX")
PIDS=()
cleanup() {
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
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

RESULTS=$TMP/results.tsv
: >"$RESULTS"

run_ojsd() { # SETTING P C PIPELINE
    local setting=$1 p=$2 c=$3 pipe=$4
    echo "== ojsd ($setting): $JOBS jobs, P=$p x $pipe in flight, C=$c, fsync per commit" >&2
    start_server "$TMP/ojsd-data-$setting"
    local pid=$SERVER_PID
    PIDS+=("$pid")
    "$BENCH" --addr "$ADDR" --mode one --jobs "$JOBS" --producers "$p" \
        --workers "$c" --pipeline "$pipe" --worker-pipeline 1 --json >"$TMP/ojsd-$setting.json"
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    printf '%s\tojsd\tfsync every commit\tP=%s x%s C=%s\t%s\n' "$setting" "$p" "$pipe" "$c" \
        "$TMP/ojsd-$setting.json" >>"$RESULTS"
}

run_peer() { # SETTING KIND FSYNC P INFLIGHT C
    local setting=$1 kind=$2 fsync=$3 p=$4 inflight=$5 c=$6 port dir
    port=$(free_port)
    dir=$TMP/redis-$setting-$kind-$fsync
    mkdir -p "$dir"
    echo "== $kind ($setting) on redis (appendfsync $fsync): $JOBS jobs, P=$p x $inflight in flight, C=$c" >&2
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly yes --appendfsync "$fsync" --daemonize no --logfile "$dir/redis.log" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    local out=$TMP/$setting-$kind-$fsync.json
    node "$ROOT/bench/peer-bench.js" --kind "$kind" --port "$port" --jobs "$JOBS" \
        --producers "$p" --inflight "$inflight" --workers "$c" >"$out"
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    printf '%s\t%s\tappendfsync %s\tP=%s x%s C=%s\t%s\n' "$setting" "$kind" "$fsync" "$p" \
        "$inflight" "$c" "$out" >>"$RESULTS"
}

for setting in $SETTINGS; do
    case $setting in
    equal)
        run_ojsd equal "$PRODUCERS" "$WORKERS" 1
        for f in $REDIS_FSYNC; do
            run_peer equal bullmq "$f" "$PRODUCERS" 1 "$WORKERS"
            run_peer equal list "$f" "$PRODUCERS" 1 "$WORKERS"
        done
        ;;
    usual)
        run_ojsd usual 4 50 16
        for f in $REDIS_FSYNC; do
            run_peer usual bullmq "$f" 1 64 50
            run_peer usual list "$f" 4 16 50
        done
        ;;
    *)
        echo "unknown setting $setting (equal, usual)" >&2
        exit 2
        ;;
    esac
done

echo
echo "compare — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load avg $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$JOBS jobs, ~300 B args, one job per command"
echo "redis $(redis-server --version | grep -o 'v=[0-9.]*'), bullmq $BULLMQ_VERSION, node $(node --version)"
python3 - "$RESULTS" <<'EOF'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
res = [(st, name, dur, conc, json.load(open(path))) for st, name, dur, conc, path in rows]
ojsd = {st: d["jobs_per_s"] for st, n, _, _, d in res if n == "ojsd"}
head = ["setting", "system", "durability", "concurrency", "jobs/s", "push/s", "pickup p50 ms",
        "p99 ms", "exactly once", "ojsd / this"]
out = []
for st, n, dur, conc, d in res:
    out.append([st, n, dur, conc, f"{d['jobs_per_s']:.0f}", f"{d['push_per_s']:.0f}",
                str(d["latency_ms"]["p50"]), str(d["latency_ms"]["p99"]),
                "yes" if d["exactly_once"]["ok"] else "NO",
                f"{ojsd[st] / d['jobs_per_s']:.2f}x" if st in ojsd else "-"])
w = [max(len(r[i]) for r in out + [head]) for i in range(len(head))]
line = lambda r: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
print(line(head))
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for r in out:
    print(line(r))
targets = {"bullmq": 5.0, "list": 1.0}
for st, n, dur, conc, d in res:
    if n in targets and st in ojsd:
        ratio = ojsd[st] / d["jobs_per_s"]
        verdict = "met" if ratio >= targets[n] else "NOT met"
        print(f"target ojsd >= {targets[n]:g}x {n} ({st}, {dur}): {ratio:.2f}x -> {verdict}")
EOF
