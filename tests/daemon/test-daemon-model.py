#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The real agentxpu-engine on a private bus, serving a small model made by
`agentxpu mkmodel`: what a desktop sees. Skips (77) where the daemon is not built (it needs
the engine's scheduler) or the command line cannot make a model.

Run one test: test-daemon-model.py test_complete_matches_generate. Print the real daemon's
answers to the bad inputs, the table in README.md and docs/dbus-api.md (under TABLE_CONFIG):
meson test -C build test-daemon-model --test-args=--bad-inputs-table -v"""

import atexit
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bustest import (BAD_CONSTRAINTS, NAME, PATH, REQ_IFACE, WAIT, Daemon, Skip, TestBus,  # noqa: E402
                     check_bad_inputs, drain,
                     gvariant_first_string, is_root, main, need_tools, print_bad_inputs_table, run, wait_for)

DAEMON = os.environ.get("AXP_ENGINE_DAEMON", "")
CLI = os.environ.get("AXP_CLI", "")
_model = None


def model():
    """A small synthetic model (seeded random weights), made once per run, readable by all."""
    global _model
    if _model:
        return _model
    if not DAEMON:
        raise Skip("agentxpu-engine is not built (the engine's scheduler, engine/engine.c, is missing)")
    folder = tempfile.mkdtemp(prefix="axp-test-model-")
    atexit.register(shutil.rmtree, folder, True)
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "tiny.gguf")
    # Large enough that a long request takes seconds, and never ending on its own (--no-eog),
    # so the tests that watch a request in flight do not see it end first; small enough to
    # make in a second.
    r = run([CLI, "mkmodel", "-o", path, "--seed", "7", "--dim", "512", "--layers", "4", "--heads", "8",
             "--kv-heads", "4", "--ffn", "1536", "--ctx", "4096", "--no-eog"])
    if r.rc != 0:
        raise Skip(f"agentxpu mkmodel failed: {r.err.strip()}")
    _model = path
    return path


def second_model():
    """Another model of the same shape, with other weights and its own name."""
    path = os.path.join(os.path.dirname(model()), "second.gguf")
    if not os.path.exists(path):
        r = run([CLI, "mkmodel", "-o", path, "--seed", "8", "--dim", "512", "--layers", "4", "--heads", "8",
                 "--kv-heads", "4", "--ffn", "1536", "--ctx", "4096", "--no-eog", "--name", "second-model"])
        if r.rc != 0:
            raise Skip(f"agentxpu mkmodel failed: {r.err.strip()}")
    return path


@contextlib.contextmanager
def engine(config="", args=(), model_path=None):
    m = model_path or model()
    bus = TestBus()
    try:
        d = Daemon(bus, DAEMON, config=config, args=["--model", m] + list(args),
                   env={"AGENTXPU_LOG_LEVEL": "debug"})
        yield bus, d
        if d.proc.poll() is None:
            assert d.stop() == 0, d.text()
    finally:
        bus.close()


def submit_bg(bus, *args):
    p = bus.cli_spawn("submit", "--wait", *args)
    path = p.stdout.readline().strip()
    assert path.startswith(PATH + "/request/"), path
    return p, path


def engine_idle(bus):
    p = bus.props()
    return p["Running"] == 0 and p["QueuedReactive"] == 0 and p["QueuedProactive"] == 0


GREEDY = "{'max_tokens': <uint32 8>, 'temperature': <0.0>, 'raw': <true>}"

# The settings of the bad-input table: a 64-token context, prompts of at most 4096 bytes.
TABLE_CONFIG = "[Engine]\nContextSize=64\n[Limits]\nPromptBytes=4096\nMaxTokens=4096\n"


def test_complete_matches_generate():
    with engine() as (bus, d):
        r = bus.call("Complete", "Hello", GREEDY)
        assert r.rc == 0, r
        text = gvariant_first_string(r.out)
        assert "'generated_tokens': <uint32 8>" in r.out or "'reason': <'stop'>" in r.out, r.out
        gen = run([CLI, "generate", "-m", model(), "-p", "Hello", "--raw", "-n", "8", "--temperature", "0"])
        if gen.rc != 0 and "unknown command" in gen.err:
            raise Skip("agentxpu generate is not in this build")
        assert gen.rc == 0, gen
        assert gen.out.rstrip("\n") == text, (gen.out, text)


def test_stop_word():
    """Option stop: the answer ends before the first stop string it holds, and the stats name
    that one (stop_word); an answer that no stop string ended has none."""
    with engine() as (bus, d):
        r = bus.call("Complete", "Hello", GREEDY)
        assert r.rc == 0 and "'stop_word'" not in r.out, r
        text = gvariant_first_string(r.out)
        at = next((i for i in range(1, len(text) - 1) if text[i:i + 2].isalnum() and text[i:i + 2].isascii()), None)
        if at is None:
            raise Skip(f"no two letters or digits in the answer {text!r}")
        word = text[at:at + 2]
        first = text.find(word)
        r = bus.call("Complete", "Hello", GREEDY[:-1] + f", 'stop': <['zzzz', '{word}', 'qqqq']>}}")
        assert r.rc == 0, r
        assert gvariant_first_string(r.out) == text[:first], (r.out, text, word)
        assert f"'stop_word': <'{word}'>" in r.out and "'reason': <'stop'>" in r.out, r.out


def embedding_of(out):
    """The numbers of Embed's reply as gdbus prints it: ([x, ...], {stats})"""
    return [float(x) for x in out[out.index("[") + 1:out.index("]")].split(",")]


def test_embed():
    """Embed (agentxpu embed): the text's embedding, the model's width of numbers, unit length
    unless normalize is false, the same for the same text and another for another, a proactive
    one too; the command prints the method's numbers. An empty text, options only an answer
    takes, an unknown pooling and a text beyond the context are refused (truncate cuts it)."""
    text = "The cat sat on the mat."
    with engine(config="[Engine]\nContextSize=64\n") as (bus, d):
        r = bus.call("Embed", text, "{}")
        assert r.rc == 0, r
        v = embedding_of(r.out)
        assert len(v) == 512, len(v)
        assert abs(sum(x * x for x in v) - 1) < 1e-4, sum(x * x for x in v)
        assert "'reason': <'stop'>" in r.out and "'generated_tokens': <uint32 0>" in r.out, r.out
        again = bus.call("Embed", text, "{'priority': <'proactive'>}")
        assert again.rc == 0 and embedding_of(again.out) == v, again
        other = embedding_of(bus.call("Embed", "A dog ran in the park.", "{}").out)
        assert other != v
        raw = bus.call("Embed", text, "{'normalize': <false>, 'pooling': <'mean'>}")
        assert raw.rc == 0, raw
        w = embedding_of(raw.out)
        n = sum(x * x for x in w) ** 0.5
        assert abs(n - 1) > 1e-3 and all(abs(a - b / n) < 1e-5 for a, b in zip(v, w)), n
        last = embedding_of(bus.call("Embed", text, "{'pooling': <'last'>}").out)
        assert last != v
        # the command line: the same numbers, as JSON
        r = bus.cli("embed", text)
        assert r.rc == 0, r
        assert all(abs(a - b) < 1e-7 for a, b in zip(json.loads(r.out), v)), r.out[:200]
        r = bus.cli("embed", "--pooling", "last", "--proactive", "--stats", "-p", text)
        assert r.rc == 0 and "tokens" in r.err, r
        assert all(abs(a - b) < 1e-7 for a, b in zip(json.loads(r.out), last)), r.out[:200]
        # refused
        for args, what in [((text, "{'max_tokens': <uint32 8>}"), "Unknown option 'max_tokens'"),
                           ((text, "{'pooling': <'best'>}"), "pooling"),
                           ((text, "{'normalize': <'yes'>}"), "must be of type b"),
                           (("", "{}"), "The text is empty")]:
            r = bus.call("Embed", *args)
            assert r.rc != 0 and what in r.err, (args, r)
        long = "word " * 200
        r = bus.call("Embed", long, "{}")
        assert r.rc != 0 and "context" in r.err, r
        r = bus.call("Embed", long, "{'truncate': <true>}")
        assert r.rc == 0 and "'prompt_cut': <true>" in r.out and "'prompt_tokens': <uint32 63>" in r.out, r.out
        r = bus.cli("embed", "--truncate", "--stats", long)
        assert r.rc == 0 and "cut to fit" in r.err, r
        r = bus.cli("embed", "--pooling", "best", text)
        assert r.rc == 2 and "--pooling" in r.err, r
    # in-process (-m): the engine's numbers without the service
    r = run([CLI, "embed", "-m", model(), text])
    assert r.rc == 0 and all(abs(a - b) < 1e-7 for a, b in zip(json.loads(r.out), v)), r.out[:200]
    r = run([CLI, "embed", "-m", model(), "--pooling", "last", "--stats", text])
    assert r.rc == 0 and "last pooling" in r.err, r
    assert all(abs(a - b) < 1e-7 for a, b in zip(json.loads(r.out), last)), r.out[:200]
    r = run([CLI, "embed", "-m", model(), "--proactive", text])
    assert r.rc == 2 and "-m runs the model here" in r.err, r
    r = run([CLI, "embed", "--threads", "2", text])
    assert r.rc == 2 and "go with -m" in r.err, r
    # a file that names its pooling (mkmodel --pooling) is pooled so by default
    path = os.path.join(os.path.dirname(model()), "last.gguf")
    r = run([CLI, "mkmodel", "-o", path, "--arch", "qwen3", "--pooling", "last", "--seed", "5"])
    assert r.rc == 0, r
    r = run([CLI, "embed", "-m", path, "--stats", text])
    assert r.rc == 0 and "(last pooling)" in r.err, r
    r = run([CLI, "mkmodel", "-o", path, "--pooling", "model"])
    assert r.rc == 2 and "unknown --pooling 'model'" in r.err, r


def test_forget_prompt_cache():
    """ForgetPromptCache (agentxpu forget): what the prompt cache keeps of the caller's requests
    goes, and their next request prefills all of its prompt; another user's call drops none of
    it."""
    prompt = "The prompt cache keeps what a request prefilled, so that the next one that begins the same way does not."

    def prefill():
        r = bus.call("Complete", prompt, GREEDY)
        assert r.rc == 0, r
        st = dict(re.findall(r"'(prompt_tokens|prefill_tokens)': <uint32 (\d+)>", r.out))
        return int(st["prefill_tokens"]), int(st["prompt_tokens"])

    with engine() as (bus, d):
        done, n = prefill()
        assert done == n > 16, (done, n)
        assert prefill() == (1, n)
        assert bus.props()["KVMemoryCached"] > 0
        r = bus.cli("forget", user="nobody")
        assert r.rc == 0 and r.out == "0 cached prompts dropped\n", r
        assert bus.props()["KVMemoryCached"] > 0
        r = bus.cli("forget")
        assert r.rc == 0 and r.out == "1 cached prompt dropped\n", r
        assert bus.props()["KVMemoryCached"] == 0
        assert prefill() == (n, n)
        r = bus.call("ForgetPromptCache")
        assert r.rc == 0 and r.out.strip() == "(uint32 1,)", r


def test_longrope_follows_the_engine_context():
    """A LongRoPE model (Phi-3.5/Phi-4-mini's scaling) rotates with its short factors within its
    original context and its long ones past it: the engine chooses by its ContextSize, as
    llama.cpp does by its -c. At the default context (4096, the original one here) the daemon
    answers as `generate`; at ContextSize=8192 it takes the long factors and answers otherwise."""
    path = os.path.join(os.path.dirname(model()), "longrope.gguf")
    r = run([CLI, "mkmodel", "-o", path, "--arch", "phi3", "--seed", "9", "--dim", "256", "--layers", "2",
             "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--ctx", "8192", "--longrope", "4096",
             "--rope-dim", "48", "--no-eog"])
    assert r.rc == 0, r
    prompt = "The quick brown fox jumps over the lazy dog. " * 12
    opts = "{'max_tokens': <uint32 12>, 'temperature': <0.0>, 'raw': <true>}"
    gen = run([CLI, "generate", "-m", path, "-p", prompt, "--raw", "-n", "12", "--temperature", "0"])
    assert gen.rc == 0, gen
    answers = {}
    for ctx in ("", "[Engine]\nContextSize=8192\n"):
        with engine(ctx, model_path=path) as (bus, d):
            r = bus.call("Complete", prompt, opts)
            assert r.rc == 0, r
            answers[ctx] = gvariant_first_string(r.out)
    assert answers[""] == gen.out.rstrip("\n"), (answers, gen.out)
    assert answers["[Engine]\nContextSize=8192\n"] != answers[""], answers


def test_no_byte_of_the_answer_is_dropped():
    """The tests' model, having random weights, generates byte tokens that make no UTF-8 (this
    answer holds a NUL and many stray bytes). The daemon's text is the command line's with
    each NUL, which a D-Bus string cannot carry, as U+FFFD: streamed or whole, nothing is
    dropped."""
    def output(cmd):
        # bytes, not text: a "\r" of the answer must stay one
        p = subprocess.run(cmd, capture_output=True, timeout=WAIT)
        assert p.returncode == 0, p
        return p.stdout.decode()

    # with an F32 KV cache: the answer of the F16 one holds no NUL
    gen = output([CLI, "generate", "-m", model(), "-p", "Hello", "--raw", "-n", "200", "--temperature", "0",
                  "--kv-type", "f32"])
    assert "\0" in gen and "\ufffd" in gen, "the answer no longer shows what this test is about"
    want = gen.replace("\0", "\ufffd")
    with engine("[Engine]\nKVType=f32\n") as (bus, d):
        r = bus.call("Complete", "Hello", GREEDY.replace("uint32 8", "uint32 200"))
        assert r.rc == 0 and gvariant_first_string(r.out) + "\n" == want, (r.out, want)
        asked = output([CLI, "ask", "--address", bus.address, "-n", "200", "--temperature", "0", "--raw", "Hello"])
        assert asked == want, (asked, want)


def test_q8_0_kv_cache():
    """KVType=q8_0 (llama.cpp's -ctk q8_0 -ctv q8_0): the daemon answers as `generate --kv-type
    q8_0`; a model whose heads are not whole blocks of 32 is refused by LoadModel in one line,
    and the engine keeps its model."""
    gen = run([CLI, "generate", "-m", model(), "-p", "Hello", "--raw", "-n", "8", "--temperature", "0",
               "--kv-type", "q8_0"])
    assert gen.rc == 0, gen
    with engine("[Engine]\nKVType=q8_0\n") as (bus, d):
        r = bus.call("Complete", "Hello", GREEDY)
        assert r.rc == 0 and gvariant_first_string(r.out) == gen.out.rstrip("\n"), (r.out, gen.out)
        if not is_root():
            raise Skip("LoadModel needs root (administrative call without polkit)")
        narrow = bus.path("heads48.gguf")
        assert run([CLI, "mkmodel", "--head-dim", "48", "-o", narrow]).rc == 0
        os.chmod(narrow, 0o644)
        r = bus.call("LoadModel", narrow)
        assert r.error_name == "org.agentxpu.Error.InvalidArgument" and \
            "a q8_0 KV cache needs a head size that is a multiple of 32; this model's is 48" in r.error_message, r
        assert bus.call("Complete", "Hello", GREEDY).rc == 0


def test_reactive_stream_in_order_unicast():
    need_tools("dbus-monitor")
    if not is_root():
        raise Skip("dbus-monitor needs root")
    with engine() as (bus, d):
        complete = gvariant_first_string(bus.call("Complete", "Hello", GREEDY.replace("8", "16")).out)
        mon = bus.spawn(["dbus-monitor", "--address", bus.address], stdout=subprocess.PIPE, text=True)
        by = bus.spawn(["gdbus", "monitor", "--address", bus.address, "--dest", NAME],
                       stdout=subprocess.PIPE, text=True)
        mon.stdout.readline()
        by.stdout.readline()
        r = bus.cli("ask", "-n", "16", "--temperature", "0", "--raw", "-v", "Hello")
        assert r.rc == 0, r
        assert r.out == complete + "\n", (r.out, complete)
        path = re.search(r"request (\S+)", r.err).group(1)
        assert bus.cli("ask", "-n", "1", "sync").rc == 0
        mon.terminate()
        by.terminate()
        mon_out, by_out = mon.stdout.read(), by.stdout.read()
    signals = re.findall(rf"signal .*-> destination=(\S+) .*path={re.escape(path)}; interface=\S+; member=(\w+)\n"
                         r"(?:\s+string \"((?:[^\"\\]|\\.)*)\")?", mon_out)
    assert signals and signals[-1][1] == "Finished", signals[-3:]
    assert len({dest for dest, _, _ in signals}) == 1, "every signal goes to the one requester"
    assert "Token" not in by_out and "Finished" not in by_out, by_out


def test_other_uid_cannot_cancel_or_read():
    if not is_root():
        raise Skip("needs root to run the second client as nobody")
    with engine() as (bus, d):
        p, path = submit_bg(bus, "-n", "4000", "The story goes on")
        p.stdout.read(1)
        for method, args in ((f"{REQ_IFACE}.Cancel", ()),
                             ("org.freedesktop.DBus.Properties.Get", (REQ_IFACE, "Stats"))):
            r = bus.gdbus(path, method, *args, user="nobody")
            assert r.error_name == "org.agentxpu.Error.AccessDenied", r
        assert p.poll() is None
        assert bus.cli("cancel", path).rc == 0
        rc, out, err = drain(p)
        assert rc == 1 and "cancelled" in err, (rc, err)


def test_fifty_clients_a_third_leaving():
    with engine("[Limits]\nRequestsPerUser=64\n") as (bus, d):
        def round_():
            clients = [bus.cli_spawn("submit", "--wait", "-n", "24", "--temperature", "0", f"Client number {i}:")
                       for i in range(50)]
            for p in clients:
                assert p.stdout.readline().startswith(PATH + "/request/")
            leaving = clients[::3]
            for p in leaving:
                p.stdout.read(1)
                p.kill()
            for p in clients:
                if p in leaving:
                    p.wait(timeout=60)
                    continue
                rc, out, err = drain(p)
                assert rc == 0 and out.strip(), (rc, out, err)
            wait_for(lambda: engine_idle(bus) and bus.request_nodes() == [], "the request table to empty")
        assert bus.call("Complete", "warm up", "{'max_tokens': <uint32 4>}").rc == 0
        idle = d.rss_kib()
        round_()
        first = d.rss_kib()
        # A leak grows the daemon with every round and never gives the memory back. Without
        # one, RSS still wanders: the allocator's arenas and a loaded machine's timing leave a
        # round up to ~3 MiB above the one before (measured over 20 rounds on a busy machine).
        # So a later round must come back within 2 MiB of the first once in four rounds,
        # which a leak of one KV cache per request (about 6 MiB a round here) never does.
        later = []
        for _ in range(4):
            round_()
            later.append(d.rss_kib())
            if later[-1] <= first + 2048:
                break
        print(f"    daemon RSS: idle {idle} KiB, after 50 clients {first} KiB, after each 50 more {later} KiB",
              flush=True)
        assert min(later) <= first + 2048, (idle, first, later)
        # the prompt cache keeps some finished requests' KV caches: that much more is held
        cached = bus.props()["KVMemoryCached"] // 1024
        assert 0 < cached and min(later) <= idle + 8192 + cached, (idle, first, later, cached)


def generated(bus, path):
    st = bus.busctl("get-property", NAME, path, REQ_IFACE, "Stats")
    assert st.rc == 0, st
    return st.json["data"]["generated_tokens"]["data"]


def test_reactive_overtakes_busy_proactive_work():
    with engine() as (bus, d):
        background = [submit_bg(bus, "-n", "3000", "--temperature", "0", f"Background job {i}") for i in range(4)]
        # Well into their decoding, so the engine is busy with them.
        wait_for(lambda: all(generated(bus, path) >= 20 for _, path in background), "proactive work to get going")
        ask = bus.cli_spawn("ask", "-n", "8", "--temperature", "0", "Quick question")
        assert ask.stdout.read(1), "the reactive request produced no token"
        # At the reactive request's first token, how far is the proactive work?
        progress = [generated(bus, path) for _, path in background]
        rc, out, err = drain(ask)
        assert rc == 0, err
        print(f"    proactive tokens generated when the reactive one began: {progress} of 3000", flush=True)
        assert all(p.poll() is None for p, _ in background), "proactive work finished first"
        assert all(n < 1500 for n in progress), progress
        for p, _ in background:
            p.kill()


def test_gdbus_example_client():
    example = os.environ.get("AXP_GDBUS_EXAMPLE")
    if not example:
        raise Skip("the GDBus example is not built (no GIO)")
    with engine() as (bus, d):
        complete = gvariant_first_string(bus.call("Complete", "Hello", GREEDY).out)
        r = run([example, "--address", bus.address, "-n", "8", "--temperature", "0", "--raw", "Hello"])
        assert r.rc == 0, r
        assert r.out == complete + "\n", (r.out, complete)


def chat_turns(bus, lines):
    """[(prompt_tokens, prefill_tokens)] of each turn of one `agentxpu chat`."""
    chat = bus.spawn([CLI, "chat", "--address", bus.address, "-v", "-n", "6", "--temperature", "0"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert chat.stderr.readline().startswith("flow ")
    stats = []
    for line in lines:
        chat.stdin.write(line + "\n")
        chat.stdin.flush()
        chat.stderr.readline()
        m = re.match(r"finished: \w+, prompt (\d+) tokens \((\d+) prefilled\)", chat.stderr.readline())
        assert m
        stats.append((int(m.group(1)), int(m.group(2))))
    chat.stdin.close()
    assert chat.wait(timeout=120) == 0
    return stats


def test_flow_turn_prefills_only_new_tokens():
    with engine() as (bus, d):
        long_first = "Tell me about the sea, " + " ".join(["the waves and the tide"] * 12) + "."
        a = chat_turns(bus, [long_first, "And the mountains?"])
        b = chat_turns(bus, ["Hi.", "And the mountains?"])
    print(f"    (prompt, prefilled) per turn: long first turn {a}, short first turn {b}", flush=True)
    # The first turns differ by dozens of tokens; the second turns prefill the same few,
    # because the conversation before them stays in the flow's KV cache.
    assert a[0][1] > b[0][1] + 40, (a, b)
    assert a[1][1] == b[1][1], (a, b)
    assert a[1][1] < a[0][1], (a, b)


def test_prompt_cache_is_per_user():
    """The prompt cache serves the user whose requests filled it alone: what a cache saves
    shows in a request's Stats (prefill_tokens) and in its time to first token, so another
    user's request with the same prompt prefills it whole."""
    prompt = "Tell me about the sea, " + " ".join(["the waves and the tide"] * 12) + "."

    def prefilled(user=None):
        r = bus.call("Complete", prompt, "{'max_tokens': <uint32 4>, 'temperature': <0.0>}", user=user)
        assert r.rc == 0, r
        m = re.search(r"'prompt_tokens': <uint32 (\d+)>, 'prefill_tokens': <uint32 (\d+)>", r.out)
        return int(m.group(1)), int(m.group(2)), gvariant_first_string(r.out)

    with engine() as (bus, d):
        first = prefilled()
        assert first[0] == first[1], first
        other = prefilled("nobody")
        assert other == first, (other, first)
        again = prefilled()
        assert again == (first[0], 1, first[2]), (again, first)
        assert prefilled("nobody") == (first[0], 1, first[2])
        assert bus.props()["KVMemoryCached"] > 0
        # agentxpu status tells what requests hold apart from what the cache keeps
        r = bus.cli("status")
        assert r.rc == 0 and re.search(r"^KV cache: 0 bytes of [0-9.]+ [MG]iB in use \(KVMemory=\), "
                                       r"[0-9.]+ [KMG]iB more kept by the prompt cache$", r.out, re.M), r.out


def token_count(text, bos=True):
    r = run([CLI, "tokenize", "-m", model(), "-p", text, "--json"] + ([] if bos else ["--no-bos"]))
    assert r.rc == 0, r
    return len(json.loads(r.out)["tokens"])


def prompt_tokens(r):
    assert r.rc == 0, r
    m = re.search(r"'prompt_tokens': <uint32 (\d+)>", r.out)
    assert m, r.out
    return int(m.group(1))


def llama3(*turns, gen=True):
    """Turns (role, content) as the Llama 3 template renders them: the test model's."""
    text = "".join(f"<|start_header_id|>{r}<|end_header_id|>\n\n{c}<|eot_id|>" for r, c in turns)
    return text + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if gen else "")


def test_earlier_turns_go_through_the_chat_template():
    # the whole conversation rendered in its roles, the prompt as the user's last turn
    turns = "[('system', 'Be brief.'), ('user', 'Hi.'), ('assistant', 'Hello!')]"
    full = llama3(("system", "Be brief."), ("user", "Hi."), ("assistant", "Hello!"), ("user", "And you?"))
    with engine() as (bus, d):
        r = bus.call("Complete", "And you?", f"{{'max_tokens': <uint32 2>, 'messages': <{turns}>}}")
        assert prompt_tokens(r) == token_count(full), (r.out, token_count(full))
        # what the engine refuses
        r = bus.call("Complete", "hi", "{'raw': <true>, 'messages': <[('user', 'a')]>}")
        assert r.error_name == "org.agentxpu.Error.InvalidArgument", r
        assert "Earlier turns need the chat template (not raw)" in r.error_message, r
        # a flow's later turn with earlier turns of its own: tests/http/test-http.py
        # (test_conversation_reuses_its_flow), through a connection that keeps the flow


def test_sigterm_cancels_running_requests_and_exits_0():
    with engine() as (bus, d):
        streams = [submit_bg(bus, "-n", "4000", f"Long story {i}")[0] for i in range(2)]
        for p in streams:
            p.stdout.read(1)
        assert d.stop() == 0, d.text()
        for p in streams:
            rc, out, err = drain(p)
            assert rc == 1 and "cancelled" in err, (rc, err)


def test_cli_ends_when_the_engine_dies_mid_stream():
    """A killed engine sends no Finished: ask and submit --wait end with an error, not a hang."""
    with engine() as (bus, d):
        # The proactive one streams before the reactive one comes (which would run first and,
        # on a fast machine, end before the kill), then both stream together.
        streams = [submit_bg(bus, "-n", "4000", "Long story")[0]]
        streams[0].stdout.read(1)
        streams.append(bus.cli_spawn("ask", "-n", "4000", "Another long story"))
        streams[1].stdout.read(1)
        d.proc.kill()
        d.proc.wait()
        for p in streams:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                raise AssertionError("the command line still waits for a dead engine")
            rc, out, err = drain(p)
            assert rc == 1 and "left the bus" in err, (p.args, rc, err)


def test_load_model_refuses_a_corrupt_file_and_keeps_serving():
    """LoadModel of a truncated GGUF answers an error naming the file; the engine keeps its
    model and still answers (no polkit on this bus: root is authorized)."""
    if not is_root():
        raise Skip("needs root (administrative call without polkit)")
    with engine() as (bus, d):
        bad = bus.path("cut.gguf")
        with open(model(), "rb") as src, open(bad, "wb") as dst:
            dst.write(src.read(200000))
        os.chmod(bad, 0o644)
        r = bus.call("LoadModel", bad)
        assert r.error_name == "org.agentxpu.Error.InvalidArgument" and "cut.gguf" in r.error_message, r
        assert bus.props()["Model"], "the engine lost its model"
        r = bus.call("Complete", "Hello", GREEDY)
        assert r.rc == 0, r


def test_devices_carry_their_memory():
    """The Devices property gives the CPU the machine's memory, as `agentxpu devices` does."""
    with engine() as (bus, d):
        devices = bus.props()["Devices"]
        cpu = [props for name, kind, props in devices if kind == "cpu"]
        assert cpu, devices
        with open("/proc/meminfo") as f:
            total = int(re.search(r"MemTotal:\s+(\d+) kB", f.read()).group(1)) * 1024
        memory = cpu[0]["memory_bytes"]["data"]
        assert abs(memory - total) <= total // 100, (memory, total)


def test_second_engine_leaves_before_loading_its_model():
    """A second agentxpu-engine on the bus says the name is taken and exits 1, without
    loading its model first: one that does not exist is not even looked at, and a real one
    is never reported loaded."""
    with engine() as (bus, d):
        for m in ("/nonexistent/model.gguf", model()):
            r = run([DAEMON, "--address", bus.address, "--config", "/dev/null", "--model", m],
                    env=dict(os.environ, AGENTXPU_LOG_LEVEL="debug"))
            assert r.rc == 1, r
            assert "Another agentxpu-engine already owns org.agentxpu.Engine on this bus" in r.err, r
            assert "Cannot start the engine" not in r.err and "model '" not in r.err, r
        assert bus.call("Complete", "Hello", GREEDY).rc == 0


def test_bad_inputs():
    with engine(TABLE_CONFIG) as (bus, d):
        check_bad_inputs(bus)
        assert engine_idle(bus) and bus.request_nodes() == []
        assert bus.call("Complete", "still here", "{'max_tokens': <uint32 1>}").rc == 0


def test_bad_constraints():
    """Bad JSON schemas and grammars (the list the command line's test gives `generate`): left
    recursion, undefined rules, oneOf and allOf named, an answer that cannot fit in max_tokens,
    and the 64 KiB cap: on Complete, Reactive and Proactive each is an InvalidArgument saying
    what is wrong, and nothing is queued."""
    def gvariant(s):
        return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    cap = 64 * 1024
    cases = [(key, value, "", want) for key, value, want in BAD_CONSTRAINTS if len(value) <= cap]
    cases += [
        ("grammar", 'root ::= "a"{3000}\n', "'max_tokens': <uint32 2>, ",
         "shortest text the grammar allows is 3000 bytes, more than 2 tokens"),
        ("json_schema", json.dumps({"enum": ["x" * 3000]}), "'max_tokens': <uint32 2>, ",
         "shortest text the JSON schema allows is 3002 bytes, more than 2 tokens"),
    ]
    for key, value in (("grammar", 'root ::= "' + "a" * cap + '"\n'),
                       ("json_schema", json.dumps({"enum": ["a" * cap]}))):
        cases.append((key, value, "", f"Option '{key}' is {len(value)} bytes; the limit is {cap}"))
    with engine(TABLE_CONFIG) as (bus, d):
        for key, value, more, want in cases:
            for method in ("Complete", "Reactive", "Proactive"):
                r = bus.call(method, "x", "{" + more + f"'{key}': <{gvariant(value)}>}}")
                assert r.error_name == "org.agentxpu.Error.InvalidArgument" and want in r.error_message, \
                    (method, key, value[:60], want, r)
        assert engine_idle(bus) and bus.request_nodes() == []
        assert bus.call("Complete", "still here", "{'max_tokens': <uint32 1>}").rc == 0


def test_tool_turns_bad_input():
    """Earlier tool calls and results: the engine's checks, each a clear InvalidArgument."""
    tools = "'tools': <'[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]'>"
    with engine(TABLE_CONFIG) as (bus, d):
        for prompt, opts, want in [
                # without tools too: the turns are written as the template writes them
                ("hi", "{'messages': <[('user', 'hi'), ('tool_call', '{}')]>}",
                 "Turn 2: a tool_call must be {\"name\": NAME, \"arguments\": {...}}"),
                ("hi", "{'tool_choice': <'auto'>, 'messages': <[('user', 'hi'), ('tool_call', '{}')]>}",
                 "Tool_choice needs tools"),
                ("", "{" + tools + ", 'messages': <[('user', 'hi'), ('tool_call', 'nope'), ('tool', '1')]>}",
                 "Turn 2: a tool_call is not valid JSON"),
                ("", "{" + tools + ", 'messages': <[('user', 'hi'), ('tool', '1')]>}",
                 "Turn 2: a tool result must follow a tool_call turn"),
                ("", "{" + tools + ", 'messages': <[('user', 'hi'), ('tool_call', '{\"name\": \"f\"}'), "
                 "('tool', '1')]>}", "Turn 2: a tool_call must be {\"name\": NAME, \"arguments\": {...}}")]:
            r = bus.call("Reactive", prompt, opts)
            assert r.error_name == "org.agentxpu.Error.InvalidArgument" and want in r.error_message, (want, r)
        assert bus.call("Complete", "still here", "{'max_tokens': <uint32 1>}").rc == 0


def test_context_overflow_messages():
    """A prompt beyond the context: without a flow the message gives the prompt and the
    context; on a flow, also what the conversation already holds."""
    with engine(TABLE_CONFIG) as (bus, d):
        r = bus.call("Reactive", " ".join(["word"] * 100), "{}")
        assert r.error_name == "org.agentxpu.Error.ContextOverflow", r
        m = re.fullmatch(r"The prompt is (\d+) tokens and the context holds 64", r.error_message)
        assert m and int(m.group(1)) > 64, r.error_message

        chat = bus.spawn([CLI, "chat", "--address", bus.address, "-v", "-n", "16", "--temperature", "0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        flow = chat.stderr.readline().split()[1]
        chat.stdin.write("Hello\n")
        chat.stdin.flush()
        chat.stderr.readline()
        assert chat.stderr.readline().startswith("finished:")
        # A prompt that fits the empty context but not beside the conversation.
        prompt = " ".join(["word"] * 20)
        alone = bus.call("Complete", prompt, "{'max_tokens': <uint32 1>, 'raw': <true>}")
        assert alone.rc == 0, alone
        r = bus.call("Complete", prompt, f"{{'flow': <objectpath '{flow}'>}}")
        assert r.error_name == "org.agentxpu.Error.ContextOverflow", r
        m = re.fullmatch(r"The prompt is (\d+) tokens; the flow already holds (\d+) of the context's 64 positions",
                         r.error_message)
        assert m and 0 < int(m.group(1)) < 64 and int(m.group(1)) + int(m.group(2)) >= 64, r.error_message
        chat.stdin.close()
        assert chat.wait(timeout=60) == 0


def test_load_model_changes_the_model_property():
    """LoadModel with a request in flight: the request finishes on the old model, and the
    Model property names the new one, announced with PropertiesChanged; loading the same file
    again is announced too (no polkit on this bus: root is authorized)."""
    if not is_root():
        raise Skip("needs root (administrative call without polkit)")
    second = second_model()
    with engine() as (bus, d):
        first_name = bus.props()["Model"]
        assert first_name and first_name != "second-model", first_name
        mon = bus.spawn(["gdbus", "monitor", "--address", bus.address, "--dest", NAME],
                        stdout=subprocess.PIPE, text=True)
        mon.stdout.readline()
        p, path = submit_bg(bus, "-n", "48", "--temperature", "0", "Before the swap")
        p.stdout.read(1)
        r = bus.call("LoadModel", second)
        assert r.rc == 0, r
        assert bus.props()["Model"] == "second-model"
        rc, out, err = drain(p)
        assert rc == 0, (rc, err)
        for _ in range(2):
            r = bus.call("LoadModel", model())
            assert r.rc == 0, r
            assert bus.props()["Model"] == first_name
        assert bus.call("Complete", "Hello", GREEDY).rc == 0
        time.sleep(0.3)
        mon.terminate()
        signals = mon.stdout.read()
    changed = re.findall(r"PropertiesChanged \('org\.agentxpu\.Engine', \{'[^\n]*", signals)
    models = [m for c in changed for m in re.findall(r"'Model': <'([^']*)'>", c)]
    assert models == ["second-model", first_name, first_name], (models, signals)
    assert all("'Devices'" in c and "'ModelInfo'" in c for c in changed if "'Model'" in c), changed


def test_penalties_from_the_command_line():
    """--frequency-penalty and --presence-penalty reach the engine (ask) and the in-process
    generator (generate): both answer as the engine does with those options, which is not the
    answer without them (the tiny model repeats itself when greedy)."""
    opts = "'max_tokens': <uint32 24>, 'temperature': <0.0>, 'raw': <true>"
    with engine() as (bus, d):
        r = bus.call("Complete", "Once upon a time", "{%s}" % opts)
        plain = gvariant_first_string(r.out)
        r = bus.call("Complete", "Once upon a time",
                     "{%s, 'frequency_penalty': <1.5>, 'presence_penalty': <0.5>}" % opts)
        assert r.rc == 0, r
        want = gvariant_first_string(r.out)
        assert want != plain, (want, plain)
        r = bus.cli("ask", "--raw", "-n", "24", "--temperature", "0", "--frequency-penalty", "1.5",
                    "--presence-penalty", "0.5", "Once upon a time")
        assert r.rc == 0 and r.out == want + "\n", (r, want)
        r = bus.cli("ask", "--frequency-penalty", "2.5", "hi")
        assert r.rc != 0 and "'frequency_penalty' must be at least -2 and at most 2, got 2.5" in r.err, r
    r = run([CLI, "generate", "-m", model(), "--raw", "-n", "24", "--temperature", "0", "--frequency-penalty", "1.5",
             "--presence-penalty", "0.5", "-p", "Once upon a time"])
    assert r.rc == 0 and r.out == want + "\n", (r, want)
    r = run([CLI, "generate", "-m", model(), "--presence-penalty", "-3", "-p", "hi"])
    assert r.rc == 2 and "--presence-penalty" in r.err, r



LOGPROB = re.compile(r"""\((?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"), (?:@ay )?\[(?:byte )?([^\]]*)\], """
                     r"""(-?inf|[-0-9.e+]+)(, (?:@a\(sayd\) )?\[)?""")


def logprobs_of(out):
    """The records of a Complete reply's 'logprobs': [(bytes, logprob, [(bytes, logprob)...])]"""
    at = out.index("'logprobs': <")
    records = []
    for m in LOGPROB.finditer(out, at):
        b = bytes(int(x, 16) for x in m.group(3).split(", ") if x)
        lp = float(m.group(4))
        if m.group(5):
            records.append((b, lp, []))
        else:
            records[-1][2].append((b, lp))
    return records


def test_logprobs():
    """Option logprobs: each generated token's bytes and log-probability and its alternatives',
    most likely first, in the reply's stats, as `generate --logprobs` gives them in-process; the
    tokens' bytes make the text; more than 20 alternatives is an InvalidArgument."""
    with engine() as (bus, d):
        r = bus.call("Complete", "Hello", GREEDY[:-1] + ", 'logprobs': <uint32 3>}")
        assert r.rc == 0, r
        text = gvariant_first_string(r.out)
        records = logprobs_of(r.out)
        assert len(records) == 8, records
        for b, lp, alts in records:
            assert lp <= 0 and len(alts) == 3, (b, lp, alts)
            # greedy: the chosen token is the most likely
            assert alts[0] == (b, lp), (b, lp, alts)
            assert alts[0][1] >= alts[1][1] >= alts[2][1], alts
        assert b"".join(b for b, _, _ in records).decode("utf-8", "replace") == text, (records, text)
        # the command line's generate, in-process, gives the same log-probabilities
        gen = run([CLI, "generate", "-m", model(), "-p", "Hello", "--raw", "-n", "8", "--temperature", "0", "--json",
                   "--logprobs", "3"])
        assert gen.rc == 0, gen
        cli = json.loads(gen.out)["logprobs"]
        assert len(cli) == 8, cli
        for (b, lp, alts), c in zip(records, cli):
            assert abs(lp - c["logprob"]) < 1e-5 and len(c["top_logprobs"]) == 3, (lp, c)
            assert all(abs(a[1] - t["logprob"]) < 1e-5 for a, t in zip(alts, c["top_logprobs"])), (alts, c)
        # without the option, none
        r = bus.call("Complete", "Hello", GREEDY)
        assert r.rc == 0 and "'logprobs'" not in r.out, r
        # only the chosen token's
        r = bus.call("Complete", "Hello", GREEDY[:-1] + ", 'logprobs': <uint32 0>}")
        assert r.rc == 0, r
        assert [(b, lp) for b, lp, _ in logprobs_of(r.out)] == [(b, lp) for b, lp, _ in records], r.out
        assert all(not alts for _, _, alts in logprobs_of(r.out)), r.out
        r = bus.call("Complete", "Hello", "{'logprobs': <uint32 21>}")
        assert r.rc != 0 and "InvalidArgument" in r.err and "from 0 to 20" in r.err, r

def test_model_info_describes_the_model():
    """ModelInfo describes the loaded model as the file says (the parameters as `agentxpu
    inspect` counts them) and the context a request gets (ContextSize=), for clients such as
    the HTTP bridge's /api/show."""
    with engine(config="[Engine]\nContextSize=1000\n") as (bus, d):
        p = bus.props()
        r = run([CLI, "inspect", "-m", model()])
        m = re.search(r"^runs: llama, (\d+) parameters", r.out, re.M)
        assert r.rc == 0 and m, r
        info = {k: v["data"] for k, v in p["ModelInfo"].items()}
        assert info == {"name": p["Model"], "architecture": "llama", "parameters": int(m.group(1)),
                        "size": os.path.getsize(model()), "context_length": 1000, "embedding_length": 512,
                        "file_type": "Q8_0", "chat_template": "llama3",
                        "tools": False, "fim": False, "thinking": False, "thinking_open": False}, info
        r = bus.cli("status")
        want = "          llama, %.1f million parameters, Q8_0, context 1000, chat template llama3\n" % (
            int(m.group(1)) / 1e6)
        assert r.rc == 0 and want in r.out, (want, r.out)
        assert re.search(r"^KV cache: 0 bytes of [0-9.]+ [MG]iB in use \(KVMemory=\)$", r.out, re.M), r.out
    # another type, a template that takes tools, the model's own context
    path = os.path.join(os.path.dirname(model()), "tools-q4_k.gguf")
    template = ("{% if tools %}{{ tools | tojson }}{% endif %}{% for message in messages %}"
                "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
                "{% endfor %}")
    r = run([CLI, "mkmodel", "-o", path, "--seed", "9", "--dim", "512", "--layers", "2", "--heads", "8",
             "--kv-heads", "4", "--ffn", "1536", "--ctx", "2048", "--type", "q4_k", "--name", "tools-model",
             "--chat-template", template, "--fim"])
    assert r.rc == 0, r
    with engine(model_path=path) as (bus, d):
        info = {k: v["data"] for k, v in bus.props()["ModelInfo"].items()}
        assert (info["name"], info["context_length"], info["embedding_length"], info["file_type"],
                info["chat_template"], info["tools"], info["fim"]) == ("tools-model", 2048, 512, "Q4_K_S", "llama3",
                                                                       True, True), info
        r = bus.cli("status")
        assert r.rc == 0 and "chat template llama3 (takes tools), fills in the middle\n" in r.out, r.out
    # a name from the file that would forge a line of `agentxpu status` stays on its own
    path = os.path.join(os.path.dirname(model()), "odd-name.gguf")
    r = run([CLI, "mkmodel", "-o", path, "--seed", "9", "--dim", "64", "--layers", "1", "--heads", "2",
             "--kv-heads", "1", "--ffn", "128", "--ctx", "256", "--name", "odd\nRunning:  99\tx"])
    assert r.rc == 0, r
    with engine(model_path=path) as (bus, d):
        r = bus.cli("status")
        assert r.rc == 0 and "Model:    odd\\x0aRunning:  99\\x09x\n" in r.out, r.out
        assert not re.search(r"^Running:  99", r.out, re.M), r.out


def test_a_load_waiting_on_requests_holds_no_one_up():
    """LoadModel waits for the requests in flight to end. Meanwhile a submission is answered
    Busy at once (it used to wait inside the daemon's one thread: no other call was answered,
    and past 25 s the engine lost the bus), a bystander's property read is answered, and
    SIGTERM cancels the requests rather than waiting for each to run to its end."""
    if not is_root():
        raise Skip("needs root (administrative call without polkit)")
    second = second_model()
    with engine() as (bus, d):
        p, _ = submit_bg(bus, "-n", "4000", "A long story")
        p.stdout.read(1)
        load = bus.spawn(["gdbus", "call", "--address", bus.address, "--dest", NAME, "--object-path", PATH,
                          "--method", "org.agentxpu.Engine.LoadModel", second],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert load.poll() is None, load.communicate()
        t = time.monotonic()
        r = bus.call("Reactive", "hi", "{'max_tokens': <uint32 1>}", user="nobody")
        assert r.error_name == "org.agentxpu.Error.Busy" and "being loaded" in r.error_message, r
        assert bus.props()["Running"] == 1
        assert time.monotonic() - t < 5, time.monotonic() - t
        t = time.monotonic()
        assert d.stop() == 0, d.text()
        assert time.monotonic() - t < 10, time.monotonic() - t
        rc, out, err = drain(p)
        assert rc == 1 and "cancelled" in err, (rc, err)
        load.wait(timeout=10)


def test_kv_memory_budget():
    """KVMemory=: a request reserves the KV cache of its prompt and max_tokens (at most the
    context) until it ends; what does not fit now is answered Busy at once, naming the budget,
    and fits again once a request is cancelled; an open flow holds its cache between turns
    until it is closed. The test model's cache is 4 KiB a position: 16 MiB at 4096."""
    with engine("[Limits]\nKVMemory=16896K\n") as (bus, d):
        props = bus.props()
        assert props["KVMemory"] == 16896 * 1024 and props["KVMemoryUsed"] == 0, props
        # the whole context's cache: 16 MiB, of 16.5
        a, path_a = submit_bg(bus, "-n", "4096", "Held A")
        wait_for(lambda: bus.props()["KVMemoryUsed"] == 16 << 20, "the request's reservation")
        full = ("The KV-cache budget (KVMemory=16.5 MiB) is full: 1 request or flow holds 16.0 MiB; "
                "this one needs 16.0 MiB; try again when one ends")
        r = bus.call("Reactive", "Held B", "{'max_tokens': <uint32 4096>}")
        assert r.error_name == "org.agentxpu.Error.Busy" and r.error_message == full, r
        # a small one fits in what is left
        r = bus.call("Complete", "Small", GREEDY)
        assert r.rc == 0, r
        # cancelled: its room is free again
        assert bus.gdbus(path_a, f"{REQ_IFACE}.Cancel").rc == 0
        drain(a)
        wait_for(lambda: bus.props()["KVMemoryUsed"] == 0, "the cancelled request's reservation to go")
        b, path_b = submit_bg(bus, "-n", "4096", "Held B")
        wait_for(lambda: bus.props()["KVMemoryUsed"] == 16 << 20, "the next request's reservation")
        # its client gone: given back too
        b.kill()
        wait_for(lambda: bus.props()["KVMemoryUsed"] == 0, "the reservation of a request whose client left")

        # a flow after a turn holds its cache (256 positions: 1 MiB), which leaves no room
        chat = bus.spawn([CLI, "chat", "--address", bus.address, "-v", "-n", "16", "--temperature", "0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert chat.stderr.readline().startswith("flow ")
        chat.stdin.write("Hello\n")
        chat.stdin.flush()
        chat.stderr.readline()
        assert chat.stderr.readline().startswith("finished:")
        wait_for(lambda: bus.props()["KVMemoryUsed"] == 1 << 20, "the flow's cache to be counted")
        r = bus.call("Reactive", "Held B", "{'max_tokens': <uint32 4096>}")
        assert r.error_name == "org.agentxpu.Error.Busy", r
        assert "is full: 1 request or flow holds 1.0 MiB; this one needs 16.0 MiB" in r.error_message, r
        # the flow closed: room again
        chat.stdin.close()
        assert chat.wait(timeout=60) == 0
        wait_for(lambda: bus.props()["KVMemoryUsed"] == 0, "the closed flow's cache to go")
        b, path_b = submit_bg(bus, "-n", "4096", "Held B")
        assert bus.gdbus(path_b, f"{REQ_IFACE}.Cancel").rc == 0
        drain(b)
        wait_for(lambda: bus.props()["KVMemoryUsed"] == 0, "the last reservation to go")


TESTS = [
    test_complete_matches_generate,
    test_stop_word,
    test_embed,
    test_forget_prompt_cache,
    test_longrope_follows_the_engine_context,
    test_no_byte_of_the_answer_is_dropped,
    test_q8_0_kv_cache,
    test_reactive_stream_in_order_unicast,
    test_other_uid_cannot_cancel_or_read,
    test_fifty_clients_a_third_leaving,
    test_reactive_overtakes_busy_proactive_work,
    test_gdbus_example_client,
    test_flow_turn_prefills_only_new_tokens,
    test_prompt_cache_is_per_user,
    test_logprobs,
    test_sigterm_cancels_running_requests_and_exits_0,
    test_a_load_waiting_on_requests_holds_no_one_up,
    test_cli_ends_when_the_engine_dies_mid_stream,
    test_load_model_refuses_a_corrupt_file_and_keeps_serving,
    test_bad_inputs,
    test_bad_constraints,
    test_earlier_turns_go_through_the_chat_template,
    test_tool_turns_bad_input,
    test_context_overflow_messages,
    test_devices_carry_their_memory,
    test_second_engine_leaves_before_loading_its_model,
    test_load_model_changes_the_model_property,
    test_model_info_describes_the_model,
    test_penalties_from_the_command_line,
    test_kv_memory_budget,
]

if __name__ == "__main__":
    if sys.argv[1:] == ["--bad-inputs-table"]:
        with engine(TABLE_CONFIG) as (bus, d):
            print_bad_inputs_table(bus)
    else:
        main(TESTS)
