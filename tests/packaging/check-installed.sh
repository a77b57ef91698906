#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs agentxpu's .deb with apt and checks the installed files and the engine, or purges
# the package and checks that its state went with it. Runs as root in the system under test:
# a Debian 12 root that test-install.sh made, or the machine itself.
#
#   check-installed.sh install DEB DIR     DIR: a scratch folder holding install-bus.conf.in
#   check-installed.sh purge DIR
#   check-installed.sh upgrade DEB DIR     from an older package (made from DEB as 0.1.0 was:
#                                          no tmpfiles.d, the models folder root's) to DEB
#
# The engine runs as its user on a private bus whose policy is the installed one, and is
# asked by the installed command line as an ordinary user (nobody), who may not own the
# engine's name. Where polkitd is installed it runs on that bus too (it serves "the system
# bus", which DBUS_SYSTEM_BUS_ADDRESS names for it), with the installed action and a rule of
# the test's in /etc/polkit-1/rules.d, and decides on `agentxpu model install` and `use`:
# an ordinary user the rule names installs a model from a file only they can read, has it
# answer; nobody is refused.
set -eu

phase=$1
if [ "$phase" = install ] || [ "$phase" = upgrade ]; then
        deb=$2
        dir=$3
else
        dir=$2
fi
NAME=org.agentxpu.Engine
POLICY=/usr/share/dbus-1/system.d/$NAME.conf
UNIT=/lib/systemd/system/agentxpu-engine.service
ENGINE=/usr/libexec/agentxpu-engine
HTTP=/usr/libexec/agentxpu-http
USER_UNITS=/usr/lib/systemd/user
MODEL=/var/lib/agentxpu/models/install-test.gguf
POLKITD=/usr/lib/polkit-1/polkitd
INSTALLER=axp-installer
RULE=/etc/polkit-1/rules.d/50-agentxpu-install-test.rules
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8

