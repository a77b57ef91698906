#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The engine's system files as meson made them (build/data, build/man), checked before any
package is built: they agree with each other (bus name, user, unit name, paths), the D-Bus
policy grants what it should and nothing more and dbus-daemon accepts it, systemd-sysusers
makes the user, the daemon accepts the shipped engine.conf and it documents every key the
daemon reads, the polkit action is the one the daemon asks for, and the man pages render
without warnings and name every command and option the programs have.

Run one check: test-data-files.py policy_grants"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SRC = os.environ.get("AXP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("AXP_BUILD_DIR", os.path.join(SRC, "build"))
DATA = os.path.join(BUILD, "data")
MAN = os.path.join(BUILD, "man")
ENGINE_EXEC = os.environ.get("AXP_ENGINE_EXEC", "")
DAEMON = os.environ.get("AXP_ENGINE_DAEMON", os.path.join(BUILD, "service", "daemon", "agentxpu-engine"))
CLI = os.environ.get("AXP_CLI", os.path.join(BUILD, "service", "cli", "agentxpu"))
MONITOR = os.environ.get("AXP_MONITOR", os.path.join(BUILD, "service", "monitor", "agentxpu-monitor"))
HTTP_EXEC = os.environ.get("AXP_HTTP_EXEC", "")
HTTP_BRIDGE = os.environ.get("AXP_HTTP_BRIDGE", os.path.join(BUILD, "service", "bridge", "agentxpu-http"))

NAME = "org.agentxpu.Engine"
USER = "agentxpu"
UNIT = "agentxpu-engine.service"
# Everyone may call these on the engine, and nothing else.
PUBLIC_INTERFACES = {
    "org.agentxpu.Engine",
    "org.agentxpu.Engine.Request",
    "org.freedesktop.DBus.Introspectable",
    "org.freedesktop.DBus.Properties",
    "org.freedesktop.DBus.Peer",
}


class Skip(Exception):
    pass


def data(name):
    return os.path.join(DATA, name)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def unit_entries(path):
    """A unit or desktop-style file as (section, key, value) in order (keys may repeat)."""
    section, out = None, []
    for line in read(path).splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def unit_value(entries, section, key):
    values = [v for s, k, v in entries if s == section and k == key]
    assert len(values) == 1, f"[{section}] {key}= appears {len(values)} times"
    return values[0]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


# --- names and paths agree ---------------------------------------------------------------


def test_names_agree():
    unit = unit_entries(data(UNIT))
    act = unit_entries(data(NAME + ".service"))
    assert unit_value(unit, "Service", "Type") == "dbus"
    assert unit_value(unit, "Service", "BusName") == NAME
    assert unit_value(unit, "Service", "User") == USER
    assert not [k for s, k, v in unit if k == "DynamicUser" and v != "no"], "the bus policy needs a static user"
    # the engine's state, and the models folder InstallModel writes
    assert unit_value(unit, "Service", "StateDirectory") == "agentxpu agentxpu/models"
    if ENGINE_EXEC:
        assert unit_value(unit, "Service", "ExecStart") == ENGINE_EXEC, "ExecStart is not where meson installs the daemon"
    assert unit_value(act, "D-BUS Service", "Name") == NAME
    assert unit_value(act, "D-BUS Service", "Exec") == "/bin/false", "activation goes through systemd only"
    assert unit_value(act, "D-BUS Service", "User") == USER
    assert unit_value(act, "D-BUS Service", "SystemdService") == UNIT
    assert {k for s, k, v in act} == {"Name", "Exec", "User", "SystemdService"}, act


