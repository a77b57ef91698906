#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs inside the Debian 12 root booted with systemd-nspawn (test-install.sh), after
# check-installed.sh installed the package and a model: the real system bus activates
# agentxpu-engine.service, sandbox and all, for an ordinary user's `agentxpu ask`; the engine
# exits when idle and comes back on the next call; with PoCL there, the dynamic role runs on
# OpenCL. Writes OK or the failure to $1, then powers the container off.
set -u

result=$1
MODEL=/var/lib/agentxpu/models/install-test.gguf
NAME=org.agentxpu.Engine
export LC_ALL=C.UTF-8

finish() {
        echo "$*" >"$result"
        {
                echo "--- journal of agentxpu-engine.service"
                journalctl -u agentxpu-engine.service --no-pager | tail -n 30
        } >>"$result.log" 2>&1
        systemctl poweroff --no-block
        exit 0
}
as_user() {
        setpriv --reuid=axp-user --regid=axp-user --init-groups -- "$@"
}
active() {
        [ "$(systemctl is-active agentxpu-engine.service)" = active ]
}

exec >"$result.log" 2>&1
useradd --create-home axp-user || finish "FAIL: useradd"
# Exit when idle quickly, so that the test sees it.
sed -i 's/^#ExitIdleSec=.*/ExitIdleSec=2/' /etc/agentxpu/engine.conf
active && finish "FAIL: the engine runs before anyone called it"

expected=$(agentxpu generate -m "$MODEL" -p Hello --raw -n 8 --temperature 0) ||
        finish "FAIL: agentxpu generate"
answer=$(as_user timeout 120 agentxpu ask -n 8 --temperature 0 --raw Hello) ||
        finish "FAIL: agentxpu ask on the system bus (exit $?)"
[ "$answer" = "$expected" ] || finish "FAIL: the engine answered '$answer', in-process '$expected'"
echo "answer: $answer"

pid=$(systemctl show -p MainPID --value agentxpu-engine.service)
[ "${pid:-0}" -gt 0 ] || finish "FAIL: the engine is not running after the call"
status=$(cat "/proc/$pid/status")
echo "$status" | grep -q "^Uid:[[:space:]]*$(id -u agentxpu)[[:space:]]" || finish "FAIL: not running as agentxpu"
echo "$status" | grep -q "^CapEff:[[:space:]]*0000000000000000" || finish "FAIL: it has capabilities"
echo "$status" | grep -q "^NoNewPrivs:[[:space:]]*1" || finish "FAIL: NoNewPrivileges is off"
echo "$status" | grep -q "^Seccomp:[[:space:]]*2" || finish "FAIL: no system call filter"
[ -s /var/cache/agentxpu/calibration ] || finish "FAIL: no calibration cache in /var/cache/agentxpu"

out=$(as_user busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        RequestName su $NAME 4 2>&1) && finish "FAIL: an ordinary user took $NAME on the system bus"
case "$out" in *"ccess denied"* | *AccessDenied*) ;; *) finish "FAIL: RequestName: $out" ;; esac

i=0
while active; do
        i=$((i + 1))
        [ $i -lt 300 ] || finish "FAIL: the engine did not exit when idle (ExitIdleSec=2)"
        sleep 0.1
done
systemctl is-failed --quiet agentxpu-engine.service && finish "FAIL: the idle exit left the unit failed"
again=$(as_user timeout 120 agentxpu ask -n 8 --temperature 0 --raw Hello) ||
        finish "FAIL: no answer once the engine had exited when idle"
[ "$again" = "$expected" ] || finish "FAIL: second answer '$again'"

# The GPU's role on PoCL, where test-install.sh installed it: OpenCL kernels compiled at run
# time, inside the sandbox (MemoryDenyWriteExecute=, the system call filter, a read-only
# system but for the cache folder).
if [ -e /etc/OpenCL/vendors/pocl.icd ]; then
        expected=$(agentxpu generate -m "$MODEL" -p Hello --raw -n 8 --temperature 0 --device opencl) ||
                finish "FAIL: agentxpu generate --device opencl"
        sed -i 's/^#DynamicDevice=.*/DynamicDevice=opencl/' /etc/agentxpu/engine.conf
        systemctl stop agentxpu-engine.service
        answer=$(as_user timeout 120 agentxpu ask -n 8 --temperature 0 --raw Hello) ||
                finish "FAIL: agentxpu ask with the dynamic role on OpenCL (exit $?)"
        [ "$answer" = "$expected" ] || finish "FAIL: on OpenCL the engine answered '$answer', in-process '$expected'"
        as_user agentxpu status | grep -q "backend opencl, roles dynamic" ||
                finish "FAIL: the dynamic role is not on OpenCL: $(as_user agentxpu status)"
        [ -d /var/cache/agentxpu/pocl ] || finish "FAIL: PoCL's kernel cache is not in /var/cache/agentxpu"
        echo "on OpenCL (PoCL): $answer"
fi
finish "OK"
