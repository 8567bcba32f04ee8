#!/usr/bin/env bash
# Profile ojsd under an ojsd-bench load with perf (software cpu-clock event, DWARF stacks):
#
#   bench/profile.sh NAME [SECONDS] -- OJSD-BENCH-ARGS...
#   bench/profile.sh batch 10 -- --mode batch --jobs 60000
#   bench/profile.sh one 10 -- --mode one --jobs 40000
#   bench/profile.sh idle 15 -- --idle 1000 --seconds 25
#
# Prints samples per thread and the top inclusive symbols of the engine thread, and leaves
# perf.data (plus flame.svg when inferno-collapse-perf/inferno-flamegraph are installed,
# e.g. `cargo install inferno`) in PROFILE_DIR (default bench/profiles/NAME, gitignored).
# Needs `perf` (Debian: linux-perf). OJSD_BIN / BENCH_BIN skip the release build.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=${1:?usage: $0 NAME [SECONDS] -- OJSD-BENCH-ARGS...}
shift
SECS=10
if [ "${1:-}" != "--" ] && [ -n "${1:-}" ]; then
    SECS=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 1; }

# The `profiling` profile: release code with debug info, so perf can name inlined frames.
if [ -z "${OJSD_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
    echo "building the profiling binaries..." >&2
    (cd "$ROOT" && cargo build --profile profiling --quiet --bin ojsd --bin ojsd-bench)
    export OJSD_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/profiling/ojsd
    export BENCH_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/profiling/ojsd-bench
fi
. "$ROOT/bench/bins.sh"
OUT=${PROFILE_DIR:-$ROOT/bench/profiles/$NAME}
mkdir -p "$OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ojsd-profile.XXXXXX")
SERVER_PID=""
cleanup() {
    [ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

start_server "$TMP/db"
PID=$SERVER_PID

"$BENCH" --addr "$ADDR" --server-pid "$PID" --json "$@" >"$OUT/bench.json" &
LOAD=$!
sleep 1 # past connection setup
perf record -F 299 -e cpu-clock --call-graph dwarf,32768 -p "$PID" -o "$OUT/perf.data" \
    -- sleep "$SECS" 2>"$OUT/perf-record.log" >/dev/null
wait "$LOAD" || echo "(the load run reported a failure; see $OUT/bench.json)" >&2

echo "load: $(cut -c1-300 "$OUT/bench.json")"
echo "samples per thread (at 299 Hz for ${SECS}s a fully busy thread has ~$((299 * SECS))):"
perf script -i "$OUT/perf.data" -F comm 2>/dev/null | sort | uniq -c | sort -rn | head -6
echo "engine thread, top inclusive symbols:"
perf report -i "$OUT/perf.data" --children --comm ojsd-engine --sort sym --stdio -g none 2>/dev/null |
    grep -v '^#' | grep -v '^$' | grep -E 'ojsd::|sled::|serde_json::(de|ser)|malloc|free' | head -40
if command -v inferno-collapse-perf >/dev/null && command -v inferno-flamegraph >/dev/null; then
    perf script -i "$OUT/perf.data" 2>/dev/null | inferno-collapse-perf >"$OUT/folded.txt"
    inferno-flamegraph --title "ojsd: $NAME" <"$OUT/folded.txt" >"$OUT/flame.svg"
    echo "flamegraph: $OUT/flame.svg"
fi
