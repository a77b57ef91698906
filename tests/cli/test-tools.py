#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tool calls on a random-weight model with llama.cpp's Llama 3 vocabulary and a Llama 3.1
style chat template (one that mentions tools): with tool_choice "required" every answer is a
call of one of two tools whose arguments validate against that tool's parameters schema
(checked with Python's jsonschema), and across seeds both tools are chosen; with "auto" an
answer is a valid call or text that does not begin like one. Bad tools are refused in one
line; a template without tools refuses them. Then through the daemon on a private bus:
Complete's stats carry finish_reason and tool_call, ask -v prints them, bad tools are
InvalidArgument with nothing queued.
Env: AXP_CLI, AXP_CONFORMANCE_DIR, AXP_ENGINE_DAEMON, AXP_TEST_BUS_CONF."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import CLI, CONF, engine_daemon, fail, need_module, run, skip  # noqa: E402

VOCAB = os.path.join(CONF, "vocab", "ggml-vocab-llama-bpe.gguf")

jsonschema = need_module("jsonschema", "python3-jsonschema")
if not os.path.exists(VOCAB):
    skip("no conformance vocabulary")

# enough of a Llama 3.1 template for the family and its tool support to be recognised
TEMPLATE_TOOLS = ("{%- if tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}"
                  "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
                  "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}")
TEMPLATE_PLAIN = ("{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
                  "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "add_event", "description": "Put an event in the calendar",
        "parameters": {"type": "object", "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 30},
            "day": {"type": "string", "format": "date"},
            "attendees": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}},
            "required": ["title", "day"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
FORMAT = jsonschema.FormatChecker()

BAD = [
    ("{not json", "not valid JSON"),
    ("{}", "non-empty list"),
    ("[]", "non-empty list"),
    (json.dumps([{"type": "function", "function": {"name": "a b"}}]), "function.name must be"),
    (json.dumps([TOOLS[0], TOOLS[0]]), "is given twice"),
    (json.dumps([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "not": {"const": "a"}}}}}}]),
     "(f) parameters: JSON schema at #/properties/x: the keyword 'not' is not supported"),
    (json.dumps([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]),
     "must be a JSON schema of type object"),
]


def check_call(what, call):
    """call: {"name": ..., "arguments": {...}}; returns the name or None."""
    if not isinstance(call, dict) or set(call) != {"name", "arguments"} or call["name"] not in SCHEMAS:
        fail(f"{what}: not a call of one of the tools: {call!r}")
        return None
    try:
        jsonschema.validate(call["arguments"], SCHEMAS[call["name"]], format_checker=FORMAT)
    except Exception as e:
        fail(f"{what}: {call!r}: {e}")
        return None
    return call["name"]


def mkmodel(path, template):
    r = run("mkmodel", "--arch", "llama", "--type", "q8_0", "--dim", "128", "--layers", "2", "--heads", "4",
            "--kv-heads", "2", "--ffn", "256", "--ctx", "2048", "--seed", "3", "--vocab-from", VOCAB,
            "--chat-template", template, "-o", path)
    return r


