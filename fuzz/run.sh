#!/usr/bin/env bash
# Run every cargo-fuzz target for a bounded time: fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Installs cargo-fuzz when it is missing, builds all targets once (ASan, release with debug
# assertions), then runs each for SECONDS_PER_TARGET (default 15) on its persistent corpus
# fuzz/corpus/<target> (gitignored), also reading the committed seeds in fuzz/seeds/<target>
# and the dictionary fuzz/dicts/<target>.dict when they exist. Prints one summary line per
# target; exits non-zero if any target crashed, failed an assertion, timed out on one input
# or ran out of memory (the input is saved under fuzz/artifacts/<target>/).
#
# Stable Rust only: RUSTC_BOOTSTRAP=1 lets it accept the sanitizer flags cargo-fuzz passes.
set -euo pipefail
cd "$(dirname "$0")"

secs="${1:-15}"
shift || true
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
fi

# Pinned: the newest release at the time, known to build with the stable toolchain here.
CARGO_FUZZ_VERSION="${CARGO_FUZZ_VERSION:-0.13.2}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

export RUSTC_BOOTSTRAP=1

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
if [ "${#targets[@]}" -eq 0 ]; then
    echo "fuzz: no targets found" >&2
    exit 1
fi

# One build for all targets: the ojsd library is compiled once, the binaries in parallel.
cargo fuzz build

logs=target/fuzz-logs
mkdir -p "$logs"
failed=()
for t in "${targets[@]}"; do
    corpus=(corpus/"$t")
    mkdir -p "${corpus[0]}"
    if [ -d seeds/"$t" ]; then
        corpus+=(seeds/"$t") # read only: new inputs go to the first directory
    fi
    args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1)
    if [ -f dicts/"$t".dict ]; then
        args+=(-dict=dicts/"$t".dict)
    fi
    log="$logs/$t.log"
    rc=0
    cargo fuzz run "$t" "${corpus[@]}" -- "${args[@]}" >"$log" 2>&1 || rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1 || true)
    time_s=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -n 1 || true)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || true)
    inputs=$(find "${corpus[0]}" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        printf 'fuzz %-10s ok     %10s executions in %ss, coverage %s, corpus %s inputs\n' \
            "$t" "${runs:-?}" "${time_s:-$secs}" "${cov:-?}" "$inputs"
    else
        printf 'fuzz %-10s FAILED after %s executions (exit %s); log %s\n' \
            "$t" "${runs:-?}" "$rc" "fuzz/$log"
        grep -m 3 -A 2 -E 'panicked at|==ERROR|SUMMARY:|^Test unit written' "$log" || true
        tail -n 12 "$log"
        failed+=("$t")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (inputs under fuzz/artifacts/; reproduce with" \
        "RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <artifact>)" >&2
    exit 1
fi
