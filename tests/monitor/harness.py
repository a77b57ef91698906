# SPDX-License-Identifier: MIT
"""Test harness for agentxpu-monitor: a private dbus-daemon, an engine on it, a recorder of
every message on it, the monitor under test, and helpers to read what came out.

The engine is AXP_ENGINE_CMD (a command line where {address} is the bus address; the engine
may also read DBUS_SYSTEM_BUS_ADDRESS), by default the test stand-in tests/monitor/fake-engine.
"""
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


class Fail(Exception):
    pass


def env_path(name):
    value = os.environ.get(name)
    if not value:
        raise Fail(f"{name} is not set (run the tests through meson)")
    return value


MONITOR = env_path("AXP_MONITOR")
CLI = env_path("AXP_CLI")
FAKE_ENGINE = env_path("AXP_FAKE_ENGINE")
RECORDER = env_path("AXP_BUS_RECORDER")
NOTIFYD = env_path("AXP_FAKE_NOTIFYD")
SECRET_OWNER = os.environ.get("AXP_X11_SECRET_OWNER", "")
FAKE_WL_PASTE = env_path("AXP_FAKE_WL_PASTE")
ENGINE_CMD = os.environ.get("AXP_ENGINE_CMD") or (FAKE_ENGINE + " --address {address}")
STAND_IN = not os.environ.get("AXP_ENGINE_CMD")

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={dir}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def wait_for(predicate, what, timeout=90):
    """Polls until predicate() is true; the timeout only guards against a hang."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def check(cond, message):
    if not cond:
        raise Fail(message)


def read_jsonl(path):
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a torn last line while the writer is mid-write
    except FileNotFoundError:
        pass
    return out


def conf_text(sections):
    lines = []
    for group, keys in sections.items():
        lines.append(f"[{group}]")
        for key, value in keys.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            value = str(value).replace("\\", "\\\\").replace("\n", "\\n")
            lines.append(f"{key}={value}")
        lines.append("")
    return "\n".join(lines)


# Templates that are easy to parse: the first line names what the event is about.
TEST_TEMPLATES = {
    "template": "FILE {path}\n{change}",
    "batch_template": "BATCH {count} {root}\n{files}",
}


class Session:
    def __init__(self, name):
        self.tmp = tempfile.mkdtemp(prefix=f"axp-{name}-")
        self.procs = {}
        self.logs = {}
        self.home = os.path.join(self.tmp, "home")
        self.state = os.path.join(self.tmp, "state")
        self.watched = os.path.join(self.home, "watched")
        self.runtime = os.path.join(self.tmp, "runtime")
        for d in (self.home, self.state, self.watched, self.runtime):
            os.makedirs(d, exist_ok=True)
        os.chmod(self.runtime, 0o700)
        env = {k: v for k, v in os.environ.items()
               if k not in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS",
                            "DBUS_SYSTEM_BUS_ADDRESS", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS")}
        env.update(HOME=self.home, XDG_STATE_HOME=self.state,
                   XDG_CONFIG_HOME=os.path.join(self.tmp, "config"),
                   XDG_DATA_HOME=os.path.join(self.tmp, "data"),
                   XDG_CACHE_HOME=os.path.join(self.tmp, "cache"),
                   XDG_RUNTIME_DIR=self.runtime,
                   XDG_CONFIG_DIRS=os.path.join(self.tmp, "etc-xdg"),
                   GIO_USE_VFS="local", G_MESSAGES_DEBUG="")
        self.env = env
        self.store_path = os.path.join(self.state, "agentxpu", "suggestions.jsonl")
        self.journal_path = os.path.join(self.state, "agentxpu", "monitor-journal.jsonl")
        self.recording = os.path.join(self.tmp, "bus.jsonl")
        self.address = self._start_bus()
        self.env["DBUS_SESSION_BUS_ADDRESS"] = self.address
        self.env["DBUS_SYSTEM_BUS_ADDRESS"] = self.address

    # -- processes -------------------------------------------------------------------------

    def _spawn(self, name, argv, shell=False, env=None):
        log = open(os.path.join(self.tmp, name + ".log"), "ab")
        p = subprocess.Popen(argv, shell=shell, env=env or self.env, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs[name] = p
        self.logs[name] = log.name
        return p

    def _start_bus(self):
        cfg = os.path.join(self.tmp, "bus.conf")
        with open(cfg, "w") as f:
            f.write(BUS_CONFIG.format(dir=self.tmp))
        p = subprocess.Popen(["dbus-daemon", "--nofork", "--config-file=" + cfg,
                              "--print-address=1"], stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        self.procs["dbus-daemon"] = p
        address = p.stdout.readline().decode().strip()
        if not address:
            raise Fail("dbus-daemon did not start")
        return address

    def _ready_line(self, name, argv, word):
        p = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                             stderr=open(os.path.join(self.tmp, name + ".log"), "ab"),
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = p
        line = p.stdout.readline().decode().strip()
        if line != word:
            raise Fail(f"{name} did not start (said {line!r})")
        return p

    def start_recorder(self):
        self._ready_line("recorder", [RECORDER, "--address", self.address,
                                      "--output", self.recording], "ready")

    def name_has_owner(self, name):
        r = subprocess.run(["gdbus", "call", "--address", self.address, "--dest",
                            "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                            "--method", "org.freedesktop.DBus.NameHasOwner", name],
                           capture_output=True, text=True, env=self.env)
        return "true" in r.stdout

    def start_engine(self, stand_in_args=""):
        """Starts the engine; stand_in_args only reach the test stand-in."""
        cmd = ENGINE_CMD.format(address=shlex.quote(self.address))
        if STAND_IN and stand_in_args:
            cmd += " " + stand_in_args
        self._spawn("engine", cmd, shell=True)
        wait_for(lambda: self.name_has_owner("org.agentxpu.Engine"), "the engine on the bus")

    def stop(self, name, sig=signal.SIGTERM):
        p = self.procs.pop(name, None)
        if not p:
            return
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def stop_engine(self, sig=signal.SIGTERM):
        self.stop("engine", sig)
        wait_for(lambda: not self.name_has_owner("org.agentxpu.Engine"), "the engine to leave")

    def write_config(self, sections):
        path = os.path.join(self.tmp, "monitor.conf")
        with open(path, "w") as f:
            f.write(conf_text(sections))
        return path

    def start_monitor(self, sections, args=(), env=None):
        config = self.write_config(sections)
        argv = [MONITOR, "--address", self.address, "--config", config] + list(args)
        return self._spawn("monitor", argv, env=env)

    def monitor_pid(self):
        return self.procs["monitor"].pid

    def log(self, name="monitor"):
        try:
            with open(self.logs[name], encoding="utf-8", errors="replace") as f:
                return f.read()
        except (KeyError, FileNotFoundError):
            return ""

    def wait_log(self, text, name="monitor", timeout=90):
        wait_for(lambda: text in self.log(name), f"{text!r} in the {name} log", timeout)

    def alive(self, name):
        p = self.procs.get(name)
        return p is not None and p.poll() is None

    # -- outputs ---------------------------------------------------------------------------

    def store(self):
        return read_jsonl(self.store_path)

    def journal(self):
        return read_jsonl(self.journal_path)

    def messages(self):
        return read_jsonl(self.recording)

    def prompts(self):
        """The prompt of every Proactive call an engine accepted, in order. (A call while
        no engine is on the bus gets an error from the bus itself and is left out.)"""
        msgs = self.messages()
        accepted = {(m.get("destination"), m.get("reply_serial")) for m in msgs
                    if m.get("type") == "return"}
        return [m.get("arg0", "") for m in msgs
                if m.get("type") == "call" and m.get("member") == "Proactive"
                and (m.get("sender"), m.get("serial")) in accepted]

    def pending_ids(self):
        """Ids of the events the journal holds as pending (replayed as the monitor would)."""
        pending = {}
        for r in self.journal():
            op = r.get("op")
            if op == "event":
                for old in r.get("replaces", []):
                    pending.pop(old, None)
                pending[r["id"]] = r
            elif op == "done":
                pending.pop(r.get("id"), None)
        return pending

    def cli(self, *args):
        return subprocess.run([CLI, "suggestions", *args], capture_output=True, text=True,
                              env=self.env)

    def close(self):
        for name in list(self.procs)[::-1]:
            if name != "dbus-daemon":
                self.stop(name)
        self.stop("dbus-daemon")
        if os.environ.get("AXP_KEEP_TMP"):
            print(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def dump_logs(self):
        for name, path in self.logs.items():
            print(f"----- {name} log -----")
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    print(f.read()[-6000:])
            except FileNotFoundError:
                pass


def run(name, body):
    """Runs body(session); prints the outcome and exits as meson expects."""
    s = Session(name)
    try:
        body(s)
    except Fail as e:
        print(f"FAIL: {e}")
        s.dump_logs()
        s.close()
        sys.exit(1)
    except Skip as e:
        print(f"SKIP: {e}")
        s.close()
        sys.exit(SKIP)
    except BaseException:
        s.dump_logs()
        s.close()
        raise
    s.close()
    print(f"ok   {name}" + ("" if STAND_IN else " (engine: AXP_ENGINE_CMD)"))
    sys.exit(0)


class Skip(Exception):
    pass


def start_xvfb(s):
    """Starts Xvfb on a free display; returns the DISPLAY value."""
    if not shutil.which("Xvfb"):
        raise Skip("Xvfb is not installed")
    r, w = os.pipe()
    p = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-nolisten", "tcp", "-screen", "0",
                          "640x480x24"], pass_fds=(w,), stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(s.tmp, "xvfb.log"), "ab"),
                         start_new_session=True, env=s.env)
    os.close(w)
    s.procs["xvfb"] = p
    # The display number arrives once the server accepts connections.
    with os.fdopen(r) as f:
        number = f.readline().strip()
    if not number:
        raise Fail("Xvfb did not start")
    return ":" + number