def test_engine_slice_below_sessions():
    """The engine runs in a slice of its own whose CPU weight is below a session's (user.slice,
    systemd's default 100), and may bring its threads back from SCHED_IDLE (LimitNICE=+0)."""
    unit = unit_entries(data(UNIT))
    assert unit_value(unit, "Service", "Slice") == "agentxpu.slice"
    assert unit_value(unit, "Service", "LimitNICE") == "+0"
    slice_ = unit_entries(data("agentxpu.slice"))
    weight = unit_value(slice_, "Slice", "CPUWeight")
    assert weight is not None and 1 <= int(weight) < 100, weight
    if shutil.which("systemd-analyze"):
        r = run(["systemd-analyze", "verify", "--man=no", data("agentxpu.slice")])
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_http_user_units():
    """agentxpu serve's user units: the socket is where the bridge listens by default, private,
    and hands over one listening socket (Accept=no), as the bridge wants; the service runs the
    installed bridge and is started by the socket only. systemd takes both as user units."""
    if not os.path.exists(data("agentxpu-http.service")):
        raise Skip("agentxpu-http is not built (it needs libsoup 3 and json-glib)")
    sock = unit_entries(os.path.join(SRC, "data", "agentxpu-http.socket"))
    assert [v for s, k, v in sock if s == "Socket" and k.startswith("Listen")] == ["%t/agentxpu/http.sock"], sock
    assert unit_value(sock, "Socket", "SocketMode") == "0600"
    assert unit_value(sock, "Socket", "DirectoryMode") == "0700"
    assert not [v for s, k, v in sock if k == "Accept" and v != "no"], "the bridge serves a listening socket"
    assert unit_value(sock, "Install", "WantedBy") == "sockets.target"
    text = read(data("agentxpu-http.service"))
    service = unit_entries(data("agentxpu-http.service"))
    if HTTP_EXEC:
        assert unit_value(service, "Service", "ExecStart") == HTTP_EXEC, "ExecStart is not where meson installs the bridge"
    assert unit_value(service, "Unit", "Requires") == "agentxpu-http.socket"
    assert unit_value(service, "Unit", "After") == "agentxpu-http.socket"
    assert not [k for s, k, v in service if s == "Install"], "the socket starts the service; it has no [Install]"

    if not shutil.which("systemd-analyze"):
        raise Skip("systemd-analyze is missing (the units were only read)")
    with tempfile.TemporaryDirectory() as d:
        # systemd-analyze verify wants ExecStart= to exist, and a user manager's runtime folder
        with open(os.path.join(d, "agentxpu-http.service"), "w") as f:
            f.write(re.sub(r"^ExecStart=\S+", f"ExecStart={os.path.abspath(HTTP_BRIDGE)}", text, flags=re.M))
        shutil.copy(os.path.join(SRC, "data", "agentxpu-http.socket"), d)
        units = [os.path.join(d, "agentxpu-http.socket"), os.path.join(d, "agentxpu-http.service")]
        r = run(["systemd-analyze", "--user", "verify", "--man=no"] + units,
                env=dict(os.environ, XDG_RUNTIME_DIR=d))
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_sysusers_user():
    lines = [line.split() for line in read(data("agentxpu.conf")).splitlines()
             if line.strip() and not line.startswith("#")]
    users = [fields for fields in lines if fields[0] == "u"]
    assert len(users) == 1 and users[0][1] == USER, users
    members = {fields[2] for fields in lines if fields[0] == "m" and fields[1] == USER}
    assert members == {"render", "video"}, members
    home = users[0][-1]
    assert home.endswith("/lib/agentxpu"), home

    if not shutil.which("systemd-sysusers"):
        raise Skip("systemd-sysusers is missing (the file was only read)")
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "etc"))
        r = run(["systemd-sysusers", f"--root={root}", data("agentxpu.conf")])
        assert r.returncode == 0, r.stderr
        passwd = read(os.path.join(root, "etc", "passwd"))
        group = read(os.path.join(root, "etc", "group"))
    entry = [line.split(":") for line in passwd.splitlines() if line.startswith(USER + ":")]
    assert entry, passwd
    uid, home_made, shell = int(entry[0][2]), entry[0][5], entry[0][6]
    assert uid < 1000, f"{USER} is not a system user (uid {uid})"
    assert home_made == home and shell.endswith("nologin"), entry
    for g in ("render", "video"):
        assert re.search(rf"^{g}:x:\d+:(.*,)?{USER}(,|$)", group, re.M), group


