#!/usr/bin/env bash
# Cluster mode on PostgreSQL (issue 21), two measurements on release builds:
#
# 1. Takeover with a backlog: node A (active) and node B (standby) on one PostgreSQL; A is
#    filled with TAKEOVER_JOBS jobs (PUSHB 100 over 4 connections), then killed (kill -9).
#    Measured from the kill: when B took the lease (its log), when B answered its first FETCH
#    with a job (ojsd-bench --probe-restart, connecting to B's port until B binds it), and
#    when all the jobs were visible on B. Also printed: how much of A's lease was left at
#    the kill (database time), which B has to wait out, and B's rebuild.
# 2. One node's throughput on PostgreSQL (`one` and `batch` modes of ojsd-bench) with the
#    database's committed transactions (pg_stat_database.xact_commit, the whole database:
#    read-only ones too, i.e. every point read or scan page of a cache miss, and the lease
#    renewals and heartbeats), its write transactions (transaction ids assigned: the
#    txid_current() diff, less the probe's own) and WAL bytes (pg_current_wal_lsn() diff)
#    per job; and the same runs on fjall (the default store), back to back.
#
#   bench/takeover.sh [takeover|throughput|all]
#
# Env: TAKEOVER_JOBS=100000 LEASE_TTL_MS=5000 ONE_JOBS=20000 BATCH_JOBS=100000 BATCH=100
#      PG_URL: use this PostgreSQL (a database of its own: the transaction counts are the
#      database's) instead of a throw-away PostgreSQL 15 started here (initdb as the
#      `postgres` user when root, as .ci/postgres.sh does, on PG_PORT or a free port).
#      A_PORT, B_PORT: the nodes' client ports (free ports by default).
#      PG_NODE_ARGS: more flags for the PostgreSQL nodes (e.g. --postgres-cache-mb 256).
#      OJSD_BIN / BENCH_BIN: prebuilt binaries instead of `cargo build --release`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHAT=${1:-all}
case "$WHAT" in takeover | throughput | all) ;; *)
    echo "usage: $0 [takeover|throughput|all]" >&2
    exit 2
    ;;
esac
TAKEOVER_JOBS=${TAKEOVER_JOBS:-100000}
LEASE_TTL_MS=${LEASE_TTL_MS:-5000}
ONE_JOBS=${ONE_JOBS:-20000}
BATCH_JOBS=${BATCH_JOBS:-100000}
BATCH=${BATCH:-100}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ojsd-takeover.XXXXXX")
PIDS=()
. "$ROOT/bench/pg.sh"
A_PORT=${A_PORT:-$(free_port)}
B_PORT=${B_PORT:-$(free_port)}
cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    pg_stop
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. "$ROOT/bench/bins.sh"

pg_start ojsd-takeover

