#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu inspect and mkmodel from the command line: `inspect --json` of the conformance
models and vocab files agrees with every fact in conformance/models.json (each tensor's
type and shape, each non-array key/value, array lengths); mkmodel writes what inspect then
shows; usage errors exit with status 2. Env: AXP_CLI, AXP_CONFORMANCE_DIR."""
import json
import math
import os
import subprocess
import sys
import tempfile

CLI = os.environ["AXP_CLI"]
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg)


def run(*args, check=True):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        fail(f"agentxpu {' '.join(args)}: status {p.returncode}: {p.stderr.strip()}")
    return p


def inspect_json(path):
    p = run("inspect", "--json", "-m", path)
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        fail(f"inspect --json {path}: not JSON ({e})")
        return None


def same_value(got, want):
    if isinstance(want, float):
        return isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-6)
    return got == want


def check_against_models_json(conf):
    with open(os.path.join(conf, "models.json")) as f:
        facts = json.load(f)
    for name, want in facts.items():
        path = os.path.join(conf, name)
        if not os.path.exists(path):
            path = os.path.join(conf, "vocab", name)
        d = inspect_json(path)
        if d is None:
            continue
        if d["size"] != want["size"]:
            fail(f"{name}: size {d['size']} != {want['size']}")
        tensors = {t["name"]: t for t in d["tensors"]}
        if set(tensors) != set(want["tensors"]):
            fail(f"{name}: tensor names differ: {sorted(set(tensors) ^ set(want['tensors']))[:5]}")
        for tname, (ttype, shape) in want["tensors"].items():
            t = tensors.get(tname)
            if t and (t["type"] != ttype or t["shape"] != shape):
                fail(f"{name}: {tname}: {t['type']} {t['shape']} != {ttype} {shape}")
        counts = {}
        for t in d["tensors"]:
            counts[t["type"]] = counts.get(t["type"], 0) + 1
        if counts != want["tensor_type_counts"]:
            fail(f"{name}: type counts {counts} != {want['tensor_type_counts']}")
        kvs = {kv["key"]: kv for kv in d["kv"]}
        if set(kvs) != set(want["kv"]):
            fail(f"{name}: keys differ: {sorted(set(kvs) ^ set(want['kv']))}")
        for key, value in want["kv"].items():
            kv = kvs.get(key)
            if kv is None:
                continue
            if isinstance(value, str) and value.startswith("array["):
                n = int(value[len("array["):-1])
                if kv["type"] != "array" or kv["count"] != n:
                    fail(f"{name}: {key}: {kv.get('count')} elements, want {n}")
            elif not same_value(kv.get("value"), value):
                fail(f"{name}: {key} = {kv.get('value')!r}, want {value!r}")
        print(f"ok   {name}: {len(tensors)} tensors, {len(kvs)} key/values agree with models.json")


def check_mkmodel_then_inspect(tmp):
    path = os.path.join(tmp, "m.gguf")
    run("mkmodel", "--arch", "qwen3", "--type", "q6_k", "--dim", "256", "--layers", "1",
        "--heads", "2", "--kv-heads", "1", "--head-dim", "128", "--ffn", "512", "--tied",
        "--seed", "5", "-o", path)
    d = inspect_json(path)
    if d:
        kvs = {kv["key"]: kv for kv in d["kv"]}
        tensors = {t["name"]: t for t in d["tensors"]}
        want = {"general.architecture": "qwen3", "qwen3.attention.key_length": 128,
                "qwen3.embedding_length": 256, "qwen3.block_count": 1}
        for k, v in want.items():
            if k not in kvs or kvs[k]["value"] != v:
                fail(f"mkmodel: {k} = {kvs.get(k)}, want {v}")
        if tensors.get("blk.0.attn_q.weight", {}).get("shape") != [256, 256]:
            fail(f"mkmodel: attn_q {tensors.get('blk.0.attn_q.weight')}")
        if tensors.get("blk.0.attn_k_norm.weight", {}).get("shape") != [128]:
            fail("mkmodel: attn_k_norm")
        if "output.weight" in tensors:
            fail("mkmodel --tied wrote output.weight")
        if tensors.get("token_embd.weight", {}).get("type") != "Q6_K":
            fail("mkmodel: token_embd is not Q6_K")
    text = run("inspect", "-m", path).stdout
    if "qwen3.attention.key_length = uint32 128" not in text or "blk.0.ffn_down.weight Q6_K [512, 256]" not in text:
        fail("inspect text output lacks the expected lines")
    # a row that does not fit the type's blocks: a clear error naming the tensor
    p = run("mkmodel", "--type", "q4_k", "--dim", "64", "-o", os.path.join(tmp, "x.gguf"), check=False)
    if p.returncode != 1 or "token_embd.weight" not in p.stderr or p.stderr.count("\n") != 1:
        fail(f"mkmodel q4_k dim 64: status {p.returncode}, stderr {p.stderr!r}")
    if os.path.exists(os.path.join(tmp, "x.gguf")):
        fail("mkmodel left a file behind after failing")
    print("ok   mkmodel then inspect")


def check_usage():
    for args in (["inspect"], ["inspect", "-m"], ["inspect", "--bogus"], ["mkmodel"],
                 ["mkmodel", "--arch", "gpt", "-o", "/tmp/x"], ["mkmodel", "--dim", "x", "-o", "/tmp/x"]):
        p = run(*args, check=False)
        if p.returncode != 2:
            fail(f"agentxpu {' '.join(args)}: status {p.returncode}, want 2 (usage)")
    for cmd in ("inspect", "mkmodel"):
        p = run(cmd, "--help")
        if "usage: agentxpu " + cmd not in p.stdout:
            fail(f"{cmd} --help")
    print("ok   usage errors")


def main():
    conf = os.environ.get("AXP_CONFORMANCE_DIR", "")
    with tempfile.TemporaryDirectory() as tmp:
        check_mkmodel_then_inspect(tmp)
    check_usage()
    if os.path.isfile(os.path.join(conf, "models.json")):
        check_against_models_json(conf)
    else:
        print("SKIP: models.json (no AXP_CONFORMANCE_DIR)")
    sys.exit(1 if failures else 0)


main()
