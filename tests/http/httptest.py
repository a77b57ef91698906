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
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from bustest import WAIT, Daemon, Skip, TestBus, main, need_tools, run, wait_for  # noqa: E402,F401

DAEMON = os.environ.get("AXP_ENGINE_DAEMON", "")
BRIDGE = os.environ.get("AXP_HTTP_BRIDGE", "")
CLI = os.environ.get("AXP_CLI", "")
_model = None


# The Llama 3 template of `agentxpu mkmodel`'s models, mentioning tools, so that the engine
# renders a function list into it (Llama 3.1's way) and requests may carry tools.
TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
            "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
            "message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
            "{% endif %}{# tools: as Llama 3.1 #}")


def llama3(*turns, gen=True):
    """Turns (role, content) as TEMPLATE renders them."""
    text = "".join(f"<|start_header_id|>{r}<|end_header_id|>\n\n{c.strip()}<|eot_id|>" for r, c in turns)
    return text + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if gen else "")


def token_count(text, bos=True):
    r = run([CLI, "tokenize", "-m", model(), "-p", text, "--json"] + ([] if bos else ["--no-bos"]))
    assert r.rc == 0, r
    return len(json.loads(r.out)["tokens"])


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
             "--kv-heads", "4", "--ffn", "1536", "--ctx", "4096", "--no-eog", "--chat-template", TEMPLATE])
    if r.rc != 0:
        raise Skip(f"agentxpu mkmodel failed: {r.err.strip()}")
    _model = path
    return path


_coders = {}


def coder_model(ctx):
    """A small qwen2 model with Qwen2.5-Coder's fill-in-the-middle tokens (mkmodel --fim) and a
    context of ctx, made once per run and context."""
    if ctx in _coders:
        return _coders[ctx]
    folder = tempfile.mkdtemp(prefix="axp-test-coder-")
    atexit.register(shutil.rmtree, folder, True)
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "coder.gguf")
    r = run([CLI, "mkmodel", "-o", path, "--arch", "qwen2", "--seed", "3", "--dim", "256", "--layers", "2",
             "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--ctx", str(ctx), "--no-eog", "--fim"])
    assert r.rc == 0, r
    _coders[ctx] = path
    return path


def free_port():
    """A loopback TCP port that nobody listens on now (systemd-socket-activate takes no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bridge:
    """agentxpu serve on the test's bus: a Unix socket in a private runtime folder, and
    loopback TCP on a port of the kernel's choosing. activated: started as systemd starts
    agentxpu-http.service from agentxpu-http.socket, by systemd-socket-activate, which listens
    on $XDG_RUNTIME_DIR/agentxpu/http.sock (and a free loopback port) and at the first
    connection runs agentxpu-http on the sockets it hands over; activate_args are more of its
    options, via a command that execs the bridge (keeping its pid, which LISTEN_PID names)."""

    def __init__(self, bus, args=(), tcp=True, activated=False, activate_args=(), via=()):
        self.bus = bus
        self.home = bus.path("home")
        self.runtime = bus.path("runtime")
        os.makedirs(self.runtime, mode=0o700, exist_ok=True)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime, XDG_CONFIG_HOME=os.path.join(self.home, ".config"),
                        HOME=self.home)
        self.log_path = bus.path(f"bridge-{len(bus.children)}.log")
        self.log = open(self.log_path, "w")
        self.socket = None
        self.port = None
        if activated:
            need_tools("systemd-socket-activate")
            self.socket = os.path.join(self.runtime, "agentxpu", "http.sock")
            os.makedirs(os.path.dirname(self.socket), mode=0o700, exist_ok=True)
            self.port = free_port() if tcp else None
            listen = [self.socket] + ([f"127.0.0.1:{self.port}"] if tcp else [])
            cmd = (["systemd-socket-activate"] + [f"--listen={a}" for a in listen] + list(activate_args) +
                   list(via) + [BRIDGE, "--address", bus.address] + list(args))
        else:
            cmd = [CLI, "serve", "--address", bus.address] + (["--listen", "127.0.0.1:0"] if tcp else []) + list(args)
        self.proc = bus.spawn(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                              env=dict(self.env, AGENTXPU_HTTP=BRIDGE))
        if activated:
            sockets = len(listen) + list(activate_args).count("-l")
            wait_for(lambda: self.text().count("Listening on ") >= sockets or self.proc.poll() is not None,
                     "systemd-socket-activate to listen")
        else:
            self.listening(2 if tcp else 1)
        self.base = f"http://127.0.0.1:{self.port}"
        self.token = run([CLI, "serve", "--print-token"], env=dict(self.env, AGENTXPU_HTTP=BRIDGE)).out.strip() \
            if tcp else None

    def listening(self, n):
        """The n lines where the bridge says it listens, which set socket and port."""
        lines = []
        for _ in range(n):
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the bridge exited with {self.proc.wait()}:\n{self.text()}")
            lines.append(line.strip())
            m = re.match(r"Listening on unix:(\S+)", line)
            if m:
                self.socket = m.group(1)
            m = re.match(r"Listening on http://127\.0\.0\.1:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
        return lines

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
def serving(config="", bridge_args=(), tcp=True, activated=False, model_path=None):
    """The engine and the bridge on a private bus: (bus, daemon, bridge); the test model unless
    model_path names another."""
    m = model_path or model()
    bus = TestBus()
    try:
        d = Daemon(bus, DAEMON, config=config, args=["--model", m])
        b = Bridge(bus, bridge_args, tcp=tcp, activated=activated)
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
