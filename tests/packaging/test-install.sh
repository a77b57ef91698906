#!/bin/sh
# SPDX-License-Identifier: MIT
# The install test (meson suite 'packaging'; test.sh runs it): builds the .deb with
# packaging/build-deb (lintian included), installs it with apt into a clean Debian 12 root
# made with debootstrap, and there runs check-installed.sh: the installed engine on a private
# bus with the installed policy, `agentxpu ask` as an ordinary user, `agentxpu model install`
# as an ordinary user with a real polkitd deciding, purge; then an upgrade from an older
# package whose models folder was root's, and purge again.
#
# Needs root (it installs packages) and dpkg-dev, debhelper, lintian and debootstrap
# (tools/install-deps); skips without them.
#
#   AXP_INSTALL_MODE=chroot   a debootstrap root (the default where mount namespaces work)
#   AXP_INSTALL_MODE=host     this machine itself (the package is purged at the end)
#   AXP_DEBIAN_MIRROR=URL     the mirror for debootstrap (http://deb.debian.org/debian)
#
# In a root, debootstrap downloads Debian's packages (about 90 s): where the archive does not
# answer, the test skips at once with one line saying so, like the other missing things it
# needs, rather than failing late in debootstrap or waiting on it.
#   AXP_DEB=FILE              install this .deb instead of building one
#   AXP_KEEP_WORK=1           keep the work folder (the root, the logs) for a look
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
mode=${AXP_INSTALL_MODE:-auto}
mirror=${AXP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
started=$(date +%s)

skip() {
        echo "SKIP: $*"
        exit 77
}
fail() {
        echo "FAIL: $*" >&2
        exit 1
}
elapsed() {
        echo "($(($(date +%s) - started)) s) $*"
}

[ "$(id -u)" -eq 0 ] || skip "the install test needs root: it installs the package"
[ -r /etc/debian_version ] && command -v apt-get >/dev/null 2>&1 || skip "not a Debian system"
if [ -z "${AXP_DEB:-}" ]; then
        for tool in dpkg-buildpackage dh lintian; do
                command -v "$tool" >/dev/null 2>&1 ||
                        skip "$tool is missing (tools/install-deps installs dpkg-dev, debhelper, lintian)"
        done
fi
case "$mode" in
auto)
        if command -v debootstrap >/dev/null 2>&1 && unshare --mount --propagation private true 2>/dev/null; then
                mode=chroot
        else
                echo "no debootstrap or no mount namespaces here: installing into this machine"
                mode=host
        fi
        ;;
chroot)
        command -v debootstrap >/dev/null 2>&1 || skip "debootstrap is missing"
        ;;
host) ;;
*) fail "AXP_INSTALL_MODE must be chroot, host or auto, got '$mode'" ;;
esac

if [ "$mode" = chroot ] && command -v wget >/dev/null 2>&1; then
        # The Release file, through wget as debootstrap fetches it (same proxy settings).
        release=$mirror/dists/bookworm/Release
        if ! out=$(timeout 20 wget -nv -T 10 -t 1 -O /dev/null "$release" 2>&1); then
                why=$(printf '%s\n' "$out" | tail -n 1 | sed 's/^[0-9-]* [0-9:]* //; s/\.$//')
                skip "cannot reach the Debian archive at $mirror (needed to debootstrap the" \
                        "install root): ${why:-no answer in 20 s}; AXP_DEBIAN_MIRROR names another mirror"
        fi
fi

work=$(mktemp -d /var/tmp/agentxpu-install.XXXXXX)
chmod 0755 "$work"
root="$work/root"
cleanup() {
        # Everything mounted in the root lived in a mount namespace that is gone by now; make
        # sure before deleting anything.
        if grep -q " $work/" /proc/self/mountinfo; then
                echo "leaving $work: something is still mounted below it" >&2
                return
        fi
        if [ "${AXP_KEEP_WORK:-0}" = 1 ]; then
                echo "kept $work" >&2
                return
        fi
        rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Run a command in the root with its own /proc, /dev, /tmp and /run, in a mount namespace
# of its own, so that nothing stays mounted when it ends. TMPDIR is the root's /tmp: the
# caller's (test.sh sets one) is a folder of this machine, absent in the root.
in_root() {
        unshare --mount --propagation private -- sh -c '
                root=$1
                shift
                mount -t proc proc "$root/proc"
                mount --rbind /dev "$root/dev"
                mount -t tmpfs tmpfs "$root/tmp"
                mount -t tmpfs tmpfs "$root/run"
                exec chroot "$root" /usr/bin/env TMPDIR=/tmp "$@"' sh "$root" "$@"
}

nspawn() {
        timeout 180 systemd-nspawn --quiet --directory="$root" --register=no --keep-unit "$@"
}

if [ -n "${AXP_DEB:-}" ]; then
        deb=$AXP_DEB
else
        elapsed "building the package"
        # Without the tests (nocheck): test.sh ran them against the same tree already, and
        # building them again inside the package build doubled this test's time.
        # parallel: debhelper builds with one job unless told (the AVX-512 kernels alone take
        # minutes to compile on one core; their three objects compile at once on three).
        DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-nocheck parallel=$(nproc)}" "$src/packaging/build-deb" "$work/out" ||
                fail "packaging/build-deb failed"
        deb=$(ls "$work"/out/agentxpu_*.deb)
