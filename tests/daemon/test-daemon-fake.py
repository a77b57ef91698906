#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu-engine's behaviour on the bus, with the engine replaced by its test double
(fake-engine.c: words are tokens, it generates " t1", " t2", ...). Everything here is about
the daemon: validation, ownership, unicast, tracking of clients, limits, flows, polkit,
SIGTERM, idle exit, memory. test-daemon-model.py runs the real engine on a real model.

Run one test: test-daemon-fake.py test_flows. Print the test double's answers to the bad
inputs (test-daemon-model.py prints the real daemon's, which the documentation shows):
test-daemon-fake.py --bad-inputs-table."""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bustest import (IFACE, JOB_IFACE, NAME, PATH, REQ_IFACE, WAIT, Daemon, Skip, TestBus, check_bad_inputs,  # noqa: E402
                     drain, gvariant_first_string, is_root, main, need_tools, print_bad_inputs_table, run,
                     wait_for)

FAKE = os.environ.get("AXP_ENGINE_FAKE", "")
STANDIN = os.environ.get("AXP_POLKIT_STANDIN", "")
SOURCE = os.environ.get("AXP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))

BASE_CONFIG = """
[Engine]
ContextSize=64
[Limits]
PromptBytes=4096
MaxTokens=1000000
"""

# Long enough never to end on its own (over an hour at the test double's pace): a test that
# waits for such a request to go proves it was cancelled.
LONG = "1000000"


@contextlib.contextmanager
def engine(config="", step_ms=5, env=None, valgrind=False, args=(), bus_limits=None):
    """A private bus with agentxpu-engine-fake on it, serving a model file."""
    if not FAKE:
        raise Skip("AXP_ENGINE_FAKE is not set (run through meson test)")
    bus = TestBus(bus_limits)
    try:
        model = bus.path("tiny.gguf")
        with open(model, "w") as f:
            f.write("not a real model: the test double only checks that it exists\n")
        e = {"AXP_FAKE_STEP_MS": str(step_ms), "AGENTXPU_LOG_LEVEL": "debug"}
        e.update(env or {})
        d = Daemon(bus, FAKE, config=BASE_CONFIG + config, args=["--model", model] + list(args), env=e,
                   valgrind=valgrind)
        yield bus, d
        if d.proc.poll() is None:
            assert d.stop() == 0, d.text()
    finally:
        bus.close()


def submit_bg(bus, *args, user=None):
    """`agentxpu submit --wait` in the background; returns (process, request path)."""
    p = bus.cli_spawn("submit", "--wait", *args, user=user)
    path = p.stdout.readline().strip()
    assert path.startswith(PATH + "/request/"), (path, p.stderr.read() if p.poll() is not None else "")
    return p, path


def first_token(p):
    """Block until the streaming client printed something."""
    c = p.stdout.read(1)
    assert c, "the stream ended without a token"
    return c


def engine_idle(bus):
    p = bus.props()
    return p["Running"] == 0 and p["QueuedReactive"] == 0 and p["QueuedProactive"] == 0


# --- the interface ------------------------------------------------------------------------------

def interface_members(root):
    """{interface: {(kind, name): description}} from introspection XML."""
    out = {}
    for iface in root.iter("interface"):
        name = iface.get("name")
        if name.startswith("org.freedesktop.DBus."):
            continue
        members = {}
        for m in iface:
            if m.tag == "method":
                members[("method", m.get("name"))] = [(a.get("name"), a.get("type"), a.get("direction", "in"))
                                                      for a in m.findall("arg")]
            elif m.tag == "signal":
                members[("signal", m.get("name"))] = [(a.get("name"), a.get("type")) for a in m.findall("arg")]
            elif m.tag == "property":
                emits = "true"
                for a in m.findall("annotation"):
                    if a.get("name") == "org.freedesktop.DBus.Property.EmitsChangedSignal":
                        emits = a.get("value")
                members[("property", m.get("name"))] = (m.get("type"), m.get("access"), emits)
        out[name] = members
    return out


def test_introspection_matches_xml():
    contract = interface_members(ET.parse(os.path.join(SOURCE, "dbus", "org.agentxpu.Engine.xml")).getroot())
    with engine() as (bus, d):
        r = bus.gdbus(PATH, "org.freedesktop.DBus.Introspectable.Introspect")
        live = interface_members(ET.fromstring(gvariant_first_string(r.out)))
        p, path = submit_bg(bus, "-n", LONG, "hello")
        r = bus.gdbus(path, "org.freedesktop.DBus.Introspectable.Introspect")
        live.update(interface_members(ET.fromstring(gvariant_first_string(r.out))))
        p.kill()
    # The job interface is compared with a job alive, in test-daemon-model.py.
    assert set(contract) == {IFACE, REQ_IFACE, JOB_IFACE}, contract.keys()
    for iface in (IFACE, REQ_IFACE):
        assert live.get(iface) == contract[iface], (iface, live.get(iface), contract[iface])


# --- requests and their signals -----------------------------------------------------------------

def test_complete_replies_with_text_and_stats():
    with engine() as (bus, d):
        r = bus.call("Complete", "Hello", "{'max_tokens': <uint32 8>, 'temperature': <0.0>, 'raw': <true>}")
        assert r.rc == 0, r
        assert gvariant_first_string(r.out) == " t1 t2 t3 t4 t5 t6 t7 t8"
        assert "'reason': <'length'>" in r.out and "'generated_tokens': <uint32 8>" in r.out, r.out
        assert "'prompt_tokens': <uint32 1>" in r.out, r.out
        # Complete requests have no object and leave nothing behind.
        assert bus.request_nodes() == []
        r = bus.busctl("call", NAME, PATH, IFACE, "Complete", "sa{sv}", "say it short", "1",
                       "priority", "s", "proactive")
        assert r.rc == 0 and r.json["data"][0] == " t1 t2 t3", r
        assert r.json["data"][1]["reason"]["data"] == "stop", r


def test_embed_replies_and_its_caller_may_leave():
    """Embed replies with the engine's numbers (the test double's: the prompt's tokens, then
    what the options asked) and Complete's stats, and leaves no object; a caller that leaves
    before the answer has its request cancelled, and the daemon goes on serving."""
    with engine() as (bus, d):
        r = bus.call("Embed", "one two three", "{}")
        assert r.rc == 0, r
        assert r.out.startswith("([7.0, 1.0, 0.0, 0.0], {"), r.out
        assert "'reason': <'stop'>" in r.out and "'generated_tokens': <uint32 0>" in r.out, r.out
        r = bus.call("Embed", "one", "{'normalize': <false>, 'pooling': <'last'>, 'truncate': <true>, "
                                     "'priority': <'proactive'>}")
        assert r.rc == 0 and r.out.startswith("([5.0, 0.0, 3.0, 1.0], {"), r
        assert bus.request_nodes() == []
        p = bus.spawn(["gdbus", "call", "--address", bus.address, "--dest", NAME, "--object-path", PATH,
                       "--method", f"{IFACE}.Embed", "silent please", "{}"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: bus.props()["QueuedReactive"] + bus.props()["Running"] == 1, "the embedding queued")
        p.kill()
        p.wait()
        wait_for(lambda: engine_idle(bus), "the orphan cancelled")
        assert bus.call("Embed", "again", "{}").rc == 0
        assert d.proc.poll() is None, d.text()


def parse_monitor(text):
    """dbus-monitor's output as a list of (header dict, [argument lines])."""
    msgs = []
    for line in text.splitlines():
        if re.match(r"^(signal|method call|method return|error) ", line):
            head = dict(re.findall(r"(\w+)=([^ ;]+)", line))
            head["type"] = line.split(" time=")[0]
            msgs.append((head, []))
        elif msgs and line.startswith("   "):
            msgs[-1][1].append(line.strip())
    return msgs


