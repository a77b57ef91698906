#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu inspect and mkmodel from the command line: `inspect --json` of the conformance
models and vocab files agrees with every fact in conformance/models.json (each tensor's
type and shape, each non-array key/value, array lengths); mkmodel writes what inspect then
shows; inspect's verdict says a model runs, and why a file of an unknown architecture, of a
tensor type the engine cannot compute with, without hyperparameters or with a vocabulary
only does not (status 0), and a truncated file gives its reason with status 1; usage errors
exit with status 2. Env: AXP_CLI, AXP_CONFORMANCE_DIR."""
import json
import math
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import CONF, fail  # noqa: E402


def run(*args, check=True):
    return clitest.run(*args, check=check)


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
        v = d.get("verdict", {})
        if "/vocab/" in path:
            if v.get("runs") is not False or "a vocabulary only" not in v.get("reason", ""):
                fail(f"{name}: verdict {v}, want a vocabulary only")
        elif v.get("runs") is not True:
            fail(f"{name}: verdict {v}, want it to run")
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


def gguf(path, kvs, tensors):
    """A small GGUF v3 file by hand: kvs as (key, value) with str or uint32 values, tensors as
    (name, type id, shape, data bytes)."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, v in kvs:
        head += s(k) + (struct.pack("<I", 8) + s(v) if isinstance(v, str) else struct.pack("<II", 4, v))
    offset, data = 0, b""
    for name, ttype, shape, nbytes in tensors:
        head += s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}q", *shape)
        head += struct.pack("<IQ", ttype, offset)
        data += b"\x01" * nbytes + b"\0" * (-nbytes % 32)
        offset = len(data)
    head += b"\0" * (-len(head) % 32)
    with open(path, "wb") as f:
        f.write(head + data)
    return path


def verdict(path, runs, *want):
    """inspect's verdict on path: whether it runs, the parts its text line must contain, and
    --json's verdict saying the same. Status 0 either way."""
    p = run("inspect", "-m", path)
    lines = p.stdout.splitlines()
    line = lines[1] if len(lines) > 1 else ""
    prefix = "runs: " if runs else "does not run: "
    if not line.startswith(prefix) or any(w not in line for w in want):
        fail(f"inspect {path}: verdict {line!r}, want {prefix!r} with {want}")
    d = inspect_json(path)
    if d is None:
        return None
    v = d.get("verdict", {})
    same = ("runs: {architecture}, {parameters} parameters, types {types}" if runs
            else "does not run: {reason}").format_map(v) if v.get("runs") is runs else None
    if line != same:
        fail(f"inspect --json {path}: verdict {v}, want runs {runs} as the text says: {line!r}")
    return d


def check_verdicts(tmp):
    model = os.path.join(tmp, "m.gguf")  # check_mkmodel_then_inspect made it
    d = verdict(model, True, "runs: qwen3, ", " parameters, types Q6_K 8, F32 5")
    if d and d["verdict"].get("parameters") != sum(math.prod(t["shape"]) for t in d["tensors"]):
        fail(f"inspect: parameters {d['verdict']}, want the tensors' elements")
    f32 = ("token_embd.weight", 0, [32, 2], 256)
    verdict(gguf(os.path.join(tmp, "mamba.gguf"), [("general.architecture", "mamba")], [f32]), False,
            "architecture 'mamba' is not one the engine runs (llama")
    # IQ2_XXS (16): 256 elements in 66 bytes
    verdict(gguf(os.path.join(tmp, "iq2xxs.gguf"), [("general.architecture", "llama")],
                 [("token_embd.weight", 16, [256, 2], 132)]), False,
            "tensor 'token_embd.weight' has type IQ2_XXS", "(supported: F32, F16")
    verdict(gguf(os.path.join(tmp, "vocab.gguf"), [("tokenizer.ggml.model", "gpt2")], []), False,
            "vocab.gguf holds a vocabulary only (no tensors)")
    # a header the engine accepts, and then the load finds no hyperparameters
    verdict(gguf(os.path.join(tmp, "bare.gguf"), [("general.architecture", "llama")], [f32]), False,
            "bare.gguf")
    # cut short: not a file that can be read, so status 1 and one line naming it
    with open(model, "rb") as f:
        data = f.read()
    cut = os.path.join(tmp, "cut.gguf")
    with open(cut, "wb") as f:
        f.write(data[:len(data) // 2])
    for args in (["-m", cut], ["--json", "-m", cut]):
        p = run("inspect", *args, check=False)
        if p.returncode != 1 or p.stderr.count("\n") != 1 or "cut.gguf" not in p.stderr:
            fail(f"inspect {args}: status {p.returncode}, stderr {p.stderr!r}")
    try:
        v = json.loads(p.stdout)["verdict"]
        if v["runs"] is not False or v["reason"] not in p.stderr:
            fail(f"inspect --json of a cut file: {v}, stderr {p.stderr!r}")
    except (json.JSONDecodeError, KeyError) as e:
        fail(f"inspect --json of a cut file: {e}: {p.stdout!r}")
    print("ok   verdicts: runs, unknown architecture, IQ2_XXS, vocabulary only, no hyperparameters, cut")


def check_conformance_files_run(conf):
    """Every tensor type's conformance file (llama.cpp's llama-quantize wrote them) and every
    architecture's (phi3, gemma3, qwen3moe: written by llama.cpp's tools) runs."""
    for sub, what in (("types", "tensor-type"), ("archs", "architecture")):
        folder = os.path.join(conf, sub)
        names = sorted(n for n in os.listdir(folder) if n.endswith(".gguf")) if os.path.isdir(folder) else []
        for name in names:
            d = inspect_json(os.path.join(folder, name))
            if d and d.get("verdict", {}).get("runs") is not True:
                fail(f"{sub}/{name}: verdict {d.get('verdict')}, want it to run")
        print(f"ok   {len(names)} {what} files run" if names else f"SKIP: no conformance {sub} folder")


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
    with tempfile.TemporaryDirectory() as tmp:
        check_mkmodel_then_inspect(tmp)
        check_verdicts(tmp)
    check_usage()
    if os.path.isfile(os.path.join(CONF, "models.json")):
        check_against_models_json(CONF)
        check_conformance_files_run(CONF)
    else:
        print("SKIP: models.json (no AXP_CONFORMANCE_DIR)")
    sys.exit(clitest.status())


main()
