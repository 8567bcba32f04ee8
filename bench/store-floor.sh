#!/usr/bin/env bash
# The store decision (bench/RESULTS.md, round 4): ojsd-bench --store-floor against fjall,
# redb and sled back to back, twice each, at 10 and 100 jobs per commit, the delete-churn
# run, and a larger run for the restart figures. One JSON line per run on stdout.
#
#   cargo build --release --features redb --bin ojsd-bench
#   bench/store-floor.sh > /tmp/floor.jsonl
#
# Env: PATTERN (lean), STORES ("fjall redb sled"), REPS (2), JOBS10 (30000),
# JOBS100 (60000), CHURN_JOBS (30000) and CHURN (8 cycles), BIG_JOBS (300000, 0 to skip).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ojsd-bench}
PATTERN=${PATTERN:-lean}
STORES=${STORES:-fjall redb sled}
REPS=${REPS:-2}
JOBS10=${JOBS10:-30000}
JOBS100=${JOBS100:-60000}
CHURN_JOBS=${CHURN_JOBS:-30000}
CHURN=${CHURN:-8}
BIG_JOBS=${BIG_JOBS:-300000}
TMP=${TMPDIR:-/tmp}/ojsd-floor.$$

floor() { # store extra-args...
    local store=$1; shift
    rm -rf "$TMP"
    "$BIN" --json --store-floor "$TMP" --store "$store" --pattern "$PATTERN" "$@"
}

for batch in 10 100; do
    jobs=$JOBS10; [ "$batch" = 100 ] && jobs=$JOBS100
    for rep in $(seq "$REPS"); do
        for store in $STORES; do floor "$store" --jobs "$jobs" --batch "$batch"; done
        rm -rf "$TMP"
        "$BIN" --json --store-floor "$TMP" --raw-log --pattern "$PATTERN" --jobs "$jobs" --batch "$batch"
    done
done
if [ "$CHURN" != 0 ]; then
    for store in $STORES; do floor "$store" --jobs "$CHURN_JOBS" --batch 100 --churn "$CHURN"; done
fi
if [ "$BIG_JOBS" != 0 ]; then
    for store in $STORES; do floor "$store" --jobs "$BIG_JOBS" --batch 1000; done
fi
rm -rf "$TMP"
