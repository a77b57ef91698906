# SPDX-License-Identifier: MIT
"""Helpers for the tests of agentxpu serve (agentxpu-http): a private dbus-daemon, the real
agentxpu-engine on a small model made by `agentxpu mkmodel`, and the bridge on a Unix socket
and loopback TCP, as a desktop session runs them. Python 3 standard library only."""

import atexit
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from bustest import WAIT, Daemon, Skip, TestBus, main, need_tools, run, wait_for  # noqa: E402,F401

DAEMON = os.environ.get("AXP_ENGINE_DAEMON", "")
BRIDGE = os.environ.get("AXP_HTTP_BRIDGE", "")
CLI = os.environ.get("AXP_CLI", "")
_model = None


def model():
    """A small synthetic model that never ends on its own (--no-eog), made once per run."""
    global _model
    if _model:
        return _model
    if not DAEMON:
        raise Skip("agentxpu-engine is not built")
    if not BRIDGE or not os.path.exists(BRIDGE):
        raise Skip("agentxpu-http is not built (it needs libsoup 3 and json-glib)")
    folder = tempfile.mkdtemp(prefix="axp-test-model-")
    atexit.register(shutil.rmtree, folder, True)
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "tiny.gguf")
    r = run([CLI, "mkmodel", "-o", path, "--seed", "7", "--dim", "512", "--layers", "4", "--heads", "8",
             "--kv-heads", "4", "--ffn", "1536", "--ctx", "4096", "--no-eog"])
    if r.rc != 0:
        raise Skip(f"agentxpu mkmodel failed: {r.err.strip()}")
    _model = path
    return path


class Bridge:
    """agentxpu serve on the test's bus: a Unix socket in a private runtime folder, and
    loopback TCP on a port of the kernel's choosing."""

    def __init__(self, bus, args=(), tcp=True):
        self.bus = bus
        self.home = bus.path("home")
        self.runtime = bus.path("runtime")
        os.makedirs(self.runtime, mode=0o700, exist_ok=True)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime, XDG_CONFIG_HOME=os.path.join(self.home, ".config"),
                        HOME=self.home)
        self.log_path = bus.path(f"bridge-{len(bus.children)}.log")
        self.log = open(self.log_path, "w")
        cmd = [CLI, "serve", "--address", bus.address] + (["--listen", "127.0.0.1:0"] if tcp else []) + list(args)
        self.proc = bus.spawn(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                              env=dict(self.env, AGENTXPU_HTTP=BRIDGE))
        self.socket = None
        self.port = None
        want = 2 if tcp else 1
        for _ in range(want):
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the bridge exited with {self.proc.wait()}:\n{self.text()}")
            m = re.match(r"Listening on unix:(\S+)", line)
            if m:
                self.socket = m.group(1)
            m = re.match(r"Listening on http://127\.0\.0\.1:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
        self.base = f"http://127.0.0.1:{self.port}"
        self.token = run([CLI, "serve", "--print-token"], env=dict(self.env, AGENTXPU_HTTP=BRIDGE)).out.strip() \
            if tcp else None

    def text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=WAIT)

    # --- curl ----------------------------------------------------------------------------

    def curl_args(self, path, body=None, tcp=False, token=True, headers=(), method=None):
        a = ["curl", "-sS", "-N", "-o", "-", "-w", "\n%{http_code}"]
        if tcp:
            url = self.base + path
            if token:
                a += ["-H", f"Authorization: Bearer {self.token if token is True else token}"]
        else:
            a += ["--unix-socket", self.socket]
            url = "http://localhost" + path
        for h in headers:
            a += ["-H", h]
        if body is not None:
            a += ["-H", "Content-Type: application/json",
                  "--data-binary", body if isinstance(body, str) else json.dumps(body)]
        if method:
            a += ["-X", method]
        return a + [url]

    def curl(self, path, body=None, **kw):
        """(status, body text)"""
        need_tools("curl")
        r = run(self.curl_args(path, body, **kw))
        assert r.rc == 0, r
        text, _, code = r.out.rpartition("\n")
        return int(code), text

    def json(self, path, body=None, **kw):
        status, text = self.curl(path, body, **kw)
        return status, json.loads(text) if text else None

    def curl_spawn(self, path, body=None, **kw):
        need_tools("curl")
        return self.bus.spawn(self.curl_args(path, body, **kw), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def serving(config="", bridge_args=(), tcp=True):
    """The engine and the bridge on a private bus: (bus, daemon, bridge)."""
    m = model()
    bus = TestBus()
    try:
        d = Daemon(bus, DAEMON, config=config, args=["--model", m])
        b = Bridge(bus, bridge_args, tcp=tcp)
        yield bus, d, b
        assert b.proc.poll() is None, "the bridge died:\n" + b.text()
        assert b.stop() == 0, b.text()
    finally:
        bus.close()


def model_name(b):
    status, body = b.json("/v1/models")
    assert status == 200, body
    return body["data"][0]["id"]


def sse_events(text):
    """The data of each server-sent event, in order; asserts the framing."""
    assert text.endswith("\n\n"), repr(text[-200:])
    events = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), repr(block)
        events.append(block[len("data: "):])
    return events