fi
[ -f "$deb" ] || fail "no package at $deb"

if [ "$mode" = chroot ]; then
        elapsed "debootstrap bookworm from $mirror"
        debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
                { tail -n 20 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
        # No services start inside the root while packages install.
        printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
        chmod 0755 "$root/usr/sbin/policy-rc.d"
        # polkitd (the package recommends it), to decide on `agentxpu model install`.
        in_root sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                --no-install-recommends polkitd' >"$work/apt-polkitd.log" 2>&1 ||
                { tail -n 20 "$work/apt-polkitd.log" >&2; fail "could not install polkitd in the root"; }
        check=/var/tmp/axp-check
        mkdir -m 0755 "$root$check"
        cp "$deb" "$here/check-installed.sh" "$here/install-bus.conf.in" "$here/boot-check.sh" \
                "$root$check/"
        elapsed "installing and checking in the root"
        in_root sh "$check/check-installed.sh" install "$check/$(basename "$deb")" "$check" ||
                fail "check-installed.sh failed in the Debian 12 root"

        # Boot the root with systemd, where the system bus activates the engine's unit with
        # its whole sandbox: the hardening must leave the engine working.
        if ! command -v systemd-nspawn >/dev/null 2>&1; then
                echo "systemd-nspawn is missing (systemd-container): not booting the root"
        elif ! nspawn --pipe true >/dev/null 2>&1; then
                echo "systemd-nspawn does not work here: not booting the root"
        else
                # PoCL, for an OpenCL device whose kernels compile at run time in the sandbox.
                in_root sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                        --no-install-recommends pocl-opencl-icd' >"$work/apt-pocl.log" 2>&1 ||
                        echo "could not install pocl-opencl-icd in the root: no OpenCL check"
                elapsed "booting the root: the system bus activates agentxpu-engine.service"
                cat >"$root/etc/systemd/system/axp-boot-check.service" <<UNIT
[Unit]
Description=agentxpu install test, in the booted root
After=multi-user.target dbus.service

[Service]
Type=oneshot
ExecStart=/bin/sh $check/boot-check.sh $check/boot.result
UNIT
                mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
                ln -s ../axp-boot-check.service \
                        "$root/etc/systemd/system/multi-user.target.wants/axp-boot-check.service"
                nspawn --boot >"$work/boot.log" 2>&1 || true
                rm -f "$root/etc/systemd/system/axp-boot-check.service" \
                        "$root/etc/systemd/system/multi-user.target.wants/axp-boot-check.service"
                result=$(cat "$root$check/boot.result" 2>/dev/null || echo "FAIL: no result (see the boot log)")
                cat "$root$check/boot.result.log" 2>/dev/null || tail -n 40 "$work/boot.log"
                [ "$result" = OK ] || fail "in the booted root: $result"
                echo "booted root: OK"
        fi

        elapsed "purging in the root"
        in_root sh "$check/check-installed.sh" purge "$check" ||
                fail "check-installed.sh purge failed in the Debian 12 root"
        elapsed "upgrading from an older package in the root"
        in_root sh "$check/check-installed.sh" upgrade "$check/$(basename "$deb")" "$check" ||
                fail "check-installed.sh upgrade failed in the Debian 12 root"
        in_root sh "$check/check-installed.sh" purge "$check" ||
                fail "check-installed.sh purge after the upgrade failed in the Debian 12 root"
else
        mkdir -m 0755 "$work/check"
        cp "$deb" "$here/install-bus.conf.in" "$work/check/"
        chmod 0644 "$work/check/"*
        elapsed "installing and checking on this machine"
        sh "$here/check-installed.sh" install "$work/check/$(basename "$deb")" "$work/check" ||
                fail "check-installed.sh failed on this machine"
        sh "$here/check-installed.sh" purge "$work/check" ||
                fail "check-installed.sh purge failed on this machine"
        sh "$here/check-installed.sh" upgrade "$work/check/$(basename "$deb")" "$work/check" ||
                fail "check-installed.sh upgrade failed on this machine"
        sh "$here/check-installed.sh" purge "$work/check" ||
                fail "check-installed.sh purge after the upgrade failed on this machine"
fi
elapsed "done ($mode)"
