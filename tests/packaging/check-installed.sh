#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs agentxpu's .deb with apt and checks the installed files and the engine, or purges
# the package and checks that its state went with it. Runs as root in the system under test:
# a Debian 12 root that test-install.sh made, or the machine itself.
#
#   check-installed.sh install DEB DIR     DIR: a scratch folder holding install-bus.conf.in
#   check-installed.sh purge DIR
#
# The engine runs as its user on a private bus whose policy is the installed one, and is
# asked by the installed command line as an ordinary user (nobody), who may not own the
# engine's name.
set -eu

phase=$1
if [ "$phase" = install ]; then
        deb=$2
        dir=$3
else
        dir=$2
fi
NAME=org.agentxpu.Engine
POLICY=/usr/share/dbus-1/system.d/$NAME.conf
UNIT=/lib/systemd/system/agentxpu-engine.service
ENGINE=/usr/libexec/agentxpu-engine
MODEL=/var/lib/agentxpu/models/install-test.gguf
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8

bus_pid=
engine_pid=
cleanup() {
        [ -n "$engine_pid" ] && kill "$engine_pid" 2>/dev/null || true
        [ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null || true
}
trap cleanup EXIT

fail() {
        echo "FAIL: $*" >&2
        for log in "$dir/engine.log" "$dir/bus.log"; do
                [ -s "$log" ] && { echo "--- $log" >&2; tail -n 30 "$log" >&2; }
        done
        exit 1
}
step() {
        echo "== $*"
}
as_nobody() {
        setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
}

purge() {
        step "apt-get purge agentxpu"
        apt-get purge -y -q agentxpu >"$dir/apt-purge.log" 2>&1 ||
                { tail -n 30 "$dir/apt-purge.log" >&2; fail "apt-get purge failed"; }
        for f in /var/lib/agentxpu /var/cache/agentxpu /etc/agentxpu "$ENGINE" /usr/bin/agentxpu \
                "$POLICY"; do
                [ ! -e "$f" ] || fail "$f is still there after purge"
        done
        # The user stays, as Debian leaves system users (see packaging/debian/agentxpu.postrm).
        getent passwd agentxpu >/dev/null || fail "purge removed the user agentxpu; it should stay"
        echo "OK"
}
if [ "$phase" = purge ]; then
        purge
        exit 0
fi

step "apt-get install $(basename "$deb")"
dpkg-query -W -f='${Status}' agentxpu 2>/dev/null | grep -q "installed" &&
        fail "agentxpu is already installed here; the test installs and purges it"
apt-get install -y -q --no-install-recommends "$deb" >"$dir/apt-install.log" 2>&1 ||
        { tail -n 30 "$dir/apt-install.log" >&2; fail "apt-get install failed"; }

step "installed files"
for f in /usr/bin/agentxpu /usr/bin/agentxpu-monitor "$ENGINE" "$POLICY" \
        /usr/share/dbus-1/system-services/$NAME.service /usr/share/dbus-1/interfaces/$NAME.xml \
        "$UNIT" /usr/lib/systemd/user/agentxpu-monitor.service \
        /etc/xdg/autostart/agentxpu-monitor.desktop /etc/xdg/agentxpu/monitor.conf \
        /etc/agentxpu/engine.conf /usr/lib/sysusers.d/agentxpu.conf \
        /lib/udev/rules.d/70-agentxpu-accel.rules \
        /usr/share/polkit-1/actions/org.agentxpu.engine.policy \
        /usr/share/man/man1/agentxpu.1.gz /usr/share/man/man1/agentxpu-monitor.1.gz \
        /usr/share/man/man8/agentxpu-engine.8.gz; do
        [ -f "$f" ] || fail "$f is not installed"
done
[ -d /var/lib/agentxpu/models ] || fail "/var/lib/agentxpu/models is missing"
dpkg-query -W -f='${Conffiles}\n' agentxpu | grep -q " /etc/agentxpu/engine.conf " ||
        fail "/etc/agentxpu/engine.conf is not a conffile"
grep -q "^ExecStart=$ENGINE\$" "$UNIT" || fail "the unit does not start $ENGINE"

step "the service user (sysusers.d)"
getent passwd agentxpu >/dev/null || fail "user agentxpu was not created"
groups=$(id -nG agentxpu)
for g in render video; do
        case " $groups " in *" $g "*) ;; *) fail "agentxpu is not in group $g (it is in: $groups)" ;; esac
done
[ "$(getent passwd agentxpu | cut -d: -f6)" = /var/lib/agentxpu ] || fail "agentxpu's home is not /var/lib/agentxpu"

