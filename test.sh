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
packaging_log=
# The install test (suite 'packaging', left out of a plain `meson test`): builds the .deb and
# installs it into a Debian 12 root. Only in a full run; it needs root and skips without.
if [ $# -eq 0 ]; then
        [ "$(id -u)" -eq 0 ] || echo "test-install will skip: installing the package needs root"
        meson test -C "$BUILD" --print-errorlogs --suite packaging --logbase packaging-testlog
        [ $? -eq 0 ] || status=1
        packaging_log="$BUILD/meson-logs/packaging-testlog.json"
fi
set -e
python3 tools/test-summary.py "$BUILD/meson-logs/testlog.json" ${packaging_log:+"$packaging_log"}
exit $status