def main():
    tmp = tempfile.mkdtemp(prefix="axp-tools-")
    model = os.path.join(tmp, "m.gguf")
    r = mkmodel(model, TEMPLATE_TOOLS)
    if r.returncode != 0:
        print("SKIP: mkmodel:", r.stderr)
        return 77
    tools = os.path.join(tmp, "tools.json")
    with open(tools, "w") as f:
        json.dump(TOOLS, f)

    # the template the model carries is the one given
    r = run("inspect", model)
    if r.returncode == 0 and "llama3" not in r.stdout:
        print("note: inspect does not name the chat family:", r.stdout[:200])

    chosen = set()
    runs = [["--temperature", "0"]] + [["--temperature", t, "--seed", str(s)]
                                       for t, s in (("0.8", 1), ("1.5", 2), ("1", 3), ("1", 4), ("1.2", 5),
                                                    ("1", 6), ("1.5", 7), ("2", 8), ("2", 9))]
    for sampling in runs:
        r = run("generate", "-m", model, "-p", "What is on today?", "-n", "200", "--tools", tools,
                "--tool-choice", "required", "--json", *sampling)
        if r.returncode != 0:
            fail(f"required {sampling}: {r.stderr.strip()}")
            continue
        out = json.loads(r.stdout)
        if out["finish_reason"] != "tool_calls" or "tool_call" not in out:
            fail(f"required {sampling}: finished with {out['finish_reason']}: {out['text']!r}")
            continue
        # the text is Llama 3.1's own format; the reported call is the usual shape
        try:
            raw = json.loads(out["text"])
        except ValueError as e:
            fail(f"required {sampling}: the text is not JSON: {out['text']!r}: {e}")
            continue
        if raw != {"name": out["tool_call"]["name"], "parameters": out["tool_call"]["arguments"]}:
            fail(f"required {sampling}: text {out['text']!r} and call {out['tool_call']!r} differ")
        name = check_call(f"required {sampling}", out["tool_call"])
        if name:
            chosen.add(name)
    if chosen != set(SCHEMAS):
        fail(f"calls chose only {sorted(chosen)} over {len(runs)} answers")
    print(f"ok: {len(runs)} required calls validate, tools chosen: {sorted(chosen)}")

    kinds = set()
    for seed in range(6):
        r = run("generate", "-m", model, "-p", "Hello", "-n", "40", "--tools", tools, "--json",
                "--temperature", "1", "--seed", str(seed))
        if r.returncode != 0:
            fail(f"auto seed {seed}: {r.stderr.strip()}")
            continue
        out = json.loads(r.stdout)
        if out["finish_reason"] == "tool_calls":
            check_call(f"auto seed {seed}", out.get("tool_call"))
            kinds.add("call")
        elif out["text"].startswith("{") or "tool_call" in out or out["finish_reason"] not in ("stop", "length"):
            fail(f"auto seed {seed}: {out['finish_reason']} {out['text']!r}")
        else:
            kinds.add("text")
    print(f"ok: auto answers ({sorted(kinds)})")

    # "none": the prompt of "auto", tools and all; the answer text that never begins like a call
    auto = run("generate", "-m", model, "-p", "What is on today?", "-n", "1", "--tools", tools, "--json")
    for seed in range(6):
        r = run("generate", "-m", model, "-p", "What is on today?", "-n", "40", "--tools", tools,
                "--tool-choice", "none", "--json", "--temperature", "1", "--seed", str(seed))
        if r.returncode != 0 or auto.returncode != 0:
            fail(f"none seed {seed}: {r.stderr.strip()} {auto.stderr.strip()}")
            continue
        out = json.loads(r.stdout)
        if out["prompt_tokens"] != json.loads(auto.stdout)["prompt_tokens"]:
            fail(f"none seed {seed}: the prompt differs from auto's")
        if out["finish_reason"] not in ("stop", "length") or "tool_call" in out or out["text"].startswith("{"):
            fail(f"none seed {seed}: {out['finish_reason']} {out['text']!r}")
    print("ok: none answers text")

    for value, want in BAD:
        path = os.path.join(tmp, "bad.json")
        with open(path, "w") as f:
            f.write(value)
        r = run("generate", "-m", model, "-p", "x", "-n", "8", "--tools", path)
        lines = r.stderr.strip().splitlines()
        if r.returncode != 1 or len(lines) != 1 or want not in lines[0]:
            fail(f"bad tools {value[:40]!r}: {r.returncode} {r.stderr!r}")
    r = run("generate", "-m", model, "-p", "x", "-n", "8", "--tools", tools, "--tool-choice", "always")
    if r.returncode != 1 or "tool_choice must be 'auto', 'required' or 'none', got 'always'" not in r.stderr:
        fail(f"bad --tool-choice: {r.returncode} {r.stderr!r}")
    plain = os.path.join(tmp, "plain.gguf")
    if mkmodel(plain, TEMPLATE_PLAIN).returncode != 0:
        fail("mkmodel with a template without tools")
    else:
        r = run("generate", "-m", plain, "-p", "x", "-n", "8", "--tools", tools)
        if r.returncode != 1 or "does not take tools" not in r.stderr:
            fail(f"a template without tools: {r.returncode} {r.stderr!r}")
    print("ok: bad input")

    other_families(tmp, tools)
    daemon_part(model, tools, tmp)
    return clitest.status()


