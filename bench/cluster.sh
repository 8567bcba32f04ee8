#!/usr/bin/env bash
# Cluster mode with partitions (issue 21): 1, 2 and 3 ojsd nodes on one PostgreSQL against
# single-node fjall, back to back, on release builds.
#
# 1. throughput: the "usual" load of compare.sh (ojsd-bench `one` mode, PRODUCERS producer
#    connections with PIPELINE PUSHes in flight each, WORKERS worker connections taking one
#    job at a time) over QUEUES queues (ojsd-bench --queues: each PUSH goes to the
#    producer's next queue, worker w fetches queue w mod QUEUES; --spread PARTITIONS names
#    them so that each partition has QUEUES / PARTITIONS of them), for: one fjall node (the
#    baseline), then 1, 2 and 3 nodes on one PostgreSQL with --partitions PARTITIONS, a fresh
#    schema per run, the clients spread over the nodes round-robin (ojsd-bench --addr
#    a,b,c). A run starts once CLUSTER shows the partitions shared out (each node at least
#    floor(PARTITIONS / nodes)). With ROUTES (default "lb holders") each multi-node setup
#    runs twice: "lb" as through a load balancer (every command to the next node in turn,
#    so most are forwarded to the partition's holder) and "holders" (setup pg-Nn-holders)
#    as a partition-aware client (ojsd-bench --to-holders: each worker on the holder of its
#    queue, each PUSH over the connection to its queue's holder; nothing forwarded).
#    Reported per run: jobs/s, pickup p50/p99, the database's
#    xact_commit and transaction ids assigned (writing transactions), WAL bytes and ojs_kv rows
#    inserted, updated and deleted per job,
#    the CPU seconds of the nodes and of PostgreSQL per 1,000 jobs, and the machine's CPU
#    steal (/proc/stat), the cores busy during the run (nodes + PostgreSQL + the load
#    generator's CPU over its measured time; see usage()), and the nodes' write system calls per job
#    (/proc/PID/io syscw: replies to clients, frames to peers, statements to PostgreSQL).
# 2. takeover: 3 nodes, TAKEOVER_JOBS jobs pushed over the QUEUES queues (PUSHB 100 through
#    all three nodes), then kill -9 of the node holding the most partitions. From the kill:
#    the first queue and the last queue that hand out a job again through a surviving node
#    (one probe connection per queue, retried on any error, as a client would), when CLUSTER
#    lists every partition under a live node, and when INFO shows all the jobs.
#
#   bench/cluster.sh [throughput|takeover|all]
#
# Env: REPEAT=2 (passes of each), JOBS=20000, PRODUCERS=4 PIPELINE=16 WORKERS=50, QUEUES=16,
#      PARTITIONS=8, NODES="1 2 3", ROUTES="lb holders", RATE (offered jobs/s for the load runs: pickup latency
#      below saturation; default as fast as possible), TAKEOVER_JOBS=100000, LEASE_TTL_MS=5000,
#      PG_NODE_ARGS (more flags for the PostgreSQL nodes), PG_URL (a database of its own,
#      else a throw-away PostgreSQL 15 is started here as in takeover.sh),
#      PG_SERVER_ARGS (more -c settings for the throw-away PostgreSQL, as in bench/pg.sh),
#      OJSD_BIN / BENCH_BIN (prebuilt binaries instead of `cargo build --release`),
#      OUT_DIR (keep the raw JSON and the nodes' logs there).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHAT=${1:-all}
case "$WHAT" in throughput | takeover | all) ;; *)
    echo "usage: $0 [throughput|takeover|all]" >&2
    exit 2
    ;;