bus_pid=
engine_pid=
polkitd_pid=
cleanup() {
        [ -n "$engine_pid" ] && kill "$engine_pid" 2>/dev/null || true
        [ -n "$polkitd_pid" ] && kill "$polkitd_pid" 2>/dev/null || true
        [ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null || true
        rm -f "$RULE"
        if getent passwd "$INSTALLER" >/dev/null 2>&1; then
                userdel -r "$INSTALLER" >/dev/null 2>&1 || true
        fi
}
trap cleanup EXIT

fail() {
        echo "FAIL: $*" >&2
        for log in "$dir/engine.log" "$dir/polkitd.log" "$dir/bus.log"; do
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

if [ "$phase" = upgrade ]; then
        step "an older package: the models folder root's, as 0.1.0 shipped it"
        dpkg-query -W -f='${Status}' agentxpu 2>/dev/null | grep -q "installed" &&
                fail "agentxpu is already installed here; the upgrade check starts without it"
        old=$dir/old
        rm -rf "$old"
        dpkg-deb -R "$deb" "$old" || fail "dpkg-deb -R $deb"
        sed -i 's/^Version: .*/Version: 0.1.0~old1/' "$old/DEBIAN/control"
        rm "$old/usr/lib/tmpfiles.d/agentxpu.conf"
        sed -i '/usr\/lib\/tmpfiles.d\/agentxpu.conf/d' "$old/DEBIAN/md5sums"
        sed -i '/^# Automatically added by dh_installtmpfiles/,/^# End automatically added section/d' \
                "$old/DEBIAN/postinst"
        grep -q tmpfiles "$old/DEBIAN/postinst" && fail "the older package's postinst still runs tmpfiles"
        dpkg-deb -b "$old" "$dir/agentxpu-old.deb" >/dev/null || fail "dpkg-deb -b"
        apt-get install -y -q --no-install-recommends "$dir/agentxpu-old.deb" >"$dir/apt-old.log" 2>&1 ||
                { tail -n 30 "$dir/apt-old.log" >&2; fail "installing the older package failed"; }
        got=$(stat -c '%U:%G %a' /var/lib/agentxpu/models)
        [ "$got" = "root:root 755" ] || fail "the older package made the models folder $got, not root:root 755"
        # A model put there by hand, as the README said before `agentxpu model install`.
        agentxpu mkmodel -o "$dir/by-hand.gguf" --seed 5 >/dev/null
        install -m 0644 "$dir/by-hand.gguf" /var/lib/agentxpu/models/by-hand.gguf

        step "apt-get install $(basename "$deb") over it"
        apt-get install -y -q --no-install-recommends "$deb" >"$dir/apt-upgrade.log" 2>&1 ||
                { tail -n 30 "$dir/apt-upgrade.log" >&2; fail "the upgrade failed"; }
        dpkg-query -W -f='${Version}' agentxpu | grep -q '~old' && fail "the upgrade left the older version"
        for d in /var/lib/agentxpu /var/lib/agentxpu/models; do
                got=$(stat -c '%U:%G %a' "$d")
                [ "$got" = "agentxpu:agentxpu 755" ] || fail "after the upgrade $d is $got, not agentxpu:agentxpu 755"
        done
        got=$(stat -c '%U:%G %a' /var/lib/agentxpu/models/by-hand.gguf)
        [ "$got" = "agentxpu:agentxpu 644" ] || fail "after the upgrade the model put there by hand is $got"
        cmp -s "$dir/by-hand.gguf" /var/lib/agentxpu/models/by-hand.gguf || fail "the upgrade changed a model"
        # And the engine, as its user, may now write there: a rename in place, as InstallModel does.
        setpriv --reuid=agentxpu --regid=agentxpu --init-groups -- \
                sh -c 'echo x >/var/lib/agentxpu/models/.probe && rm /var/lib/agentxpu/models/.probe' ||
                fail "agentxpu cannot write the models folder after the upgrade"
        echo "OK"
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
        "$UNIT" "$USER_UNITS/agentxpu-monitor.service" \
        "$HTTP" "$USER_UNITS/agentxpu-http.service" "$USER_UNITS/agentxpu-http.socket" \
        /etc/xdg/autostart/agentxpu-monitor.desktop /etc/xdg/agentxpu/monitor.conf \
        /etc/agentxpu/engine.conf /usr/lib/sysusers.d/agentxpu.conf \
        /lib/udev/rules.d/70-agentxpu-accel.rules \
        /usr/share/polkit-1/actions/org.agentxpu.engine.policy \
        /usr/share/man/man1/agentxpu.1.gz /usr/share/man/man1/agentxpu-monitor.1.gz \
        /usr/share/man/man8/agentxpu-engine.8.gz /usr/lib/tmpfiles.d/agentxpu.conf; do
        [ -f "$f" ] || fail "$f is not installed"
done
[ -d /var/lib/agentxpu/models ] || fail "/var/lib/agentxpu/models is missing"
dpkg-query -W -f='${Conffiles}\n' agentxpu | grep -q " /etc/agentxpu/engine.conf " ||
        fail "/etc/agentxpu/engine.conf is not a conffile"
grep -q "^ExecStart=$ENGINE\$" "$UNIT" || fail "the unit does not start $ENGINE"
grep -q "^ExecStart=$HTTP\$" "$USER_UNITS/agentxpu-http.service" ||
        fail "agentxpu-http.service does not start $HTTP"

step "the service user (sysusers.d)"
getent passwd agentxpu >/dev/null || fail "user agentxpu was not created"
groups=$(id -nG agentxpu)
for g in render video; do
        case " $groups " in *" $g "*) ;; *) fail "agentxpu is not in group $g (it is in: $groups)" ;; esac
done
[ "$(getent passwd agentxpu | cut -d: -f6)" = /var/lib/agentxpu ] || fail "agentxpu's home is not /var/lib/agentxpu"

step "the state and models folders are agentxpu's (tmpfiles.d), before the engine ever ran"
for d in /var/lib/agentxpu /var/lib/agentxpu/models; do
        got=$(stat -c '%U:%G %a' "$d")
        [ "$got" = "agentxpu:agentxpu 755" ] || fail "$d is $got, not agentxpu:agentxpu 755"
done

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
# What systemd's CacheDirectory= would make (the package made the state folders).
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

if [ -x "$POLKITD" ]; then
        step "polkitd on the bus, with a rule for $INSTALLER"
        getent passwd polkitd >/dev/null || fail "polkitd is installed but its user is missing"
        useradd --create-home --shell /bin/sh "$INSTALLER" || fail "useradd $INSTALLER"
        # Debian's polkitd reads rules (JavaScript, Duktape) from /etc/polkit-1/rules.d and
        # /usr/share/polkit-1/rules.d, folders only its user may read. The rule is what
        # docs/install.md shows a site writing, for one user instead of the active session
        # (no logind here: nobody has a session).
        cat >"$RULE" <<RULE