def test_tokens_unicast_in_order_and_bystander_sees_none():
    need_tools("dbus-monitor")
    if not is_root():
        raise Skip("dbus-monitor needs root to watch a bus it does not own")
    with engine() as (bus, d):
        mon = bus.spawn(["dbus-monitor", "--address", bus.address], stdout=subprocess.PIPE, text=True)
        by = bus.spawn(["gdbus", "monitor", "--address", bus.address, "--dest", NAME],
                       stdout=subprocess.PIPE, text=True)
        # Both are listening once they print their first line.
        mon.stdout.readline()
        by.stdout.readline()
        time.sleep(0.2)

        r = bus.cli("ask", "-n", "20", "-v", "hello there")
        assert r.rc == 0, r
        assert r.out == "".join(f" t{i}" for i in range(1, 21)) + "\n", r.out
        assert "finished: length" in r.err, r.err
        path = re.search(r"request (\S+)", r.err).group(1)

        # One more request after it: the engine's broadcast PropertiesChanged for its end comes
        # after anything the bystander could have been sent about the first one.
        assert bus.cli("ask", "-n", "1", "sync").rc == 0
        time.sleep(0.5)
        mon.terminate()
        by.terminate()
        mon_out, by_out = mon.stdout.read(), by.stdout.read()
        mon.wait()
        by.wait()

    msgs = parse_monitor(mon_out)
    call = next(h for h, a in msgs if h.get("member") == "Reactive" and a and a[0] == 'string "hello there"')
    client = call["sender"]
    on_path = [(h, a) for h, a in msgs if h.get("path") == path and h["type"] == "signal"]
    assert on_path, mon_out
    for h, a in on_path:
        assert h["destination"] == client, h
    tokens = [a[0] for h, a in on_path if h["member"] == "Token"]
    assert tokens == [f'string " t{i}"' for i in range(1, 21)], tokens
    assert on_path[-1][0]["member"] == "Finished", on_path[-1]
    assert on_path[-1][1][0] == 'string "length"', on_path[-1]

    assert "Running" in by_out, by_out  # the bystander did hear the engine's broadcasts
    assert "Token" not in by_out and "Finished" not in by_out and "/request/" not in by_out, by_out


def test_tokens_are_whole_characters_and_no_byte_is_dropped():
    """The engine's tokens may split a character or hold bytes that are none (byte-fallback
    tokens): Token signals carry whole characters, a split one once its last byte came, and
    bytes that never make one (0xff, a NUL, a character cut short at the end) as U+FFFD."""
    want = " caf\u00e9 \u20ac \ufffd \ufffd \ufffd"
    with engine() as (bus, d):
        r = bus.call("Complete", "bytes", "{'max_tokens': <uint32 8>}")
        assert r.rc == 0 and gvariant_first_string(r.out) == want, r
        mon = None
        if is_root() and shutil.which("dbus-monitor"):
            mon = bus.spawn(["dbus-monitor", "--address", bus.address, "type='signal',member='Token'"],
                            stdout=subprocess.PIPE, text=True)
            mon.stdout.readline()
        r = bus.cli("ask", "-n", "8", "bytes")
        assert r.rc == 0 and r.out == want + "\n", r
        assert "not UTF-8" not in d.text(), d.text()
        if mon:
            assert bus.cli("ask", "-n", "1", "sync").rc == 0
            time.sleep(0.3)
            mon.terminate()
            tokens = [a[0] for h, a in parse_monitor(mon.stdout.read()) if h.get("member") == "Token"]
            # " \xe2\x82" gives its space at once and "\u20ac" with the next token; the
            # character cut short at the end comes as the last Token, before Finished.
            assert [t[len('string "'):-1] for t in tokens[:-1]] == \
                [" caf", "\u00e9", " ", "\u20ac", " \ufffd", " \ufffd", " ", "\ufffd"], tokens


