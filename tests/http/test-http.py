#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu serve against the real engine on a private bus, spoken to with curl: the raw
SSE and NDJSON framing, the socket's mode, the token on TCP, cancellation when a client
leaves, proactive priority, and bad inputs. The official client libraries are
test-http-clients.py's.

Run one test: test-http.py test_openai_chat_sse_framing"""

import json
import os
import re
import socket
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from httptest import (CLI, WAIT, Bridge, Skip, TestBus, free_port, llama3, main, model, model_name, run,  # noqa: E402,F401
                      serving, sse_events, token_count, wait_for)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from bustest import NAME, PATH, REQ_IFACE, gvariant_first_string  # noqa: E402


def complete(bus, prompt, n, raw=False):
    """The engine's own answer over D-Bus, greedy."""
    r = bus.call("Complete", prompt, f"{{'max_tokens': <uint32 {n}>, 'temperature': <0.0>, 'raw': <{str(raw).lower()}>}}")
    assert r.rc == 0, r
    return gvariant_first_string(r.out)


def engine_idle(bus):
    p = bus.props()
    return p["Running"] == 0 and p["QueuedReactive"] == 0 and p["QueuedProactive"] == 0


def test_socket_mode_and_token_file():
    with serving() as (bus, d, b):
        st = os.stat(b.socket)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        assert stat.S_IMODE(os.stat(os.path.dirname(b.socket)).st_mode) == 0o700
        assert b.socket == os.path.join(b.runtime, "agentxpu", "http.sock")
        token_file = os.path.join(b.home, ".config", "agentxpu", "token")
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        with open(token_file) as f:
            assert f.read().strip() == b.token and len(b.token) >= 32
        # a second bridge on the same socket refuses to start
        from httptest import CLI, BRIDGE, run
        r = run([CLI, "serve", "--address", bus.address], env=dict(b.env, AGENTXPU_HTTP=BRIDGE), timeout=30)
        assert r.rc == 1 and "Another agentxpu serve listens on" in r.err, r
        status, _ = b.curl("/api/version")
        assert status == 200


