#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu serve with the clients people use: the official `openai` and `ollama` npm
packages (streaming and not), run with the system's nodejs against the real engine on a
private bus. The packages are installed with `npm ci` from tests/http/package-lock.json into
the build folder ($AXP_NODE_DIR), with an npm cache and HOME of their own there; where npm
cannot reach its registry the test skips (77) and says so."""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from httptest import Skip, main, model_name, need_tools, serving  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from bustest import gvariant_first_string  # noqa: E402

NODE_DIR = os.environ.get("AXP_NODE_DIR") or os.path.join(HERE, "node")


def node_modules():
    """The clients, installed once per build folder (again when the lock file changes)."""
    need_tools("node", "npm")
    os.makedirs(NODE_DIR, exist_ok=True)
    stamp = os.path.join(NODE_DIR, "node_modules", ".lock-installed")
    with open(os.path.join(HERE, "package-lock.json")) as f:
        lock = f.read()
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read() == lock:
                return NODE_DIR
    for name in ("package.json", "package-lock.json", "clients.mjs"):
        shutil.copy(os.path.join(HERE, name), NODE_DIR)
    env = dict(os.environ, HOME=os.path.join(NODE_DIR, "home"), npm_config_cache=os.path.join(NODE_DIR, "cache"),
               npm_config_update_notifier="false", npm_config_audit="false", npm_config_fund="false")
    try:
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=NODE_DIR, env=env,
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise Skip("npm ci took over 5 minutes (is the npm registry reachable?)")
    if r.returncode != 0:
        if any(s in r.stderr for s in ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET",
                                       "network", "FetchError")):
            raise Skip("npm cannot reach its registry to install the openai and ollama packages:\n"
                       + r.stderr.strip()[-500:])
        raise AssertionError(f"npm ci failed:\n{r.stderr}")
    with open(stamp, "w") as f:
        f.write(lock)
    return NODE_DIR


def complete(bus, prompt, n, raw=False):
    r = bus.call("Complete", prompt, f"{{'max_tokens': <uint32 {n}>, 'temperature': <0.0>, 'raw': <{str(raw).lower()}>}}")
    assert r.rc == 0, r
    return gvariant_first_string(r.out)


def test_official_openai_and_ollama_clients():
    folder = node_modules()
    shutil.copy(os.path.join(HERE, "clients.mjs"), folder)
    with serving() as (bus, d, b):
        m = model_name(b)
        chat16 = complete(bus, "Hello", 16)
        chat10 = complete(bus, "Hello", 10)
        comp12 = complete(bus, "Once upon a time", 12, raw=True)
        texts = ["The cat sat on the mat.", "A dog ran in the park."]
        embeds = [json.loads(bus.cli("embed", t).out) for t in texts]
        raw0 = json.loads(bus.cli("embed", "--no-normalize", texts[0]).out)
        r = subprocess.run(["node", "clients.mjs", b.base, b.token, m, b.socket], cwd=folder, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, (r.stdout, r.stderr, b.text())
        got = json.loads(r.stdout)
        print("    " + r.stdout.strip()[:600] + " ...", flush=True)

        assert got["openai_chat"]["content"] == chat16 and got["openai_chat"]["finish"] == "length", got["openai_chat"]
        assert got["openai_chat"]["usage"]["completion_tokens"] == 16
        assert got["openai_chat_stream"]["content"] == chat16, got["openai_chat_stream"]
        assert got["openai_chat_stream"]["finish"] == "length"
        assert got["openai_chat_stream"]["usage"]["completion_tokens"] == 16
        assert got["openai_completion"] == comp12 and got["openai_completion_stream"] == comp12
        assert got["openai_models"] == [m] and got["openai_retrieve"] == m
        assert got["openai_unknown_model"]["name"] == "NotFoundError", got["openai_unknown_model"]
        assert got["openai_unknown_model"]["status"] == 404 and got["openai_unknown_model"]["code"] == "model_not_found"
        assert isinstance(json.loads(got["openai_json_object"]), dict), got["openai_json_object"]
        assert json.loads(got["openai_json_schema"])["city"] in ("Paris", "Oslo"), got["openai_json_schema"]
        for key in ("openai_tool_call", "openai_tool_call_stream"):
            call = got[key]
            assert call["finish"] == "tool_calls", call
            fn = call["message"]["tool_calls"][0]["function"]
            assert fn["name"] == "get_weather" and json.loads(fn["arguments"])["unit"] in ("C", "F"), call
        # n: three choices, the same whole and streamed (the same seeds), not all alike
        many = got["openai_choices"]
        assert [c[0] for c in many] == [0, 1, 2] and all(c[2] == "length" and c[1] for c in many), many
        assert len({c[1] for c in many}) > 1 and got["openai_choices_stream"] == many, (many, got["openai_choices_stream"])
        # token probabilities: four tokens, two alternatives each, the chosen one first (greedy);
        # the same whole, streamed and through Ollama's client (the same prompt)
        lp = got["openai_logprobs"]
        assert len(lp) == 4 and all(len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["token"] == e["token"]
                                    for e in lp), lp
        assert got["openai_logprobs_stream"] == lp, (got["openai_logprobs_stream"], lp)
        assert [(e["token"], e["logprob"]) for e in got["ollama_logprobs"]] == [(e["token"], e["logprob"]) for e in lp], \
            (got["ollama_logprobs"], lp)
        # the loop's second request holds the call and its result: more prompt than the first
        loop = got["openai_tool_loop"]
        assert loop["usage"]["prompt_tokens"] > loop["first_prompt_tokens"], loop
        assert loop["finish"] in ("stop", "length", "tool_calls") and loop["stream_finish"] == loop["finish"], loop
        if loop["finish"] == "tool_calls":
            assert loop["message"]["tool_calls"][0]["function"]["name"] == "get_weather", loop
        else:
            assert isinstance(loop["message"]["content"], str), loop
        first, second = got["openai_conversation"]["first"], got["openai_conversation"]["second"]
        # the second turn continues the first's flow: what it held is cached, not prefilled again
        assert second["prompt_tokens_details"]["cached_tokens"] == first["prompt_tokens"] + first["completion_tokens"] - 1, \
            got["openai_conversation"]
        assert got["openai_bad_token"]["name"] == "AuthenticationError", got["openai_bad_token"]
        assert got["openai_bad_token"]["status"] == 401
        assert got["openai_unix_socket"] == chat16

        assert got["ollama_generate"] == {"response": chat10, "done": True, "done_reason": "length",
                                          "eval_count": 10}, got["ollama_generate"]
        assert got["ollama_generate_stream"] == {"response": chat10, "done_reason": "length"}
        assert got["ollama_chat"] == chat10 and got["ollama_chat_stream"] == chat10
        assert got["ollama_list"] == [m] and got["ollama_ps"] == [m]
        assert got["ollama_show"]["family"] == "llama" and "tools" in got["ollama_show"]["capabilities"], got
        assert got["ollama_show"]["context"] > 0, got
        assert got["ollama_unknown_model"]["status"] == 404, got["ollama_unknown_model"]
        assert "not found" in got["ollama_unknown_model"]["message"]
        assert isinstance(json.loads(got["ollama_format_json"]), dict), got["ollama_format_json"]
        assert json.loads(got["ollama_format_schema"])["city"] in ("Paris", "Oslo"), got["ollama_format_schema"]
        # embeddings: the engine's (agentxpu embed) for each text, through both libraries
        def near(got, want):
            return len(got) == len(want) and all(abs(a - b) < 2e-7 for a, b in zip(got, want))
        emb = got["openai_embeddings"]
        assert [d[0] for d in emb["data"]] == [0, 1] and all(d[1] == 512 for d in emb["data"]), emb
        assert all(near(d[2], e[:4]) for d, e in zip(emb["data"], embeds)), (emb, [e[:4] for e in embeds])
        assert emb["usage"]["prompt_tokens"] > 0 and near(got["openai_embedding_float"], embeds[0][:4]), got
        assert [e[0] for e in got["ollama_embed"]] == [512, 512], got["ollama_embed"]
        assert all(near(g[1], e[:4]) for g, e in zip(got["ollama_embed"], embeds)), got["ollama_embed"]
        assert near(got["ollama_embeddings"], raw0[:4]), (got["ollama_embeddings"], raw0[:4])
        # a model of random weights answers in text or with a call; a call is Ollama's shape
        for call in got["ollama_tools"].get("tool_calls") or []:
            assert call["function"]["name"] == "get_weather" and isinstance(call["function"]["arguments"], dict), call


if __name__ == "__main__":
    main([test_official_openai_and_ollama_clients])