def test_client_that_leaves_has_its_request_cancelled_and_freed():
    with engine() as (bus, d):
        p, path = submit_bg(bus, "-n", LONG, "a long one")
        first_token(p)
        assert bus.request_nodes() == [path.rsplit("/", 1)[1]]
        p.kill()
        wait_for(lambda: engine_idle(bus) and bus.request_nodes() == [], "the request to go")
        assert re.search(r"Client :\S+ is gone", d.text()), d.text()
        assert f"{path} finished: cancelled" in d.text(), d.text()


def test_finished_request_is_kept_for_its_owner_then_dropped():
    # Keep-after-finish needs a client that stays on the bus after Finished: chat does.
    for keep, expect_gone in ((600, False), (1, True)):
        with engine(f"[Daemon]\nFinishedKeepSec={keep}\n") as (bus, d):
            chat = bus.spawn([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-v", "-n", "5"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert chat.stderr.readline().startswith("flow ")
            chat.stdin.write("one two three\n")
            chat.stdin.flush()
            path = chat.stderr.readline().split()[1]
            assert chat.stderr.readline().startswith("finished: length")
            n = path.rsplit("/", 1)[1]
            if not expect_gone:
                state = bus.busctl("get-property", NAME, path, REQ_IFACE, "State")
                assert state.json["data"] == "finished", state
                stats = bus.busctl("get-property", NAME, path, REQ_IFACE, "Stats")
                assert stats.json["data"]["generated_tokens"]["data"] == 5, stats
                assert n in bus.request_nodes()
                r = bus.gdbus(path, f"{REQ_IFACE}.Cancel")
                assert r.error_name == "org.agentxpu.Error.NotFound", r
            else:
                wait_for(lambda: n not in bus.request_nodes(), "the finished request to be dropped")
            chat.stdin.close()
            assert chat.wait(timeout=60) == 0


def test_engine_error_is_reported():
    with engine() as (bus, d):
        r = bus.call("Complete", "please fail", "{}")
        assert r.error_name == "org.freedesktop.DBus.Error.Failed", r
        assert "asked to fail" in r.error_message, r
        r = bus.cli("ask", "fail now")
        assert r.rc == 1 and "generation failed: the fake engine was asked to fail" in r.err, r


def test_calls_to_missing_paths_answer_not_found():
    with engine() as (bus, d):
        # 0 and 007 (a leading zero) are no request's number: they used to answer UnknownObject
        for n in ("9999", "0", "007", "abc"):
            for method, args in ((f"{REQ_IFACE}.Cancel", ()),
                                 ("org.freedesktop.DBus.Properties.Get", (REQ_IFACE, "State")),
                                 ("org.freedesktop.DBus.Introspectable.Introspect", ())):
                r = bus.gdbus(PATH + "/request/" + n, method, *args)
                assert r.error_name == "org.agentxpu.Error.NotFound", (n, method, r)
                assert r.error_message == f"Request {n} does not exist (finished and collected, or never created)", r
        # with a request 1 there, 01 is still none
        p, path = submit_bg(bus, "-n", LONG, "mine")
        assert path == PATH + "/request/1", path
        r = bus.gdbus(PATH + "/request/01", f"{REQ_IFACE}.Cancel")
        assert r.error_name == "org.agentxpu.Error.NotFound" and "Request 01 does not exist" in r.error_message, r
        assert p.poll() is None
        assert bus.cli("cancel", path).rc == 0
        assert p.wait(timeout=60) == 1
        # One that finished and was collected (its client left).
        r = bus.cli("submit", "-n", "2", "gone soon")
        path = r.out.split("\n")[0]
        assert r.rc == 0 and path.startswith(PATH + "/request/"), r
        wait_for(lambda: bus.request_nodes() == [], "the request to be collected")
        r = bus.gdbus(path, f"{REQ_IFACE}.Cancel")
        assert r.error_name == "org.agentxpu.Error.NotFound" and "does not exist" in r.error_message, r
        # The folder of requests is no request: introspecting it still lists them.
        assert bus.request_nodes() == []

        for n in ("77", "0", "007", "abc"):
            r = bus.gdbus(PATH + "/flow/" + n, "org.freedesktop.DBus.Introspectable.Introspect")
            assert r.error_name == "org.agentxpu.Error.NotFound", (n, r)
            assert r.error_message == f"Flow {n} does not exist (closed, or its owner left)", r
        chat = bus.spawn([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-v"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        flow = chat.stderr.readline().split()[1]
        assert bus.gdbus(flow, "org.freedesktop.DBus.Introspectable.Introspect").rc == 0
        chat.stdin.close()
        assert chat.wait(timeout=60) == 0


# --- ownership ----------------------------------------------------------------------------------

def test_other_user_cannot_read_or_cancel():
    if not is_root():
        raise Skip("needs root to run the second client as nobody")
    with engine() as (bus, d):
        p, path = submit_bg(bus, "-n", LONG, "mine")
        first_token(p)
        for method, args in ((f"{REQ_IFACE}.Cancel", ()),
                             ("org.freedesktop.DBus.Properties.Get", (REQ_IFACE, "State")),
                             ("org.freedesktop.DBus.Properties.Get", (REQ_IFACE, "Stats")),
                             ("org.freedesktop.DBus.Properties.GetAll", (REQ_IFACE,))):
            r = bus.gdbus(path, method, *args, user="nobody")
            assert r.error_name == "org.agentxpu.Error.AccessDenied", (method, r)
            assert "belongs to another user" in r.error_message, r
        r = bus.cli("cancel", path, user="nobody")
        assert r.rc == 1 and "belongs to another user" in r.err, r
        assert bus.request_nodes(user="nobody") == []
        # Introspection lists the interface of a request that exists: to another user it
        # answers as for one that does not (it used to answer the XML).
        n = path.rsplit("/", 1)[1]
        for target, want in ((path, n), (PATH + "/request/9999", "9999")):
            r = bus.gdbus(target, "org.freedesktop.DBus.Introspectable.Introspect", user="nobody")
            assert r.error_name == "org.agentxpu.Error.NotFound", (target, r)
            assert r.error_message == f"Request {want} does not exist (finished and collected, or never created)", r
        r = bus.gdbus(path, "org.freedesktop.DBus.Introspectable.Introspect")
        assert r.rc == 0 and REQ_IFACE in r.out, r  # the owner's, as before
        assert p.poll() is None, "the request must still be running"

        # The owner, from another connection, may.
        r = bus.cli("cancel", path)
        assert r.rc == 0, r
        rc, out, err = drain(p)
        assert rc == 1 and "cancelled" in err, (rc, out, err)


def test_other_user_cannot_use_or_close_a_flow():
    if not is_root():
        raise Skip("needs root to run the second client as nobody")
    with engine() as (bus, d):
        chat = bus.spawn([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-v", "-n", "3"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        flow = chat.stderr.readline().split()[1]
        r = bus.call("Complete", "hi", f"{{'flow': <objectpath '{flow}'>}}", user="nobody")
        assert r.error_name == "org.agentxpu.Error.AccessDenied", r
        r = bus.call("CloseFlow", flow, user="nobody")
        assert r.error_name == "org.agentxpu.Error.AccessDenied", r
        # The same user from another connection may continue it.
        r = bus.call("Complete", "hi", f"{{'flow': <objectpath '{flow}'>, 'max_tokens': <uint32 2>}}")
        assert r.rc == 0 and gvariant_first_string(r.out) == " t1 t2", r
        chat.stdin.close()
        assert chat.wait(timeout=60) == 0


def test_chat_goes_on_after_a_refused_line():
    """A line the engine refuses (longer than the context) is said and skipped; the
    conversation goes on (it used to end there, its later lines never sent), and chat exits 1."""
    with engine() as (bus, d):
        long_line = " ".join(["word"] * 100)
        p = subprocess.run([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-n", "2"],
                           input=f"first\n{long_line}\nthird\n", capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
        assert p.stdout.count(" t1 t2") == 2, (p.stdout, p.stderr)
        assert "context" in p.stderr, p.stderr


def test_ask_whose_output_is_gone_cancels():
    """`ask` whose standard output closes (a pipe to `head`, SIGPIPE ignored as some shells and
    programs run it) cancels its request and fails, rather than listening to the end."""
    with engine() as (bus, d):
        p = subprocess.Popen([os.environ["AXP_CLI"], "ask", "--address", bus.address, "-n", LONG, "hi"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_IGN))
        first_token(p)
        p.stdout.close()
        assert p.wait(timeout=30) == 1
        err = p.stderr.read()
        assert "cannot write the answer: Broken pipe" in err and "cancelled" in err, err
        wait_for(lambda: engine_idle(bus) and bus.request_nodes() == [], "the request to be cancelled")


# --- flows ----------------------------------------------------------------------------------------

def read_stats_line(f):
    line = f.readline()
    m = re.match(r"finished: (\w+), prompt (\d+) tokens \((\d+) prefilled\), (\d+) generated", line)
    assert m, line
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))


def test_flows():
    with engine() as (bus, d):
        chat = bus.spawn([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-v", "-n", "5"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        flow = chat.stderr.readline().split()[1]
        assert re.fullmatch(PATH + r"/flow/\d+", flow), flow

        chat.stdin.write("one two three\n")
        chat.stdin.flush()
        chat.stderr.readline()  # request path
        # The test double counts words as tokens and 4 for the chat template.
        assert read_stats_line(chat.stderr) == ("length", 7, 7, 5)
        assert chat.stdout.readline() == " t1 t2 t3 t4 t5\n"

        chat.stdin.write("four five\n")
        chat.stdin.flush()
        chat.stderr.readline()
        # The second turn prefills only its own 6 tokens, not the 12 before it.
        assert read_stats_line(chat.stderr) == ("length", 6, 6, 5)

        # One turn at a time: while a turn runs, another on the same flow is Busy.
        long_turn = bus.spawn(["gdbus", "call", "--address", bus.address, "--dest", NAME, "--object-path", PATH,
                               "--method", f"{IFACE}.Complete", "go on",
                               f"{{'flow': <objectpath '{flow}'>, 'max_tokens': <uint32 1000000>}}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: bus.props()["Running"] == 1, "the long turn to run")
        r = bus.call("Complete", "hi", f"{{'flow': <objectpath '{flow}'>}}")
        assert r.error_name == "org.agentxpu.Error.Busy", r
        long_turn.kill()
        wait_for(lambda: engine_idle(bus), "the abandoned turn to be cancelled")

        chat.stdin.close()
        assert chat.wait(timeout=60) == 0
        r = bus.call("Complete", "hi", f"{{'flow': <objectpath '{flow}'>}}")
        assert r.error_name == "org.agentxpu.Error.NotFound", r

        # A flow dies with the connection that opened it.
        chat = bus.spawn([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-v"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        flow = chat.stderr.readline().split()[1]
        chat.kill()
        wait_for(lambda: bus.call("Complete", "hi", f"{{'flow': <objectpath '{flow}'>}}").error_name
                 == "org.agentxpu.Error.NotFound", "the flow to be closed")


# --- limits and bad input -------------------------------------------------------------------------

def test_per_user_limit_answers_busy():
    with engine("[Limits]\nRequestsPerUser=3\n") as (bus, d):
        clients = [submit_bg(bus, "-n", LONG, f"job {i}")[0] for i in range(3)]
        r = bus.call("Proactive", "one more", "{}")
        assert r.error_name == "org.agentxpu.Error.Busy", r
        assert "3 requests" in r.error_message, r
        if is_root():
            # The limit is per user: somebody else still gets in.
            r = bus.call("Proactive", "hello", "{}", user="nobody")
            assert r.rc == 0 and "/request/" in r.out, r
        clients[0].kill()
        wait_for(lambda: bus.call("Complete", "now", "{'max_tokens': <uint32 1>}").rc == 0,
                 "room for another request")


def test_context_overflow():
    with engine() as (bus, d):
        r = bus.call("Reactive", " ".join(["word"] * 100), "{}")
        assert r.error_name == "org.agentxpu.Error.ContextOverflow", r
        assert "104 tokens" in r.error_message and "64" in r.error_message, r


def test_bad_inputs():
    with engine() as (bus, d):
        check_bad_inputs(bus)
        # Nothing was queued, nothing is left, the daemon is fine.
        assert engine_idle(bus) and bus.request_nodes() == []
        assert bus.call("Complete", "still here", "{'max_tokens': <uint32 1>}").rc == 0


# --- many clients and memory ---------------------------------------------------------------------

def fifty_clients(bus, n_tokens):
    clients = [bus.cli_spawn("submit", "--wait", "-n", str(n_tokens), f"client {i}") for i in range(50)]
    paths = [p.stdout.readline().strip() for p in clients]
    assert all(p.startswith(PATH + "/request/") for p in paths), paths
    leaving = clients[::3]
    for p in leaving:
        first_token(p)
        p.kill()
    expected = "".join(f" t{i}" for i in range(1, n_tokens + 1)) + "\n"
    for p in clients:
        if p in leaving:
            p.wait(timeout=60)
            continue
        rc, out, err = drain(p)
        assert rc == 0 and out == expected, (rc, out[:300], err)
    wait_for(lambda: engine_idle(bus) and bus.request_nodes() == [], "the request table to empty")
    return len(leaving)


def test_fifty_clients_a_third_leaving():
    with engine("[Limits]\nRequestsPerUser=64\n", step_ms=10) as (bus, d):
        idle = d.rss_kib()
        assert fifty_clients(bus, 200) == 17
        after_first = d.rss_kib()
        fifty_clients(bus, 200)
        after_second = d.rss_kib()
        print(f"    daemon RSS: idle {idle} KiB, after 50 clients {after_first} KiB, "
              f"after 50 more {after_second} KiB", flush=True)
        # No growth per round: what 50 clients took is given back.
        assert after_second <= after_first + 512, (idle, after_first, after_second)
        assert after_second <= idle + 2048, (idle, after_first, after_second)


def test_more_clients_than_the_bus_allows_match_rules():
    """The bus limits the match rules of a connection (512 on the system bus). The engine used
    to add one for each client it tracked, and sd-bus drops the connection when adding one
    fails: two users' connections took the engine off the bus. It watches clients leave with
    one rule now; here 48 clients hold requests where the bus allows 32 rules, then leave."""
    with engine("[Limits]\nRequestsPerUser=64\n", step_ms=20,
                bus_limits={"max_match_rules_per_connection": 32}) as (bus, d):
        clients = [submit_bg(bus, "-n", LONG, f"client {i}")[0] for i in range(48)]
        for p in clients:
            first_token(p)
        assert bus.name_has_owner() and d.proc.poll() is None, d.text()
        assert bus.props()["Running"] + bus.props()["QueuedReactive"] == 48
        for p in clients:
            p.kill()
            p.wait(timeout=10)
        wait_for(lambda: engine_idle(bus) and bus.request_nodes() == [], "the clients' requests to go")
        assert bus.name_has_owner() and d.proc.poll() is None, d.text()


# --- polkit ------------------------------------------------------------------------------------------

def polkit_standin(bus, *args):
    if not STANDIN:
        raise Skip("AXP_POLKIT_STANDIN is not set")
    p = bus.spawn([STANDIN, "--address", bus.address] + list(args), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_administration_asks_polkit():
    with engine() as (bus, d):
        pk = polkit_standin(bus, "--allow-uid", "0")
        r = bus.call("SetPolicy", "fcfs")
        assert r.rc == 0, r
        assert pk.stdout.readline().strip() == "check org.agentxpu.engine.manage uid=0 -> yes"
        assert bus.props()["Policy"] == "fcfs"

        other = bus.path("other.gguf")
        with open(other, "w") as f:
            f.write("x")
        r = bus.call("LoadModel", other)
        assert r.rc == 0, r
        assert bus.props()["Model"] == "other.gguf"
        pk.stdout.readline()
        r = bus.call("LoadModel", "/nonexistent/model.gguf")
        assert r.error_name == "org.agentxpu.Error.NotFound" and "/nonexistent/model.gguf" in r.error_message, r
        pk.stdout.readline()

        if is_root():
            r = bus.call("SetPolicy", "serial", user="nobody")
            assert r.error_name == "org.agentxpu.Error.AccessDenied", r
            assert pk.stdout.readline().strip() == "check org.agentxpu.engine.manage uid=65534 -> no"
            assert bus.props()["Policy"] == "fcfs"


def test_without_polkit_only_root_administers():
    if not is_root():
        raise Skip("needs root")
    with engine() as (bus, d):
        assert bus.call("SetPolicy", "serial").rc == 0
        r = bus.call("SetPolicy", "fcfs", user="nobody")
        assert r.error_name == "org.agentxpu.Error.AccessDenied", r
        assert "polkit is not running" in r.error_message, r
        assert bus.props()["Policy"] == "serial"


# --- the end of the daemon -----------------------------------------------------------------------------

def test_sigterm_answers_everything_and_exits_0():
    with engine(step_ms=20) as (bus, d):
        polkit_standin(bus, "--hang")
        streams = [submit_bg(bus, "-n", LONG, f"stream {i}")[0] for i in range(3)]
        for p in streams:
            first_token(p)
        complete = bus.spawn(["gdbus", "call", "--address", bus.address, "--dest", NAME, "--object-path", PATH,
                              "--method", f"{IFACE}.Complete", "long", "{'max_tokens': <uint32 1000000>}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        admin = bus.spawn(["gdbus", "call", "--address", bus.address, "--dest", NAME, "--object-path", PATH,
                           "--method", f"{IFACE}.SetPolicy", "fcfs"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: d.text().count("request from") == 4 and bus.props()["Running"] == 4,
                 "four requests running")
        # The SetPolicy call is with the stand-in (which holds it) or on its way: either way
        # it is pending and must be answered.
        time.sleep(0.3)

        assert d.stop(signal.SIGTERM) == 0, d.text()
        for p in streams:
            rc, out, err = drain(p)
            assert rc == 1 and "the request was cancelled" in err, (rc, out, err)
        out, err = complete.communicate(timeout=60)
        assert "org.agentxpu.Error.Cancelled" in err and "shutting down" in err, (out, err)
        out, err = admin.communicate(timeout=60)
        assert admin.returncode != 0 and "org.agentxpu.Error" in err, (out, err)
        assert "NoReply" not in err


def test_bus_activated_daemon_exits_when_idle():
    if not FAKE:
        raise Skip("AXP_ENGINE_FAKE is not set")
    bus = TestBus()
    try:
        model = bus.path("tiny.gguf")
        with open(model, "w") as f:
            f.write("x")
        conf = bus.path("engine.conf")
        with open(conf, "w") as f:
            f.write("[Daemon]\nExitIdleSec=1\n")
        with open(bus.path("services/org.agentxpu.Engine.service"), "w") as f:
            f.write(f"[D-BUS Service]\nName={NAME}\nExec={FAKE} --config {conf} --model {model}\n")
        for _ in range(2):
            r = bus.call("Complete", "wake up", "{'max_tokens': <uint32 2>}")
            assert r.rc == 0 and gvariant_first_string(r.out) == " t1 t2", r
            pid = bus.busctl("call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                             "GetConnectionUnixProcessID", "s", NAME).json["data"][0]
            wait_for(lambda: not bus.name_has_owner() and not os.path.exists(f"/proc/{pid}/status")
                     or _zombie(pid), "the idle daemon to exit")
    finally:
        bus.close()


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_under_valgrind_no_leaks():
    need_tools("valgrind")
    with engine("[Daemon]\nFinishedKeepSec=600\n", valgrind=True) as (bus, d):
        assert bus.call("Complete", "hello", "{'max_tokens': <uint32 3>}").rc == 0
        assert bus.call("Reactive", "hi", "{'colour': <1>}").error_name == "org.agentxpu.Error.InvalidArgument"
        p, path = submit_bg(bus, "-n", LONG, "leaving")
        first_token(p)
        p.kill()
        chat = bus.spawn([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-n", "3"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        chat.stdin.write("one\ntwo\n")
        chat.stdin.flush()
        assert chat.stdout.readline() == " t1 t2 t3\n"
        # Left running on purpose: SIGTERM must cancel it, close the flow and free everything.
        p2, path2 = submit_bg(bus, "-n", LONG, "still running at the end")
        first_token(p2)
        rc = d.stop(signal.SIGTERM)
        assert rc == 0, d.text()


def test_cli_status_and_cancel():
    with engine() as (bus, d):
        r = bus.cli("status")
        assert r.rc == 0, r
        for line in ("Model:    tiny.gguf", "Policy:   agentxpu", "Running:  0",
                     "Devices:  fake CPU (cpu, backend cpu, roles static+dynamic, 1.0 GiB)",
                     "CPU:      proactive work at idle priority, may take 62% of the CPU now "
                     "(25% at full pressure); CPU pressure 0.50 (fake)"):
            assert line in r.out, (line, r.out)
        g = bus.props()["CpuGuard"]
        assert {k: v["data"] for k, v in g.items()} == {
            "priority": "idle", "pressure": 0.5, "pressure_source": "fake", "proactive_share": 0.625,
            "share_setting": 0.25}, g
        p, path = submit_bg(bus, "-n", LONG, "watch me")
        first_token(p)
        r = bus.cli("status")
        assert re.search(rf"Yours:\s+{path}\s+proactive\s+decode", r.out), r.out
        r = bus.cli("submit", "-n", "3", "no streaming")
        lines = r.out.split("\n")
        assert r.rc == 0 and lines[0].startswith(PATH + "/request/") and lines[1:] == [" t1 t2 t3", ""], r
        r = bus.cli("cancel", PATH + "/request/999")
        assert r.rc == 1 and "Request 999 does not exist" in r.err, r
        assert bus.cli("cancel", path).rc == 0
        assert p.wait(timeout=60) == 1
    bus = TestBus()
    try:
        r = run([os.environ["AXP_CLI"], "ask", "--address", bus.address, "hello"])
        assert r.rc == 1 and "the engine is not running" in r.err, r
    finally:
        bus.close()


def test_cli_without_engine_says_what_to_do():
    # A bus with no engine on it and no service file to start one: as the system bus, the
    # engine is not installed; as a private bus, it is not running there.
    bus = TestBus()
    try:
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address)
        for args in (["ask", "hi"], ["status"], ["chat"]):
            p = subprocess.run([os.environ["AXP_CLI"], *args], env=env, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=60)
            assert p.returncode == 1 and p.stderr == (f"agentxpu {args[0]}: the engine is not installed: no service "
                                                      f"on the system bus provides {NAME}\n"), p
        r = bus.cli("submit", "hi")
        assert r.rc == 1 and r.err == (f"agentxpu submit: the engine is not running on {bus.address}; "
                                       f"start agentxpu-engine --address {bus.address}\n"), r
    finally:
        bus.close()


def test_cli_escapes_control_characters_on_a_terminal():
    need_tools("script")
    tok = "\a\x1b[7m\u009b"  # what the test double adds to each token for "controls"
    shown = "\\x07\\x1b[7m\\xc2\\x9b"
    with engine() as (bus, d):
        # into a pipe, unchanged
        r = bus.cli("ask", "-n", "2", "controls please")
        assert r.rc == 0 and r.out == f" t1{tok} t2{tok}\n", r
        # on a terminal (util-linux script's pseudo-terminal, which turns \n into \r\n), shown
        for args, want in ((["ask", "-n", "2", "controls please"], f" t1{shown} t2{shown}\n"),
                           (["submit", "-n", "2", "controls please"], f" t1{shown} t2{shown}\n"),
                           (["chat", "-n", "1"], f" t1{shown}\n")):
            cmd = [os.environ["AXP_CLI"], args[0], "--address", bus.address] + args[1:]
            # chat reads its line through the terminal, which echoes it
            p = subprocess.run(["script", "-qec", " ".join(f"'{a}'" for a in cmd), "/dev/null"],
                               input=b"controls\n" if args[0] == "chat" else b"", capture_output=True,
                               timeout=120)
            out = p.stdout.decode().replace("\r\n", "\n")
            if args[0] == "submit":
                out = out.split("\n", 1)[1]  # after the request's path
            if args[0] == "chat":
                out = out.replace("> ", "")
                want = "controls\n" + want  # the terminal echoes the line typed
            assert p.returncode == 0 and out == want, (args, p, out)


def test_cli_chat_refuses_a_line_that_is_not_utf8_and_goes_on():
    with engine() as (bus, d):
        p = subprocess.run([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-n", "2"],
                           input="one\n".encode() + b"caf\xe9 au lait\n" + "two\n".encode(),
                           capture_output=True, timeout=120)
        # both good turns answered; the bad line is refused, saying where, and not sent
        assert p.stdout == b" t1 t2\n t1 t2\n", p
        assert p.stderr == b"agentxpu chat: line 2 is not valid UTF-8 (byte 0xe9 at offset 3)\n", p
        assert p.returncode == 1, p


def test_gdbus_example_client_streams():
    example = os.environ.get("AXP_GDBUS_EXAMPLE")
    if not example:
        raise Skip("the GDBus example is not built (no GIO)")
    with engine() as (bus, d):
        r = run([example, "--address", bus.address, "-n", "12", "--temperature", "0", "hello"])
        assert r.rc == 0, r
        assert r.out == "".join(f" t{i}" for i in range(1, 13)) + "\n", r.out
        r = run([example, "--address", bus.address, "fail please"])
        assert r.rc == 1 and "error: the fake engine was asked to fail" in r.err, r
        r = run([example, "--address", bus.address, "-n", "0", "--temperature", "-0.5", ""])
        assert r.rc == 1 and "The prompt is empty" in r.err, r


def test_ctrl_c_cancels_the_request():
    with engine() as (bus, d):
        p = bus.cli_spawn("ask", "-v", "-n", LONG, "tell me everything")
        assert p.stdout.read(1)
        p.send_signal(signal.SIGINT)
        rc, out, err = drain(p)
        assert rc == 1 and "the request was cancelled" in err and "finished: cancelled" in err, (rc, err)
        path = re.search(r"request (\S+)", err).group(1)
        assert f"{path} finished: cancelled" in d.text()


def test_ctrl_c_cancels_while_the_engine_is_silent():
    """Ctrl-C cancels at once though nothing comes on the bus to wake the command: the test
    double tells nothing of a "silent" request until it is cancelled. Each command is tried
    with the Ctrl-C sent while it waits, and with it landing just before it waits
    (sigint-before-wait.c): there the command used to check for a Ctrl-C, then sleep on the
    bus until its next message, which never came."""
    shim = os.environ.get("AXP_SIGINT_BEFORE_WAIT")
    if not shim:
        raise Skip("AXP_SIGINT_BEFORE_WAIT is not set (run through meson test)")

    def ended(p, what):
        try:
            rc = p.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise AssertionError(f"{what}: still running {WAIT:.0f} s after Ctrl-C")
        return rc, p.stdout.read(), p.stderr.read()

    with engine() as (bus, d):
        for cmd, want_rc in ((["ask", "-v"], 1), (["submit", "-v", "--wait"], 1), (["chat", "-v"], 0)):
            for before_wait in (False, True):
                what = f"{cmd[0]} ({'just before' if before_wait else 'while'} it waits)"
                argv = [os.environ["AXP_CLI"], cmd[0], "--address", bus.address] + cmd[1:]
                if cmd[0] != "chat":
                    argv.append("silent please")
                # chat's first wait is at its prompt (below): the turn's comes second
                env = dict(os.environ, LD_PRELOAD=shim, AXP_SIGINT_SKIP="1" if cmd[0] == "chat" else "0") \
                    if before_wait else None
                p = bus.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
                if cmd[0] == "chat":
                    p.stdin.write("silent please\n")
                    p.stdin.flush()
                line = p.stderr.readline()
                if cmd[0] == "chat":
                    line = p.stderr.readline()  # after "flow PATH"
                m = re.match(r"request (\S+)$", line.strip())
                assert m, (what, line)
                if not before_wait:
                    p.send_signal(signal.SIGINT)
                if cmd[0] == "chat":
                    wait_for(lambda: f"{m.group(1)} finished: cancelled" in d.text(), f"{what}: the cancel")
                    p.stdin.close()  # the turn was cancelled, not the chat: it ends at Ctrl-D
                rc, out, err = ended(p, what)
                assert rc == want_rc and "the request was cancelled" in err, (what, rc, out, err)
                assert f"{m.group(1)} finished: cancelled" in d.text(), what
        # at chat's prompt, a Ctrl-C ends the chat; landing just before the read, it used to
        # wait for a line that may never come
        p = bus.spawn([os.environ["AXP_CLI"], "chat", "--address", bus.address, "-v"], stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                      env=dict(os.environ, LD_PRELOAD=shim, AXP_SIGINT_SKIP="0"))
        line = p.stderr.readline()
        assert line.startswith("flow "), line
        rc, out, err = ended(p, "chat (at its prompt)")
        assert rc == 0 and out == "" and err == "", (rc, out, err)


def test_startup_errors_are_clear():
    if not FAKE:
        raise Skip("AXP_ENGINE_FAKE is not set")
    bus = TestBus()
    try:
        conf = bus.path("bad.conf")
        with open(conf, "w") as f:
            f.write("[Limits]\nRequestsPerUser=lots\n")
        for args, message in (
                (["--config", conf], f"{conf}:2: RequestsPerUser= must be a whole number above 0, got 'lots'"),
                (["--config", bus.path("missing.conf")], "Cannot open " + bus.path("missing.conf")),
                (["--config", "/dev/null", "--model", "/nonexistent.gguf", "--address", bus.address],
                 "Cannot start the engine: Cannot open model"),
                (["--policy", "fastest"], "--policy must be agentxpu, fcfs or serial"),
                (["--exit-idle-time", "soon"], "--exit-idle-time wants seconds"),
                (["--config", "/dev/null", "--address", "unix:path=/nonexistent/bus"], "Failed to connect to unix:path=/nonexistent/bus")):
            r = run([FAKE] + args)
            assert r.rc == 1 and message in r.err, (args, r)
        # A second instance cannot take the name from the first, and says so before it
        # loads a model (this one would not load).
        model = bus.path("tiny.gguf")
        with open(model, "w") as f:
            f.write("x")
        d = Daemon(bus, FAKE, args=["--model", model])
        r = run([FAKE, "--config", "/dev/null", "--address", bus.address, "--model", "/nonexistent.gguf"])
        assert r.rc == 1 and r.err == "Another agentxpu-engine already owns org.agentxpu.Engine on this bus\n", r
        assert d.stop() == 0
    finally:
        bus.close()


TESTS = [
    test_introspection_matches_xml,
    test_complete_replies_with_text_and_stats,
    test_embed_replies_and_its_caller_may_leave,
    test_tokens_unicast_in_order_and_bystander_sees_none,
    test_tokens_are_whole_characters_and_no_byte_is_dropped,
    test_client_that_leaves_has_its_request_cancelled_and_freed,
    test_finished_request_is_kept_for_its_owner_then_dropped,
    test_engine_error_is_reported,
    test_calls_to_missing_paths_answer_not_found,
    test_other_user_cannot_read_or_cancel,
    test_other_user_cannot_use_or_close_a_flow,
    test_chat_goes_on_after_a_refused_line,
    test_ask_whose_output_is_gone_cancels,
    test_flows,
    test_per_user_limit_answers_busy,
    test_context_overflow,
    test_bad_inputs,
    test_fifty_clients_a_third_leaving,
    test_more_clients_than_the_bus_allows_match_rules,
    test_administration_asks_polkit,
    test_without_polkit_only_root_administers,
    test_sigterm_answers_everything_and_exits_0,
    test_bus_activated_daemon_exits_when_idle,
    test_under_valgrind_no_leaks,
    test_cli_status_and_cancel,
    test_cli_without_engine_says_what_to_do,
    test_cli_chat_refuses_a_line_that_is_not_utf8_and_goes_on,
    test_cli_escapes_control_characters_on_a_terminal,
    test_gdbus_example_client_streams,
    test_ctrl_c_cancels_the_request,
    test_ctrl_c_cancels_while_the_engine_is_silent,
    test_startup_errors_are_clear,
]

if __name__ == "__main__":
    if sys.argv[1:] == ["--bad-inputs-table"]:
        with engine("[Limits]\nMaxTokens=4096\n") as (bus, d):
            print_bad_inputs_table(bus)
    else:
        main(TESTS)
