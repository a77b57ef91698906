#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""generate --parallel N: N completions of one prompt decoded together (one pass over the
weights for all, as the engine decodes N requests). Each completion must be exactly what a
lone run gives with its seed (seed + k for completion k), greedy and sampled, on a Q8_0 llama
model and a Q4_K qwen2 one, with one and two threads; a completion that meets its stop string
leaves the batch while the others go on; text output gives each completion under its own
line; --parallel outside 1..64 is a usage error; --json's timings name the CPU path and the
prefetch plan and give the model's load time.
Env: AXP_CLI."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import fail, run  # noqa: E402


def gen_json(model, *args):
    p = run("generate", "-m", model, "-p", "The quick brown fox", "--raw", "--json", *args)
    if p.returncode != 0:
        fail(f"generate {' '.join(args)}: status {p.returncode}, stderr {p.stderr.strip()}")
        return None
    return json.loads(p.stdout)


def check_model(model, name):
    for threads in ("1", "2"):
        common = ["-n", "24", "--threads", threads]
        # greedy: every completion is the lone greedy run
        lone = gen_json(model, *common, "--temperature", "0")
        many = gen_json(model, *common, "--temperature", "0", "--parallel", "3")
        if lone and many:
            ch = many.get("choices", [])
            if len(ch) != 3 or any(c["tokens"] != lone["tokens"] or c["text"] != lone["text"] for c in ch):
                fail(f"{name}, {threads} threads: greedy --parallel 3 differs from the lone run")
            if [c["index"] for c in ch] != [0, 1, 2] or many["prompt_tokens"] != lone["prompt_tokens"]:
                fail(f"{name}: choices' indices or prompt tokens wrong")
            if many["timings"]["decode_tokens_per_s"] <= 0:
                fail(f"{name}: no decode rate")
            # on the CPU, the path and the prefetch plan the figures were measured with
            t = many["timings"]
            if t.get("cpu_path") not in ("generic", "avx2", "avx-vnni", "avx512", "amx") or \
                    t.get("prefetch_plan") not in ("dense", "sparse", "dense-l1", "sparse-l1"):
                fail(f"{name}: timings without the CPU path or prefetch plan: {t}")
            if not isinstance(t.get("load_s"), float) or not 0 < t["load_s"] < 600:
                fail(f"{name}: timings without the model's load time: {t}")
        # sampled: completion k is the lone run with seed 11 + k
        many = gen_json(model, *common, "--seed", "11", "--parallel", "4")
        if not many:
            continue
        seqs = []
        for k in range(4):
            lone = gen_json(model, *common, "--seed", str(11 + k))
            c = many["choices"][k]
            if lone and (c["tokens"] != lone["tokens"] or c["finish_reason"] != lone["finish_reason"]):
                fail(f"{name}, {threads} threads: completion {k} differs from the lone run with seed {11 + k}")
            seqs.append(c["tokens"])
        if len(set(map(tuple, seqs))) < 2:
            fail(f"{name}: four sampled completions with different seeds are all the same")
    print(f"ok   {name}: each completion is its lone run, greedy and sampled, 1 and 2 threads")

    # a stop string met by completion 0 only: it leaves the batch, completion 1 goes on
    a = gen_json(model, "-n", "24", "--seed", "3")
    b = gen_json(model, "-n", "24", "--seed", "4")
    if not a or not b:
        return
    stop = None
    for i in range(2, len(a["text"]) - 4):
        s = a["text"][i:i + 3]
        if s.strip() and s not in b["text"] and s not in a["text"][:i]:
            stop = s
            break
    if stop is None:
        print(f"SKIP {name}: no stop string found in one completion only")
        return
    lone0 = gen_json(model, "-n", "24", "--seed", "3", "--stop", stop)
    many = gen_json(model, "-n", "24", "--seed", "3", "--stop", stop, "--parallel", "2")
    if lone0 and many:
        c0, c1 = many["choices"]
        if c0["finish_reason"] != "stop" or c0["text"] != lone0["text"] or c0["tokens"] != lone0["tokens"]:
            fail(f"{name}: the completion that met its stop: {c0} against {lone0}")
        if c1["finish_reason"] != "length" or c1["tokens"] != b["tokens"]:
            fail(f"{name}: the completion that went on after the other stopped differs from its lone run")
    print(f"ok   {name}: a completion that stops leaves the batch, the other goes on")


def check_text_and_usage(model):
    p = run("generate", "-m", model, "-p", "hi", "--raw", "-n", "6", "--temperature", "0", "--parallel", "2")
    lone = run("generate", "-m", model, "-p", "hi", "--raw", "-n", "6", "--temperature", "0")
    want = f"--- completion 0 ---\n{lone.stdout}--- completion 1 ---\n{lone.stdout}"
    if p.returncode != 0 or p.stdout != want:
        fail(f"text output of --parallel 2: {p.stdout!r}, want {want!r}")
    for bad in ("0", "65", "x"):
        p = run("generate", "-m", model, "-p", "hi", "--parallel", bad)
        if p.returncode != 2 or "--parallel" not in p.stderr or len(p.stderr.strip().splitlines()) != 1:
            fail(f"--parallel {bad}: status {p.returncode}, stderr {p.stderr!r}")
    print("ok   text output: each completion under its own line; --parallel out of range refused")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        q8 = os.path.join(tmp, "q8.gguf")
        q4k = os.path.join(tmp, "q4k.gguf")
        if (run("mkmodel", "--no-eog", "-o", q8).returncode != 0 or
                run("mkmodel", "--no-eog", "--arch", "qwen2", "--type", "q4_k", "--dim", "512", "--ffn", "768",
                    "--heads", "8", "--kv-heads", "2", "-o", q4k).returncode != 0):
            print("FAIL: mkmodel")
            return 1
        check_model(q8, "q8_0 llama")
        check_model(q4k, "q4_k qwen2")
        check_text_and_usage(q8)
    print(f"{clitest.failures} failures")
    return clitest.status()


if __name__ == "__main__":
    sys.exit(main())
