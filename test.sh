#!/bin/sh
# Build agentxpu and run every test. Installs its packages with apt-get on Debian 12.
# Ends with a line "N passed, N failed".
set -eu
cd "$(dirname "$0")"
tools/install-deps
BUILD=${BUILD:-build}
[ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=debugoptimized >/dev/null
ninja -C "$BUILD" >/dev/null
set +e
meson test -C "$BUILD" --print-errorlogs --num-processes 2 "$@"
status=$?
set -e
python3 tools/test-summary.py "$BUILD/meson-logs/testlog.json"
exit $status