step "systemd-analyze security on the installed unit"
exposure=$(systemd-analyze security --offline=yes "$UNIT" 2>&1 |
        sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
[ -n "$exposure" ] || fail "no exposure figure from systemd-analyze"
echo "exposure $exposure"
awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || fail "exposure $exposure is above 2.0"

step "a model in /var/lib/agentxpu/models, named in /etc/agentxpu/engine.conf"
agentxpu mkmodel -o "$MODEL" --seed 7 >/dev/null
sed -i "s|^#Model=.*|Model=$MODEL|" /etc/agentxpu/engine.conf
grep -q "^Model=$MODEL\$" /etc/agentxpu/engine.conf || fail "could not set Model= in engine.conf"
# What systemd's StateDirectory= and CacheDirectory= would make.
install -d -o agentxpu -g agentxpu -m 0755 /var/lib/agentxpu
install -d -o agentxpu -g agentxpu -m 0700 /var/cache/agentxpu

step "a private bus with the installed policy"
chmod 0755 "$dir"
sed -e "s|@DIR@|$dir|g" -e "s|@POLICY@|$POLICY|g" "$dir/install-bus.conf.in" >"$dir/bus.conf"
dbus-daemon --config-file="$dir/bus.conf" --nofork --nopidfile --print-address=3 \
        3>"$dir/address" 2>"$dir/bus.log" &
bus_pid=$!
i=0
while [ ! -s "$dir/address" ]; do
        i=$((i + 1))
        [ $i -lt 300 ] && kill -0 "$bus_pid" 2>/dev/null || fail "dbus-daemon did not start"
        sleep 0.1
done
address=$(head -n 1 "$dir/address")
has_owner() {
        busctl --address="$address" call org.freedesktop.DBus /org/freedesktop/DBus \
                org.freedesktop.DBus NameHasOwner s $NAME 2>/dev/null | grep -q true
}

step "the installed engine as user agentxpu"
setpriv --reuid=agentxpu --regid=agentxpu --init-groups -- \
        "$ENGINE" --address "$address" >"$dir/engine.log" 2>&1 &
engine_pid=$!
i=0
until has_owner; do
        i=$((i + 1))
        [ $i -lt 600 ] && kill -0 "$engine_pid" 2>/dev/null || fail "the engine did not take its name"
        sleep 0.1
done

step "agentxpu ask as nobody"
answer=$(as_nobody timeout 120 agentxpu ask --address "$address" -n 8 --temperature 0 --raw Hello) ||
        fail "agentxpu ask failed for nobody"
expected=$(agentxpu generate -m "$MODEL" -p Hello --raw -n 8 --temperature 0) ||
        fail "agentxpu generate failed"
[ -n "$answer" ] || fail "empty answer"
[ "$answer" = "$expected" ] || fail "the engine answered '$answer', generating in-process gives '$expected'"
echo "answer: $answer"
as_nobody timeout 60 agentxpu status --address "$address" >"$dir/status" || fail "agentxpu status failed"
grep -q "install-test\|synthetic" "$dir/status" || fail "status does not name the model: $(cat "$dir/status")"
as_nobody busctl --address="$address" call $NAME /org/agentxpu/Engine org.freedesktop.DBus.Peer Ping ||
        fail "nobody may not ping the engine"

step "what the policy refuses"
refused() { # who, then the busctl arguments; the bus (not the engine) must answer AccessDenied
        who=$1
        shift
        if [ "$who" = nobody ]; then
                out=$(as_nobody busctl --address="$address" "$@" 2>&1) && return 1
        else
                out=$(busctl --address="$address" "$@" 2>&1) && return 1
        fi
        case "$out" in *"ccess denied"* | *AccessDenied*) return 0 ;; esac
        echo "$out" >&2
        return 1
}
refused nobody call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        RequestName su $NAME 4 || fail "nobody may own $NAME"
refused root call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        RequestName su $NAME 4 || fail "root may own $NAME; only agentxpu should"
refused nobody call $NAME /org/agentxpu/Engine org.agentxpu.Undocumented Anything ||
        fail "nobody may call an interface the policy does not list"
has_owner || fail "the engine lost its name"

step "the engine stops on SIGTERM"
kill -TERM "$engine_pid"
wait "$engine_pid" || fail "the engine exited with $? on SIGTERM"
engine_pid=
kill "$bus_pid"
wait "$bus_pid" 2>/dev/null || true
bus_pid=

echo "OK"
