#!/usr/bin/env bash
# The Rust crate `faktory`'s own real-server test suite (its tests/real, shipped in the
# crate's source on crates.io), run unmodified against ojsd's Faktory port. The crate is
# the dev-dependency tests/faktory_client.rs uses; its source comes from cargo's registry
# cache, nothing of it is kept in this repository. The suite's one `#[ignore]`d test
# (QUEUE PAUSE/RESUME/REMOVE with `*`) needs a server of its own and gets a second run.
# Usage: tests/faktory_clients/faktory_rs_suite.sh   (OJSD_BIN overrides the binary)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
bin="${OJSD_BIN:-target/debug/ojsd}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
[ -x "$bin" ] || cargo build --bin ojsd

version="$(awk '/^name = "faktory"$/ {getline; gsub(/[^0-9.]/, ""); print; exit}' Cargo.lock)"
cargo fetch --quiet
src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"faktory-$version" | head -1)"
[ -d "$src/tests/real" ] || { echo "faktory-rs suite: no tests/real in $src" >&2; exit 1; }

work="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cp -r "$src" "$work/faktory"
chmod -R u+w "$work/faktory"
export CARGO_TARGET_DIR="$root/target/faktory-rs-suite"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One fresh ojsd on its own port and data directory; sets FAKTORY_URL.
start_ojsd() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  local port
  port="$(free_port)"
  rm -rf "$work/data"
  "$bin" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --faktory-listen "127.0.0.1:$port" \
    --data-dir "$work/data" --log-level warn >"$work/ojsd.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  export FAKTORY_URL="tcp://127.0.0.1:$port"
}

echo "== faktory-rs $version: its tests/real against ojsd"
(cd "$work/faktory" && cargo test --quiet --locked --test real --no-run)
start_ojsd
(cd "$work/faktory" && cargo test --locked --test real)
start_ojsd
(cd "$work/faktory" && cargo test --locked --test real queue_control_actions_wildcard -- --include-ignored)