def other_families(tmp, tools):
    """Qwen's and Mistral's formats: required calls read back and validate."""
    vocab_dir = os.path.dirname(VOCAB)
    for family, arch, vocab, template, prefix in (
            ("chatml", "qwen2", "ggml-vocab-qwen2.gguf", "{{ '<|im_start|>' }}{% if tools %}<tools>{% endif %}",
             "<tool_call>\n{\"name\": "),
            ("mistral", "llama", "ggml-vocab-llama-spm.gguf", "{{ '[INST] ' }}{% if tools %}[AVAILABLE_TOOLS]{% endif %}",
             "[TOOL_CALLS] [{\"name\": "),
            # Mistral-Nemo's tekken form: no space after the markers
            ("mistral-v3-tekken", "llama", "ggml-vocab-llama-spm.gguf",
             "{{ '[INST]' }}{% if tools %}[AVAILABLE_TOOLS]{% endif %}", "[TOOL_CALLS][{\"name\": "),
            # Mistral-Small-3.2's v7 form, the call's id optional; Devstral's without ids
            ("mistral-v7-call-id", "llama", "ggml-vocab-llama-spm.gguf",
             "{{ '[SYSTEM_PROMPT]' }}{{ '[INST]' }}[AVAILABLE_TOOLS]{{ '[TOOL_CALLS]' }}[CALL_ID][ARGS]",
             re.compile(r"\[TOOL_CALLS\](get_weather|add_event)(\[CALL_ID\][A-Za-z0-9]{9})?\[ARGS\]\{")),
            ("mistral-v7-args", "llama", "ggml-vocab-llama-spm.gguf",
             "{{ '[SYSTEM_PROMPT]' }}{{ '[INST]' }}[AVAILABLE_TOOLS]{{ '[TOOL_CALLS]' }}[ARGS]",
             re.compile(r"\[TOOL_CALLS\](get_weather|add_event)\[ARGS\]\{")),
            # Granite 3.x: a list after <|tool_call|>, the template's own system prompt
            ("granite", "llama", "ggml-vocab-llama-spm.gguf",
             "{{ '<|start_of_role|>system<|end_of_role|>' }}{{ '<|start_of_role|>available_tools<|end_of_role|>' }}",
             "<|tool_call|>[{\"name\": ")):
        path = os.path.join(vocab_dir, vocab)
        if not os.path.exists(path):
            print(f"skip: {family} (no {vocab})")
            continue
        model = os.path.join(tmp, family + ".gguf")
        r = run("mkmodel", "--arch", arch, "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                "--ffn", "256", "--ctx", "2048", "--vocab-from", path, "--chat-template", template, "-o", model)
        if r.returncode != 0:
            fail(f"mkmodel {family}: {r.stderr}")
            continue
        for seed in range(3):
            r = run("generate", "-m", model, "-p", "What is on today?", "-n", "200", "--tools", tools,
                    "--tool-choice", "required", "--json", "--temperature", "1", "--seed", str(seed))
            out = json.loads(r.stdout) if r.returncode == 0 else {"text": r.stderr, "finish_reason": "?"}
            starts = prefix.match(out["text"]) if isinstance(prefix, re.Pattern) else out["text"].startswith(prefix)
            if out["finish_reason"] != "tool_calls" or not starts:
                fail(f"{family} seed {seed}: {out['finish_reason']} {out['text']!r}")
            else:
                check_call(f"{family} seed {seed}", out["tool_call"])
        print(f"ok: {family} calls")
    qwen3_coder(tmp)


# Qwen3-Coder's XML form: arguments that are no strings (a string's text runs until the model
# closes it, which random weights need not do), each typed by its schema when read back
CODER_TOOLS = [
    {"type": "function", "function": {
        "name": "set_volume", "description": "Set the volume",
        "parameters": {"type": "object", "properties": {
            "level": {"type": "integer", "minimum": 0, "maximum": 10},
            "mute": {"type": "boolean"},
            "unit": {"enum": ["db", "pct"]},
            "steps": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9}, "maxItems": 2}},
            "required": ["level", "unit"], "additionalProperties": False}}},
]


