#!/usr/bin/env bash
# Run the same workload against ojsd, BullMQ 5 on Redis 7, and a bare Redis list queue
# (LPUSH + BRPOP), and print jobs/s side by side with the ratios ojsd/peer.
#
# Workload (ojsd-bench `one` mode): N jobs with ~300 bytes of args, P producer connections
# pushing one job at a time, C worker connections taking one job at a time.
#   COMPARE_JOBS=50000 PRODUCERS=16 WORKERS=16
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

run_ojsd() {
    echo "== ojsd: $JOBS jobs, P=$PRODUCERS C=$WORKERS, one at a time, fsync per commit" >&2
    start_server "$TMP/ojsd-data"
    local pid=$SERVER_PID
    PIDS+=("$pid")
    "$BENCH" --addr "$ADDR" --mode one --jobs "$JOBS" --producers "$PRODUCERS" \
        --workers "$WORKERS" --json >"$TMP/ojsd.json"
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    printf 'ojsd\tfsync every commit\t%s\n' "$TMP/ojsd.json" >>"$RESULTS"
}

run_peer() { # KIND FSYNC
    local kind=$1 fsync=$2 port dir
    port=$(free_port)
    dir=$TMP/redis-$kind-$fsync
    mkdir -p "$dir"
    echo "== $kind on redis (appendfsync $fsync): $JOBS jobs, P=$PRODUCERS C=$WORKERS" >&2
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly yes --appendfsync "$fsync" --daemonize no --logfile "$dir/redis.log" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    node "$ROOT/bench/peer-bench.js" --kind "$kind" --port "$port" --jobs "$JOBS" \
        --producers "$PRODUCERS" --workers "$WORKERS" >"$TMP/$kind-$fsync.json"
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    printf '%s\tappendfsync %s\t%s\n' "$kind" "$fsync" "$TMP/$kind-$fsync.json" >>"$RESULTS"
}

run_ojsd
for f in $REDIS_FSYNC; do
    run_peer bullmq "$f"
    run_peer list "$f"
done

echo
echo "compare — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load avg $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$JOBS jobs, P=$PRODUCERS C=$WORKERS, ~300 B args, one job per command"
echo "redis $(redis-server --version | grep -o 'v=[0-9.]*'), bullmq $BULLMQ_VERSION, node $(node --version)"
python3 - "$RESULTS" <<'EOF'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
res = [(name, dur, json.load(open(path))) for name, dur, path in rows]
ojsd = next(d for n, _, d in res if n == "ojsd")["jobs_per_s"]
head = ["system", "durability", "jobs/s", "push/s", "pickup p50 ms", "p99 ms", "exactly once", "ojsd / this"]
out = []
for n, dur, d in res:
    out.append([n, dur, f"{d['jobs_per_s']:.0f}", f"{d['push_per_s']:.0f}",
                str(d["latency_ms"]["p50"]), str(d["latency_ms"]["p99"]),
                "yes" if d["exactly_once"]["ok"] else "NO",
                f"{ojsd / d['jobs_per_s']:.2f}x"])
w = [max(len(r[i]) for r in out + [head]) for i in range(len(head))]
line = lambda r: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
print(line(head))
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for r in out:
    print(line(r))
targets = {"bullmq": 5.0, "list": 1.0}
for n, dur, d in res:
    if n in targets:
        ratio = ojsd / d["jobs_per_s"]
        verdict = "met" if ratio >= targets[n] else "NOT met"
        print(f"target ojsd >= {targets[n]:g}x {n} ({dur}): {ratio:.2f}x -> {verdict}")
EOF
