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
logs="$BUILD/meson-logs/testlog.json"
# In a full run, the suites a plain `meson test` leaves out: the fuzz targets under ASan and
# UBSan for a minute, the scheduler's and engine's tests under the same sanitizers, and the
# install test, which builds the .deb and installs it into a
# Debian 12 root (it needs root and skips without).
if [ $# -eq 0 ]; then
        [ "$(id -u)" -eq 0 ] || echo "test-install will skip: installing the package needs root"
        for suite in fuzz sanitize packaging; do
                meson test -C "$BUILD" --print-errorlogs --suite $suite --logbase $suite-testlog
                [ $? -eq 0 ] || status=1
                logs="$logs $BUILD/meson-logs/$suite-testlog.json"
        done
fi
set -e
# shellcheck disable=SC2086 # one log per word
python3 tools/test-summary.py $logs
exit $status