def test_openai_chat_sse_framing():
    with serving() as (bus, d, b):
        m = model_name(b)
        want = complete(bus, "Hello", 16)
        status, body = b.json("/v1/chat/completions", {"model": m, "max_tokens": 16, "temperature": 0,
                                                       "messages": [{"role": "user", "content": "Hello"}]})
        assert status == 200, body
        assert body["object"] == "chat.completion" and body["model"] == m, body
        choice = body["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": want}, (choice, want)
        assert choice["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 16 and body["usage"]["prompt_tokens"] > 0, body

        status, text = b.curl("/v1/chat/completions", {"model": m, "max_tokens": 16, "temperature": 0, "stream": True,
                                                       "stream_options": {"include_usage": True},
                                                       "messages": [{"role": "user", "content": "Hello"}]})
        assert status == 200, text
        events = sse_events(text)
        assert events[-1] == "[DONE]", events[-3:]
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        text_chunks = [c for c in chunks if c["choices"]]
        assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"
        got = "".join(c["choices"][0]["delta"].get("content", "") for c in text_chunks)
        assert got == want, (got, want)
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 16, chunks[-1]


def test_penalties_reach_the_engine():
    """OpenAI's frequency_penalty and presence_penalty (and Ollama's options of those names)
    are the engine's options of those names: the answer is the engine's with them, and not
    the one without (the tiny model repeats itself when greedy)."""
    with serving() as (bus, d, b):
        m = model_name(b)
        plain = complete(bus, "Once upon a time", 24, raw=True)
        r = bus.call("Complete", "Once upon a time", "{'max_tokens': <uint32 24>, 'temperature': <0.0>, 'raw': <true>, "
                     "'frequency_penalty': <1.5>, 'presence_penalty': <0.5>}")
        assert r.rc == 0, r
        want = gvariant_first_string(r.out)
        assert want != plain, (want, plain)
        status, body = b.json("/v1/completions", {"model": m, "prompt": "Once upon a time", "max_tokens": 24,
                                                  "temperature": 0, "frequency_penalty": 1.5, "presence_penalty": 0.5})
        assert status == 200 and body["choices"][0]["text"] == want, (body, want)
        status, body = b.json("/api/generate", {"model": m, "prompt": "Once upon a time", "raw": True, "stream": False,
                                                "options": {"num_predict": 24, "temperature": 0,
                                                            "frequency_penalty": 1.5, "presence_penalty": 0.5}})
        assert status == 200 and body["response"] == want, (body, want)


def test_openai_completions_raw():
    with serving() as (bus, d, b):
        m = model_name(b)
        want = complete(bus, "Once upon a time", 12, raw=True)
        status, body = b.json("/v1/completions", {"model": m, "prompt": "Once upon a time", "max_tokens": 12,
                                                  "temperature": 0})
        assert status == 200, body
        assert body["object"] == "text_completion" and body["choices"][0]["text"] == want, (body, want)
        status, text = b.curl("/v1/completions", {"model": m, "prompt": "Once upon a time", "max_tokens": 12,
                                                  "temperature": 0, "stream": True}, tcp=True)
        assert status == 200, text
        events = sse_events(text)
        assert events[-1] == "[DONE]"
        got = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
        assert got == want, (got, want)


def ndjson(text):
    assert text.endswith("\n"), repr(text[-200:])
    return [json.loads(line) for line in text.split("\n")[:-1]]


def test_ollama_ndjson_framing():
    with serving() as (bus, d, b):
        m = model_name(b)
        want = complete(bus, "Hello", 10)
        a = b.curl_args("/api/generate", {"model": m, "prompt": "Hello", "options": {"num_predict": 10, "temperature": 0}})
        a.insert(1, "-i")
        from httptest import run
        r = run(a)
        assert r.rc == 0 and re.search(r"(?im)^content-type: application/x-ndjson", r.out), r.out[:400]
        status, text = b.curl("/api/generate", {"model": m, "prompt": "Hello",
                                                "options": {"num_predict": 10, "temperature": 0}})
        lines = ndjson(text)
        assert status == 200 and all(not x["done"] for x in lines[:-1]) and lines[-1]["done"], lines
        assert "".join(x["response"] for x in lines) == want
        last = lines[-1]
        assert last["done_reason"] == "length" and last["eval_count"] == 10 and last["prompt_eval_count"] > 0, last
        assert last["model"] == m and re.match(r"\d{4}-\d\d-\d\dT", last["created_at"])

        status, body = b.json("/api/generate", {"model": m + ":latest", "prompt": "Hello", "stream": False,
                                                "options": {"num_predict": 10, "temperature": 0}})
        assert status == 200 and body["response"] == want and body["done"], body

        status, text = b.curl("/api/chat", {"model": m, "messages": [{"role": "user", "content": "Hello"}],
                                            "options": {"num_predict": 10, "temperature": 0}})
        lines = ndjson(text)
        assert "".join(x["message"]["content"] for x in lines) == want
        assert all(x["message"]["role"] == "assistant" for x in lines) and lines[-1]["done"]
        status, body = b.json("/api/chat", {"model": m, "stream": False, "messages": [{"role": "user", "content": "Hello"}],
                                            "options": {"num_predict": 10, "temperature": 0}})
        assert status == 200 and body["message"]["content"] == want, body
        # An empty prompt loads the model, as Ollama's clients expect; "keep_alive": 0 asks
        # for it to be unloaded (the engine keeps it for everyone; the answer is Ollama's)
        status, body = b.json("/api/generate", {"model": m})
        assert status == 200 and body["done"] and body["done_reason"] == "load" and body["model"] == m, body
        status, body = b.json("/api/chat", {"model": m + ":latest", "messages": []})
        assert status == 200 and body["done_reason"] == "load" and body["message"]["content"] == "", body
        for keep in (0, "0", "0s"):
            status, body = b.json("/api/generate", {"model": m, "keep_alive": keep})
            assert status == 200 and body["done_reason"] == "unload", (keep, body)
        status, body = b.json("/api/generate", {"model": m, "keep_alive": "5m"})
        assert status == 200 and body["done_reason"] == "load", body
        # a model the engine does not serve is not "loaded": 404, as Ollama answers
        for path, body in (("/api/generate", {"model": "llama3.2"}), ("/api/chat", {"model": "llama3.2", "messages": []})):
            status, body = b.json(path, body)
            assert status == 404 and body == {"error": f"model 'llama3.2' not found; this engine serves '{m}'"}, body


def test_listings():
    from httptest import CLI, run
    r = run([CLI, "inspect", "-m", model()])
    n_params = int(re.search(r"^runs: llama, (\d+) parameters", r.out, re.M).group(1))
    size = f"{n_params / 1e6:.2f}M"
    with serving(config="[Engine]\nContextSize=2048\n") as (bus, d, b):
        m = model_name(b)
        assert bus.props()["Model"] == m
        details = {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                   "parameter_size": size, "quantization_level": "Q8_0"}
        status, body = b.json("/api/tags")
        assert status == 200 and [x["name"] for x in body["models"]] == [m], body
        assert body["models"][0]["details"] == details and body["models"][0]["size"] == os.path.getsize(model()), body
        status, body = b.json("/api/ps")
        assert status == 200 and [x["name"] for x in body["models"]] == [m], body
        assert body["models"][0]["details"] == details and body["models"][0]["context_length"] == 2048, body
        # what editors ask before they use a model: its context and whether it takes tools
        for ask in ({"model": m}, {"name": m + ":latest"}, {"model": m, "verbose": True}):
            status, body = b.json("/api/show", ask)
            assert status == 200 and body["details"] == details, (ask, body)
            assert body["model_info"]["llama.context_length"] == 2048, body
            assert body["model_info"]["llama.embedding_length"] == 512, body
            assert body["model_info"]["general.parameter_count"] == n_params, body
            assert body["capabilities"] == ["completion", "tools"] and "num_ctx 2048" in body["parameters"], body
        status, body = b.json("/api/show", {"model": "llama3.2"})
        assert status == 404 and body == {"error": f"model 'llama3.2' not found; this engine serves '{m}'"}, body
        status, body = b.json("/api/show", {})
        assert status == 400 and body == {"error": "model is required"}, body
        status, body = b.json("/api/show", method="GET")
        assert status == 405, body
        status, body = b.json("/api/version")
        assert status == 200 and re.match(r"\d+\.\d+\.\d+$", body["version"]), body
        status, body = b.json("/v1/nothing")
        assert status == 404 and body["error"]["code"] == "unknown_url", body
        status, body = b.json("/v1/models", method="DELETE")
        assert status == 405, body
        # OpenAI's retrieve: the engine's model, or 404 in OpenAI's words
        status, body = b.json(f"/v1/models/{m}")
        assert status == 200 and body == {"id": m, "object": "model", "created": 0, "owned_by": "agentxpu"}, body
        status, body = b.json("/v1/models/gpt-4o")
        assert status == 404 and body["error"]["code"] == "model_not_found", body
        status, body = b.json(f"/v1/models/{m}", method="DELETE")
        assert status == 405, body


def check_token_required_on_tcp(bus, b):
    """Over TCP, no request without the token reaches the engine; with it, they are served."""
    m = model_name(b)
    chat = {"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]}
    for token in (False, "0" * len(b.token), b.token[:-1]):
        status, body = b.json("/v1/chat/completions", chat, tcp=True, token=token)
        assert status == 401 and body["error"]["code"] == "invalid_api_key", body
        status, body = b.json("/api/generate", {"model": m, "prompt": "hi"}, tcp=True, token=token)
        assert status == 401 and isinstance(body["error"], str), body
        status, body = b.json("/v1/models", tcp=True, token=token)
        assert status == 401, body
    # nothing reached the engine
    assert bus.request_nodes() == []
    assert "A bearer token is required" in b.text()
    status, body = b.json("/v1/chat/completions", chat, tcp=True)
    assert status == 200, body
    # the Unix socket needs none: it is the user's alone
    status, body = b.json("/v1/chat/completions", chat)
    assert status == 200, body


def test_token_required_on_tcp():
    with serving() as (bus, d, b):
        check_token_required_on_tcp(bus, b)


def test_socket_activation_unix():
    """Started as agentxpu-http.socket starts it: the first connection to the socket that
    systemd listens on starts the bridge, which serves it and the ones after."""
    with serving(tcp=False, activated=True) as (bus, d, b):
        m = bus.props()["Model"]
        want = complete(bus, "Hello", 10)
        status, body = b.json("/v1/chat/completions", {"model": m, "max_tokens": 10, "temperature": 0,
                                                       "messages": [{"role": "user", "content": "Hello"}]})
        assert status == 200 and body["choices"][0]["message"]["content"] == want, (body, want)
        # it serves on the socket handed over, and makes none of its own
        assert b.listening(1) == [f"Listening on unix:{b.socket}"]
        status, text = b.curl("/api/chat", {"model": m, "messages": [{"role": "user", "content": "Hello"}],
                                            "options": {"num_predict": 10, "temperature": 0}})
        lines = ndjson(text)
        assert status == 200 and lines[-1]["done"], lines
        assert "".join(x["message"]["content"] for x in lines) == want
        status, body = b.json("/api/tags")
        assert status == 200 and [x["name"] for x in body["models"]] == [m], body


def test_socket_activation_tcp_needs_the_token():
    with serving(activated=True) as (bus, d, b):
        # the first connection, over TCP without the token, starts the bridge and gets 401
        status, body = b.json("/v1/models", tcp=True, token=False)
        assert status == 401 and body["error"]["code"] == "invalid_api_key", body
        assert sorted(b.listening(2)) == [f"Listening on http://127.0.0.1:{b.port}/ (bearer token required)",
                                          f"Listening on unix:{b.socket}"]
        check_token_required_on_tcp(bus, b)


def test_socket_activation_refuses_sockets_it_cannot_serve_on():
    """A socket unit or a LISTEN_FDS that the bridge cannot serve on: one line that says
    what is wrong, and exit status 1."""
    model()
    port = free_port()
    cases = [
        ("LISTEN_FDS counts more than were passed", {"via": ["sh", "-c", 'LISTEN_FDS=2 exec "$0" "$@"']},
         "LISTEN_FDS=2 (fds 3 to 4): fd 4 is not open"),
        ("LISTEN_FDS not a number", {"via": ["sh", "-c", 'LISTEN_FDS=two exec "$0" "$@"']},
         "LISTEN_FDS=two is not a number of sockets"),
        ("a file, not a socket", {"via": ["sh", "-c", 'exec 3</dev/null; exec "$0" "$@"']},
         "LISTEN_FDS=1 (fds 3 to 3): fd 3 is not a socket"),
        ("a datagram socket (ListenDatagram=)", {"activate_args": ["--datagram"]},
         "LISTEN_FDS=1 (fds 3 to 3): fd 3 is not a stream socket (the socket unit needs ListenStream=)"),
        ("a connection (Accept=yes)", {"activate_args": ["--accept"]},
         "LISTEN_FDS=1 (fds 3 to 3): fd 3 is not a listening socket (the socket unit needs Accept=no)"),
        ("TCP on every address", {"activate_args": ["-l", f"0.0.0.0:{port}"]},
         f"LISTEN_FDS=2 (fds 3 to 4): fd 4 listens on 0.0.0.0 port {port}, not on loopback "
         "(ListenStream=127.0.0.1:PORT or [::1]:PORT)"),
    ]
    for what, kw, want in cases:
        bus = TestBus()
        try:
            b = Bridge(bus, tcp=False, activated=True, **kw)
            datagram = "--datagram" in kw.get("activate_args", ())
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM if datagram else socket.SOCK_STREAM) as s:
                if datagram:
                    s.sendto(b"GET / HTTP/1.0\r\n\r\n", b.socket)
                else:
                    s.connect(b.socket)
            wait_for(lambda: "agentxpu serve:" in b.text(), f"the bridge to refuse {what}")
            errors = [line for line in b.text().splitlines() if line.startswith("agentxpu serve:")]
            assert errors == [f"agentxpu serve: the sockets from systemd: {want}"], (what, b.text())
            print(f"    {what}: {errors[0]}", flush=True)
            if "--accept" not in kw.get("activate_args", ()):    # else the bridge ran in a child of its own
                assert b.proc.wait(timeout=WAIT) == 1, (what, b.text())
        finally:
            bus.close()


def test_client_leaving_cancels_its_request():
    with serving() as (bus, d, b):
        m = model_name(b)
        for stream in (True, False):
            p = b.curl_spawn("/api/generate", {"model": m, "prompt": "Hello", "stream": stream,
                                               "options": {"num_predict": 4000}})
            wait_for(lambda: bus.props()["Running"] == 1, "the request to run")
            if stream:
                assert p.stdout.readline(), "no token came"
            time.sleep(0.3)
            start = time.monotonic()
            p.kill()
            p.wait()
            wait_for(lambda: engine_idle(bus), "the request to be cancelled")
            print(f"    {'streamed' if stream else 'whole'}: cancelled in the engine "
                  f"{time.monotonic() - start:.2f} s after its client left", flush=True)
            nodes = bus.request_nodes()
            st = bus.busctl("get-property", NAME, f"{PATH}/request/{max(map(int, nodes))}", REQ_IFACE, "Stats")
            assert st.json["data"]["generated_tokens"]["data"] < 4000
        assert b.text().count("the client left; its request is cancelled") == 2, b.text()
        status, body = b.json("/api/generate", {"model": m, "prompt": "Hello", "stream": False,
                                                "options": {"num_predict": 2}})
        assert status == 200, body


def request_kinds(bus):
    kinds = []
    for n in bus.request_nodes():
        r = bus.busctl("get-property", NAME, f"{PATH}/request/{n}", REQ_IFACE, "Kind")
        kinds.append(r.json["data"])
    return kinds


def generated(bus, n):
    st = bus.busctl("get-property", NAME, f"{PATH}/request/{n}", REQ_IFACE, "Stats")
    return st.json["data"]["generated_tokens"]["data"]


def test_proactive_priority_and_a_reactive_request_overtakes():
    with serving() as (bus, d, b):
        m = model_name(b)
        chat = {"model": m, "max_tokens": 3000, "temperature": 0, "stream": True}
        ways = [({"priority": "background"}, ()), ({"service_tier": "flex"}, ()),
                ({}, ("X-Agentxpu-Priority: proactive",)), ({"priority": "background"}, ())]
        background = []
        for i, (extra, headers) in enumerate(ways):
            body = dict(chat, messages=[{"role": "user", "content": f"Background job {i}"}], **extra)
            background.append(b.curl_spawn("/v1/chat/completions", body, headers=headers))
            wait_for(lambda: len(bus.request_nodes()) == i + 1, "the request to reach the engine")
        assert request_kinds(bus) == ["proactive"] * 4, request_kinds(bus)
        nodes = bus.request_nodes()
        wait_for(lambda: all(generated(bus, n) >= 20 for n in nodes), "proactive work to get going")
        ask = b.curl_spawn("/v1/chat/completions", {"model": m, "max_tokens": 8, "temperature": 0, "stream": True,
                                                    "messages": [{"role": "user", "content": "Quick question"}]})
        out, err = ask.communicate(timeout=WAIT)
        progress = [generated(bus, n) for n in nodes]
        assert ask.returncode == 0 and "data: [DONE]" in out, (out[-300:], err)
        print(f"    proactive tokens generated when the reactive one ended: {progress} of 3000", flush=True)
        assert all(p.poll() is None for p in background), "proactive work finished first"
        assert all(n < 1500 for n in progress), progress
        assert sorted(request_kinds(bus)) == ["proactive"] * 4 + ["reactive"]
        for p in background:
            p.kill()


# The settings of the bad-input table: a 64-token context, prompts of at most 4096 bytes.
TABLE_CONFIG = "[Engine]\nContextSize=64\n[Limits]\nPromptBytes=4096\nMaxTokens=4096\n"


WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                           "unit": {"enum": ["C", "F"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}}]


