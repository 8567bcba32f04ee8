#!/usr/bin/env bash
# The Python and Node clients' tests against a real ojsd: OJSD_BIN (default
# target/debug/ojsd, which `cargo build` makes). Then each is checked as a package, offline
# and in a few seconds: `pip install clients/python` into a fresh venv and import it (with
# py.typed), and `npm pack` in clients/node ships the code and its types. Fails if any fails.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export OJSD_BIN=${OJSD_BIN:-$ROOT/target/debug/ojsd}
[ -x "$OJSD_BIN" ] || { echo "no ojsd binary at $OJSD_BIN (run cargo build)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
status=0
echo "== clients/python"
python3 -m unittest discover -s "$ROOT/clients/python/tests" -v || status=1
echo "== clients/node"
(cd "$ROOT/clients/node" && node --test test/) || status=1

echo "== clients/python: pip install into a fresh venv"
python_package() {
    # The build backend is in the tree and needs nothing from an index (--no-index).
    if python3 -m pip install --help 2>/dev/null | grep -q -- '--python '; then
        python3 -m venv --without-pip "$TMP/venv" # pip >= 22.3 installs into it from outside
        python3 -m pip --python "$TMP/venv/bin/python" install -q --no-index --no-cache-dir "$ROOT/clients/python"
    else
        python3 -m venv "$TMP/venv"
        "$TMP/venv/bin/python" -m pip install -q --no-index --no-cache-dir "$ROOT/clients/python"
    fi
    (cd "$TMP" && "$TMP/venv/bin/python" - <<'PY'
import importlib.metadata as metadata
import importlib.resources as resources
import ojsd_client
from ojsd_client import Client, Worker, OjsdError  # noqa: F401
assert "site-packages" in ojsd_client.__file__, ojsd_client.__file__
assert resources.files("ojsd_client").joinpath("py.typed").is_file(), "py.typed is missing"
print("installed ojsd-client", metadata.version("ojsd-client"), "with py.typed")
PY
    )
}
python_package || { echo "clients/python: the package does not install" >&2; status=1; }

echo "== clients/node: npm pack"
node_package() {
    local tgz
    tgz=$(cd "$ROOT/clients/node" && npm pack --silent --pack-destination "$TMP")
    tar -tzf "$TMP/$tgz" > "$TMP/contents"
    for f in package/package.json package/ojsd.js package/index.d.ts package/README.md; do
        grep -qx "$f" "$TMP/contents" || { echo "$tgz lacks $f" >&2; return 1; }
    done
    tar -xzf "$TMP/$tgz" -C "$TMP" package/package.json
    node -e 'const p = require(process.argv[1]); if (p.types !== "index.d.ts" || p.private) throw new Error("package.json: types/private")' \
        "$TMP/package/package.json"
    echo "packed $tgz: $(tr '\n' ' ' < "$TMP/contents")"
}
node_package || { echo "clients/node: npm pack is wrong" >&2; status=1; }
exit $status