esac
REPEAT=${REPEAT:-2}
JOBS=${JOBS:-20000}
PRODUCERS=${PRODUCERS:-4}
PIPELINE=${PIPELINE:-16}
WORKERS=${WORKERS:-50}
QUEUES=${QUEUES:-16}
PARTITIONS=${PARTITIONS:-8}
NODES=${NODES:-1 2 3}
ROUTES=${ROUTES:-lb holders}
TAKEOVER_JOBS=${TAKEOVER_JOBS:-100000}
LEASE_TTL_MS=${LEASE_TTL_MS:-5000}
OUT_DIR=${OUT_DIR:-}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ojsd-cluster.XXXXXX")
PIDS=()
. "$ROOT/bench/pg.sh"
cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    if [ -n "$OUT_DIR" ]; then mkdir -p "$OUT_DIR" && cp -r "$TMP"/*.json "$TMP"/*.err "$OUT_DIR"/ 2>/dev/null || true; fi
    pg_stop
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ulimit -n 8192 2>/dev/null || true

. "$ROOT/bench/bins.sh"

pg_start ojsd-cluster

RESULTS=$TMP/results.tsv
: >"$RESULTS"
# row SCENARIO SETUP PASS METRIC VALUE
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# CPU seconds (user + system) of the given pids and, with PG_PID, of PostgreSQL (the
# postmaster and its children); and the machine's /proc/stat cpu line. One line of JSON.
snapshot() {
    python3 - "$PG_PID" "$@" <<'EOF'
import json, os, sys
tick = os.sysconf("SC_CLK_TCK")
def stat(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    f = s[s.rindex(")") + 2:].split()
    return int(f[1]), (int(f[11]) + int(f[12])) / tick  # ppid, utime + stime
def writes(pid):  # write system calls (write, writev, sendmsg...) so far
    try:
        return int(next(l for l in open(f"/proc/{pid}/io") if l.startswith("syscw")).split()[1])
    except (OSError, StopIteration):
        return 0
pg = sys.argv[1]
nodes = sum((stat(p) or (0, 0))[1] for p in sys.argv[2:])
syscw = sum(writes(p) for p in sys.argv[2:])
pg_cpu = 0.0
if pg:
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = stat(d)
            if st and (d == pg or str(st[0]) == pg):
                pg_cpu += st[1]
cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
print(json.dumps({"nodes": nodes, "pg": pg_cpu, "cpu": cpu, "syscw": syscw}))
EOF
}
# usage A B JOBS BENCH-JSON: nodes' and PostgreSQL's CPU s per 1,000 jobs, steal %, the
# cores busy during the run and write system calls per job between two snapshots. The
# busy cores are the CPU of the nodes, PostgreSQL and the load generator over the run's
# measured time (its `elapsed_s`, taken by ojsd-bench from the first PUSH to the last job
# done), not /proc/stat's idle time: the snapshots also span the load generator's start and
# its exactly-once check, as long as a short run itself (round 16 found 55% "idle" that
# way in runs that kept 1.7 of the 2 cores busy).
usage() {
    python3 - "$1" "$2" "$3" "$4" <<'EOF'
import json, os, sys
a, b, jobs = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
try:
    run = json.load(open(sys.argv[4]))
except (OSError, ValueError):
    run = {}
d = [y - x for x, y in zip(a["cpu"], b["cpu"])]
tot = sum(d[:8]) or 1
cpu = (b["nodes"] - a["nodes"]) + (b["pg"] - a["pg"]) + (run.get("client_cpu_s") or 0)
busy = cpu / run["elapsed_s"] if run.get("elapsed_s") else float("nan")
print(round((b["nodes"] - a["nodes"]) * 1000 / jobs, 3), round((b["pg"] - a["pg"]) * 1000 / jobs, 3),
      round(d[7] * 100 / tot, 1), f"{busy:.2f} of {os.cpu_count()}",
      round((b["syscw"] - a["syscw"]) / jobs, 2), sep="\t")
EOF
}

# start_cluster TAG N: N PostgreSQL nodes on schema TAG; sets ADDRS (comma-separated),
# NODE_PIDS, NODE_NAMES, NODE_PORTS; returns once CLUSTER shows the partitions shared out.
start_cluster() {
    local tag=$1 n=$2 i port peer
    ADDRS="" NODE_PIDS=() NODE_NAMES=() NODE_PORTS=()
    for i in $(seq 1 "$n"); do
        port=$(free_port)
        peer=$(free_port)
        # shellcheck disable=SC2086 # PG_NODE_ARGS is a list of flags
        node "$tag-n$i" "$port" --store postgres --postgres-url "$PG_URL" \
            --postgres-schema "$tag" --partitions "$PARTITIONS" --node-id "$tag-n$i" \
            --peer-listen "127.0.0.1:$peer" --lease-ttl-ms "$LEASE_TTL_MS" ${PG_NODE_ARGS:-}
        NODE_PIDS+=("$NODE_PID")
        NODE_NAMES+=("$tag-n$i")
        NODE_PORTS+=("$port")
        ADDRS="${ADDRS:+$ADDRS,}127.0.0.1:$port"
        # One at a time: the first creates the schema.
        wait_listening "$tag-n$i"
    done
    wait_balanced "127.0.0.1:${NODE_PORTS[0]}" "$n"
}
# wait_balanced ADDR N: until CLUSTER shows no unowned partition and N live nodes each
# holding at least floor(PARTITIONS / N).
wait_balanced() {
    local addr=$1 n=$2
    for _ in $(seq 1 600); do
        if "$OJSD" cluster --addr "$addr" --json 2>/dev/null | python3 -c "
import json, sys
c = json.load(sys.stdin)
live = [x for x in c['nodes'] if x['role'] != 'gone']
ok = not c['unowned'] and len(live) == $n and all(len(x['partitions']) >= $PARTITIONS // $n for x in live)
sys.exit(0 if ok else 1)"; then
            return 0
        fi
        sleep 0.1
    done
    echo "the partitions were not shared out over $n nodes in 60 s:" >&2
    "$OJSD" cluster --addr "$addr" >&2 || true
    exit 1
}
stop_pids() {
    local p
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# load SETUP PASS ADDRS PIDS...: one usual-settings run; PostgreSQL counters around it
# unless SETUP is fjall.
load() {
    local setup=$1 pass=$2 addrs=$3
    shift 3
    local name="tp-$setup-$pass" x0 x1 t0 t1 w0 w1 s0 s1 r0 r1
    if [ "$setup" != fjall ]; then
        x0=$(sql "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        w0=$(sql "SELECT pg_current_wal_lsn()")
        t0=$(sql "SELECT txid_current()")
        r0=$(sql "SELECT coalesce(sum(n_tup_ins), 0) || ' ' || coalesce(sum(n_tup_upd), 0) || ' ' || coalesce(sum(n_tup_hot_upd), 0) || ' ' || coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables WHERE relname = 'ojs_kv'")
    fi
    s0=$(snapshot "$@")
    "$BENCH" --addr "$addrs" --mode one --jobs "$JOBS" --producers "$PRODUCERS" \
        --pipeline "$PIPELINE" --worker-pipeline 1 --workers "$WORKERS" --queues "$QUEUES" \
        --spread "$PARTITIONS" ${RATE:+--rate "$RATE"} ${LOAD_ARGS:-} --json >"$TMP/$name.json" || { echo "ojsd-bench failed ($setup, pass $pass):" >&2; cat "$TMP/$name.json" >&2; }
    s1=$(snapshot "$@")
    local f=$TMP/$name.json
    row throughput "$setup" "$pass" "jobs/s" "$(json "$f" "round(d.get('jobs_per_s', 0))")"
    row throughput "$setup" "$pass" "pickup p50 / p99 ms" "$(json "$f" "str(d['latency_ms']['p50']) + ' / ' + str(d['latency_ms']['p99'])")"
    row throughput "$setup" "$pass" "exactly once" "$(json "$f" "d['exactly_once']['ok']")"
    local u
    u=$(usage "$s0" "$s1" "$JOBS" "$f")
    row throughput "$setup" "$pass" "CPU s per 1k jobs: nodes / PostgreSQL" "$(cut -f1 <<<"$u") / $(cut -f2 <<<"$u")"
    row throughput "$setup" "$pass" "machine: steal %" "$(cut -f3 <<<"$u")"
    row throughput "$setup" "$pass" "cores busy in the run: nodes + PostgreSQL + load generator" "$(cut -f4 <<<"$u")"
    row throughput "$setup" "$pass" "write system calls per job, nodes" "$(cut -f5 <<<"$u")"
    if [ "$setup" != fjall ]; then
        sleep 1.5 # pg_stat_database is flushed by the backends at most once a second
        x1=$(sql "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        w1=$(sql "SELECT pg_current_wal_lsn()")
        t1=$(sql "SELECT txid_current()")
        r1=$(sql "SELECT coalesce(sum(n_tup_ins), 0) || ' ' || coalesce(sum(n_tup_upd), 0) || ' ' || coalesce(sum(n_tup_hot_upd), 0) || ' ' || coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables WHERE relname = 'ojs_kv'")
        local wal
        wal=$(sql "SELECT pg_wal_lsn_diff('$w1', '$w0')")
        row throughput "$setup" "$pass" "PG transactions per job (all / writing)" \
            "$(python3 -c "print(round(($x1 - $x0) / $JOBS, 3), '/', round(($t1 - $t0 - 1) / $JOBS, 4))")"
        row throughput "$setup" "$pass" "WAL bytes per job" "$(python3 -c "print(round($wal / $JOBS))")"
        row throughput "$setup" "$pass" "ojs_kv rows per job: inserted / updated (HOT) / deleted" \
            "$(python3 -c "a = '$r0'.split(); b = '$r1'.split(); d = [(int(y) - int(x)) / $JOBS for x, y in zip(a, b)]; print('%.2f / %.2f (%.2f) / %.2f' % tuple(d))")"
    fi
}

scenario_throughput() {
    local pass n port
    for pass in $(seq 1 "$REPEAT"); do
        echo "== throughput pass $pass: fjall, then $NODES PostgreSQL nodes ($PARTITIONS partitions)" >&2
        port=$(free_port)
        node "fjall-$pass" "$port"
        wait_listening "fjall-$pass"
        sleep 1
        load fjall "$pass" "127.0.0.1:$port" "$NODE_PID"
        stop_pids "$NODE_PID"
        for n in $NODES; do
            for route in $ROUTES; do
                # One node forwards nothing: the holders run would be the same run.
                if [ "$route" = holders ] && [ "$n" = 1 ]; then continue; fi
                start_cluster "c${n}_p${pass}_${route}_$$" "$n"
                sleep 1
                if [ "$route" = holders ]; then
                    LOAD_ARGS=--to-holders load "pg-${n}n-holders" "$pass" "$ADDRS" "${NODE_PIDS[@]}"
                else
                    load "pg-${n}n" "$pass" "$ADDRS" "${NODE_PIDS[@]}"
                fi
                stop_pids "${NODE_PIDS[@]}"
            done
        done
    done
}

scenario_takeover() {
    local pass
    for pass in $(seq 1 "$REPEAT"); do
        local tag="tk_p${pass}_$$"
        echo "== takeover pass $pass: 3 nodes, $TAKEOVER_JOBS jobs over $QUEUES queues, kill -9 of the busiest (lease ${LEASE_TTL_MS} ms)" >&2
        start_cluster "$tag" 3
        local t0=$SECONDS
        "$BENCH" --addr "$ADDRS" --fill "$TAKEOVER_JOBS" --batch 100 --producers 4 \
            --queues "$QUEUES" --spread "$PARTITIONS" --json >"$TMP/fill-$pass.json"
        row takeover "3 nodes" "$pass" "backlog filled (s, jobs/s)" "$((SECONDS - t0)) s, $(json "$TMP/fill-$pass.json" "round(d['push_per_s'])") jobs/s"
        sleep 1
        # The node holding the most partitions, and the others.
        local held victim i vi=0 most=-1 survivor=""
        "$OJSD" cluster --addr "127.0.0.1:${NODE_PORTS[0]}" --json >"$TMP/cluster-$pass.json"
        for i in 0 1 2; do
            held=$(json "$TMP/cluster-$pass.json" "sum(len(x['partitions']) for x in d['nodes'] if x['id'] == '${NODE_NAMES[$i]}')")
            if [ "$held" -gt "$most" ]; then most=$held vi=$i; fi
        done
        victim=${NODE_NAMES[$vi]}
        for i in 0 1 2; do [ "$i" != "$vi" ] && survivor=${survivor:-${NODE_PORTS[$i]}}; done
        local left kill_ns
        left=$(sql "SELECT round(extract(epoch FROM max(lease_until) - now()) * 1000) FROM $tag.ojs_partitions WHERE owner = '$victim'")
        kill_ns=$(date +%s%N)
        kill -KILL "${NODE_PIDS[$vi]}"
        "$BENCH" --addr "127.0.0.1:$survivor" --probe-restart --queues "$QUEUES" --spread "$PARTITIONS" \
            --expect "$TAKEOVER_JOBS" --since-ns "$kill_ns" --dead-node "$victim" \
            --timeout 300 --json >"$TMP/probe-$pass.json" || { echo "probe failed" >&2; cat "$TMP/probe-$pass.json" >&2; }
        local f=$TMP/probe-$pass.json
        row takeover "3 nodes" "$pass" "killed node's partitions; its lease left at the kill (ms)" "$most of $PARTITIONS; $left"
        row takeover "3 nodes" "$pass" "kill -> CLUSTER: every partition under a live node (ms)" "$(json "$f" "round(d['cluster_all_served_s'] * 1000)")"
        row takeover "3 nodes" "$pass" "kill -> first / last of $QUEUES queues hands out a job (ms)" "$(json "$f" "str(round(d['first_fetch_s'] * 1000)) + ' / ' + str(round(d['every_queue_fetch_s'] * 1000))")"
        row takeover "3 nodes" "$pass" "kill -> all $TAKEOVER_JOBS jobs visible (ms)" "$(json "$f" "round(d['all_fetchable_s'] * 1000)")"
        row takeover "3 nodes" "$pass" "probe commands retried (errors)" "$(json "$f" "d['errors_retried']")"
        local pids=()
        for i in 0 1 2; do [ "$i" != "$vi" ] && pids+=("${NODE_PIDS[$i]}"); done
        stop_pids "${pids[@]}"
        grep -h "took the partition\|rebuil" "$TMP"/"$tag"-n*.err | sed 's/\x1b\[[0-9;]*m//g' | tail -6 >&2 || true
    done
}

vmstat 1 3 >"$TMP/vmstat-before.txt" 2>&1 || true
START=$(date -u +%H:%M)
case "$WHAT" in
throughput) scenario_throughput ;;
takeover) scenario_takeover ;;
all)
    scenario_throughput
    scenario_takeover
    ;;
esac

echo
echo "ojsd cluster benchmark — $(date -u +%Y-%m-%d) $START–$(date -u +%H:%MZ), $(nproc) cores, load avg $(cut -d' ' -f1-3 /proc/loadavg), PostgreSQL $(sql 'SHOW server_version'), lease TTL $LEASE_TTL_MS ms, $PARTITIONS partitions, $QUEUES queues, P=$PRODUCERS x$PIPELINE C=$WORKERS, $JOBS jobs a run${RATE:+, offered $RATE jobs/s}"
echo "vmstat before:"
cat "$TMP/vmstat-before.txt"
python3 - "$RESULTS" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = ["scenario", "setup", "pass", "metric", "value"]
w = [max(len(r[i]) for r in rows + [head]) for i in range(5)]
line = lambda r: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
print(line(head))
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for r in sorted(rows, key=lambda r: (r[0] != "throughput", r[1], r[3], r[2])):
    print(line(r))
EOF
