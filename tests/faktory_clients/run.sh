#!/usr/bin/env bash
# ojsd's Faktory port driven by two real, unmodified Faktory client libraries:
# npm faktory-worker (node.test.mjs) and PyPI faktory (test_faktory_py.py).
# Usage: tests/faktory_clients/run.sh   (from anywhere; OJSD_BIN overrides the binary)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

PY_FAKTORY_VERSION=1.0.0 # keep in step with README.md; npm's pin is in package.json
PYFAKTORY_VERSION=0.2.13

bin="${OJSD_BIN:-target/debug/ojsd}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
if [ ! -x "$bin" ]; then
  echo "faktory_clients: building ojsd ($bin missing)"
  cargo build --bin ojsd
fi
export OJSD_BIN="$bin"

# npm faktory-worker, exactly as locked in package-lock.json
if [ ! -d "$here/node_modules/faktory-worker" ]; then
  (cd "$here" && npm ci --no-audit --no-fund)
fi

# PyPI faktory in a venv of its own
venv="$here/.venv"
if ! "$venv/bin/python" -c "import faktory, sys; sys.exit(faktory.__version__ != '$PY_FAKTORY_VERSION')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "faktory==$PY_FAKTORY_VERSION"
fi
# PyPI pyfaktory, in the same venv
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('pyfaktory') != '$PYFAKTORY_VERSION')" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "pyfaktory==$PYFAKTORY_VERSION"
fi

status=0
tap="$(mktemp)"
pylog="$(mktemp)"
trap 'rm -f "$tap" "$pylog"' EXIT

echo "== node: faktory-worker $(node -p "require('$here/node_modules/faktory-worker/package.json').version")"
node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tap" "$here/node.test.mjs" || status=1
node_pass="$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$tap")"
node_fail="$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$tap")"

echo "== python: faktory $PY_FAKTORY_VERSION"
(cd "$here" && "$venv/bin/python" test_faktory_py.py) 2>&1 | tee "$pylog" || status=1
py_pass="$(sed -n 's/^python: \([0-9]*\) passed, [0-9]* failed$/\1/p' "$pylog")"
py_fail="$(sed -n 's/^python: [0-9]* passed, \([0-9]*\) failed$/\1/p' "$pylog")"

echo "== python: pyfaktory $PYFAKTORY_VERSION"
(cd "$here" && "$venv/bin/python" test_pyfaktory.py) 2>&1 | tee "$pylog" || status=1
pyf_pass="$(sed -n 's/^pyfaktory: \([0-9]*\) passed, [0-9]* failed$/\1/p' "$pylog")"
pyf_fail="$(sed -n 's/^pyfaktory: [0-9]* passed, \([0-9]*\) failed$/\1/p' "$pylog")"

if [ -z "$node_pass" ] || [ -z "$py_pass" ] || [ -z "$pyf_pass" ]; then
  echo "faktory_clients: a suite did not report its counts"
  status=1
fi
echo "faktory_clients: $(( ${node_pass:-0} + ${py_pass:-0} + ${pyf_pass:-0} )) passed, $(( ${node_fail:-0} + ${py_fail:-0} + ${pyf_fail:-0} )) failed"
exit "$status"