def qwen3_coder(tmp):
    path = os.path.join(os.path.dirname(VOCAB), "ggml-vocab-qwen2.gguf")
    if not os.path.exists(path):
        print("skip: qwen3-coder (no ggml-vocab-qwen2.gguf)")
        return
    tools = os.path.join(tmp, "coder-tools.json")
    with open(tools, "w") as f:
        json.dump(CODER_TOOLS, f)
    model = os.path.join(tmp, "qwen3-coder.gguf")
    template = ("{{ '<|im_start|>' }}{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
                "{{- '<parameter=' + args_name + '>\\n' }}")
    r = run("mkmodel", "--arch", "qwen3", "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
            "--ffn", "256", "--ctx", "4096", "--vocab-from", path, "--chat-template", template, "-o", model)
    if r.returncode != 0:
        fail(f"mkmodel qwen3-coder: {r.stderr}")
        return
    schema = CODER_TOOLS[0]["function"]["parameters"]
    shape = re.compile(r"<tool_call>\n<function=set_volume>\n(<parameter=(\w+)>\n[^\n]*\n</parameter>\n)+"
                       r"</function>\n</tool_call>$")
    for seed in range(4):
        r = run("generate", "-m", model, "-p", "Quieter, please.", "-n", "200", "--tools", tools,
                "--tool-choice", "required", "--json", "--temperature", "1", "--seed", str(seed))
        out = json.loads(r.stdout) if r.returncode == 0 else {"text": r.stderr, "finish_reason": "?"}
        if out["finish_reason"] != "tool_calls" or not shape.match(out["text"]):
            fail(f"qwen3-coder seed {seed}: {out['finish_reason']} {out['text']!r}")
            continue
        call = out["tool_call"]
        try:
            jsonschema.validate(call["arguments"], schema)
        except Exception as e:
            fail(f"qwen3-coder seed {seed}: {call!r}: {e}")
    print("ok: qwen3-coder calls")


