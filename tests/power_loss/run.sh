#!/usr/bin/env bash
# Power cuts on a file system that loses what was not fsynced (lazyfs.py, FUSE): the
# tests of tests/power_loss.rs that need it, on both stores. Needs /dev/fuse and root (the
# mount is done with mount(2), no fusermount); installs libfuse 3 from Debian's packages
# and mfusepy (pinned) from PyPI into target/lazyfs-venv when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -c /dev/fuse ] || [ "$(id -u)" != 0 ]; then
    echo "power_loss: /dev/fuse or root missing; the lazyfs tests cannot run here" >&2
    exit 1
fi
if ! ldconfig -p | grep -q 'libfuse3\.so\.3'; then
    apt-get update -qq && apt-get install -y -qq libfuse3-3
fi
venv=target/lazyfs-venv
if ! "$venv/bin/python" -c 'import mfusepy' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'mfusepy==3.1.1'
fi
export OJSD_LAZYFS_PYTHON="$PWD/$venv/bin/python"
cargo test --test power_loss -- --nocapture
OJSD_TEST_STORE=sled cargo test --test power_loss -- --nocapture
