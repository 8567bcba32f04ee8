# Sourced by the bench scripts: sets OJSD and BENCH to the release binaries, building them
# unless OJSD_BIN and BENCH_BIN name prebuilt ones. Needs ROOT (the repository root).
if [ -n "${OJSD_BIN:-}" ] && [ -n "${BENCH_BIN:-}" ]; then
    OJSD=$OJSD_BIN
    BENCH=$BENCH_BIN
else
    echo "building release binaries..." >&2
    (cd "$ROOT" && cargo build --release --quiet --bin ojsd --bin ojsd-bench)
    TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
    OJSD=$TARGET/release/ojsd
    BENCH=$TARGET/release/ojsd-bench
fi