def test_udev_rule():
    rules = [line for line in read(os.path.join(SRC, "data", "70-agentxpu-accel.rules")).splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(rules) == 1, rules
    pairs = re.findall(r'([A-Z]+(?:\{[^}]*\})?)\s*(==|!=|\+=|:=|=)\s*"([^"]*)"', rules[0])
    assert ", ".join(f'{k}{op}"{v}"' for k, op, v in pairs) == rules[0].strip(), f"cannot parse {rules[0]!r}"
    d = {(k, op): v for k, op, v in pairs}
    assert d[("SUBSYSTEM", "==")] == "accel"
    assert d[("GROUP", "=")] == "render"
    assert d[("MODE", "=")] == "0660"


# --- the D-Bus policy ----------------------------------------------------------------------


def test_monitor_autostart_is_opt_in():
    """The monitor reads files and the clipboard: its autostart entry is off until a user
    turns it on, as its user unit is (the package enables neither)."""
    e = unit_entries(data("agentxpu-monitor.desktop"))
    assert unit_value(e, "Desktop Entry", "Hidden") == "true"
    assert unit_value(e, "Desktop Entry", "Exec").endswith("/agentxpu-monitor")
    if shutil.which("desktop-file-validate"):
        r = run(["desktop-file-validate", data("agentxpu-monitor.desktop")])
        assert r.returncode == 0, r.stdout + r.stderr


def test_policy_grants():
    tree = ET.parse(data(NAME + ".conf"))
    policies = tree.getroot().findall("policy")
    owners, senders = [], []
    for p in policies:
        for rule in p:
            assert rule.tag == "allow", f"unexpected <{rule.tag}> in the policy"
            attrs = dict(rule.attrib)
            if p.get("user") == USER:
                assert attrs == {"own": NAME}, attrs
                owners.append(attrs["own"])
            else:
                assert p.attrib == {"context": "default"}, p.attrib
                assert set(attrs) == {"send_destination", "send_interface"}, attrs
                assert attrs["send_destination"] == NAME, attrs
                senders.append(attrs["send_interface"])
    assert owners == [NAME], "only the service user may own the name"
    assert sorted(senders) == sorted(PUBLIC_INTERFACES), senders


def test_policy_loads():
    if not shutil.which("dbus-daemon"):
        raise Skip("dbus-daemon is missing")
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "bus.conf")
        with open(conf, "w") as f:
            f.write(read(os.path.join(os.path.dirname(__file__), "install-bus.conf.in"))
                    .replace("@DIR@", d).replace("@POLICY@", data(NAME + ".conf")))
        p = subprocess.Popen(["dbus-daemon", "--config-file", conf, "--nofork", "--nopidfile",
                              "--print-address"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        address = p.stdout.readline().strip()
        p.terminate()
        _, err = p.communicate(timeout=30)
    # A machine without the service user gets a warning about it, and a root without the right
    # to raise its file limit one about that; anything else is wrong.
    err = "\n".join(line for line in err.splitlines()
                    if f'"{USER}"' not in line and "fd limit" not in line)
    assert address, f"dbus-daemon refused the policy: {err}"
    assert not err.strip(), err


# --- the configuration ---------------------------------------------------------------------


def daemon_keys():
    src = read(os.path.join(SRC, "service", "daemon", "daemon-config.c"))
    keys = re.findall(r'\{\s*"(\w+)",\s*"(\w+)",\s*VALUE_', src)
    assert len(keys) > 10, "cannot find the daemon's key table in daemon-config.c"
    return keys


def test_engine_conf_documents_every_key():
    conf = read(data("engine.conf"))
    section, found = None, set()
    for line in conf.splitlines():
        m = re.match(r"^\[(\w+)\]$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^#?(\w+)=", line)
        if m:
            found.add((section, m.group(1)))
    missing = [f"[{s}] {k}=" for s, k in daemon_keys() if (s, k) not in found]
    assert not missing, f"engine.conf does not document {', '.join(missing)}"
    unknown = sorted(found - set(daemon_keys()))
    assert not unknown, f"engine.conf documents keys the daemon does not read: {unknown}"


def test_daemon_accepts_engine_conf():
    if not os.access(DAEMON, os.X_OK):
        raise Skip("the daemon is not built")
    # Every setting given, at the value the file shows (the model aside: there is none here).
    lines = []
    for line in read(data("engine.conf")).splitlines():
        if re.match(r"^#\w+=", line) and not line.startswith("#Model="):
            line = line[1:]
        lines.append(line)
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "engine.conf")
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        # No bus at that address: getting as far as connecting means the file was accepted.
        r = run([DAEMON, "--config", conf, "--address", f"unix:path={d}/no-bus"])
    assert r.returncode != 0
    assert "Failed to connect" in r.stderr and "unknown setting" not in r.stderr, r.stderr


def test_polkit_action():
    path = os.path.join(SRC, "data", "org.agentxpu.engine.policy")
    actions = [a.get("id") for a in ET.parse(path).getroot().findall("action")]
    src = read(os.path.join(SRC, "service", "daemon", "admin.h"))
    asked = re.findall(r'#define\s+ADMIN_POLKIT_ACTION\w*\s+"([^"]+)"', src)
    assert asked and sorted(actions) == sorted(asked), f"the daemon asks for {asked}, the policy defines {actions}"
    # polkitd answers the engine (not root) only for actions it owns
    user = re.search(r"^service_user = '([^']+)'", read(os.path.join(SRC, "data", "meson.build")), re.M).group(1)
    for a in ET.parse(path).getroot().findall("action"):
        owners = [n.text for n in a.findall("annotate") if n.get("key") == "org.freedesktop.policykit.owner"]
        assert owners == [f"unix-user:{user}"], f"{a.get('id')}: owner {owners}, not the engine's user {user}"
    dtd = "/usr/share/polkit-1/policyconfig-1.dtd"
    if not (shutil.which("xmllint") and os.path.exists(dtd)):
        raise Skip("no xmllint or polkit DTD: the action file was only parsed")
    r = run(["xmllint", "--noout", "--dtdvalid", dtd, path])
    assert r.returncode == 0, r.stderr


# --- the man pages -------------------------------------------------------------------------


def man_text(page):
    r = run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", os.path.join(MAN, page)],
            env=dict(os.environ, MANWIDTH="100", LC_ALL="C.UTF-8"))
    assert r.returncode == 0, r.stderr
    assert not r.stderr.strip(), f"{page}: {r.stderr}"
    # Undo bold and underline overstrikes, and the hyphens roff may substitute.
    return re.sub(r".\x08", "", r.stdout).replace("\u2010", "-").replace("\u2212", "-")


