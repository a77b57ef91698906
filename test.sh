#!/bin/sh
# Build agentxpu and run every test. Installs its packages with apt-get on Debian 12.
# Ends with a line "N passed, N failed".
#
# Everything a run uses is its own: the build folder ($BUILD, default build-test, not the
# release build/ of the quick start and demo.sh; made debugoptimized if it is not), and a
# fresh PoCL kernel cache and XDG cache, config and state folders under $BUILD/test-home
# and a temporary folder, emptied or made anew on each run, so that no run depends on what
# an earlier one or the demo left behind.
set -eu
cd "$(dirname "$0")"
tools/install-deps
BUILD=${BUILD:-build-test}
TYPE=debugoptimized
if [ ! -f "$BUILD/build.ninja" ]; then
        # A folder meson set up only in part (interrupted) is set up anew.
        wipe=""
        [ ! -f "$BUILD/meson-private/coredata.dat" ] || wipe=--wipe
        # shellcheck disable=SC2086 # no word when empty
        meson setup $wipe "$BUILD" --buildtype=$TYPE >/dev/null
elif [ "$(meson introspect --buildoptions "$BUILD" | python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))')" != $TYPE ]; then
        echo "test.sh: $BUILD is set up with another build type; reconfiguring it as $TYPE"
        meson configure "$BUILD" -Dbuildtype=$TYPE >/dev/null
fi
ninja -C "$BUILD" >/dev/null

home="$BUILD/test-home"
rm -rf "$home"
mkdir -p "$home/pocl" "$home/cache" "$home/config" "$home/state"
POCL_CACHE_DIR=$(cd "$home/pocl" && pwd)
XDG_CACHE_HOME=$(cd "$home/cache" && pwd)
XDG_CONFIG_HOME=$(cd "$home/config" && pwd)
XDG_STATE_HOME=$(cd "$home/state" && pwd)
# Temporary files out of the build folder: the tests' private buses are Unix sockets in
# it, whose paths must stay short.
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/agentxpu-test.XXXXXX")
# The tests that act as another user (nobody) reach buses and files in their own folders
# inside it, as they would in /tmp.
chmod 0755 "$TMPDIR"
export POCL_CACHE_DIR XDG_CACHE_HOME XDG_CONFIG_HOME XDG_STATE_HOME TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
trap 'exit 130' INT TERM
rm -f "$BUILD"/meson-logs/*testlog.json

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
