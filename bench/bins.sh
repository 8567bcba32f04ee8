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

# start_server DATA_DIR [LISTEN] [LOG_LEVEL] [EXTRA_ARGS...]: start $OJSD, its stdout in
# $TMP/ojsd.out and stderr appended to $TMP/ojsd.err; sets SERVER_PID and ADDR once it
# listens, and FAKTORY_ADDR too when EXTRA_ARGS include --faktory-listen.
start_server() {
    local dir=$1 listen=${2:-127.0.0.1:0} level=${3:-warn}
    shift $(($# < 3 ? $# : 3))
    local want_faktory=""
    case " $* " in *" --faktory-listen "*) want_faktory=1 ;; esac
    : >"$TMP/ojsd.out"
    FAKTORY_ADDR=""
    "$OJSD" --listen "$listen" --data-dir "$dir" --log-level "$level" "$@" \
        >"$TMP/ojsd.out" 2>>"$TMP/ojsd.err" &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        ADDR=$(sed -n 's/^ojsd listening on //p' "$TMP/ojsd.out")
        [ -n "$want_faktory" ] && FAKTORY_ADDR=$(sed -n 's/^ojsd faktory listening on //p' "$TMP/ojsd.out")
        [ -n "$ADDR" ] && { [ -z "$want_faktory" ] || [ -n "$FAKTORY_ADDR" ]; } && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "ojsd did not start; its log:" >&2
    tail -20 "$TMP/ojsd.err" >&2
    exit 1
}