polkit.addRule(function(action, subject) {
    if ((action.id == "org.agentxpu.engine.install-model" ||
         action.id == "org.agentxpu.engine.manage") && subject.user == "$INSTALLER")
        return polkit.Result.YES;
});
RULE
        chmod 0644 "$RULE"
        # Started as root, as systemd starts it: it changes to its user itself.
        DBUS_SYSTEM_BUS_ADDRESS=$address "$POLKITD" >"$dir/polkitd.log" 2>&1 &
        polkitd_pid=$!
        i=0
        until busctl --address="$address" call org.freedesktop.DBus /org/freedesktop/DBus \
                org.freedesktop.DBus NameHasOwner s org.freedesktop.PolicyKit1 2>/dev/null | grep -q true; do
                i=$((i + 1))
                [ $i -lt 300 ] && kill -0 "$polkitd_pid" 2>/dev/null || fail "polkitd did not take its name"
                sleep 0.1
        done
        grep "rules\|user" "$dir/polkitd.log" || true

        step "agentxpu model install as $INSTALLER, from a file only $INSTALLER can read"
        home=$(getent passwd "$INSTALLER" | cut -d: -f6)
        as_installer() {
                setpriv --reuid="$INSTALLER" --regid="$INSTALLER" --init-groups -- env HOME="$home" "$@"
        }
        as_installer agentxpu mkmodel -o "$home/mine.gguf" --seed 9 >/dev/null || fail "mkmodel as $INSTALLER"
        chmod 0700 "$home"
        chmod 0600 "$home/mine.gguf"
        out=$(as_nobody timeout 120 agentxpu model install --address "$address" "$home/mine.gguf" 2>&1) &&
                fail "nobody could not read the file and yet installed it: $out"
        cp "$home/mine.gguf" /tmp/nobodys.gguf
        chmod 0644 /tmp/nobodys.gguf
        out=$(as_nobody timeout 120 agentxpu model install --address "$address" --name nobodys \
                /tmp/nobodys.gguf 2>&1) && fail "polkitd let nobody install a model: $out"
        case "$out" in *"ot authorized"*) ;; *) fail "nobody's install failed otherwise than unauthorized: $out" ;; esac
        echo "nobody: $out"
        [ ! -e /var/lib/agentxpu/models/nobodys.gguf ] || fail "nobody's refused model is in the models folder"
        as_installer timeout 120 agentxpu model install --address "$address" --name mine "$home/mine.gguf" ||
                fail "$INSTALLER could not install a model with polkitd's yes"
        installed=/var/lib/agentxpu/models/mine.gguf
        [ "$(stat -c %U "$installed")" = agentxpu ] || fail "$installed is not agentxpu's"
        cmp -s "$installed" "$home/mine.gguf" || fail "$installed differs from the file installed"
        ls -A /var/lib/agentxpu/models | grep -v '^install-test.gguf$\|^mine.gguf$' &&
                fail "the install left something else in the models folder"
        as_nobody agentxpu model list --address "$address" >"$dir/list" || fail "agentxpu model list"
        grep -q "^mine " "$dir/list" || grep -q "mine" "$dir/list" || fail "model list lacks mine: $(cat "$dir/list")"
        out=$(as_nobody timeout 120 agentxpu model use --address "$address" mine 2>&1) &&
                fail "polkitd let nobody choose the model: $out"
        as_installer timeout 120 agentxpu model use --address "$address" mine ||
                fail "$INSTALLER could not choose the model"
        expected=$(agentxpu generate -m "$installed" -p Hello --raw -n 8 --temperature 0) ||
                fail "agentxpu generate on the installed model"
        answer=$(as_nobody timeout 120 agentxpu ask --address "$address" -n 8 --temperature 0 --raw Hello) ||
                fail "agentxpu ask after model use"
        [ "$answer" = "$expected" ] || fail "the installed model answered '$answer', in-process '$expected'"
        echo "the installed model answers: $answer"
        [ "$(cat /var/lib/agentxpu/default-model 2>/dev/null)" = mine ] ||
                echo "(the default model is recorded as: $(cat /var/lib/agentxpu/default-model 2>&1))"
        # Back to the model engine.conf names (the booted root's check asks it), and the
        # installed one removed, with polkitd's yes.
        as_installer timeout 120 agentxpu model use --address "$address" install-test ||
                fail "$INSTALLER could not choose install-test again"
        as_installer timeout 120 agentxpu model remove --address "$address" mine ||
                fail "$INSTALLER could not remove mine"
        [ ! -e "$installed" ] || fail "model remove left $installed"
        rm -f "$RULE" /tmp/nobodys.gguf
        kill "$polkitd_pid"
        wait "$polkitd_pid" 2>/dev/null || true
        polkitd_pid=
        userdel -r "$INSTALLER" >/dev/null 2>&1 || true
else
        echo "== polkitd is not installed here: agentxpu model install is not checked"
fi

step "the engine stops on SIGTERM"
kill -TERM "$engine_pid"
wait "$engine_pid" || fail "the engine exited with $? on SIGTERM"
engine_pid=
kill "$bus_pid"
wait "$bus_pid" 2>/dev/null || true
bus_pid=

echo "OK"
