# SPDX-License-Identifier: MIT
"""Helpers for agentxpu-engine's integration tests: a private dbus-daemon started by the test,
the daemon under test on it, and clients (gdbus, busctl, dbus-monitor, the agentxpu command
line), run as a desktop would run them. Python 3 standard library only."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

CLI = os.environ.get("AXP_CLI", "")
BUS_CONF = os.environ.get("AXP_TEST_BUS_CONF", os.path.join(os.path.dirname(__file__), "test-bus.conf.in"))
NAME = "org.agentxpu.Engine"
PATH = "/org/agentxpu/Engine"
IFACE = "org.agentxpu.Engine"
REQ_IFACE = "org.agentxpu.Engine.Request"
JOB_IFACE = "org.agentxpu.Engine.Job"

# Liveness bounds only: how long to wait before calling something hung. Never asserted on.
WAIT = float(os.environ.get("AXP_TEST_WAIT", "120"))


class Skip(Exception):
    pass


def need_tools(*tools):
    for t in tools:
        if not shutil.which(t):
            raise Skip(f"{t} is not installed")


def is_root():
    return os.geteuid() == 0


def as_nobody(cmd):
    """The command as user nobody (the tests run as root to be able to do this)."""
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"] + cmd


def wait_for(cond, what, timeout=WAIT, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class Result:
    def __init__(self, p):
        self.rc, self.out, self.err = p.returncode, p.stdout, p.stderr

    @property
    def error_name(self):
        m = re.search(r"GDBus\.Error:([\w.]+):", self.err)
        return m.group(1) if m else None

    @property
    def error_message(self):
        m = re.search(r"GDBus\.Error:[\w.]+:\s*(.*)", self.err)
        return m.group(1).strip() if m else self.err.strip()

    def __repr__(self):
        return f"<rc={self.rc} out={self.out!r} err={self.err!r}>"


def run(cmd, timeout=WAIT, **kw):
    return Result(subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw))


class TestBus:
    """A private dbus-daemon in a temporary folder readable by everyone."""

    def __init__(self, limits=None):
        """limits: {name: value} of dbus-daemon's <limit>s, over the test configuration's"""
        need_tools("dbus-daemon", "gdbus", "busctl")
        self.dir = tempfile.mkdtemp(prefix="axp-test-bus-")
        os.chmod(self.dir, 0o755)
        os.mkdir(os.path.join(self.dir, "services"))
        conf = os.path.join(self.dir, "bus.conf")
        with open(BUS_CONF) as f, open(conf, "w") as g:
            extra = "".join(f'  <limit name="{k}">{v}</limit>\n' for k, v in (limits or {}).items())
            g.write(f.read().replace("@DIR@", self.dir).replace("</busconfig>", extra + "</busconfig>"))
        self.bus_log = open(os.path.join(self.dir, "dbus-daemon.log"), "w")
        self.proc = subprocess.Popen(["dbus-daemon", "--config-file", conf, "--nofork", "--nopidfile",
                                      "--print-address"], stdout=subprocess.PIPE, stderr=self.bus_log, text=True)
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            raise AssertionError("dbus-daemon did not start")
        self.children = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def spawn(self, cmd, **kw):
        p = subprocess.Popen(cmd, **kw)
        self.children.append(p)
        return p

    def close(self):
        for p in self.children:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.bus_log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- clients -----------------------------------------------------------------------

    def gdbus(self, path, method, *args, user=None, dest=NAME):
        cmd = ["gdbus", "call", "--address", self.address, "--dest", dest, "--object-path", path,
               "--method", method] + list(args)
        return run(as_nobody(cmd) if user == "nobody" else cmd)

    def call(self, method, *args, **kw):
        return self.gdbus(PATH, f"{IFACE}.{method}", *args, **kw)

    def busctl(self, *args, user=None):
        cmd = ["busctl", f"--address={self.address}", "--json=short"] + list(args)
        r = run(as_nobody(cmd) if user == "nobody" else cmd)
        r.json = json.loads(r.out) if r.rc == 0 and r.out.strip() else None
        return r

    def props(self, path=PATH, iface=IFACE):
        r = self.busctl("call", NAME, path, "org.freedesktop.DBus.Properties", "GetAll", "s", iface)
        assert r.rc == 0, r
        return {k: v["data"] for k, v in r.json["data"][0].items()}

    def name_has_owner(self, name=NAME):
        r = self.busctl("call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                        "NameHasOwner", "s", name)
        return r.rc == 0 and r.json["data"][0]

    def request_nodes(self, user=None):
        """The request objects the caller may see (its own)."""
        r = self.gdbus(PATH + "/request", "org.freedesktop.DBus.Introspectable.Introspect", user=user)
        assert r.rc == 0, r
        return re.findall(r'<node name=\\?"(\d+)\\?"', r.out)

    def cli(self, *args, user=None, **kw):
        cmd = [CLI] + [args[0], "--address", self.address] + list(args[1:])
        return run(as_nobody(cmd) if user == "nobody" else cmd, **kw)

    def cli_spawn(self, *args, user=None):
        cmd = [CLI] + [args[0], "--address", self.address] + list(args[1:])
        return self.spawn(as_nobody(cmd) if user == "nobody" else cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


class Daemon:
    """agentxpu-engine (or its build against the test double) on a TestBus."""

    def __init__(self, bus, exe, config="", args=(), env=None, valgrind=False):
        self.bus = bus
        self.config = bus.path("engine.conf")
        with open(self.config, "w") as f:
            f.write(config)
        self.log_path = bus.path(f"daemon-{len(bus.children)}.log")
        cmd = [exe, "--address", bus.address, "--config", self.config] + list(args)
        if valgrind:
            cmd = ["valgrind", "--quiet", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                   "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99",
                   "--track-fds=no"] + cmd
        e = dict(os.environ)
        e.update(env or {})
        self.log = open(self.log_path, "w")
        self.proc = bus.spawn(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        wait_for(lambda: self.proc.poll() is not None or bus.name_has_owner(), "the daemon to own its name")
        if self.proc.poll() is not None:
            raise AssertionError(f"the daemon exited with {self.proc.returncode}:\n{self.text()}")

    @property
    def pid(self):
        return self.proc.pid

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=WAIT)

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")


# Bad inputs a client may send and what each gets: (what is tried, method, arguments, error
# name, part of the message). Both daemons' tests try them; `--bad-inputs-table` prints the
# answers as the table in README.md and docs/dbus-api.md.
BAD_INPUTS = [
    ("unknown option key", "Reactive", ["hi", "{'colour': <'red'>}"],
     "org.agentxpu.Error.InvalidArgument", "Unknown option 'colour'"),
    ("option of the wrong type", "Reactive", ["hi", "{'max_tokens': <'ten'>}"],
     "org.agentxpu.Error.InvalidArgument", "'max_tokens' must be of type u"),
    ("temperature as an integer", "Complete", ["hi", "{'temperature': <1>}"],
     "org.agentxpu.Error.InvalidArgument", "'temperature' must be of type d"),
    ("max_tokens 0", "Reactive", ["hi", "{'max_tokens': <uint32 0>}"],
     "org.agentxpu.Error.InvalidArgument", "'max_tokens' must be from 1 to"),
    ("max_tokens absurd", "Reactive", ["hi", "{'max_tokens': <uint32 4000000000>}"],
     "org.agentxpu.Error.InvalidArgument", "'max_tokens' must be from 1 to"),
    ("negative temperature", "Reactive", ["hi", "{'temperature': <-0.5>}"],
     "org.agentxpu.Error.InvalidArgument", "'temperature' must be at least 0"),
    ("top_p above 1", "Reactive", ["hi", "{'top_p': <1.5>}"],
     "org.agentxpu.Error.InvalidArgument", "'top_p' must be at least 0 and at most 1"),
    ("min_p below 0", "Reactive", ["hi", "{'min_p': <-0.1>}"],
     "org.agentxpu.Error.InvalidArgument", "'min_p' must be at least 0"),
    ("repeat_penalty 0", "Reactive", ["hi", "{'repeat_penalty': <0.0>}"],
     "org.agentxpu.Error.InvalidArgument", "'repeat_penalty' must be above 0"),
    ("empty stop string", "Reactive", ["hi", "{'stop': <['']>}"],
     "org.agentxpu.Error.InvalidArgument", "'stop' contains an empty string"),
    ("too many stop strings", "Reactive", ["hi", "{'stop': <['a','b','c','d','e','f','g','h','i']>}"],
     "org.agentxpu.Error.InvalidArgument", "'stop' has more than 8 stop strings"),
    ("the same key twice", "Reactive", ["hi", "{'raw': <true>, 'raw': <false>}"],
     "org.agentxpu.Error.InvalidArgument", "'raw' is given twice"),
    ("priority on Reactive", "Reactive", ["hi", "{'priority': <'proactive'>}"],
     "org.agentxpu.Error.InvalidArgument", "Unknown option 'priority'"),
    ("unknown priority", "Complete", ["hi", "{'priority': <'urgent'>}"],
     "org.agentxpu.Error.InvalidArgument", "'priority' must be 'reactive' or 'proactive'"),
    ("flow path not a flow", "Reactive", ["hi", "{'flow': <objectpath '/org/agentxpu/Engine'>}"],
     "org.agentxpu.Error.InvalidArgument", "'flow' must be a flow path from OpenFlow"),
    ("flow that does not exist", "Reactive", ["hi", "{'flow': <objectpath '/org/agentxpu/Engine/flow/999'>}"],
     "org.agentxpu.Error.NotFound", "Flow 999 does not exist"),
    ("empty prompt", "Reactive", ["", "{}"],
     "org.agentxpu.Error.InvalidArgument", "The prompt is empty"),
    ("prompt over the size cap", "Proactive", ["x" * 4097, "{}"],
     "org.agentxpu.Error.InvalidArgument", "The prompt is 4097 bytes; the limit is 4096"),
    ("prompt beyond the context", "Reactive", [" ".join(["word"] * 100), "{}"],
     "org.agentxpu.Error.ContextOverflow", "tokens and the context holds 64"),
    ("earlier turns of the wrong type", "Reactive", ["hi", "{'messages': <['hello']>}"],
     "org.agentxpu.Error.InvalidArgument", "'messages' must be of type a(ss)"),
    ("an earlier turn of an unknown role", "Reactive", ["hi", "{'messages': <[('robot', 'beep')]>}"],
     "org.agentxpu.Error.InvalidArgument", "has turn 1 of the role 'robot'; use system, user, assistant, tool_call or tool"),
    ("an empty prompt after a user's turn", "Reactive", ["", "{'messages': <[('user', 'hi')]>}"],
     "org.agentxpu.Error.InvalidArgument", "The prompt is empty"),
    ("earlier turns over the size cap", "Reactive", ["hi", "{'messages': <[('user', '" + "x" * 4097 + "')]>}"],
     "org.agentxpu.Error.InvalidArgument", "Option 'messages' holds more than 4096 bytes"),
    ("earlier turns on OpenFlow", "OpenFlow", ["{'messages': <[('user', 'hi')]>}"],
     "org.agentxpu.Error.InvalidArgument", "Unknown option 'messages'"),
    ("OpenFlow with a sampling option", "OpenFlow", ["{'temperature': <0.5>}"],
     "org.agentxpu.Error.InvalidArgument", "Unknown option 'temperature'"),
    ("CloseFlow of a request path", "CloseFlow", ["/org/agentxpu/Engine/request/1"],
     "org.agentxpu.Error.InvalidArgument", "is not a flow path"),
    ("CloseFlow of an unknown flow", "CloseFlow", ["/org/agentxpu/Engine/flow/42"],
     "org.agentxpu.Error.NotFound", "Flow 42 does not exist"),
    ("Cancel of a request that does not exist", "Request.Cancel", [],
     "org.agentxpu.Error.NotFound", "Request 9999 does not exist"),
    ("unknown policy", "SetPolicy", ["fastest"],
     "org.agentxpu.Error.InvalidArgument", "Unknown policy 'fastest'"),
    ("relative model path", "LoadModel", ["model.gguf"],
     "org.agentxpu.Error.InvalidArgument", "The model path must be absolute"),
    ("wrong argument signature", "Reactive", ["hi"],
     "org.freedesktop.DBus.Error.InvalidArgs", "Invalid arguments 's'"),
]


# Bad JSON schemas and grammars: (option, value, part of the message). The engine refuses each
# when it compiles it, in one line: tests/cli/test-constrained.py gives them to `generate`,
# test-daemon-model.py to Complete, Reactive and Proactive over the bus. The last is over the
# 64 KiB cap: the service refuses it before the engine sees it, with a message of its own.
BAD_CONSTRAINTS = [
    ("json_schema", "{not json", "not valid JSON"),
    ("json_schema", json.dumps({"type": "string", "pattern": r"(a)\1"}), "backreference"),
    ("json_schema", json.dumps({"type": "string", "pattern": "^a(?=b)"}), "lookaround"),
    ("json_schema", json.dumps({"type": "string", "pattern": "(?<x>a)"}), "named group"),
    ("json_schema", json.dumps({"type": "string", "pattern": r"\bword"}), "word boundary"),
    ("json_schema", json.dumps({"type": "string", "pattern": r"\p{L}"}), "Unicode property"),
    ("json_schema", json.dumps({"type": "string", "pattern": "a^b"}), "anchor"),
    ("json_schema", json.dumps({"type": "string", "pattern": "(ab"}), "without its ')'"),
    ("json_schema", json.dumps({"type": "string", "pattern": "a", "maxLength": 3}), "beside a pattern"),
    ("json_schema", json.dumps({"pattern": "a"}), "'pattern' without"),
    ("json_schema", json.dumps({"type": "number", "minimum": 3}), "for 'integer' only"),
    ("json_schema", json.dumps({"type": "integer", "minimum": 3, "exclusiveMinimum": True}), "draft 4"),
    ("json_schema", json.dumps({"type": "integer", "minimum": 5, "maximum": 4}), "no integer lies"),
    ("json_schema", json.dumps({"type": "integer", "maximum": 1e20}), "beyond the 16 digits"),
    ("json_schema", json.dumps({"$ref": "https://example.org/s.json"}), "only local $refs"),
    ("json_schema", json.dumps({"$ref": "#/$defs/missing"}), "names nothing"),
    ("json_schema", json.dumps({"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a", "maxLength": 2}),
     "'$ref' beside 'maxLength'"),
    ("json_schema", json.dumps({"type": "array", "minItems": 3, "maxItems": 1}), "minItems is greater"),
    ("json_schema", json.dumps({"enum": []}), "non-empty"),
    ("json_schema", json.dumps({"oneOf": [{"type": "integer"}, {"type": "string"}]}),
     "the keyword 'oneOf' is not supported"),
    ("json_schema", json.dumps({"allOf": [{"type": "integer"}]}), "the keyword 'allOf' is not supported"),
    ("grammar", 'root ::= root "a" | "b"\n', "left-recursive"),
    ("grammar", 'root ::= thing\n', "'thing' is used but not defined"),
    ("grammar", "root ::= " + " ".join(f'"{c}"{{4000}}' for c in "abcdefghijklmnopq") + "\n", "too large"),
    ("grammar", 'root ::= "' + "a" * 70000 + '"\n', "at most"),
    ("grammar", 'root ::= ("a"? "b"?){4096} "x"\n', "too ambiguous"),
]


def bad_input_answers(bus):
    """(row of BAD_INPUTS, the call as shown, error name, message) for each of BAD_INPUTS."""
    for row in BAD_INPUTS:
        what, method, args, _, _ = row
        if method == "Request.Cancel":
            r = bus.gdbus(PATH + "/request/9999", f"{REQ_IFACE}.Cancel")
            shown = f"`Cancel` on `{PATH}/request/9999`"
        elif args == ["hi"]:
            # dbus-send sends what it is given (gdbus would check the signature itself)
            need_tools("dbus-send")
            r = run(["dbus-send", "--print-reply", f"--bus={bus.address}", f"--dest={NAME}", PATH,
                     f"{IFACE}.{method}", "string:hi"])
            m = re.match(r"Error ([\w.]+): (.*)", r.err.strip())
            yield row, f"`{method} 'hi'` (no options)", m and m.group(1), m.group(2) if m else r.err.strip()
            continue
        else:
            r = bus.call(method, *args)
            shown = f"`{method} " + " ".join(a[:20] + "…" if len(a) >= 60 else a or "''" for a in args) + "`"
        yield row, shown, r.error_name, r.error_message


def check_bad_inputs(bus):
    for (what, _, _, name, msg), _, error_name, message in bad_input_answers(bus):
        assert error_name == name, (what, error_name, message)
        assert msg in message, (what, msg, message)


def print_bad_inputs_table(bus):
    print("| input | call | error | message |")
    print("|---|---|---|---|")
    for (what, *_), shown, error_name, message in bad_input_answers(bus):
        print(f"| {what} | {shown} | `{(error_name or 'none').replace('org.agentxpu.Error.', '')}` | {message} |")


def drain(p, timeout=WAIT):
    """(returncode, rest of stdout, stderr) of a client whose stdout was partly read with
    readline(): communicate() would skip what Python already buffered."""
    out = p.stdout.read()
    err = p.stderr.read() if p.stderr else ""
    return p.wait(timeout=timeout), out, err


def gvariant_first_string(text):
    """The first string of gdbus's GVariant text output, e.g. "('hi', {...})" -> 'hi'."""
    m = re.match(r"\(\s*('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", text.strip())
    assert m, f"no string in {text!r}"
    s = m.group(1)[1:-1]
    return re.sub(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", _unescape, s)


def _unescape(m):
    e = m.group(1)
    table = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b",
             "f": "\f", "v": "\v"}
    if e[0] in "uU":
        return chr(int(e[1:], 16))
    return table.get(e, e)


def main(tests):
    """Run the test functions in order; exit 0, 1 (a failure) or 77 (all skipped)."""
    only = sys.argv[1:]
    failed = skipped = passed = 0
    for t in tests:
        if only and t.__name__ not in only:
            continue
        start = time.monotonic()
        try:
            t()
            print(f"ok   {t.__name__} ({time.monotonic() - start:.1f}s)", flush=True)
            passed += 1
        except Skip as e:
            print(f"SKIP {t.__name__}: {e}", flush=True)
            skipped += 1
        except Exception:
            print(f"FAIL {t.__name__}", flush=True)
            traceback.print_exc()
            failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if failed:
        sys.exit(1)
    sys.exit(77 if passed == 0 else 0)
