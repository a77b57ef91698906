# SPDX-License-Identifier: MIT
"""Test harness for agentxpu-monitor: a private dbus-daemon, the real engine daemon
(agentxpu-engine) on it serving a small model made by `agentxpu mkmodel` (model.py), a
recorder of every message on the bus, the monitor under test, and helpers to read what came
out.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from model import make_model

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
ENGINE = env_path("AXP_ENGINE_DAEMON")
CONFORMANCE_DIR = os.environ.get("AXP_CONFORMANCE_DIR", "")
RECORDER = env_path("AXP_BUS_RECORDER")
NOTIFYD = env_path("AXP_FAKE_NOTIFYD")
SECRET_OWNER = os.environ.get("AXP_X11_SECRET_OWNER", "")
FAKE_WL_PASTE = env_path("AXP_FAKE_WL_PASTE")

# The monitor's request options in the tests: greedy, and short suggestions. The model never
# ends an answer by itself (see model.py); the suggestion's schema does, once the object is
# complete, which a title and a body this short make within max_tokens whatever the
# vocabulary (byte by byte at worst).
ENGINE_OPTIONS = {"max_tokens": 96, "temperature": 0, "title_max_length": 6, "body_max_length": 16}
SUGGESTION_KINDS = ("summary", "explanation", "next-step", "warning")
# A request that runs far longer than any test waits (the context allows ~4,000 tokens).
LONG_TOKENS = 4000
BLOCKERS = 10
BLOCKER_PROMPT = "Write a very long story about a lighthouse keeper."

# Lines in the monitor's log that mean a test cannot pass: fail at once, saying why, rather
# than wait for a suggestion that will not come.
FATAL = {
    "got an empty answer": "the engine answered with no text (see tests/monitor/model.py)",
    "the engine refused event": "the engine refused a request",
    'finished with "': "a request ended badly",
    "giving it up": "the monitor gave an event up",
    "got no suggestion": "an answer was not a suggestion (or did not fit max_tokens)",
}
_sessions = []

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
    """Polls until predicate() is true; the timeout only guards against a hang. Fails at
    once when the monitor logs something no test expects (see FATAL), or the monitor or the
    engine dies."""
    deadline = time.monotonic() + timeout
    while True:
        for s in _sessions:
            s.check_fatal(what)
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def check(cond, message):
    if not cond:
        raise Fail(message)


def write(path, data, mode="w"):
    """Write a file, making its folders first (text, or bytes with mode "wb")."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data)


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
        self.engine_state = os.path.join(self.tmp, "engine-state")
        os.makedirs(self.engine_state)
        self._model = None
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

    def model(self):
        """The test model, made once per test (in this session's folder)."""
        if not self._model:
            folder = os.path.join(self.tmp, "model")
            os.makedirs(folder, exist_ok=True)
            try:
                self._model, what = make_model(folder, CLI, CONFORMANCE_DIR)
            except (RuntimeError, ValueError) as e:
                raise Fail(f"cannot make the test model: {e}")
            print(f"model: {what}")
        return self._model

    def start_engine(self, policy=None, config=None):
        """Starts agentxpu-engine on the session's bus, with its state (the calibration
        cache) in engine_state and its log, at the most verbose level, in engine.log.
        config: extra [Engine] keys."""
        keys = {"CalibrationCache": os.path.join(self.engine_state, "calibration")}
        keys.update(config or {})
        conf = os.path.join(self.tmp, "engine.conf")
        with open(conf, "w") as f:
            f.write(conf_text({"Engine": keys}))
        argv = [ENGINE, "--address", self.address, "--model", self.model(), "--config", conf]
        if policy:
            argv += ["--policy", policy]
        env = dict(self.env, AGENTXPU_LOG_LEVEL="debug")
        p = self._spawn("engine", argv, env=env)
        wait_for(lambda: p.poll() is not None or self.name_has_owner("org.agentxpu.Engine"),
                 "the engine on the bus")
        if p.poll() is not None:
            raise Fail(f"the engine exited with status {p.returncode}:\n{self.log('engine')}")

    def engine_name(self):
        """The unique bus name of the engine now on the bus."""
        r = subprocess.run(["gdbus", "call", "--address", self.address, "--dest",
                            "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                            "--method", "org.freedesktop.DBus.GetNameOwner",
                            "org.agentxpu.Engine"], capture_output=True, text=True, env=self.env)
        m = re.search(r"'(:[0-9.]+)'", r.stdout)
        if not m:
            raise Fail(f"no owner of org.agentxpu.Engine: {r.stdout}{r.stderr}")
        return m.group(1)

    def check_fatal(self, what):
        """Raises Fail when the monitor logged a line no test expects, or the monitor or the
        engine died without the test stopping it."""
        log = self.log()
        for needle, why in FATAL.items():
            if needle in log:
                line = next(l for l in log.splitlines() if needle in l)
                raise Fail(f"{why}, while waiting for {what}: {line.strip()}")
        for name in ("monitor", "engine"):
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                raise Fail(f"the {name} exited with status {p.returncode} while waiting for "
                           f"{what}")

    def stop(self, name, sig=signal.SIGTERM):
        p = self.procs.pop(name, None)
        if not p:
            return
        try:
            os.killpg(p.pid, sig)
            os.killpg(p.pid, signal.SIGCONT)  # in case a test left it stopped
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
        sections = dict(sections)
        sections["engine"] = dict(ENGINE_OPTIONS, **sections.get("engine", {}))
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

    def accepted(self):
        """(engine, prompt) of every Proactive call of the monitor that an engine accepted,
        in order; engine is the unique bus name that answered. (A call while no engine is on
        the bus gets an error from the bus itself, and one the engine refuses an error from
        it: both are left out.)"""
        msgs = self.messages()
        accepted = {(m.get("destination"), m.get("reply_serial")): m.get("sender")
                    for m in msgs if m.get("type") == "return"}
        return [(accepted[(m.get("sender"), m.get("serial"))], m.get("arg0", "")) for m in msgs
                if m.get("type") == "call" and m.get("member") == "Proactive"
                and (m.get("sender"), m.get("serial")) in accepted
                and m.get("arg0") != BLOCKER_PROMPT]

    def prompts(self):
        """The prompt of every Proactive call of the monitor that an engine accepted."""
        return [prompt for _, prompt in self.accepted()]

    def signals(self, path, engine=None):
        """(member, first argument) of every signal an engine (that one, given its unique
        name: a new engine numbers its requests from 1 again) sent for a request object."""
        return [(m.get("member"), m.get("arg0")) for m in self.messages()
                if m.get("type") == "signal" and m.get("path") == path
                and m.get("interface") == "org.agentxpu.Engine.Request"
                and engine in (None, m.get("sender"))]

    def _submit_blocker(self, name):
        """Starts one blocking request (`agentxpu submit --wait`) as process `name`; returns
        the file its output goes to (the request's path is its first line)."""
        out = os.path.join(self.tmp, f"{name}.out")
        self.procs[name] = subprocess.Popen(
            [CLI, "submit", "--address", self.address, "--wait", "-n", str(LONG_TOKENS),
             "--temperature", "0", BLOCKER_PROMPT],
            stdout=open(out, "wb"), stderr=open(out + ".err", "wb"),
            stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        return out

    def start_blocker(self, refill=False):
        """Another client's long requests, the first running once this returns. With the
        engine's serial policy every later request waits behind them, submitted and
        unanswered, until the test stops the blocker (its requests are then cancelled).
        BLOCKERS requests of LONG_TOKENS tokens each: one runs for about 3-5 s on a 2-core
        machine with the llama-bpe model, so the first few may finish by themselves while a
        test acts, but together they hold the queue for most of a minute (and stay within
        the engine's 16 requests per user, beside the monitor's). Returns their paths.

        refill: each blocking request that finishes by itself is replaced by a new one at the
        back of the queue, so that a request submitted at any time finds BLOCKERS - 1 or so
        ahead of it, however fast the machine runs them (for a test whose requests need only
        wait until it cancels them; the replacements' paths are not returned)."""
        engine = self.engine_name()
        paths = []
        for i in range(BLOCKERS):
            name = f"blocker-{i}"
            out = self._submit_blocker(name)
            p = self.procs[name]

            def submitted():
                if p.poll() is not None:
                    raise Fail(f"a blocking request ended early (status {p.returncode}): "
                               + open(out + ".err", errors="replace").read())
                with open(out, encoding="utf-8", errors="replace") as f:
                    lines = f.read().split("\n", 1)
                return lines[0] if len(lines) > 1 else None
            # One after the other, so that the engine runs them in this order.
            paths.append(wait_for(submitted, "a blocking request's path"))
        wait_for(lambda: self.signals(paths[0], engine), "the first blocking request's first token")
        if refill:
            self._refill_stop = threading.Event()
            self._refill_thread = threading.Thread(target=self._refill_blocker, daemon=True)
            self._refill_thread.start()
        return paths

    def _refill_blocker(self):
        """start_blocker(refill=True)'s thread: a blocking request that ended by itself
        (status 0) is replaced; one that failed or was stopped is not."""
        n = 0
        while not self._refill_stop.wait(0.05):
            for name in [k for k, p in list(self.procs.items())
                         if k.startswith("blocker-") and p.poll() == 0]:
                self.procs.pop(name).wait()
                n += 1
                self._submit_blocker(f"blocker-{name.split('-')[1]}-{n}")

    def blocker_ends(self, paths, engine=None):
        """How the blocking requests ended so far."""
        return [a for path in paths for m, a in self.signals(path, engine) if m == "Finished"]

    def blocker_held(self, paths, engine=None):
        """Whether the blocking requests still hold the queue (or held it until they were
        cancelled): with the serial policy nothing behind them runs while the last of them
        is unfinished, so it held if one has not ended or one ended cancelled."""
        ends = self.blocker_ends(paths, engine)
        return len(ends) < len(paths) or "cancelled" in ends

    def stop_blocker(self):
        """Ends the blocking clients; the engine, if still there, cancels their requests.
        (SIGKILL, since `agentxpu submit --wait` does not notice an engine that died: it
        waits on for a Finished that will not come, and a first SIGTERM only sends a
        Cancel.)"""
        self._stop_refill()
        for name in [n for n in self.procs if n.startswith("blocker-")]:
            self.stop(name, signal.SIGKILL)

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

    def everywhere(self):
        """[(what, text)] of everything a secret must never reach: the bus (every request
        and answer), the monitor's log, store and journal, and the engine's log (at its most
        verbose) and state files."""
        def read(path):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    return f.read()
            except FileNotFoundError:
                return ""
        out = [("the bus", read(self.recording)), ("the monitor log", self.log()),
               ("the store", read(self.store_path)), ("the journal", read(self.journal_path)),
               ("the engine log", self.log("engine"))]
        for root, _, names in os.walk(self.engine_state):
            for name in names:
                path = os.path.join(root, name)
                out.append((f"the engine's state ({path})", read(path)))
        return out

    def cli(self, *args):
        return subprocess.run([CLI, "suggestions", *args], capture_output=True, text=True,
                              env=self.env)

    def _stop_refill(self):
        if getattr(self, "_refill_thread", None):
            self._refill_stop.set()
            self._refill_thread.join()
            self._refill_thread = None

    def close(self):
        self._stop_refill()
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


def suggestion_problem(record, title_max=ENGINE_OPTIONS["title_max_length"],
                       body_max=ENGINE_OPTIONS["body_max_length"]):
    """What is wrong with a stored suggestion's structured part (title, body, kind), or None."""
    for key, most in (("title", title_max), ("body", body_max)):
        v = record.get(key)
        if not isinstance(v, str) or not v.strip() or len(v) > most:
            return f"{key} {v!r} is not a non-blank string of at most {most} characters"
    if record.get("kind") not in SUGGESTION_KINDS:
        return f"kind {record.get('kind')!r} is not one of {SUGGESTION_KINDS}"
    if "text" in record:
        return "a structured record has text beside title and body"
    return None


def run(name, body):
    """Runs body(session); prints the outcome and exits as meson expects."""
    s = Session(name)
    _sessions.append(s)
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
    print(f"ok   {name}")
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
