#!/usr/bin/env bash
# The Python and Node clients' tests against a real ojsd: OJSD_BIN (default
# target/debug/ojsd, which `cargo build` makes). Fails if either suite fails.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export OJSD_BIN=${OJSD_BIN:-$ROOT/target/debug/ojsd}
[ -x "$OJSD_BIN" ] || { echo "no ojsd binary at $OJSD_BIN (run cargo build)" >&2; exit 1; }
status=0
echo "== clients/python"
python3 -m unittest discover -s "$ROOT/clients/python/tests" -v || status=1
echo "== clients/node"
(cd "$ROOT/clients/node" && node --test test/) || status=1
exit $status
