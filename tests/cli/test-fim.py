#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fill in the middle (generate --suffix, the engine's option suffix): on models made with
mkmodel --fim (Qwen2.5-Coder's FIM tokens and their GGUF keys), the prompt is llama.cpp's
/infill one: FIM_REP "myproject\\n" FIM_SEP "filename\\n", then BOS where the vocabulary adds
one, FIM_PRE prefix FIM_SUF suffix FIM_MID, the texts tokenized without special tokens; a
qwen2 model's answer is the one --raw gives for that text written out. A model without FIM
tokens is refused in one line; --suffix with --system or --raw is a usage error. Through the
daemon, Complete with a suffix answers what generate --suffix does, and refuses a system
prompt beside it; fim_middle and fim_extra put their texts' tokens in llama.cpp's places, and
fim_fit leaves out what llama-server's fit leaves out (saying prompt_cut); without a suffix
those options are refused.
Env: AXP_CLI, AXP_ENGINE_DAEMON, AXP_TEST_BUS_CONF."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import engine_daemon, fail, run  # noqa: E402

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n    return total\n"


def mkmodel(path, arch, *extra):
    r = run("mkmodel", "--arch", arch, "--type", "q8_0", "--dim", "128", "--layers", "2", "--heads", "4",
            "--kv-heads", "2", "--ffn", "256", "--ctx", "1024", "--seed", "5", "--no-eog", *extra, "-o", path)
    if r.returncode != 0:
        fail(f"mkmodel {arch} {extra}: {r.stderr.strip()}")
    return path


def tokens(model, text, *flags):
    r = run("tokenize", "-m", model, "-p", text, "--json", *flags)
    if r.returncode != 0:
        fail(f"tokenize {text!r}: {r.stderr.strip()}")
        return []
    return json.loads(r.stdout)["tokens"]


def generate(model, *args):
    r = run("generate", "-m", model, "-n", "12", "--temperature", "0", "--json", *args)
    if r.returncode != 0:
        fail(f"generate {args}: {r.stderr.strip()}")
        return None
    return json.loads(r.stdout)


def expected_prompt(model, bos):
    special = {name: tokens(model, f"<|{name}|>", "--no-bos") for name in
               ("fim_prefix", "fim_suffix", "fim_middle", "repo_name", "file_sep")}
    for name, ids in special.items():
        if len(ids) != 1:
            fail(f"<|{name}|> is not one token: {ids}")
            return None
    text = lambda s: tokens(model, s, "--no-bos", "--no-parse-special")  # noqa: E731
    return (special["repo_name"] + text("myproject\n") + special["file_sep"] + text("filename\n") + bos +
            special["fim_prefix"] + text(PREFIX) + special["fim_suffix"] + text(SUFFIX) + special["fim_middle"])


def main():
    tmp = tempfile.mkdtemp(prefix="axp-fim-")
    qwen = mkmodel(os.path.join(tmp, "qwen.gguf"), "qwen2", "--fim")
    llama = mkmodel(os.path.join(tmp, "llama.gguf"), "llama", "--fim")
    plain = mkmodel(os.path.join(tmp, "plain.gguf"), "qwen2")

    # the prompt's tokens, as llama.cpp's /infill makes them
    got = generate(qwen, "-p", PREFIX, "--suffix", SUFFIX)
    want = expected_prompt(qwen, [])
    if got and got["prompt_tokens"] != want:
        fail(f"qwen2 FIM prompt {got['prompt_tokens']} != {want}")
    # the same text written out, raw (qwen2 adds no BOS): the same answer
    raw = generate(qwen, "--raw", "-p", "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>" + PREFIX +
                   "<|fim_suffix|>" + SUFFIX + "<|fim_middle|>")
    if got and raw and (raw["prompt_tokens"] != got["prompt_tokens"] or raw["tokens"] != got["tokens"]):
        fail(f"raw FIM text: {raw} != {got}")
    # a vocabulary that adds BOS: after the file, before FIM_PRE
    bos = tokens(llama, "")
    got_l = generate(llama, "-p", PREFIX, "--suffix", SUFFIX)
    want_l = expected_prompt(llama, bos)
    if len(bos) != 1 or (got_l and got_l["prompt_tokens"] != want_l):
        fail(f"llama FIM prompt {got_l and got_l['prompt_tokens']} != {want_l}")
    print("ok: the FIM prompt")

    r = run("generate", "-m", plain, "-p", PREFIX, "--suffix", SUFFIX, "-n", "4")
    if r.returncode != 1 or r.stderr.count("\n") != 1 or "has no fill-in-the-middle tokens" not in r.stderr:
        fail(f"a model without FIM tokens: {r.returncode} {r.stderr!r}")
    for extra in (["--system", "x"], ["--raw"]):
        r = run("generate", "-m", qwen, "-p", PREFIX, "--suffix", SUFFIX, *extra)
        if r.returncode != 2 or "--suffix takes" not in r.stderr:
            fail(f"--suffix with {extra}: {r.returncode} {r.stderr!r}")
    r = run("mkmodel", "--fim", "--vocab-from", plain, "-o", os.path.join(tmp, "x.gguf"))
    if r.returncode != 2 or "--fim adds to the built-in vocabulary" not in r.stderr:
        fail(f"mkmodel --fim --vocab-from: {r.returncode} {r.stderr!r}")
    print("ok: refusals")

    daemon_part(qwen, got)
    return clitest.status()


def daemon_part(model, want):
    daemon = engine_daemon()
    if not daemon or not want:
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
    import bustest
    bus = bustest.TestBus()
    try:
        bustest.Daemon(bus, daemon, args=["--model", model])
        prefix, suffix = (json.dumps(s)[1:-1].replace("'", "\\'") for s in (PREFIX, SUFFIX))
        r = bus.call("Complete", prefix, f"{{'max_tokens': <uint32 12>, 'temperature': <0.0>, 'suffix': <'{suffix}'>}}")
        m = re.search(r"'prompt_tokens': <uint32 (\d+)>", r.out)
        if r.rc != 0 or bustest.gvariant_first_string(r.out) != want["text"] or not m or \
                int(m.group(1)) != len(want["prompt_tokens"]):
            fail(f"Complete with a suffix: {r} (want {want['text']!r}, {len(want['prompt_tokens'])} prompt tokens)")
        r = bus.call("Complete", prefix, f"{{'suffix': <'{suffix}'>, 'system': <'Be brief.'>}}")
        if r.rc == 0 or "ill in the middle (a suffix) takes" not in r.err:
            fail(f"a suffix with a system prompt: {r}")
        # what an editor sends: the cursor at the file's beginning, text typed at it, another
        # file's chunk; each text's tokens in their place (llama.cpp's /infill prompt)
        ask = (f"{{'max_tokens': <uint32 2>, 'suffix': <'{suffix}'>, 'fim_middle': <'x = '>, "
               "'fim_extra': <[('a.py', 'import os\\n')]>")
        text = lambda s: tokens(model, s, "--no-bos", "--no-parse-special")  # noqa: E731
        before = 3 + sum(len(text(s)) for s in ("myproject\n", "a.py\n", "import os\n", "filename\n"))
        want_n = before + 3 + sum(len(text(s)) for s in ("x = ", SUFFIX))
        r = bus.call("Complete", "", ask + "}")
        m = re.search(r"'prompt_tokens': <uint32 (\d+)>", r.out)
        if r.rc != 0 or not m or int(m.group(1)) != want_n or "prompt_cut" in r.out:
            fail(f"Complete with fim_middle and fim_extra: {r} (want {want_n} prompt tokens)")
        # fitted as llama-server fits it: a context of 1024 has no room for the tokens before
        # the prefix (1024 - 2048 - 2 * 2 < 0)
        r = bus.call("Complete", "", ask + ", 'fim_fit': <true>}")
        m = re.search(r"'prompt_tokens': <uint32 (\d+)>", r.out)
        if r.rc != 0 or not m or int(m.group(1)) != want_n - before or "'prompt_cut': <true>" not in r.out:
            fail(f"Complete with fim_fit: {r} (want {want_n - before} prompt tokens)")
        for opts in ("{'fim_middle': <'x'>}", "{'fim_extra': <[('a', 'b')]>}", "{'fim_fit': <true>}"):
            r = bus.call("Complete", prefix, opts)
            if r.rc == 0 or "go with a suffix" not in r.err:
                fail(f"{opts} without a suffix: {r}")
        print("ok: the daemon")
    finally:
        bus.close()


if __name__ == "__main__":
    sys.exit(main())
