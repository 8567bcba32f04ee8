# Sourced by the bench scripts that run ojsd nodes on PostgreSQL (cluster.sh, takeover.sh),
# after they set TMP (their scratch directory) and PIDS (the processes to kill on exit).
# Gives: free_port; pg_start NAME, which starts a throw-away PostgreSQL 15 unless PG_URL
# names one (initdb as the `postgres` user when root, as .ci/postgres.sh does, on PG_PORT
# or a free port, with PG_SERVER_ARGS added to its settings; sets PG_URL, and PG_DIR and
# PG_PID when it started one); pg_stop; sql; node and wait_listening for the ojsd
# processes.
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_DIR=""
PG_PID=""

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# pg_start NAME: NAME names the server's directory (the postgres user cannot enter $TMP).
pg_start() {
    [ -n "${PG_URL:-}" ] && return 0
    PG_PORT=${PG_PORT:-$(free_port)}
    PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/$1-pg.XXXXXX")
    if [ "$(id -u)" = 0 ]; then chown postgres "$PG_DIR"; fi
    as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" --auth=trust -U postgres --encoding=UTF8 \
        --locale=C >"$TMP/initdb.log" 2>&1 || { cat "$TMP/initdb.log"; exit 1; }
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -o \
        "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$PG_DIR \
         -c fsync=on -c synchronous_commit=on -c max_connections=200 ${PG_SERVER_ARGS:-}" start >/dev/null \
        || { cat "$PG_DIR/server.log"; exit 1; }
    as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres ojsd_bench
    PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/ojsd_bench"
    PG_PID=$(head -1 "$PG_DIR/data/postmaster.pid")
    echo "postgres: a throw-away PostgreSQL 15 on 127.0.0.1:$PG_PORT" >&2
}
pg_stop() {
    if [ -n "$PG_DIR" ]; then
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
        rm -rf "$PG_DIR"
    fi
}
sql() { "$PG_BIN/psql" "$PG_URL" -Atqc "$1"; }

# node NAME PORT [ARGS...]: start ojsd in the background; its pid in NODE_PID.
node() {
    local name=$1 port=$2
    shift 2
    "$OJSD" --listen "127.0.0.1:$port" --http-listen off --data-dir "$TMP/$name" \
        --log-level info "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    NODE_PID=$!
    PIDS+=("$NODE_PID")
}
wait_listening() {
    for _ in $(seq 1 600); do
        grep -qs '^ojsd listening on ' "$TMP/$1.out" && return 0
        sleep 0.1
    done
    echo "$1 did not start:" >&2
    tail -20 "$TMP/$1.err" >&2
    exit 1
}