def daemon_part(model, tools, tmp):
    daemon = engine_daemon()
    if not daemon:
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
    import bustest
    bus = bustest.TestBus()
    try:
        bustest.Daemon(bus, daemon, args=["--model", model])
        t = json.dumps(TOOLS).replace("'", "\\'")
        r = bus.call("Complete", "What is on today?",
                     f"{{'max_tokens': <uint32 200>, 'temperature': <1.0>, 'seed': <uint64 4>, "
                     f"'tools': <'{t}'>, 'tool_choice': <'required'>}}")
        m = re.search(r"'tool_call': <'((?:[^'\\]|\\.)*)'>", r.out)
        if r.rc != 0 or "'finish_reason': <'tool_calls'>" not in r.out or not m:
            fail(f"Complete with tools: {r}")
        else:
            check_call("Complete", json.loads(m.group(1).encode().decode("unicode_escape")
                                              .encode("latin-1").decode()))
        for cmd in (["ask"], ["submit", "--wait"]):
            r = bus.cli(*cmd, "-v", "--tools", tools, "--tool-choice", "required", "-n", "200",
                        "--temperature", "0.7", "--seed", "5", "What is on today?")
            m = re.search(r"^tool_call: (.*)$", r.err, re.M)
            if r.rc != 0 or "finish_reason: tool_calls" not in r.err or not m:
                fail(f"{cmd[0]} --tools: {r}")
            else:
                check_call(cmd[0], json.loads(m.group(1)))
        # the call read from the stats is the command's to free: none of its memory leaks
        if shutil.which("valgrind"):
            r = subprocess.run(["valgrind", "--quiet", "--leak-check=full", "--errors-for-leak-kinds=definite",
                                "--error-exitcode=99", CLI, "ask", "--address", bus.address, "-v", "--tools", tools,
                                "--tool-choice", "required", "-n", "200", "--temperature", "0.7", "--seed", "5",
                                "What is on today?"], capture_output=True, text=True, timeout=600)
            if r.returncode != 0 or "finish_reason: tool_calls" not in r.stderr:
                fail(f"ask --tools under valgrind: rc {r.returncode}: {r.stderr[-2000:]}")
        for value, want in BAD[:6]:
            v = value.replace("\\", "\\\\").replace("'", "\\'")
            for method in ("Complete", "Reactive", "Proactive"):
                r = bus.call(method, "x", f"{{'tools': <'{v}'>}}")
                if r.rc == 0 or r.error_name != "org.agentxpu.Error.InvalidArgument" or want not in r.err:
                    fail(f"{method} with bad tools {value[:30]!r}: {r}")
        r = bus.call("Reactive", "x", f"{{'tools': <'{t}'>, 'json_schema': <'{{}}'>}}")
        if r.rc == 0 or "cannot be combined" not in r.err:
            fail(f"tools with json_schema: {r}")
        r = bus.call("Reactive", "x", "{'tool_choice': <'sometimes'>}")
        if r.rc == 0 or "must be 'auto', 'required' or 'none'" not in r.err:
            fail(f"bad tool_choice: {r}")
        agent_last_step(bus, t, tools)
        if bus.request_nodes():
            fail(f"bad requests left request objects: {bus.request_nodes()}")
        print("ok: the daemon")
    finally:
        bus.close()


def agent_last_step(bus, t, tools):
    """An agent's last step: the earlier call and its result, tool_choice none: the prompt holds
    them and the tools as with auto, the answer is text; without tools, the call and result
    are written all the same, the tool list left out."""
    loop = ("[('user', 'What is on today?'), ('tool_call', '{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\", \"unit\": \"celsius\"}}'), ('tool', '{\"temp\": 22}')]")

    def complete(opts):
        r = bus.call("Complete", "", f"{{'max_tokens': <uint32 40>, 'temperature': <1.0>, 'messages': <{loop}>, "
                                     f"{opts}}}")
        m = re.search(r"'prompt_tokens': <uint32 (\d+)>", r.out)
        return r, int(m.group(1)) if m else None

    _, auto_tokens = complete(f"'seed': <uint64 0>, 'tools': <'{t}'>, 'tool_choice': <'auto'>")
    for seed in range(4):
        r, n = complete(f"'seed': <uint64 {seed}>, 'tools': <'{t}'>, 'tool_choice': <'none'>")
        if (r.rc != 0 or not re.search(r"'finish_reason': <'(stop|length)'>", r.out) or "'tool_call'" in r.out
                or r.out[2:3] == "{" or n is None or n != auto_tokens):
            fail(f"none after a tool result, seed {seed} ({n} prompt tokens, auto's {auto_tokens}): {r}")
    r, n = complete("'seed': <uint64 1>")
    if r.rc != 0 or "'tool_call'" in r.out or n is None or auto_tokens is None or not n < auto_tokens:
        fail(f"a tool result without tools ({n} prompt tokens, with tools {auto_tokens}): {r}")
    r, _ = complete("'tool_choice': <'required'>")
    if r.rc == 0 or "ool_choice needs tools" not in r.err:
        fail(f"required without tools after a tool result: {r}")
    r = bus.cli("ask", "-v", "--tools", tools, "--tool-choice", "none", "-n", "40", "--temperature", "1",
                "--seed", "2", "What is on today?")
    if r.rc != 0 or not re.search(r"^finish_reason: (stop|length)$", r.err, re.M) or "tool_call:" in r.err:
        fail(f"ask --tool-choice none: {r}")
    print("ok: tool_choice none after a tool result")


if __name__ == "__main__":
    sys.exit(main())
