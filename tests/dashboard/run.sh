#!/usr/bin/env bash
# The dashboard in a real browser: installs Debian's Chromium if missing (and apt can),
# playwright-core from the lockfile, then runs the test against the debug binary
# (OJSD_BIN). Screenshots land in target/dashboard-screenshots/. Without any browser it
# says so loudly and exits 0.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
export OJSD_BIN=${OJSD_BIN:-$ROOT/target/debug/ojsd}
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ] && command -v apt-get >/dev/null; then
    echo "installing chromium (apt)..." >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 || true
fi
if [ ! -x "$CHROMIUM" ]; then
    echo "SKIPPED: no browser: the dashboard's browser test did not run (no $CHROMIUM, and it could not be installed)"
    exit 0
fi
npm ci --no-audit --no-fund --silent
node --test dashboard.test.js
