#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Split models, as llama.cpp's gguf-split writes them and Hugging Face repositories carry
large models (PREFIX-00001-of-0000N.gguf, ...): a model split into three parts (and into two
with no tensors in the first) generates exactly what the whole file does, on the CPU and on
OpenCL where a device is present; inspect says it runs and shows each tensor's part; quantize
keep joins the parts into the whole file again, byte for byte, and requantizing a split model
writes one whole file; a later part, a missing part and a first part not named as the first
are refused with one line that says what to open.
Args: the gguf-split test program. Env: AXP_CLI."""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import fail, run  # noqa: E402

SPLIT = sys.argv[1]


def split(src, prefix, n, *flags):
    p = subprocess.run([SPLIT, src, prefix, str(n), *flags], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        clitest.skip(f"gguf-split failed: {p.stderr.strip()}")


def tokens(model, *args):
    p = run("generate", "-m", model, "-p", "The quick brown fox", "--raw", "--json", "-n", "16",
            "--temperature", "0", *args)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return json.loads(p.stdout)["tokens"], ""


def refused(args, want):
    p = run(*args)
    lines = p.stderr.strip().splitlines()
    if p.returncode == 0 or len(lines) != 1 or want not in lines[0]:
        fail(f"agentxpu {' '.join(args)}: status {p.returncode}, stderr {p.stderr.strip()!r}, wanted {want!r}")


def main():
    d = tempfile.mkdtemp(prefix="axp-test-split-")
    try:
        whole = os.path.join(d, "whole.gguf")
        run("mkmodel", "-o", whole, "--seed", "3", "--type", "q4_k", "--dim", "256", "--layers", "3", check=True)
        three = os.path.join(d, "m")
        split(whole, three, 3)
        first = three + "-00001-of-00003.gguf"
        two = os.path.join(d, "n")
        split(whole, two, 2, "--no-tensors-first")

        want, why = tokens(whole)
        if want is None:
            fail(f"generate on the whole file: {why}")
            return
        for model in (first, two + "-00001-of-00002.gguf"):
            got, why = tokens(model)
            if got != want:
                fail(f"{os.path.basename(model)}: {got or why} where the whole file gives {want}")
        # OpenCL maps each part: the same tokens where a device is present
        ocl, why = tokens(whole, "--device", "opencl")
        if ocl is None:
            print("skip: the OpenCL part:", why)
        else:
            for model in (first, two + "-00001-of-00002.gguf"):
                got, why = tokens(model, "--device", "opencl")
                if got != ocl:
                    fail(f"{os.path.basename(model)} on OpenCL: {got or why} where the whole file gives {ocl}")
            # AXP_OPENCL_PROFILE: the same tokens, and each kernel's and each task's time at the end
            p = run("generate", "-m", whole, "-p", "The quick brown fox", "--raw", "--json", "-n", "16",
                    "--temperature", "0", "--device", "opencl",
                    env=dict(os.environ, AXP_OPENCL_PROFILE="1"))
            got = json.loads(p.stdout)["tokens"] if p.returncode == 0 else None
            prof = [l.split() for l in p.stderr.splitlines() if l.startswith("  ")]
            kernels = {l[1] for l in prof if l[0] == "kernel"}
            tasks = {" ".join(l[1:3]) for l in prof if l[0] == "task"}
            if got != ocl or not {"matmul", "attention", "act_q8_k"} <= kernels or \
                    not {"K1 qkv", "K2 attn", "K3 ffn"} <= tasks or \
                    not any(l[0] == "kernels" and "of the tasks'" in " ".join(l) for l in prof):
                fail(f"AXP_OPENCL_PROFILE=1: tokens {got}, where {ocl}; stderr {p.stderr[-800:]!r}")

        # inspect: runs, three parts, each tensor's part
        p = run("inspect", "-m", first, "--json", check=True)
        info = json.loads(p.stdout) if p.returncode == 0 else {}
        v = info.get("verdict", {})
        if not v.get("runs") or v.get("parts") != 3 or info.get("parts") != 3:
            fail(f"inspect --json of the first part: {v}, parts {info.get('parts')}")
        parts = sorted({t["part"] for t in info.get("tensors", [])})
        sizes = sum(os.path.getsize(f"{three}-{i:05d}-of-00003.gguf") for i in (1, 2, 3))
        if parts != [1, 2, 3] or info.get("total_size") != sizes:
            fail(f"inspect --json: tensors in parts {parts}, total_size {info.get('total_size')} of {sizes}")
        p = run("inspect", "-m", first, check=True)
        if "a split model of 3 parts" not in p.stdout or "runs: llama" not in p.stdout:
            fail(f"inspect of the first part: {p.stdout[:400]!r}")

        # keep joins the parts: the whole file again, byte for byte
        joined = os.path.join(d, "joined.gguf")
        run("quantize", first, joined, "keep", check=True)
        if not filecmp.cmp(joined, whole, shallow=False):
            fail("quantize keep of the parts is not the whole file")
        # requantizing a split model writes one whole file: no split keys, the same tensors
        q8 = os.path.join(d, "q8.gguf")
        run("quantize", first, q8, "q8_0", check=True)
        p = run("inspect", "-m", q8, "--json", check=True)
        if p.returncode == 0:
            info = json.loads(p.stdout)
            keys = [k["key"] for k in info["kv"]]
            if any(k.startswith("split.") for k in keys) or info["parts"] != 1 or not info["verdict"]["runs"]:
                fail(f"quantize q8_0 of the split model: keys {keys}, parts {info['parts']}")

        # refused, with what to open
        refused(["generate", "-m", three + "-00002-of-00003.gguf", "-p", "x", "-n", "1"],
                f"is part 2 of 3 of a split model; open its first part, {first}")
        refused(["inspect", "-m", three + "-00003-of-00003.gguf"], "is part 3 of 3 of a split model")
        renamed = os.path.join(d, "renamed.gguf")
        shutil.copy(first, renamed)
        refused(["generate", "-m", renamed, "-p", "x", "-n", "1"],
                "is part 1 of 3 of a split model, but not named PREFIX-00001-of-00003.gguf")
        os.rename(three + "-00002-of-00003.gguf", os.path.join(d, "aside.gguf"))
        refused(["generate", "-m", first, "-p", "x", "-n", "1"],
                "is part 1 of 3 of a split model, and part 2 cannot be read")
        refused(["quantize", first, os.path.join(d, "never.gguf"), "keep"], "and part 2 cannot be read")
        if os.path.exists(os.path.join(d, "never.gguf")):
            fail("quantize of a model missing a part left an output")
    finally:
        shutil.rmtree(d, ignore_errors=True)


main()
sys.exit(clitest.status())