def bad_inputs(m):
    """(what, path, body, headers, status, what the error says)"""
    chat = {"model": m, "messages": [{"role": "user", "content": "hi"}]}
    gen = {"model": m, "prompt": "hi"}
    return [
        ("malformed JSON", "/v1/chat/completions", '{"model": ', (), 400, "not valid JSON"),
        ("malformed JSON", "/api/generate", '{"model": ', (), 400, "not valid JSON"),
        ("not an object", "/v1/chat/completions", "[1, 2]", (), 400, "must be a JSON object"),
        ("nested too deeply", "/v1/chat/completions", '{"model": "%s", "x": %s}' % (m, "[" * 129 + "]" * 129), (), 400,
         "nested more than 128 levels deep"),
        ("nested too deeply", "/api/chat", '{"model": "%s", "x": %s}' % (m, "{\"a\": " * 129 + "1" + "}" * 129), (), 400,
         "nested more than 128 levels deep"),
        # json-glib would cut the string at the NUL, or hand GLib bytes that are not UTF-8 (the
        # model then read "[Invalid UTF-8]"): the message was silently not the one sent
        ("a NUL in a string", "/v1/chat/completions",
         '{"model": "%s", "messages": [{"role": "user", "content": "Say\\u0000 and the rest"}]}' % m, (), 400,
         "a NUL character"),
        ("a lone surrogate", "/api/generate", '{"model": "%s", "prompt": "ab\\ud83dcd"}' % m, (), 400,
         "high surrogate without its low surrogate"),
        ("a lone surrogate", "/v1/completions", '{"model": "%s", "prompt": "ab\\ude00"}' % m, (), 400,
         "low surrogate without its high surrogate"),
        # fields that change what the answer means: refused, not dropped
        ("too many alternatives", "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=21), (), 400,
         "'top_logprobs' must be from 0 to 20, got 21"),
        ("echo asked for", "/v1/completions", dict(gen, echo=True), (), 400, "'echo' is not supported"),
        # fill in the middle with a model that has no FIM tokens, or in a chat
        ("a suffix, no FIM tokens", "/v1/completions", dict(gen, suffix="end"), (), 400,
         "his model has no fill-in-the-middle tokens"),
        ("a suffix, no FIM tokens", "/api/generate", dict(gen, suffix="end"), (), 400,
         "his model has no fill-in-the-middle tokens"),
        ("a suffix in a chat", "/api/chat", dict(chat, suffix="end"), (), 400, "is /api/generate's"),
        ("an earlier answer's context", "/api/generate", dict(gen, context=[1, 2, 3]), (), 400, "'context'"),
        # thinking on needs a model that thinks (this one's Llama 3 template does not), as Ollama's 400
        ("thinking asked for, a model that does not think", "/api/chat", dict(chat, think=True), (), 400,
         "he model does not think"),
        ("a thinking level, a model that does not think", "/api/generate", dict(gen, think="high"), (), 400,
         "he model does not think"),
        ("a reasoning format the bridge does not write", "/v1/chat/completions",
         dict(chat, reasoning_format="deepseek-legacy"), (), 400, "'reasoning_format' must be none, auto or deepseek"),
        # OpenAI-style servers' switch: enable_thinking alone, and the model must think to have it on
        ("a template argument other than thinking", "/v1/chat/completions",
         dict(chat, chat_template_kwargs={"add_vision_id": True}), (), 400, "takes enable_thinking only"),
        ("thinking on, a model that does not think", "/v1/chat/completions",
         dict(chat, chat_template_kwargs={"enable_thinking": True}), (), 400, "he model does not think"),
        ("a logit bias in OpenAI's token ids", "/v1/chat/completions", dict(chat, logit_bias={"50256": -100}), (),
         400, "'logit_bias' is not supported"),
        ("a penalty out of range", "/v1/chat/completions", dict(chat, frequency_penalty=2.5), (), 400,
         "'frequency_penalty' must be at least -2 and at most 2, got 2.5"),
        ("a penalty out of range", "/api/chat", dict(chat, options={"presence_penalty": -3}), (), 400,
         "'presence_penalty' must be at least -2 and at most 2, got -3"),
        ("body over the cap", "/v1/chat/completions", dict(chat, pad="x" * 70000), (), 413, "the limit is 65536"),
        ("body over the cap", "/api/chat", dict(chat, pad="x" * 70000), (), 413, "the limit is 65536"),
        ("prompt over the engine's cap", "/v1/chat/completions",
         dict(chat, messages=[{"role": "user", "content": "x" * 5000}]), (), 413, "the limit is 4096"),
        ("prompt over the engine's cap", "/api/generate", dict(gen, prompt="x" * 5000), (), 413, "the limit is 4096"),
        ("max_tokens of the wrong type", "/v1/chat/completions", dict(chat, max_tokens="ten"), (), 400,
         "'max_tokens' must be an integer"),
        ("temperature of the wrong type", "/v1/chat/completions", dict(chat, temperature="hot"), (), 400,
         "'temperature' must be a number"),
        ("messages of the wrong type", "/v1/chat/completions", dict(chat, messages="hi"), (), 400,
         "'messages' must be an array"),
        ("stream of the wrong type", "/api/chat", dict(chat, stream="yes"), (), 400, "'stream' must be a boolean"),
        ("options of the wrong type", "/api/generate", dict(gen, options=[1]), (), 400, "'options' must be an object"),
        ("num_predict of the wrong type", "/api/generate", dict(gen, options={"num_predict": "many"}), (), 400,
         "'num_predict' must be an integer"),
        ("temperature out of range", "/v1/chat/completions", dict(chat, temperature=-1), (), 400,
         "'temperature' must be at least 0"),
        ("no model", "/v1/chat/completions", {"messages": chat["messages"]}, (), 400, "'model' is required"),
        ("unknown model", "/v1/chat/completions", dict(chat, model="gpt-4o"), (), 404, "does not exist"),
        ("unknown model", "/api/generate", dict(gen, model="llama3"), (), 404, "not found"),
        # named back in the answer: U+001F must come out escaped (json-glib before 1.8 wrote it raw)
        ("unknown model with U+001F", "/v1/chat/completions", dict(chat, model="gpt\u001f4"), (), 404, "gpt\u001f4"),
        ("unknown model with U+001F", "/api/generate", dict(gen, model="llama\u001f3"), (), 404, "llama\u001f3"),
        ("last message not the user's", "/v1/chat/completions",
         dict(chat, messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]), (), 400,
         "The last message must be the user's"),
        ("unknown priority", "/v1/chat/completions", dict(chat, priority="urgent"), (), 400, "'priority' must be"),
        ("unknown priority header", "/api/chat", chat, ("X-Agentxpu-Priority: now",), 400, "X-Agentxpu-Priority"),
        ("prompt beyond the context", "/v1/chat/completions",
         dict(chat, messages=[{"role": "user", "content": " ".join(["word"] * 100)}]), (), 400,
         "tokens and the context holds 64"),
        ("prompt beyond the context", "/api/generate", dict(gen, prompt=" ".join(["word"] * 100)), (), 400,
         "tokens and the context holds 64"),
        ("unknown response_format", "/v1/chat/completions", dict(chat, response_format={"type": "yaml"}), (), 400,
         "'response_format' type must be text, json_object or json_schema"),
        ("json_schema without a schema", "/v1/chat/completions",
         dict(chat, response_format={"type": "json_schema", "json_schema": {"name": "x"}}), (), 400,
         "must be a JSON Schema"),
        ("a schema keyword the engine does not take", "/v1/chat/completions",
         dict(chat, response_format={"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "object", "patternProperties": {"^a": {}}}}}), (), 400,
         "patternProperties"),
        ("a tool that is not a function", "/v1/chat/completions", dict(chat, tools=[{"type": "function"}]), (), 400,
         "'tools[0]' must be"),
        ("tool_choice naming no tool", "/v1/chat/completions",
         dict(chat, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "launch"}}), (), 400,
         "which 'tools' does not have"),
        ("tool_choice without tools", "/v1/chat/completions", dict(chat, tool_choice="required"), (), 400,
         "'tool_choice' needs 'tools'"),
        ("a tool result after no call, without tools", "/v1/chat/completions",
         dict(chat, messages=[{"role": "user", "content": "hi"}, {"role": "tool", "content": "20 C"},
                              {"role": "user", "content": "and?"}]), (), 400,
         "a tool result must follow a tool_call turn"),
        ("a tool result after no call", "/api/chat",
         dict(chat, tools=TOOLS, messages=[{"role": "user", "content": "hi"}, {"role": "tool", "content": "20 C"}]),
         (), 400, "a tool result must follow a tool_call turn"),
        ("a call whose arguments are not an object", "/v1/chat/completions",
         dict(chat, tools=TOOLS, messages=[{"role": "user", "content": "hi"},
                                           {"role": "assistant", "tool_calls": [
                                               {"id": "c1", "type": "function",
                                                "function": {"name": "get_weather", "arguments": 7}}]},
                                           {"role": "tool", "tool_call_id": "c1", "content": "20 C"}]), (), 400,
         "must be a JSON object or a string holding one"),
        ("a conversation ending with a call", "/v1/chat/completions",
         dict(chat, tools=TOOLS, messages=[{"role": "user", "content": "hi"},
                                           {"role": "assistant", "tool_calls": [
                                               {"id": "c1", "type": "function",
                                                "function": {"name": "get_weather", "arguments": "{}"}}]}]), (), 400,
         "The last message must be the user's or a tool's result"),
        ("format neither json nor a schema", "/api/chat", dict(chat, format="xml"), (), 400,
         "'format' must be \"json\" or a JSON Schema"),
        ("tools and format together", "/api/chat", dict(chat, tools=TOOLS, format="json"), (), 400,
         "'tools' and 'format' cannot be combined"),
        ("image content", "/v1/chat/completions",
         dict(chat, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), (),
         400, "not supported"),
    ]


def check_error(api_openai, status, body, want_status, want_text, what):
    assert status == want_status, (what, status, body)
    if api_openai:
        e = body["error"]
        assert set(e) == {"message", "type", "param", "code"}, (what, e)
        assert want_text in e["message"], (what, e)
    else:
        assert isinstance(body["error"], str) and want_text in body["error"], (what, body)


