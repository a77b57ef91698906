#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu quantize from the command line. An F32 model made by mkmodel, requantized into
each type, is the model mkmodel makes in that type from the same seed (equal logits: the same
quantizers, rows and keys), with every weight matrix in the type and norms in F32; rows of 320
fall back as llama-quantize's do. The conformance data's Q8_0 model requantized into each type
and mix keeps its logits as close to the Q8_0 model's as llama-quantize's own file of that
type (made from the F32 original) is, within a quarter more plus 0.05 of the logit RMS; the
mixes choose, tensor by tensor, the types llama-quantize chose in its Q3_K_M and Q4_K_M files
(types/models.json). With AXP_LLAMA_QUANTIZE (a llama-quantize binary), on the 4-layer F32
model: the mixes choose what llama-quantize chooses, and llama-quantize's IQ4_XS file runs,
its logits as close to the F32 model's as our IQ4_XS file's (within a quarter more plus
0.05 of the logit RMS) and the kernels' within 0.1 of the largest of the reference forward
pass's. Bad input gives one line, status 1 or 2, and leaves no file behind.
Env: AXP_CLI, AXP_CONFORMANCE_DIR, AXP_LLAMA_QUANTIZE (optional)."""
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import CLI, CONF, fail, read_f32  # noqa: E402

TYPES = ["q8_0", "q6_k", "q5_0", "q5_1", "q5_k", "q4_0", "q4_1", "q4_k", "iq4_nl", "iq4_xs",
         "q3_k", "q2_k", "f16", "bf16"]
MIXES = ["Q5_K_M", "Q4_K_M", "Q3_K_M"]
# the llama-quantize file of the conformance data each target is held against: its own type,
# else the nearest in bits
PEER = {"q6_k": "q6_k", "q5_0": "q5_0", "q5_1": "q5_1", "q5_k": "q5_1", "q4_0": "q4_0",
        "q4_1": "q4_1", "q4_k": "q4_k_m", "iq4_nl": "iq4_nl", "iq4_xs": "q4_k_m", "q3_k": "q3_k_m",
        "q2_k": "q2_k", "Q5_K_M": "q5_1", "Q4_K_M": "q4_k_m", "Q3_K_M": "q3_k_m"}
PROMPT = "The quick brown fox jumps over the lazy dog."


def run(*args, check=True):
    return clitest.run(*args, check=check, timeout=600)


def logits(model, out):
    p = run("logits", "-m", model, "-p", PROMPT, "--kv-type", "f32", "-o", out)
    if p.returncode != 0:
        return None
    return read_f32(out)


def rel_rms(got, ref):
    """RMS of got - ref over the RMS of ref"""
    r = math.sqrt(sum(x * x for x in ref) / len(ref))
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(got, ref)) / len(ref)) / r


def tensor_types(path):
    p = run("inspect", "--json", "-m", path)
    try:
        return {t["name"]: t["type"] for t in json.loads(p.stdout)["tensors"]}
    except (json.JSONDecodeError, KeyError) as e:
        fail(f"inspect --json {path}: {e}")
        return {}


def check_llama_quantize(lq, src, d):
    ref = logits(src, os.path.join(d, "lq-f32.logits"))
    for mix in MIXES + ["IQ4_XS"]:
        theirs = os.path.join(d, f"lq-{mix}.gguf")
        ours = os.path.join(d, f"ours-{mix}.gguf")
        p = subprocess.run([lq, src, theirs, mix], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            fail(f"llama-quantize {mix}: status {p.returncode}: {p.stderr.strip()[-300:]}")
            continue
        if run("quantize", src, ours, mix).returncode != 0:
            continue
        want, got = tensor_types(theirs), tensor_types(ours)
        if mix in MIXES:
            if got != want:
                diff = sorted(k for k in want if got.get(k) != want[k])
                fail(f"{mix}: types differ from llama-quantize's at {diff[:6]}")
            else:
                print(f"  {mix}: every tensor's type as llama-quantize chose ({len(want)})")
            continue
        a, b = logits(theirs, theirs + ".logits"), logits(ours, ours + ".logits")
        if a is None or b is None or ref is None:
            continue
        et, eo = rel_rms(a, ref), rel_rms(b, ref)
        print(f"  IQ4_XS: llama-quantize's file {et:.3f} x RMS from the F32 model's logits, ours {eo:.3f}")
        if not et <= 1.25 * eo + 0.05:
            fail(f"llama-quantize's IQ4_XS file: logits {et:.3f} x RMS from F32's (ours {eo:.3f})")
        r = run("logits", "-m", theirs, "-p", PROMPT, "--reference", "-o", theirs + ".ref")
        if r.returncode == 0:
            v = read_f32(theirs + ".ref")
            e = max(abs(x - y) for x, y in zip(a, v)) / max(abs(y) for y in v)
            print(f"  IQ4_XS: llama-quantize's file, kernels vs reference pass {e:.2e} of the largest logit")
            if not e <= 0.1:
                fail(f"llama-quantize's IQ4_XS file: kernels {e:.3g} from the reference pass")


def main():
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "f32.gguf")
        run("mkmodel", "--arch", "llama", "--type", "f32", "--dim", "256", "--layers", "4",
            "--heads", "4", "--kv-heads", "2", "--ffn", "768", "--ctx", "256", "--seed", "3",
            "-o", src)
        for target in TYPES:
            out = os.path.join(d, f"{target}.gguf")
            made = os.path.join(d, f"mk-{target}.gguf")
            if run("quantize", src, out, target).returncode != 0:
                continue
            for name, ty in tensor_types(out).items():
                want = "F32" if name.endswith("_norm.weight") else target.upper()
                if ty != want:
                    fail(f"{target}: {name} is {ty}, expected {want}")
            run("mkmodel", "--arch", "llama", "--type", target, "--dim", "256", "--layers", "4",
                "--heads", "4", "--kv-heads", "2", "--ffn", "768", "--ctx", "256", "--seed", "3",
                "-o", made)
            a, b = logits(out, out + ".logits"), logits(made, made + ".logits")
            if a is None or b is None or a != b:
                fail(f"{target}: the requantized F32 model's logits differ from mkmodel's {target} model's")
        print(f"  {len(TYPES)} types: requantized F32 models compute what mkmodel's do")

        # 320-wide rows: llama-quantize's fallbacks (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0,
        # Q2_K/Q3_K to Q4_0, IQ4_XS to IQ4_NL)
        w320 = os.path.join(d, "w320.gguf")
        run("mkmodel", "--arch", "llama", "--type", "f32", "--dim", "320", "--layers", "1",
            "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--ctx", "256", "--seed", "4",
            "-o", w320)
        fallback = {"q4_k": "Q5_0", "q5_k": "Q5_1", "q6_k": "Q8_0", "q2_k": "Q4_0", "q3_k": "Q4_0",
                    "iq4_xs": "IQ4_NL"}
        for target, fb in fallback.items():
            out = os.path.join(d, f"w320-{target}.gguf")
            if run("quantize", w320, out, target).returncode != 0:
                continue
            types = tensor_types(out)
            # ffn_down's rows are 512 long, every other matrix's 320
            for name, ty in types.items():
                want = ("F32" if name.endswith("_norm.weight") else
                        target.upper() if "ffn_down" in name else fb)
                if ty != want:
                    fail(f"320-wide {target}: {name} is {ty}, expected {want}")
            run("logits", "-m", out, "-p", "hello", "-o", os.path.join(d, "w320.logits"))

        # the conformance Q8_0 model into each type and mix, against llama-quantize's files
        q8 = os.path.join(CONF, "types", "tiny-spm-llama-q8_0.gguf")
        if os.path.exists(q8):
            ref = logits(q8, os.path.join(d, "q8.logits"))
            for target in TYPES[1:12] + MIXES:
                out = os.path.join(d, f"c-{target}.gguf")
                peer = os.path.join(CONF, "types", f"tiny-spm-llama-{PEER[target]}.gguf")
                if run("quantize", q8, out, target).returncode != 0 or not os.path.exists(peer):
                    continue
                got, theirs = logits(out, out + ".logits"), logits(peer, out + ".peer")
                if got is None or theirs is None or ref is None:
                    continue
                e, ep = rel_rms(got, ref), rel_rms(theirs, ref)
                bound = 1.25 * ep + 0.05
                print(f"  {target}: logits {e:.3f} x RMS from the Q8_0 model's; llama-quantize's "
                      f"{PEER[target].upper()} file {ep:.3f} (bound {bound:.3f})")
                if not e <= bound:
                    fail(f"{target}: logits {e:.3f} x RMS from the Q8_0 model's (bound {bound:.3f})")
        # the mixes against llama-quantize's choices in the conformance data
        facts = os.path.join(CONF, "types", "models.json")
        if os.path.exists(facts):
            with open(facts) as f:
                models = json.load(f)
            for src_name, mix, want_name in [
                    ("tiny-spm-llama-q8_0", "Q4_K_M", "tiny-spm-llama-q4_k_m"),
                    ("tiny-spm-llama-q8_0", "Q3_K_M", "tiny-spm-llama-q3_k_m"),
                    ("tiny-spm-llama320-q4_k_m", "Q4_K_M", "tiny-spm-llama320-q4_k_m")]:
                path = os.path.join(CONF, "types", src_name + ".gguf")
                if not os.path.exists(path):
                    continue
                out = os.path.join(d, f"{want_name}.gguf")
                if run("quantize", path, out, mix).returncode != 0:
                    continue
                want = {k: v[0] for k, v in models[f"types/{want_name}.gguf"]["tensors"].items()}
                got = tensor_types(out)
                if got != want:
                    diff = sorted(k for k in want if got.get(k) != want[k])
                    fail(f"{mix} of {src_name}: types differ from llama-quantize's at {diff[:6]}")
                else:
                    print(f"  {mix} of {src_name}: every tensor's type as llama-quantize chose ({len(want)})")
        else:
            print("  conformance data absent: mixes not compared with llama-quantize's")

        llama_quantize = os.environ.get("AXP_LLAMA_QUANTIZE")
        if llama_quantize:
            check_llama_quantize(llama_quantize, src, d)
        else:
            print("  AXP_LLAMA_QUANTIZE unset: llama-quantize's own files not compared")

        # bad input: one line, no file left behind
        out = os.path.join(d, "bad.gguf")
        for args, status, msg in [
                ((src, out, "q7_0"), 2, "unknown type 'q7_0'"),
                ((os.path.join(d, "missing.gguf"), out, "q4_0"), 1, "missing.gguf"),
                ((os.path.join(d, "f32.logits"), out, "q4_0"), 1, "f32.logits"),
                ((src, out), 2, "expected IN OUT TYPE"),
                ((src, os.path.join(d, "no", "such", "dir.gguf"), "q8_0"), 1, "dir.gguf")]:
            p = run("quantize", *args, check=False)
            lines = p.stderr.strip().splitlines()
            if p.returncode != status or len(lines) != 1 or msg not in lines[0]:
                fail(f"quantize {args}: status {p.returncode}, stderr {p.stderr!r}")
            if os.path.exists(out):
                fail(f"quantize {args} left {out} behind")
        left = [f for f in os.listdir(d) if ".tmp-" in f]
        if left:
            fail(f"temporary files left behind: {left}")

        # Interrupted midway (Ctrl-C): nothing of the output is left (the file is written
        # unnamed and named when complete; a named temporary file used to stay behind).
        big = os.path.join(d, "big-f32.gguf")
        run("mkmodel", "--type", "f32", "--dim", "512", "--layers", "4", "--heads", "8", "--kv-heads", "4",
            "--ffn", "1536", "--ctx", "4096", "--seed", "7", "-o", big)
        cut = os.path.join(d, "cut.gguf")
        p = subprocess.Popen([CLI, "quantize", "--threads", "1", big, cut, "q3_k"],  # a few seconds
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        left = [f for f in os.listdir(d) if f.startswith("cut.gguf")]
        if p.returncode == 0 or left:
            fail(f"quantize interrupted: status {p.returncode}, left behind {left}")
    return clitest.status()


if __name__ == "__main__":
    sys.exit(main())
