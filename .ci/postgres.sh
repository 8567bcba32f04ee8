# Sourced by .ci/run (and usable by hand: `source .ci/postgres.sh`): start a throw-away
# PostgreSQL 15 for the tests of --store postgres, export OJSD_TEST_POSTGRES_URL, and stop
# it (and remove its files) when the shell exits. The server is initdb'd as the `postgres`
# user into a temporary directory, listens on 127.0.0.1 on a free port of its own and on a
# socket in that directory (never the system's), and runs with fsync and synchronous_commit
# on, as a production server would, since the crash tests depend on what a commit means.
PG_BIN=/usr/lib/postgresql/15/bin
if [ ! -x "$PG_BIN/initdb" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15
fi
# Debian's postgresql-common starts a cluster of its own on install; ours does not use it.
id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
OJSD_PG_DIR=$(mktemp -d /tmp/ojsd-pg.XXXXXX)
chown postgres "$OJSD_PG_DIR"
OJSD_PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
runuser -u postgres -- "$PG_BIN/initdb" -D "$OJSD_PG_DIR/data" --auth=trust -U postgres \
    --encoding=UTF8 --locale=C >"$OJSD_PG_DIR/initdb.log" 2>&1 \
    || { cat "$OJSD_PG_DIR/initdb.log"; exit 1; }
ojsd_pg_stop() {
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$OJSD_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$OJSD_PG_DIR"
}
trap ojsd_pg_stop EXIT
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$OJSD_PG_DIR/data" -l "$OJSD_PG_DIR/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $OJSD_PG_PORT -c unix_socket_directories=$OJSD_PG_DIR \
        -c fsync=on -c synchronous_commit=on -c max_connections=200" start >/dev/null \
    || { cat "$OJSD_PG_DIR/server.log"; exit 1; }
runuser -u postgres -- "$PG_BIN/createdb" -h 127.0.0.1 -p "$OJSD_PG_PORT" ojsd_test
export OJSD_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$OJSD_PG_PORT/ojsd_test"
echo "postgres: a throw-away PostgreSQL 15 on 127.0.0.1:$OJSD_PG_PORT ($OJSD_PG_DIR) for the tests"