def test_bad_inputs_and_the_bridge_keeps_serving():
    with serving(config=TABLE_CONFIG, bridge_args=["--max-body", "65536"]) as (bus, d, b):
        m = model_name(b)
        table = bad_inputs(m)
        for what, path, body, headers, want_status, want_text in table:
            status, answer = b.json(path, body, headers=headers)
            check_error(path.startswith("/v1/"), status, answer, want_status, want_text, what)
        log = b.text()
        lines = [line for line in log.splitlines() if re.search(r"POST /(v1|api)/\S+: (400|404|413) ", line)]
        assert len(lines) == len(table), (len(lines), len(table), log)
        # what clients send when they ask for none of those
        for path, body in (("/v1/chat/completions", {"model": m, "max_tokens": 2, "logprobs": False,
                                                     "top_logprobs": None, "logit_bias": {},
                                                     "messages": [{"role": "user", "content": "hi"}]}),
                           ("/v1/completions", {"model": m, "max_tokens": 2, "prompt": "hi", "echo": False,
                                                "suffix": None, "best_of": 1, "logprobs": None}),
                           ("/api/chat", {"model": m, "stream": False, "think": False, "options": {"num_predict": 2},
                                          "messages": [{"role": "user", "content": "hi"}]}),
                           ("/v1/chat/completions", {"model": m, "max_tokens": 2,
                                                     "chat_template_kwargs": {"enable_thinking": False},
                                                     "messages": [{"role": "user", "content": "hi"}]})):
            status, answer = b.json(path, body)
            assert status == 200, (path, answer)
        # a surrogate pair (an emoji, as JavaScript writes it) is text
        status, body = b.json("/api/generate", '{"model": "%s", "prompt": "ab\\ud83d\\ude00", '
                                               '"stream": false, "options": {"num_predict": 2}}' % m)
        assert status == 200, body
        # the engine gone: 503 in each API's form; back: served again
        d.stop()
        wait_for(lambda: not bus.name_has_owner(), "the engine to leave")
        status, body = b.json("/v1/chat/completions", {"model": m, "messages": [{"role": "user", "content": "hi"}]})
        check_error(True, status, body, 503, "The engine is not available", "engine gone")
        status, body = b.json("/api/generate", {"model": m, "prompt": "hi"})
        check_error(False, status, body, 503, "The engine is not available", "engine gone")
        status, body = b.json("/v1/models")
        assert status == 503, body
        from httptest import Daemon, DAEMON, model
        d2 = Daemon(bus, DAEMON, config=TABLE_CONFIG, args=["--model", model()])
        status, body = b.json("/v1/chat/completions", {"model": m, "max_tokens": 4,
                                                       "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200, body
        assert d2.stop() == 0


def test_no_bound_asks_for_the_engines_limit():
    """A request with no bound on its answer (OpenAI's max_tokens absent; Ollama's num_predict
    absent, -1 or -2) runs to the engine's MaxTokens, as those APIs do to the context: it used
    to stop at the engine's default of 256. Ollama's larger bounds are clamped, not refused."""
    with serving(config="[Limits]\nMaxTokens=300\n") as (bus, d, b):
        m = model_name(b)
        msgs = [{"role": "user", "content": "Tell me a long story."}]
        status, body = b.json("/v1/chat/completions", {"model": m, "messages": msgs})
        assert status == 200 and body["usage"]["completion_tokens"] == 300, body["usage"]
        assert body["choices"][0]["finish_reason"] == "length", body
        for options in ({}, {"num_predict": -1}, {"num_predict": -2}, {"num_predict": 5000}):
            status, body = b.json("/api/chat", {"model": m, "messages": msgs, "stream": False,
                                                 "options": options})
            assert status == 200 and body["eval_count"] == 300, (options, status, body)
        status, body = b.json("/api/generate", {"model": m, "prompt": "x", "stream": False,
                                                "options": {"num_predict": 7}})
        assert status == 200 and body["eval_count"] == 7, body
        status, body = b.json("/v1/chat/completions", {"model": m, "messages": msgs, "max_tokens": 301})
        assert status == 400, body


def test_deep_nesting_is_refused_not_a_crash():
    """json-glib's parser recurses once per level: a body of a few megabytes of '[' (under the
    default 8 MiB cap) overflowed the bridge's stack; it is refused before it parses."""
    import tempfile
    with serving() as (bus, d, b):
        m = model_name(b)
        with tempfile.TemporaryDirectory() as tmp:
            deep = os.path.join(tmp, "deep.json")
            with open(deep, "w") as f:
                f.write('{"model": "%s", "x": ' % m + "[" * 3_000_000 + "]" * 3_000_000 + "}")
            for path in ("/v1/chat/completions", "/api/generate"):
                status, answer = b.json(path, "@" + deep)
                check_error(path.startswith("/v1/"), status, answer, 400, "nested more than 128 levels deep",
                            "deep nesting")
        # a body nested 128 levels deep is still read (and this one is answered)
        status, answer = b.json("/api/generate", '{"model": "%s", "prompt": "hi", "stream": false, "x": %s}'
                                % (m, "[" * 127 + "]" * 127))
        assert status == 200, answer


def test_bodies_over_the_cap_are_not_kept():
    """libsoup keeps a request's whole body before the handler runs: a client could make the
    bridge hold any amount of memory whatever --max-body said (300 MB sent, 300 MB more). The
    bridge keeps a body up to the cap as it arrives and drops the rest."""
    def rss(pid):
        return int([line for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS")][0].split()[1]) * 1024

    with serving(bridge_args=["--max-body", "65536"]) as (bus, d, b):
        before = rss(b.proc.pid)
        block = b"a" * (1 << 20)
        for chunked in (True, False):
            s = socket.socket(socket.AF_UNIX)
            s.connect(b.socket)
            s.settimeout(WAIT)
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            s.sendall(head + (b"Transfer-Encoding: chunked\r\n\r\n" if chunked else
                              b"Content-Length: %d\r\n\r\n" % (64 << 20)))
            for _ in range(64):
                s.sendall(b"%x\r\n" % len(block) + block + b"\r\n" if chunked else block)
            if chunked:
                s.sendall(b"0\r\n\r\n")
            answer = b""
            while b"the limit is 65536" not in answer:
                got = s.recv(4096)
                assert got, answer
                answer += got
            assert answer.startswith(b"HTTP/1.1 413"), answer
            s.close()
            grown = rss(b.proc.pid) - before
            assert grown < (16 << 20), f"the bridge grew {grown >> 20} MB holding a 64 MB body (chunked: {chunked})"
        status, answer = b.json("/v1/models")
        assert status == 200, answer


def test_a_burst_of_connections_is_queued_not_refused():
    """Many agents connecting at once: GLib's default listen backlog of 10 refused the
    eleventh connection not yet accepted; the bridge listens with the system's maximum. Each
    connection is a file: the bridge raises its soft limit on open files to the hard one."""
    import resource
    with serving() as (bus, d, b):
        held = []
        try:
            for _ in range(200):
                s = socket.socket(socket.AF_UNIX)
                s.setblocking(False)
                s.connect(b.socket)     # BlockingIOError where the queue is full
                held.append(s)
            for s in held[:5]:
                s.setblocking(True)
                s.settimeout(WAIT)
                s.sendall(b"GET /api/version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                assert s.recv(64).startswith(b"HTTP/1.1 200"), "a queued connection served"
        finally:
            for s in held:
                s.close()
        soft, hard = resource.prlimit(b.proc.pid, resource.RLIMIT_NOFILE)
        assert soft == hard, (soft, hard)
        status, answer = b.json("/v1/models", tcp=True)
        assert status == 200, answer


def chat(b, messages, n=8, path="/v1/chat/completions", **kw):
    body = dict(model=model_name(b), max_tokens=n, temperature=0, messages=messages, **kw)
    if path == "/api/chat":
        body = dict(model=body["model"], messages=messages, stream=False, options={"num_predict": n, "temperature": 0})
    status, answer = b.json(path, body)
    assert status == 200, answer
    return answer


def test_conversation_reuses_its_flow():
    # the prompt cache off: what is in a KV cache already is the flows' alone
    with serving(config="[Engine]\nPromptCache=0\n") as (bus, d, b):
        u1 = "Tell me about the sea, " + " ".join(["the waves and the tide"] * 12) + "."
        first = chat(b, [{"role": "user", "content": u1}])
        a1 = first["choices"][0]["message"]["content"]
        u = first["usage"]
        assert u["prompt_tokens_details"]["cached_tokens"] == 0 and first["timings"]["prompt_n"] == u["prompt_tokens"]
        # the first turn through the template, in its role
        assert u["prompt_tokens"] == token_count(llama3(("user", u1))), (u, token_count(llama3(("user", u1))))
        turns = [{"role": "user", "content": u1}, {"role": "assistant", "content": a1},
                 {"role": "user", "content": "And the mountains?"}]
        second = chat(b, turns)
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        prefilled = second["timings"]["prompt_n"]
        # the flow held the first turn and its answer but for the answer's last token; only
        # that token and the new turn are prefilled: the answer closed (this model never
        # closes one itself) and the user's turn, as the whole conversation renders
        new_turn = "<|eot_id|>" + llama3(("user", "And the mountains?"))
        print(f"    first turn: {u['prompt_tokens']} prefilled; second: {cached} cached, {prefilled} prefilled",
              flush=True)
        assert cached == u["prompt_tokens"] + u["completion_tokens"] - 1, (cached, u)
        assert prefilled == 1 + token_count(new_turn, bos=False), (prefilled, token_count(new_turn, bos=False))
        assert second["usage"]["prompt_tokens"] == cached + prefilled
        # a third turn continues the same flow; Ollama's prompt_eval_count is what it prefilled
        turns += [{"role": "assistant", "content": second["choices"][0]["message"]["content"]},
                  {"role": "user", "content": "Thanks."}]
        third = chat(b, turns, path="/api/chat")
        assert third["prompt_eval_count"] == 1 + token_count("<|eot_id|>" + llama3(("user", "Thanks.")), bos=False), third
        # an earlier message changed: nothing to continue, the whole conversation again
        changed = [dict(turns[0], content=u1 + " Please."), *turns[1:3]]
        again = chat(b, changed)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert again["timings"]["prompt_n"] == again["usage"]["prompt_tokens"] > prefilled

        # at most --flows (2) kept: a third new conversation closes the one used longest ago
        convs = {}
        for name in ("A", "B", "C"):
            msgs = [{"role": "user", "content": f"Conversation {name}."}]
            msgs.append({"role": "assistant", "content": chat(b, msgs, n=4)["choices"][0]["message"]["content"]})
            convs[name] = msgs + [{"role": "user", "content": "Go on."}]
        assert chat(b, convs["A"], n=2)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert chat(b, convs["C"], n=2)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        # stop strings end an answer inside the KV cache: such a turn keeps no flow
        s1 = [{"role": "user", "content": "Count."}]
        s1.append({"role": "assistant", "content": chat(b, s1, n=4, stop=["never said"])["choices"][0]["message"]["content"]})
        assert chat(b, s1 + [{"role": "user", "content": "More."}], n=2)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        # the engine gone and back: its flows went with it, and the conversation starts afresh
        d.stop()
        wait_for(lambda: not bus.name_has_owner(), "the engine to leave")
        from httptest import Daemon, DAEMON, model
        d2 = Daemon(bus, DAEMON, args=["--model", model()])
        again = chat(b, convs["C"][:-1] + [{"role": "user", "content": "Again."}], n=2)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert d2.stop() == 0


def test_structured_output_with_curl():
    with serving() as (bus, d, b):
        hi = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = chat(b, [{"role": "user", "content": "hi"}], n=64, response_format={"type": "json_object"})
        assert r["choices"][0]["finish_reason"] == "stop", r
        assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict), r
        schema = {"type": "json_schema", "json_schema": {"name": "weather", "strict": True, "schema": WEATHER}}
        r = chat(b, hi, n=64, response_format=schema)
        got = json.loads(r["choices"][0]["message"]["content"])
        assert got["city"] in ("Paris", "Oslo") and got["unit"] in ("C", "F"), got
        # a call, required
        r = chat(b, hi, n=64, tools=TOOLS, tool_choice="required")
        c = r["choices"][0]
        assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None, c
        call = c["message"]["tool_calls"][0]
        assert call["type"] == "function" and call["function"]["name"] == "get_weather" and call["id"], call
        assert set(json.loads(call["function"]["arguments"])) == {"city", "unit"}, call
        # a system message with tools: the engine's system prompt
        r = chat(b, [{"role": "system", "content": "Answer with a call."}] + hi, n=64, tools=TOOLS,
                 tool_choice="required")
        assert r["choices"][0]["finish_reason"] == "tool_calls", r
        assert r["usage"]["prompt_tokens"] > chat(b, hi, n=64, tools=TOOLS, tool_choice="required")["usage"]["prompt_tokens"]
        # streamed: the call in one delta, as OpenAI's clients gather it
        status, text = b.curl("/v1/chat/completions", dict(model=model_name(b), max_tokens=64, temperature=0,
                                                           messages=hi, tools=TOOLS, tool_choice="required",
                                                           stream=True))
        assert status == 200, text
        events = sse_events(text)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
        deltas = [ch["delta"]["tool_calls"][0] for ch in chunks if "tool_calls" in ch["delta"]]
        assert len(deltas) == 1 and deltas[0]["index"] == 0 and deltas[0]["function"]["name"] == "get_weather", chunks
        assert json.loads(deltas[0]["function"]["arguments"])["city"] in ("Paris", "Oslo")
        assert chunks[-1]["finish_reason"] == "tool_calls"
        assert not any(ch["delta"].get("content") for ch in chunks), chunks
        # tool_choice naming the function; "none": text
        r = chat(b, hi, n=64, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
        assert r["choices"][0]["finish_reason"] == "tool_calls", r
        r = chat(b, hi, n=4, tools=TOOLS, tool_choice="none")
        assert r["choices"][0]["finish_reason"] == "length" and "tool_calls" not in r["choices"][0]["message"], r
        # Ollama: format "json" and a schema, tools
        m = model_name(b)
        status, r = b.json("/api/chat", {"model": m, "messages": [{"role": "user", "content": "hi"}],
                                         "stream": False, "format": "json",
                                         "options": {"num_predict": 64, "temperature": 0}})
        assert status == 200 and isinstance(json.loads(r["message"]["content"]), dict), r
        status, r = b.json("/api/generate", {"model": m, "prompt": "Weather?", "stream": False, "format": WEATHER,
                                             "options": {"num_predict": 64, "temperature": 0}})
        assert status == 200 and json.loads(r["response"])["city"] in ("Paris", "Oslo"), r
        status, text = b.curl("/api/chat", {"model": m, "messages": hi, "tools": TOOLS,
                                            "options": {"num_predict": 64, "temperature": 0}})
        assert status == 200, text
        lines = [json.loads(line) for line in text.split("\n") if line]
        calls = [x["message"]["tool_calls"] for x in lines if x["message"].get("tool_calls")]
        # a model of random weights may answer in text or with a call; what it says is whole
        if calls:
            assert calls[0][0]["function"]["name"] == "get_weather", calls
            assert isinstance(calls[0][0]["function"]["arguments"], dict), calls
        assert lines[-1]["done"] is True
        # the tool loop: the call and its result go back, the model answers the result
        loop = hi + [{"role": "assistant", "content": "",
                      "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}}]},
                     {"role": "tool", "content": "{\"temp\": 22}", "tool_name": "get_weather"}]
        status, text = b.curl("/api/chat", {"model": m, "messages": loop, "tools": TOOLS,
                                            "options": {"num_predict": 8, "temperature": 0}})
        assert status == 200, text
        lines = [json.loads(line) for line in text.split("\n") if line]
        assert lines[-1]["done"] is True and lines[-1]["prompt_eval_count"] > 0, lines[-1]
        # a question after the result: a new user turn
        status, text = b.curl("/api/chat", {"model": m, "messages": loop + [{"role": "user", "content": "And Oslo?"}],
                                            "tools": TOOLS, "options": {"num_predict": 8, "temperature": 0}})
        assert status == 200, text
        # (the prompt cache holds the turns before it: what is evaluated is the new turn)
        last = json.loads(text.strip().split("\n")[-1])
        assert last["done"] is True and 0 < last["prompt_eval_count"] < lines[-1]["prompt_eval_count"], text


def test_http_1_0_streams_are_not_chunked():
    """An HTTP/1.0 client cannot read chunks (RFC 9112 forbids sending them): its stream is
    the bare events, ended by closing the connection."""
    with serving() as (bus, d, b):
        m = model_name(b)
        want = complete(bus, "Hello", 12)
        for path, body in (("/v1/chat/completions", {"model": m, "max_tokens": 12, "temperature": 0, "stream": True,
                                                     "messages": [{"role": "user", "content": "Hello"}]}),
                           ("/api/chat", {"model": m, "messages": [{"role": "user", "content": "Hello"}],
                                          "options": {"num_predict": 12, "temperature": 0}})):
            data = json.dumps(body).encode()
            s = socket.socket(socket.AF_UNIX)
            s.connect(b.socket)
            s.settimeout(WAIT)
            s.sendall(b"POST %s HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % (path.encode(), len(data)) + data)
            answer = b""
            while True:
                got = s.recv(65536)
                if not got:
                    break
                answer += got
            s.close()
            head, _, text = answer.decode().partition("\r\n\r\n")
            assert head.startswith("HTTP/1.0 200") or head.startswith("HTTP/1.1 200"), head
            assert "chunked" not in head.lower() and "content-length" not in head.lower(), head
            if path.startswith("/v1/"):
                events = sse_events(text)
                assert events[-1] == "[DONE]", text
                got = "".join(json.loads(e)["choices"][0]["delta"].get("content", "")
                              for e in events[:-1] if json.loads(e)["choices"])
            else:
                lines = ndjson(text)
                assert lines[-1]["done"], lines
                got = "".join(x["message"]["content"] for x in lines)
            assert got == want, (path, got, want)
        status, body = b.json("/v1/models")
        assert status == 200, body


def test_tool_choice_none_after_a_tool_result():
    """An agent's last step: the tools, the model's earlier call and its result, and
    tool_choice "none" for the answer in text. The prompt holds the tools and the call as with
    "auto"; the answer is text, never a call; without the tools, the call and result are
    written all the same (OpenAI takes such a history)."""
    with serving() as (bus, d, b):
        loop = [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"C\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 22}"}]
        auto = chat(b, loop, n=1, tools=TOOLS, tool_choice="auto")["usage"]["prompt_tokens"]
        first = chat(b, loop, n=8, tools=TOOLS, tool_choice="none")
        text = first["choices"][0]["message"]["content"]
        assert first["usage"]["prompt_tokens"] == auto, (first, auto)
        assert text and not text.startswith("{") and "tool_calls" not in first["choices"][0]["message"], first
        # the model of the tests never ends on its own: a stop string in its answer ends it
        stop = text[len(text) // 2:]
        r = chat(b, loop, n=64, tools=TOOLS, tool_choice="none", stop=[stop])
        c = r["choices"][0]
        assert r["usage"]["prompt_tokens"] == auto, r
        assert c["finish_reason"] == "stop", r
        assert c["message"] == {"role": "assistant", "content": text[:text.find(stop)]} and c["message"]["content"], r
        # streamed: the same text as it comes, no call
        status, body = b.curl("/v1/chat/completions", dict(model=model_name(b), max_tokens=8, temperature=0,
                                                           messages=loop, tools=TOOLS, tool_choice="none",
                                                           stream=True))
        assert status == 200, body
        chunks = [json.loads(e)["choices"][0] for e in sse_events(body)[:-1]]
        assert "".join(ch["delta"].get("content") or "" for ch in chunks) == text, chunks
        assert not any("tool_calls" in ch["delta"] for ch in chunks) and chunks[-1]["finish_reason"] == "length"
        # without the tools (tool_choice none or absent): the history as the template writes it
        # without a tool list, the answer text
        for kw in ({"tool_choice": "none"}, {}):
            r = chat(b, loop, n=8, **kw)
            c = r["choices"][0]
            assert c["finish_reason"] == "length" and c["message"]["content"], r
            assert "tool_calls" not in c["message"] and 0 < r["usage"]["prompt_tokens"] < auto, (r, auto)
        # none with a response_format: the answer follows it, the history written without the tools
        r = chat(b, loop, n=64, tools=TOOLS, tool_choice="none",
                 response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}})
        assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["prompt_tokens"] < auto, r
        assert json.loads(r["choices"][0]["message"]["content"])["city"] in ("Paris", "Oslo"), r
        # Ollama's: no tool_choice; a tool result without tools is answered the same way
        status, r = b.json("/api/chat", {"model": model_name(b), "messages": loop[:1] + [
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}}]},
            {"role": "tool", "content": "{\"temp\": 22}"}], "stream": False,
            "options": {"num_predict": 8, "temperature": 0}})
        assert status == 200 and r["message"]["content"] and not r["message"].get("tool_calls"), r


def test_several_choices():
    """OpenAI's n: n answers, each its own engine request, choice i sampled with the seed plus
    i (so each is the answer of n=1 with that seed); usage counts the prompt once and every
    choice's tokens. Streamed, each chunk carries one choice's index; every index gets its
    role, its text and its finish_reason, and [DONE] comes once, after all. Tool calls: each
    choice's own. n of 0, over the bound or not an integer is refused; more choices than the
    engine lets one user run is 429 with nothing left running."""
    def ask(b, messages, max_tokens, **kw):
        status, answer = b.json("/v1/chat/completions", dict(model=model_name(b), max_tokens=max_tokens,
                                                             messages=messages, **kw))
        assert status == 200, answer
        return answer

    with serving() as (bus, d, b):
        m = model_name(b)
        hello = [{"role": "user", "content": "Hello"}]
        r = ask(b, hello, 12, temperature=1.0, seed=7, n=3)
        assert [c["index"] for c in r["choices"]] == [0, 1, 2], r
        # the later choices went once the first one's prompt was in the engine's prompt cache:
        # the first prefilled the prompt, they its last token alone
        nodes = sorted(map(int, bus.request_nodes()))[-3:]
        stats = [bus.busctl("get-property", NAME, f"{PATH}/request/{n}", REQ_IFACE, "Stats").json["data"]
                 for n in nodes]
        assert [s["prefill_tokens"]["data"] for s in stats] == [r["usage"]["prompt_tokens"], 1, 1], stats
        one = [ask(b, hello, 12, temperature=1.0, seed=7 + i)["choices"][0]["message"]["content"] for i in range(3)]
        assert len(set(one)) > 1, one
        assert [c["message"]["content"] for c in r["choices"]] == one, (r, one)
        assert all(c["finish_reason"] == "length" for c in r["choices"]), r
        single = ask(b, hello, 12, temperature=0)["usage"]
        assert r["usage"]["prompt_tokens"] == single["prompt_tokens"], (r["usage"], single)
        assert r["usage"]["completion_tokens"] == 36 and r["usage"]["total_tokens"] == single["prompt_tokens"] + 36, r

        # completions, greedy: every choice the same text
        status, body = b.json("/v1/completions", {"model": m, "prompt": "Once upon a time", "max_tokens": 6,
                                                  "temperature": 0, "n": 2})
        assert status == 200 and len(body["choices"]) == 2, body
        assert body["choices"][0]["text"] == body["choices"][1]["text"] == complete(bus, "Once upon a time", 6, raw=True)

        # streamed: the chunks of the choices interleave, each names its index
        status, text = b.curl("/v1/chat/completions", {"model": m, "max_tokens": 12, "temperature": 1.0, "seed": 7,
                                                       "n": 3, "stream": True, "stream_options": {"include_usage": True},
                                                       "messages": hello})
        assert status == 200, text
        events = sse_events(text)
        assert events[-1] == "[DONE]" and events.count("[DONE]") == 1, events[-3:]
        chunks = [json.loads(e) for e in events[:-1]]
        got, roles, finish = ["", "", ""], [0, 0, 0], [None, None, None]
        for c in chunks[:-1]:
            assert len(c["choices"]) == 1 and c["usage"] is None, c
            ch = c["choices"][0]
            assert finish[ch["index"]] is None, ("a chunk after its choice finished", c)
            roles[ch["index"]] += ch["delta"].get("role") == "assistant"
            got[ch["index"]] += ch["delta"].get("content") or ""
            finish[ch["index"]] = ch["finish_reason"]
        assert roles == [1, 1, 1] and finish == ["length"] * 3 and got == one, (roles, finish, got, one)
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 36, chunks[-1]

        # each choice's call, each with an id of its own, streamed as given whole
        hi = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = ask(b, hi, 64, tools=TOOLS, tool_choice="required", temperature=1.0, seed=3, n=2)
        assert [c["finish_reason"] for c in r["choices"]] == ["tool_calls"] * 2, r
        calls = [c["message"]["tool_calls"][0] for c in r["choices"]]
        assert calls[0]["id"] != calls[1]["id"] and all(c["function"]["name"] == "get_weather" for c in calls), r
        status, text = b.curl("/v1/chat/completions", dict(model=m, max_tokens=64, temperature=1.0, seed=3, n=2,
                                                           messages=hi, tools=TOOLS, tool_choice="required",
                                                           stream=True))
        assert status == 200, text
        streamed = {}
        for e in sse_events(text)[:-1]:
            ch = json.loads(e)["choices"][0]
            for t in ch["delta"].get("tool_calls", []):
                streamed[ch["index"]] = (t["id"], t["function"]["name"], json.loads(t["function"]["arguments"]))
        assert {i: v[1:] for i, v in streamed.items()} == {
            i: (c["function"]["name"], json.loads(c["function"]["arguments"])) for i, c in enumerate(calls)}, (streamed, calls)
        assert streamed[0][0] != streamed[1][0], streamed

        for n, want in ((0, "'n' must be from 1 to 16, got 0"), (17, "'n' must be from 1 to 16, got 17"),
                        ("2", "'n' must be an integer")):
            status, body = b.json("/v1/chat/completions", {"model": m, "messages": hello, "n": n})
            assert status == 400 and want in body["error"]["message"], (n, status, body)

        # a client that leaves: every choice's request is cancelled
        for stream in (True, False):
            p = b.curl_spawn("/v1/chat/completions", {"model": m, "max_tokens": 4000, "n": 3, "stream": stream,
                                                      "messages": hello})
            wait_for(lambda: bus.props()["Running"] == 3, "the three choices to run")
            if stream:
                assert p.stdout.readline().startswith("data: ")
            p.kill()
            p.wait()
            wait_for(lambda: engine_idle(bus), "every choice to be cancelled")

    with serving(config="[Limits]\nRequestsPerUser=2\n") as (bus, d, b):
        for stream in (False, True):
            status, body = b.curl("/v1/chat/completions", {"model": model_name(b), "max_tokens": 200, "n": 3,
                                                           "stream": stream,
                                                           "messages": [{"role": "user", "content": "Hello"}]})
            assert status == 429 and "rate_limit_exceeded" in body, (status, body)
            wait_for(lambda: engine_idle(bus), "the other choices to be cancelled")
        assert ask(b, [{"role": "user", "content": "Hello"}], 4, n=2)["usage"]["completion_tokens"] == 8


def test_prompt_cache_serves_agents():
    """An agent sends the same system prompt and tools with each new question: the engine's
    prompt cache copies what an earlier request held of it instead of prefilling it again
    (usage.prompt_tokens_details.cached_tokens, llama-server's timings.cache_n and prompt_n,
    D-Bus's KVMemoryCached), and each answer is the one an engine without the cache gives."""
    system = "You are a careful agent. " + " ".join(f"Rule {i}: check the weather before you answer." for i in range(12))
    questions = ["What is the weather in Paris?", "What is the weather in Oslo?", "And tomorrow in Paris?"]

    def ask_all(b):
        out = []
        for q in questions:
            r = chat(b, [{"role": "system", "content": system}, {"role": "user", "content": q}], n=12,
                     tools=TOOLS, tool_choice="auto")
            out.append(r)
        return out

    with serving(config="[Engine]\nPromptCache=0\n") as (bus, d, b):
        plain = ask_all(b)
        assert bus.props()["KVMemoryCached"] == 0
    with serving() as (bus, d, b):
        cached = ask_all(b)
        assert bus.props()["KVMemoryCached"] > 0 and bus.props()["KVMemoryUsed"] == 0, bus.props()
    for i, (p, c) in enumerate(zip(plain, cached)):
        assert p["choices"] == c["choices"], (i, p, c)
        assert p["usage"]["prompt_tokens"] == c["usage"]["prompt_tokens"], (i, p["usage"], c["usage"])
        assert p["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, p["usage"]
        if i == 0:
            assert c["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, c["usage"]
        else:
            # the system prompt and the tools at least, the question not
            hit = c["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert token_count(system, bos=False) < hit < c["usage"]["prompt_tokens"], (i, c["usage"])
            assert c["timings"]["cache_n"] == hit and c["timings"]["prompt_n"] == c["usage"]["prompt_tokens"] - hit, c


def test_fill_in_the_middle():
    """Code completion in an editor: OpenAI's /v1/completions and Ollama's /api/generate with a
    suffix fill in the middle with the model's FIM tokens (a model made with mkmodel --fim):
    the answer is what `agentxpu generate --suffix` gives, whole and streamed, and the prompt
    counts what llama.cpp's /infill prompt holds."""
    from httptest import CLI, coder_model, run
    path = coder_model(2048)
    prefix, suffix = "def area(r):\n    ", "\n    return a\n"
    r = run([CLI, "generate", "-m", path, "-p", prefix, "--suffix", suffix, "-n", "10", "--temperature", "0", "--json"])
    assert r.rc == 0, r
    want = json.loads(r.out)
    with serving(model_path=path) as (bus, d, b):
        m = model_name(b)
        status, body = b.json("/v1/completions", {"model": m, "prompt": prefix, "suffix": suffix, "max_tokens": 10,
                                                  "temperature": 0})
        assert status == 200 and body["choices"][0]["text"] == want["text"], (body, want)
        assert body["usage"]["prompt_tokens"] == len(want["prompt_tokens"]), (body["usage"], want)
        status, text = b.curl("/v1/completions", {"model": m, "prompt": prefix, "suffix": suffix, "max_tokens": 10,
                                                  "temperature": 0, "stream": True})
        assert status == 200, text
        got = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(text)[:-1])
        assert got == want["text"], (got, want)
        status, body = b.json("/api/show", {"model": m})
        assert status == 200 and body["capabilities"] == ["completion", "insert"], body
        status, body = b.json("/api/generate", {"model": m, "prompt": prefix, "suffix": suffix, "stream": False,
                                                "options": {"num_predict": 10, "temperature": 0}})
        assert status == 200 and body["response"] == want["text"], (body, want)
        assert body["prompt_eval_count"] <= len(want["prompt_tokens"]), body
        # an empty suffix is none: the prompt continued as it is
        status, body = b.json("/v1/completions", {"model": m, "prompt": prefix, "suffix": "", "max_tokens": 4,
                                                  "temperature": 0})
        assert status == 200 and body["usage"]["prompt_tokens"] < len(want["prompt_tokens"]), body


def test_logprobs():
    """OpenAI's logprobs (chat: logprobs and top_logprobs; completions: logprobs) and Ollama's:
    each token's log-probability and its alternatives', the same whole and streamed and on
    every API (one engine, greedy), the most likely first; out of range is a 400."""
    with serving() as (bus, d, b):
        m = model_name(b)
        ask = {"model": m, "max_tokens": 8, "temperature": 0}
        msgs = [{"role": "user", "content": "Hello"}]
        status, body = b.json("/v1/chat/completions", dict(ask, messages=msgs, logprobs=True, top_logprobs=3))
        assert status == 200, body
        ch = body["choices"][0]
        content = ch["logprobs"]["content"]
        assert len(content) == 8 and ch["logprobs"]["refusal"] is None, ch
        for e in content:
            assert len(e["top_logprobs"]) == 3 and e["logprob"] <= 0, e
            assert e["top_logprobs"][0] == {k: e[k] for k in ("token", "logprob", "bytes")}, e
            assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"] >= e["top_logprobs"][2]["logprob"]
        assert bytes(x for e in content for x in e["bytes"]).decode("utf-8", "replace") == ch["message"]["content"]
        # streamed: each chunk holds the records of its text; together the same
        status, text = b.curl("/v1/chat/completions", dict(ask, messages=msgs, logprobs=True, top_logprobs=3,
                                                           stream=True))
        assert status == 200, text
        chunks = [json.loads(e)["choices"] for e in sse_events(text)[:-1]]
        streamed = [r for c in chunks if c and c[0]["logprobs"] for r in c[0]["logprobs"]["content"]]
        assert streamed == content, (streamed, content)
        for c in chunks:
            if c and c[0]["delta"].get("content"):
                lp = c[0]["logprobs"]["content"]
                assert bytes(x for e in lp for x in e["bytes"]).decode("utf-8", "replace") == c[0]["delta"]["content"]
        # without logprobs: null
        status, body = b.json("/v1/chat/completions", dict(ask, messages=msgs))
        assert status == 200 and body["choices"][0]["logprobs"] is None, body
        # completions' form, on the raw prompt; and Ollama's, whole and streamed
        status, body = b.json("/v1/completions", dict(ask, prompt="Hello", logprobs=2))
        assert status == 200, body
        lp = body["choices"][0]["logprobs"]
        assert len(lp["tokens"]) == 8 and len(lp["token_logprobs"]) == 8 and len(lp["text_offset"]) == 8, lp
        assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"]), lp
        for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            assert len(top) <= 2 and top.get(tok) == v == max(top.values()), (tok, v, top)
        raw = {"model": m, "prompt": "Hello", "raw": True, "logprobs": True, "top_logprobs": 2,
               "options": {"num_predict": 8, "temperature": 0}}
        status, whole = b.json("/api/generate", dict(raw, stream=False))
        assert status == 200, whole
        assert [e["logprob"] for e in whole["logprobs"]] == lp["token_logprobs"], (whole, lp)
        assert [e["token"] for e in whole["logprobs"]] == lp["tokens"], (whole, lp)
        status, text = b.curl("/api/generate", raw)
        assert status == 200, text
        assert [e for o in ndjson(text) for e in o.get("logprobs", [])] == whole["logprobs"], text
        # several choices: each its own
        status, body = b.json("/v1/chat/completions", dict(ask, messages=msgs, logprobs=True, n=2, seed=3,
                                                           temperature=1.0))
        assert status == 200 and all(len(c["logprobs"]["content"]) == 8 for c in body["choices"]), body
        for bad, why in ((dict(ask, messages=msgs, logprobs=True, top_logprobs=21), "from 0 to 20"),
                         (dict(ask, messages=msgs, top_logprobs=2), "needs 'logprobs': true")):
            status, body = b.json("/v1/chat/completions", bad)
            assert status == 400 and why in body["error"]["message"], (bad, body)
        status, body = b.json("/v1/completions", dict(ask, prompt="Hello", logprobs=21))
        assert status == 400 and "from 0 to 20" in body["error"]["message"], body
        status, body = b.json("/api/chat", {"model": m, "messages": msgs, "logprobs": True, "top_logprobs": -1})
        assert status == 400 and "from 0 to 20" in body["error"], body


def test_infill_for_code_editors():
    """llama-server's /infill, as llama.vim and llama.vscode call it: the prefix, the suffix,
    the text typed at the cursor ("prompt") and other files' chunks ("input_extra") make
    llama.cpp's repo-level FIM prompt (its tokens are the pieces' tokens in order, and the
    answer is generate --raw's for that text written out); response_fields picks fields by
    path; streamed, the events' content makes the same answer; n_predict 0 prefills only, and
    the next request takes that from the prompt cache; t_max_predict_ms ends an answer at a
    line past that time, n_indent at a line indented less; a prefix past 3/4 of llama-server's
    batch is cut from the front ("truncated"); a model without FIM tokens and bad fields are
    400s."""
    from httptest import CLI, coder_model, run
    path = coder_model(8192)

    def tokens(text, special=False):
        r = run([CLI, "tokenize", "-m", path, "-p", text, "--json", "--no-bos"] +
                ([] if special else ["--no-parse-special"]))
        assert r.rc == 0, r
        return json.loads(r.out)["tokens"]

    chunk, prefix, middle, suffix = "import math\n", "def area(r):\n", "    return", "\n\nprint(area(2))\n"
    sp = {n: tokens(f"<|{n}|>", True) for n in ("repo_name", "file_sep", "fim_prefix", "fim_suffix", "fim_middle")}
    want = (sp["repo_name"] + tokens("myproject\n") + sp["file_sep"] + tokens("a.py\n") + tokens(chunk) +
            sp["file_sep"] + tokens("filename\n") + sp["fim_prefix"] + tokens(prefix) + tokens(middle) +
            sp["fim_suffix"] + tokens(suffix) + sp["fim_middle"])
    written = ("<|repo_name|>myproject\n<|file_sep|>a.py\n" + chunk + "<|file_sep|>filename\n<|fim_prefix|>" + prefix +
               middle + "<|fim_suffix|>" + suffix + "<|fim_middle|>")
    assert tokens(written, True) == want, "the texts tokenize alike written out"
    r = run([CLI, "generate", "-m", path, "--raw", "-p", written, "-n", "10", "--temperature", "0", "--json"])
    assert r.rc == 0, r
    answer = json.loads(r.out)["text"]
    req = {"input_prefix": prefix, "input_suffix": suffix, "prompt": middle, "n_predict": 10, "temperature": 0,
           "input_extra": [{"filename": "a.py", "text": chunk}], "id_slot": 0, "cache_prompt": True,
           "samplers": ["top_k", "top_p", "infill"], "t_max_predict_ms": 1000}
    with serving(model_path=path) as (bus, d, b):
        status, body = b.json("/infill", req)
        assert status == 200, body
        assert body["content"] == answer and body["tokens_evaluated"] == len(want), (body, answer, len(want))
        assert body["tokens_predicted"] == 10 and body["stop"] is True and body["truncated"] is False, body
        assert body["stop_type"] == "limit" and body["timings"]["predicted_n"] == 10, body
        fields = ["content", "timings/prompt_n", "timings/predicted_per_second", "truncated", "tokens_cached", "nothing/here"]
        status, picked = b.json("/infill", dict(req, response_fields=fields))
        assert status == 200 and sorted(picked) == sorted(fields[:-1]) and picked["content"] == answer, picked
        status, text = b.curl("/infill", dict(req, stream=True))
        assert status == 200, text
        events = [json.loads(e) for e in sse_events(text)]
        assert "".join(e["content"] for e in events) == answer and events[-1]["stop"] is True, events
        assert all(e["stop"] is False for e in events[:-1]), events
        # t_max_predict_ms: past it, the answer ends once a line is complete (seed 46 draws a new
        # line after 182 characters here)
        sampled = dict(req, n_predict=200, temperature=1.0, seed=46)
        status, full = b.json("/infill", sampled)
        nl = full["content"].find("\n")
        assert status == 200 and 0 <= nl < len(full["content"]) - 100, full
        status, cut = b.json("/infill", dict(sampled, t_max_predict_ms=1))
        assert status == 200 and cut["stop_type"] == "limit" and full["content"].startswith(cut["content"]), cut
        assert nl < len(cut["content"]) < len(full["content"]) and cut["tokens_predicted"] < 200, (cut, nl)
        # n_indent: the first line indented less ends the answer, cut where its text begins
        pos = nl + 1
        while full["content"][pos] in " \t":
            pos += 1
        status, short = b.json("/infill", dict(sampled, n_indent=pos - nl))
        assert status == 200 and short["content"] == full["content"][:pos] and short["stop_type"] == "limit", \
            (short, full["content"][:pos])
        status, text = b.curl("/infill", dict(sampled, n_indent=pos - nl, stream=True))
        assert status == 200 and "".join(json.loads(e)["content"] for e in sse_events(text)) == full["content"][:pos]
        # a stop string ends it as a "word", the one that did named
        word = full["content"][nl + 4:nl + 7]
        at = full["content"].find(word)
        status, stopped = b.json("/infill", dict(sampled, stop=["\u0001never", word]))
        assert status == 200 and stopped["content"] == full["content"][:at], (stopped, word)
        assert stopped["stop_type"] == "word" and stopped["stopping_word"] == word, stopped
        assert full["stop_type"] == "limit" and full["stopping_word"] == "", full
        # the editor sends its extra context ahead with n_predict 0: the next request's
        # prompt begins with it, from the prompt cache
        other = [{"filename": "b.py", "text": "def volume(r, h):\n    return area(r) * h\n" * 4}]
        status, body = b.json("/infill", {"input_prefix": "", "input_suffix": "", "input_extra": other, "n_predict": 0})
        assert status == 200 and body["content"] == "" and body["tokens_predicted"] == 0, body
        status, body = b.json("/infill", dict(req, input_extra=other))
        assert status == 200 and body["timings"]["cache_n"] >= 40, body
        # a prefix past 3/4 of the batch: its end is kept
        long_prefix = "x = 1\n" * 1200
        status, body = b.json("/infill", dict(req, input_prefix=long_prefix, n_predict=2))
        assert status == 200 and body["truncated"] is True, body
        assert body["tokens_evaluated"] < len(tokens(long_prefix)), body
        for bad, why in (({"input_prefix": "a"}, '"input_suffix" is required'),
                         (dict(req, input_extra="x"), "'input_extra' must be an array"),
                         (dict(req, input_extra=[{"filename": "a"}]), "'input_extra' must be an array of"),
                         (dict(req, n_predict=-2), "'n_predict' must be"),
                         (dict(req, model="other"), "does not exist")):
            status, body = b.json("/infill", bad)
            assert status in (400, 404) and why in body["error"]["message"], (bad, body)
    with serving() as (bus, d, b):
        status, body = b.json("/infill", {"input_prefix": "a", "input_suffix": "b"})
        assert status == 400 and "no fill-in-the-middle tokens" in body["error"]["message"], body


def test_engine_leaving_mid_stream_ends_the_stream_with_an_error():
    with serving() as (bus, d, b):
        m = model_name(b)
        p = b.curl_spawn("/v1/chat/completions", {"model": m, "max_tokens": 4000, "stream": True,
                                                  "messages": [{"role": "user", "content": "Hello"}]})
        assert p.stdout.readline().startswith("data: ")
        d.stop(sig=9)
        out, _ = p.communicate(timeout=WAIT)
        assert "data: [DONE]" not in out
        last = [e for e in out.split("\n\n") if e.startswith("data: ")][-1]
        assert "The engine left the bus" in json.loads(last[len("data: "):])["error"]["message"], last
        assert p.returncode == 0


def test_embeddings():
    """/v1/embeddings, /api/embed and /api/embeddings with curl: each input's vector is the
    engine's Embed (agentxpu embed) for its text, in order, unit length (the older Ollama route
    not); base64 is the same float32 bytes; usage and prompt_eval_count count the tokens;
    Ollama's embed cuts a text beyond the context unless truncate is false; bad inputs are the
    API's 400s, another model 404, GET 405."""
    import base64
    import struct
    texts = ["The cat sat on the mat.", "A dog ran in the park.", "Embeddings map text to vectors.",
             "Short", "Five inputs go four at a time."]
    with serving(config="[Engine]\nContextSize=128\n") as (bus, d, b):
        m = model_name(b)
        want = []
        for t in texts:
            r = bus.cli("embed", "--stats", t)
            assert r.rc == 0, r
            want.append(json.loads(r.out))
        tokens = [int(bus.cli("embed", "--stats", t).err.split()[0]) for t in texts]

        def close(got, exp, scale=1.0):
            return len(got) == len(exp) == 512 and all(abs(a - b * scale) < 2e-7 for a, b in zip(got, exp))

        status, body = b.json("/v1/embeddings", {"model": m, "input": texts})
        assert status == 200, body
        assert body["object"] == "list" and body["model"] == m, body.keys()
        assert [x["index"] for x in body["data"]] == list(range(5)) and body["data"][0]["object"] == "embedding"
        assert all(close(x["embedding"], w) for x, w in zip(body["data"], want))
        assert body["usage"] == {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}, (body["usage"], tokens)
        status, body = b.json("/v1/embeddings", {"model": m, "input": texts[0], "encoding_format": "base64",
                                                  "priority": "background"})
        assert status == 200, body
        raw = base64.b64decode(body["data"][0]["embedding"])
        assert close(list(struct.unpack("<512f", raw)), want[0])

        status, body = b.json("/api/embed", {"model": m, "input": texts[:2]})
        assert status == 200, body
        assert body["model"] == m and len(body["embeddings"]) == 2 and body["prompt_eval_count"] == sum(tokens[:2])
        assert close(body["embeddings"][0], want[0]) and close(body["embeddings"][1], want[1])
        assert body["total_duration"] > 0
        status, body = b.json("/api/embed", {"model": m + ":latest", "input": texts[3]})
        assert status == 200 and close(body["embeddings"][0], want[3]), body
        status, body = b.json("/api/embeddings", {"model": m, "prompt": texts[0]})
        assert status == 200, body
        v = body["embedding"]
        norm = sum(x * x for x in v) ** 0.5
        assert abs(norm - 1) > 1e-3 and close(v, want[0], norm), norm

        long = "word " * 300
        status, body = b.json("/api/embed", {"model": m, "input": long})
        assert status == 200 and body["prompt_eval_count"] == 127, body
        status, body = b.json("/api/embed", {"model": m, "input": long, "truncate": False})
        assert status == 400 and "context" in body["error"], body
        status, body = b.json("/v1/embeddings", {"model": m, "input": long})
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body

        for path, req, what in [
                ("/v1/embeddings", {"input": "x"}, "'model' is required"),
                ("/v1/embeddings", {"model": m}, "'input' is required"),
                ("/v1/embeddings", {"model": m, "input": []}, "empty array"),
                ("/v1/embeddings", {"model": m, "input": ["a", ""]}, "empty string"),
                ("/v1/embeddings", {"model": m, "input": [1, 2, 3]}, "token ids"),
                ("/v1/embeddings", {"model": m, "input": 7}, "must be a string"),
                ("/v1/embeddings", {"model": m, "input": "x", "encoding_format": "int8"}, "'encoding_format'"),
                ("/v1/embeddings", {"model": m, "input": "x", "dimensions": 256}, "'dimensions' is 256"),
                # known before any text runs (ModelInfo's embedding_length): not the context's error
                ("/v1/embeddings", {"model": m, "input": long, "dimensions": 256}, "'dimensions' is 256"),
                ("/api/embed", {"model": m, "input": "x", "truncate": "yes"}, "'truncate'"),
                ("/api/embed", {"model": m, "input": "x", "options": 3}, "'options'"),
                ("/api/embeddings", {"model": m, "prompt": ["a"]}, "'prompt' must be a string")]:
            status, body = b.json(path, req)
            err = body["error"]["message"] if path.startswith("/v1") else body["error"]
            assert status == 400 and what in err, (path, req, status, body)
        status, body = b.json("/v1/embeddings", {"model": "text-embedding-3-small", "input": "x"})
        assert status == 404 and body["error"]["code"] == "model_not_found", body
        status, body = b.json("/api/embed", {"model": "nomic-embed-text", "input": "x"})
        assert status == 404 and "not found" in body["error"], body
        status, _ = b.curl("/v1/embeddings")
        assert status == 405
        status, body = b.json("/v1/embeddings", {"model": m, "input": texts[1], "dimensions": 512})
        assert status == 200 and close(body["data"][0]["embedding"], want[1]), body


# Thinking templates, as tests/cli/test-think.py makes them: Qwen3's (its answer opens the think
# block itself; enable_thinking false writes the empty one) and DeepSeek-R1's distills' (the
# generation prompt opens it, the answer begins inside it)
QWEN3_THINK = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
               "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
               "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
               "{%- endif %}{%- endif %}")
R1_THINK = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
            "'<|im_end|>\\n' }}{%- endfor %}{{- '<|im_start|>assistant\\n<think>\\n' }}")


def thinking_model(name, template):
    """A tiny qwen3 model with this chat template that never ends on its own, beside the test
    model, made once per run."""
    path = os.path.join(os.path.dirname(model()), f"think-{name}.gguf")
    if not os.path.exists(path):
        r = run([CLI, "mkmodel", "--arch", "qwen3", "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
                 "--ffn", "128", "--ctx", "512", "--no-eog", "--seed", "5", "--chat-template", template, "-o", path])
        assert r.rc == 0, r
    return path


def split_thinking(text, opened):
    """What the bridge's split makes of an answer (service/bridge/think.h): the thinking between
    <think> (or the start, where the prompt opened the block) and </think>, blanks around it
    left out, and the rest without the blanks after </think>; no <think> first and not opened:
    all answer, as written."""
    blanks = " \t\n\r"
    rest = text.lstrip(blanks)
    if rest.startswith("<think>"):
        rest = rest[len("<think>"):]
    elif not opened:
        return "", text
    end = rest.find("</think>")
    if end < 0:
        return rest.strip(blanks), ""
    return rest[:end].strip(blanks), rest[end + len("</think>"):].lstrip(blanks)


def test_thinking_apart():
    """A thinking model's thinking held apart: Ollama's "think": true (or a level) in
    message.thinking / thinking, OpenAI's reasoning_content by default (llama-server's
    --reasoning-format deepseek; "none" keeps the text as written), streamed and whole, the
    pieces of a stream adding up to the whole; think absent is the text as the model writes it.
    The split of the model's own text is what split_thinking makes of it: an R1 distill's
    template opens the block in its generation prompt (ModelInfo's thinking_open), so its
    answer is thinking until </think>, all of it here (random weights write no tag); a Qwen3
    template's answer is thinking only from a <think> it writes first. A schema or tools hold
    the answer from its first byte: no thinking then, and structured output is as ever."""
    for name, template, opened in (("r1", R1_THINK, True), ("qwen3", QWEN3_THINK, False)):
        with serving(model_path=thinking_model(name, template)) as (bus, d, b):
            m = model_name(b)
            status, info = b.json("/api/show", {"model": m})
            assert status == 200, info
            props = bus.props()["ModelInfo"]
            assert (props["thinking"]["data"], props["thinking_open"]["data"]) == (True, opened), props
            msgs = [{"role": "user", "content": "Why is the sky blue?"}]
            opts = {"num_predict": 24, "temperature": 0}
            base = {"model": m, "messages": msgs, "options": opts}

            # think absent: the text as the model writes it
            status, r = b.json("/api/chat", dict(base, stream=False))
            assert status == 200 and "thinking" not in r["message"], r
            raw = r["message"]["content"]
            assert raw, r
            want_t, want_c = split_thinking(raw, opened)
            if opened:
                assert want_t, (raw, want_t)    # begins inside the block: thinking
            for think in (True, "high", "medium", "low"):
                status, r = b.json("/api/chat", dict(base, stream=False, think=think))
                assert status == 200, r
                assert (r["message"].get("thinking", ""), r["message"]["content"]) == (want_t, want_c), (think, raw, r)
                assert bool(want_t) == ("thinking" in r["message"]), r
            # streamed: each line the new thinking and/or the new answer
            status, text = b.curl("/api/chat", dict(base, think=True))
            assert status == 200, text
            lines = ndjson(text)
            assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "length", lines[-1]
            got = ("".join(x["message"].get("thinking", "") for x in lines),
                   "".join(x["message"]["content"] for x in lines))
            assert got == (want_t, want_c), (raw, got)
            assert all(x["message"].get("thinking") or x["message"]["content"] or x["done"] for x in lines), lines

            # /api/generate: thinking beside response
            gen = {"model": m, "prompt": "Why is the sky blue?", "options": opts}
            status, r = b.json("/api/generate", dict(gen, stream=False))
            assert status == 200 and "thinking" not in r, r
            gt, gc = split_thinking(r["response"], opened)
            status, r = b.json("/api/generate", dict(gen, stream=False, think=True))
            assert status == 200 and (r.get("thinking", ""), r["response"]) == (gt, gc), r
            status, text = b.curl("/api/generate", dict(gen, think=True))
            lines = ndjson(text)
            assert status == 200 and ("".join(x.get("thinking", "") for x in lines),
                                      "".join(x["response"] for x in lines)) == (gt, gc), lines
            # raw text has no template to think in: refused, in one line
            status, r = b.json("/api/generate", dict(gen, stream=False, think=True, raw=True))
            assert status == 400 and "\n" not in r["error"], r

            # OpenAI: reasoning_content by default, the same split of the same text
            r = chat(b, msgs, n=24)
            msg = r["choices"][0]["message"]
            assert (msg.get("reasoning_content", ""), msg["content"]) == (want_t, want_c), (raw, r)
            assert bool(want_t) == ("reasoning_content" in msg), msg
            r = chat(b, msgs, n=24, reasoning_format="none")
            assert r["choices"][0]["message"]["content"] == raw and "reasoning_content" not in r["choices"][0]["message"], r
            r = chat(b, msgs, n=24, reasoning_format="deepseek")
            assert r["choices"][0]["message"]["content"] == want_c, r
            status, text = b.curl("/v1/chat/completions", dict(model=m, max_tokens=24, temperature=0, messages=msgs,
                                                               stream=True))
            assert status == 200, text
            events = sse_events(text)
            assert events[-1] == "[DONE]"
            deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
            got = ("".join(x.get("reasoning_content", "") for x in deltas),
                   "".join(x.get("content") or "" for x in deltas))
            assert got == (want_t, want_c), (raw, got)
            # /v1/completions: the text as written
            status, r = b.json("/v1/completions", dict(model=m, max_tokens=4, temperature=0, prompt="Hi"))
            assert status == 200 and "reasoning_content" not in json.dumps(r), r

            # structured output: the schema holds the answer from its first byte, none of it thinking
            status, r = b.json("/api/chat", dict(base, stream=False, think=True, format=WEATHER,
                                                 options={"num_predict": 64, "temperature": 0}))
            assert status == 200 and json.loads(r["message"]["content"])["city"] in ("Paris", "Oslo"), r
            assert "thinking" not in r["message"], r
            schema = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}}
            r = chat(b, msgs, n=64, response_format=schema)
            assert json.loads(r["choices"][0]["message"]["content"])["unit"] in ("C", "F"), r
            assert "reasoning_content" not in r["choices"][0]["message"], r
            status, text = b.curl("/v1/chat/completions", dict(model=m, max_tokens=64, temperature=0, messages=msgs,
                                                               response_format=schema, stream=True))
            deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_events(text)[:-1]]
            assert status == 200 and not any("reasoning_content" in x for x in deltas), deltas
            assert json.loads("".join(x.get("content") or "" for x in deltas))["city"] in ("Paris", "Oslo"), deltas

            # thinking off: the template's switch (Qwen3), or 400 where it always thinks (R1)
            status, r = b.json("/api/chat", dict(base, stream=False, think=False))
            if opened:
                assert status == 400 and "no switch to turn thinking off" in r["error"], r
            else:
                assert status == 200 and "thinking" not in r["message"], r
                r2 = chat(b, msgs, n=24, chat_template_kwargs={"enable_thinking": False})
                assert r2["choices"][0]["message"]["content"] == r["message"]["content"], (r, r2)
                assert "reasoning_content" not in r2["choices"][0]["message"], r2