def need_man():
    if not shutil.which("man") or not shutil.which("groff"):
        raise Skip("man or groff is missing")


def test_man_cli_commands():
    need_man()
    text = man_text("agentxpu.1")
    r = run([CLI, "--help"])
    commands = re.findall(r"^  (\w+) ", r.stdout, re.M)
    assert len(commands) > 5, r.stdout
    missing = [c for c in commands if not re.search(rf"\bagentxpu {c}\b|^ {{7}}{c}\b", text, re.M)]
    assert not missing, f"agentxpu(1) does not describe: {missing}"
    r = run([CLI, "ask", "--help"])
    options = set(re.findall(r"(--[a-z][a-z-]+)", r.stdout)) - {"--help"}
    missing = sorted(o for o in options if o not in text)
    assert not missing, f"agentxpu(1) does not describe ask's {missing}"


def test_man_engine_options():
    need_man()
    text = man_text("agentxpu-engine.8")
    r = run([DAEMON, "--help"])
    options = set(re.findall(r"(--[a-z][a-z-]+)", r.stdout))
    missing = sorted(o for o in options if o not in text)
    assert not missing, f"agentxpu-engine(8) does not describe {missing}"
    assert ENGINE_EXEC in text or not ENGINE_EXEC


def test_man_monitor_options():
    need_man()
    text = man_text("agentxpu-monitor.1")
    r = run([MONITOR, "--help"])
    options = set(re.findall(r"(--[a-z][a-z-]+)", r.stdout)) - {"--help-all"}
    missing = sorted(o for o in options if o not in text)
    assert not missing, f"agentxpu-monitor(1) does not describe {missing}"


def main():
    tests = {k[5:]: v for k, v in globals().items() if k.startswith("test_")}
    names = sys.argv[1:] or list(tests)
    failed = skipped = 0
    for name in names:
        try:
            tests[name]()
            print(f"ok {name}")
        except Skip as e:
            skipped += 1
            print(f"skip {name}: {e}")
        except Exception as e:
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{len(names) - failed - skipped} passed, {failed} failed, {skipped} skipped")
    if failed:
        return 1
    return 77 if skipped == len(names) else 0


if __name__ == "__main__":
    sys.exit(main())