RESULTS=$TMP/results.tsv
: >"$RESULTS"
row() { printf '%s\t%s\t%s\n' "$@" >>"$RESULTS"; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

pg_node() {
    local name=$1 port=$2 schema=$3
    shift 3
    # shellcheck disable=SC2086 # PG_NODE_ARGS is a list of flags
    node "$name" "$port" --store postgres --postgres-url "$PG_URL" --postgres-schema "$schema" \
        --node-id "$name" --lease-ttl-ms "$LEASE_TTL_MS" ${PG_NODE_ARGS:-} "$@"
}
# The first log line of FILE matching PATTERN: its timestamp as unix ns.
log_ns() {
    python3 - "$1" "$2" <<'EOF'
import re, sys, datetime
pat = sys.argv[2]
for line in open(sys.argv[1], errors="replace"):
    if pat in line:
        m = re.search(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", re.sub(r"\x1b\[[0-9;]*m", "", line))
        if m:
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
            frac = float(m.group(2) or 0)
            print(int((t.timestamp() + frac) * 1e9))
            break
EOF
}

scenario_takeover() {
    local schema=takeover_$$
    echo "== takeover: $TAKEOVER_JOBS jobs through node A, kill -9 A, node B serves (lease ${LEASE_TTL_MS} ms)" >&2
    pg_node node-a "$A_PORT" "$schema"
    local a_pid=$NODE_PID
    wait_listening node-a
    pg_node node-b "$B_PORT" "$schema"
    for _ in $(seq 1 100); do grep -q 'standby:' "$TMP/node-b.err" && break; sleep 0.1; done
    local t0=$SECONDS
    "$BENCH" --addr "127.0.0.1:$A_PORT" --fill "$TAKEOVER_JOBS" --batch 100 --producers 4 \
        --queue takeover --json >"$TMP/fill.json"
    row takeover "backlog filled through A (jobs, s)" "$TAKEOVER_JOBS in $((SECONDS - t0)) s ($(json "$TMP/fill.json" "d['push_per_s']") jobs/s)"
    sleep 1
    local left kill_ns
    left=$(sql "SELECT round(extract(epoch FROM lease_until - now()) * 1000) FROM $schema.ojs_partitions WHERE part = 0")
    kill_ns=$(date +%s%N)
    kill -KILL "$a_pid"
    "$BENCH" --addr "127.0.0.1:$B_PORT" --probe-restart --expect "$TAKEOVER_JOBS" \
        --since-ns "$kill_ns" --queue takeover --timeout 300 --json >"$TMP/probe.json"
    local took opened ms
    took=$(log_ns "$TMP/node-b.err" "took the partition's lease")
    # A standby logs "ojsd ready" at start (it serves by forwarding); this line is its
    # own engine serving the partition.
    opened=$(log_ns "$TMP/node-b.err" "this node holds the partition: serving")
    ms() { python3 -c "print(round(($1 - $2) / 1e6))"; }
    row takeover "A's lease left at the kill (ms)" "$left"
    row takeover "kill -> B took the lease (ms)" "$(ms "$took" "$kill_ns")"
    row takeover "B took the lease -> B ready (rebuild, ms)" "$(ms "$opened" "$took")"
    row takeover "kill -> B's first FETCH with a job (ms)" "$(json "$TMP/probe.json" "round(d['first_fetch_s'] * 1000)")"
    row takeover "kill -> all $TAKEOVER_JOBS jobs visible on B (ms)" "$(json "$TMP/probe.json" "round(d['all_fetchable_s'] * 1000)")"
    row takeover "B's VmRSS after the takeover (MiB)" "$(awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$NODE_PID/status")"
    kill -TERM "$NODE_PID" 2>/dev/null || true
    wait "$NODE_PID" 2>/dev/null || true
    grep -E "rebuil|took the partition" "$TMP/node-b.err" | sed 's/\x1b\[[0-9;]*m//g' | tail -5 >&2 || true
}

# tp STORE MODE JOBS: one ojsd-bench run on a fresh node; PostgreSQL counters around it.
tp() {
    local store=$1 mode=$2 jobs=$3 name="tp-$1-$2" x0 x1 w0 w1 t0 t1
    if [ "$store" = postgres ]; then
        pg_node "$name" "$A_PORT" "tp_${mode}_$$"
    else
        node "$name" "$A_PORT"
    fi
    wait_listening "$name"
    sleep 1
    x0=$(sql "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
    w0=$(sql "SELECT pg_current_wal_lsn()")
    t0=$(sql "SELECT txid_current()")
    local extra=()
    [ "$mode" = batch ] && extra=(--batch "$BATCH")
    "$BENCH" --addr "127.0.0.1:$A_PORT" --mode "$mode" --jobs "$jobs" "${extra[@]}" \
        --server-pid "$NODE_PID" --json >"$TMP/$name.json"
    sleep 2 # pg_stat_database is flushed by the backends at most once a second
    x1=$(sql "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
    w1=$(sql "SELECT pg_current_wal_lsn()")
    t1=$(sql "SELECT txid_current()")
    local f=$TMP/$name.json
    local label="$store $mode ($jobs jobs)"
    row throughput "$label: jobs/s end to end" "$(json "$f" "round(d['jobs_per_s'])")"
    row throughput "$label: pickup p50 / p99 ms" "$(json "$f" "str(d['latency_ms']['p50']) + ' / ' + str(d['latency_ms']['p99'])")"
    row throughput "$label: server CPU %" "$(json "$f" "d.get('server_cpu_pct')")"
    if [ "$store" = postgres ]; then
        local wal
        wal=$(sql "SELECT pg_wal_lsn_diff('$w1', '$w0')")
        row throughput "$label: PostgreSQL transactions per job (all / writing)" \
            "$(python3 -c "print(round(($x1 - $x0) / $jobs, 3), '/', round(($t1 - $t0 - 1) / $jobs, 4))")"
        row throughput "$label: WAL bytes per job" "$(python3 -c "print(round($wal / $jobs))")"
    fi
    kill -TERM "$NODE_PID" 2>/dev/null || true
    wait "$NODE_PID" 2>/dev/null || true
}

scenario_throughput() {
    echo "== throughput: one node on PostgreSQL and on fjall, one and batch modes" >&2
    tp postgres one "$ONE_JOBS"
    tp fjall one "$ONE_JOBS"
    tp postgres batch "$BATCH_JOBS"
    tp fjall batch "$BATCH_JOBS"
}

case "$WHAT" in
takeover) scenario_takeover ;;
throughput) scenario_throughput ;;
all)
    scenario_takeover
    scenario_throughput
    ;;
esac

echo
echo "ojsd cluster benchmark — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load avg $(cut -d' ' -f1-3 /proc/loadavg), PostgreSQL $(sql 'SHOW server_version')"
python3 - "$RESULTS" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = ["scenario", "metric", "value"]
w = [max(len(r[i]) for r in rows + [head]) for i in range(3)]
line = lambda r: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
print(line(head))
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for r in rows:
    print(line(r))
EOF