if __name__ == "__main__":
    main([
        test_socket_mode_and_token_file,
        test_openai_chat_sse_framing,
        test_openai_completions_raw,
        test_penalties_reach_the_engine,
        test_ollama_ndjson_framing,
        test_listings,
        test_token_required_on_tcp,
        test_socket_activation_unix,
        test_socket_activation_tcp_needs_the_token,
        test_socket_activation_refuses_sockets_it_cannot_serve_on,
        test_client_leaving_cancels_its_request,
        test_proactive_priority_and_a_reactive_request_overtakes,
        test_bad_inputs_and_the_bridge_keeps_serving,
        test_deep_nesting_is_refused_not_a_crash,
        test_no_bound_asks_for_the_engines_limit,
        test_a_burst_of_connections_is_queued_not_refused,
        test_bodies_over_the_cap_are_not_kept,
        test_engine_leaving_mid_stream_ends_the_stream_with_an_error,
        test_http_1_0_streams_are_not_chunked,
        test_conversation_reuses_its_flow,
        test_structured_output_with_curl,
        test_tool_choice_none_after_a_tool_result,
        test_several_choices,
        test_prompt_cache_serves_agents,
        test_fill_in_the_middle,
        test_logprobs,
        test_thinking_apart,
        test_infill_for_code_editors,
        test_embeddings,
    ])
