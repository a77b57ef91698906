#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Thinking turned off or on, as each kind of template allows: a Qwen3 template's own switch
(enable_thinking false: its empty think block after the generation prompt), a template that
always thinks (DeepSeek-R1's distills) cannot be turned off, one that never thinks (Llama 3)
cannot be turned on; `generate --think`, then the daemon's `think` option (Complete's
prompt_tokens, InvalidArgument) and `ask --think`.
Env: AXP_CLI, AXP_ENGINE_DAEMON, AXP_TEST_BUS_CONF."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import engine_daemon, fail, run  # noqa: E402

QWEN3 = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
         "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
         "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
         "{%- endif %}{%- endif %}")
R1 = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
      "'<|im_end|>\\n' }}{%- endfor %}{{- '<|im_start|>assistant\\n<think>\\n' }}")
LLAMA3 = ("{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}")


def mkmodel(path, template):
    """template None: the file has none (the family from its vocabulary)"""
    return run("mkmodel", "--arch", "qwen3", "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
               "--ffn", "128", "--ctx", "512", *(("--chat-template", template) if template else ()), "-o", path,
               check=True)


def prompt_tokens(model, *args):
    r = run("generate", "-m", model, "-p", "Hi", "-n", "1", "--json", *args)
    if r.returncode != 0:
        return None, r
    return json.loads(r.stdout)["prompt_tokens"], r


def tokenize(model, text):
    """text's token ids (no BOS), or None"""
    r = run("tokenize", "-m", model, "-p", text, "--no-bos", "--json")
    ids = json.loads(r.stdout) if r.returncode == 0 else None
    return ids.get("tokens", ids.get("ids")) if isinstance(ids, dict) else ids


def main():
    tmp = tempfile.mkdtemp(prefix="axp-think-")
    models = {}
    for name, template in (("qwen3", QWEN3), ("r1", R1), ("llama3", LLAMA3), ("none", None)):
        models[name] = os.path.join(tmp, name + ".gguf")
        mkmodel(models[name], template)

    tail = tokenize(models["qwen3"], "<think>\n\n</think>\n\n")
    base, _ = prompt_tokens(models["qwen3"])
    off, r = prompt_tokens(models["qwen3"], "--think", "off")
    on, _ = prompt_tokens(models["qwen3"], "--think", "on")
    if base is None or off is None or on != base or off[:len(base)] != base or off[len(base):] != tail:
        fail(f"qwen3 --think off: {base} / {off} / {on} / tail {tail}: {r.stderr}")
    else:
        print(f"ok: qwen3: off adds its {len(tail)}-token empty think block, on is the template's default")

    # a template whose generation prompt opens the block (R1's distills, QwQ) ends the prompt
    # with it, as the template renders it; not a raw prompt
    opening = tokenize(models["r1"], "<think>\n")
    r1, r = prompt_tokens(models["r1"])
    r1_on, _ = prompt_tokens(models["r1"], "--think", "on")
    r1_raw, _ = prompt_tokens(models["r1"], "--raw")
    qwen_raw, _ = prompt_tokens(models["qwen3"], "--raw")
    if (not opening or r1 is None or r1 != base + opening or r1_on != r1 or r1_raw is None
            or r1_raw != qwen_raw):
        fail(f"r1's opened think block: {r1} / {r1_on} / base {base} + {opening}; raw {r1_raw} / {qwen_raw}: {r.stderr}")
    else:
        print(f"ok: r1: the prompt ends with the template's opening <think> ({len(opening)} tokens), not a raw one")

    for name, arg, want in (("r1", "off", "no switch to turn thinking off"),
                            ("llama3", "on", "the model does not think"),
                            ("none", "on", "the model does not think")):
        toks, r = prompt_tokens(models[name], "--think", arg)
        lines = r.stderr.strip().splitlines()
        if toks is not None or r.returncode != 1 or len(lines) != 1 or want not in lines[0]:
            fail(f"{name} --think {arg}: {r.returncode} {r.stderr!r}")
    for name in ("llama3", "none"):
        if prompt_tokens(models[name], "--think", "off")[0] != prompt_tokens(models[name])[0]:
            fail(f"{name} --think off: not the plain prompt")
    r = run("generate", "-m", models["qwen3"], "-p", "Hi", "--think", "maybe")
    if r.returncode != 2 or "--think must be on or off" not in r.stderr:
        fail(f"--think maybe: {r.returncode} {r.stderr!r}")
    r = run("generate", "-m", models["qwen3"], "-p", "Hi", "--think", "off", "--raw")
    if r.returncode != 2 or "not --raw" not in r.stderr:
        fail(f"--think with --raw: {r.returncode} {r.stderr!r}")
    print("ok: what a template cannot do is refused in one line")

    daemon = engine_daemon()
    if daemon:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
        import bustest
        bus = bustest.TestBus()
        try:
            d = bustest.Daemon(bus, daemon, args=["--model", models["qwen3"]])

            def tokens(opts):
                r = bus.call("Complete", "Hi", "{'max_tokens': <uint32 1>%s}" % opts)
                m = re.search(r"'prompt_tokens': <uint32 (\d+)>", r.out)
                return (int(m.group(1)) if r.rc == 0 and m else None), r
            n0, r0 = tokens("")
            n1, r1 = tokens(", 'think': <false>")
            n2, r2 = tokens(", 'think': <true>")
            if n0 is None or n1 != n0 + len(tail or []) or n2 != n0:
                fail(f"Complete think: {n0} {n1} {n2}: {r0} {r1} {r2}")
            r = bus.call("Complete", "Hi", "{'think': <false>, 'raw': <true>}")
            if r.rc == 0 or "InvalidArgument" not in r.err or "hink goes with the chat template" not in r.err:
                fail(f"think with raw: {r}")
            r = bus.call("Complete", "Hi", "{'think': <'no'>}")
            if r.rc == 0 or "must be of type b" not in r.err:
                fail(f"think of the wrong type: {r}")
            r = bus.cli("ask", "--think", "off", "-n", "2", "Hi")
            if r.rc != 0:
                fail(f"ask --think off: {r}")
            d.stop()
            d = bustest.Daemon(bus, daemon, args=["--model", models["r1"]])
            n_r1, r = tokens("")
            if n_r1 is None or n_r1 != n0 + len(opening or [None] * 1000):
                fail(f"Complete on r1: {n_r1} against {n0} + the opening's {len(opening or [])}: {r}")
            d.stop()
            for name in ("llama3", "none"):
                d = bustest.Daemon(bus, daemon, args=["--model", models[name]])
                r = bus.call("Complete", "Hi", "{'think': <true>}")
                if r.rc == 0 or "he model does not think" not in r.err:
                    fail(f"think on with {name}: {r}")
                r = bus.call("Complete", "Hi", "{'think': <false>, 'max_tokens': <uint32 1>}")
                if r.rc != 0:
                    fail(f"think off with {name}: {r}")
                d.stop()
            print("ok: the daemon's think option")
        finally:
            bus.close()
    return clitest.status()


if __name__ == "__main__":
    sys.exit(main())
