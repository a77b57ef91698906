#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu tokenize on llama.cpp's tokenizer test vocabularies, which hold a vocabulary and
no tensors: `tokenize -m VOCAB.gguf -f CASE --no-bos --json` gives, for every case of each
VOCAB.gguf.inp, the ids of the matching line of VOCAB.gguf.out (cases are separated by a
"__ggml_vocab_test__" line; the ids were made with add_special and parse_special off).
Commands that run a model (generate, logits, bench, devices -m) refuse such a file in one
line saying it holds a vocabulary only. Env: AXP_CLI, AXP_CONFORMANCE_DIR; skipped (77)
without the conformance data."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import CONF, fail  # noqa: E402

VOCABS = ["llama-bpe", "qwen2", "llama-spm", "phi-3"]
SEP = b"\n__ggml_vocab_test__\n"


def run(*args):
    """Output as bytes: the checks decode it themselves."""
    return clitest.run(*args, text=False)


def cases(vocab):
    """(input bytes, expected ids) for each case of the vocabulary's test vectors."""
    with open(vocab + ".inp", "rb") as f:
        inputs = f.read().split(SEP)
    if inputs and inputs[-1] == b"":  # the file ends with a separator
        inputs.pop()
    with open(vocab + ".out") as f:
        outputs = f.read().split("\n")
    if len(outputs) < len(inputs):
        fail(f"{vocab}: {len(inputs)} inputs but {len(outputs)} output lines")
    return [(text, [int(t) for t in ids.split()]) for text, ids in zip(inputs, outputs)]


def check_vectors(tmp):
    for name in VOCABS:
        vocab = os.path.join(CONF, "vocab", f"ggml-vocab-{name}.gguf")
        n_ok = 0
        all_cases = cases(vocab)
        for i, (text, want) in enumerate(all_cases):
            path = os.path.join(tmp, f"{name}-{i}.txt")
            with open(path, "wb") as f:
                f.write(text)
            p = run("tokenize", "-m", vocab, "-f", path, "--no-bos", "--json")
            try:
                got = json.loads(p.stdout)["tokens"] if p.returncode == 0 else None
            except (json.JSONDecodeError, KeyError):
                got = None
            if got != want:
                fail(f"{name} case {i} {text[:40]!r}: status {p.returncode}, "
                     f"{p.stderr.decode(errors='replace').strip()}\n  want {want}\n  got  {got}")
            else:
                n_ok += 1
        print(f"{'ok  ' if n_ok == len(all_cases) else 'FAIL'} {name}: {n_ok}/{len(all_cases)} cases")
        if len(all_cases) < 40:
            fail(f"{name}: only {len(all_cases)} cases read")


def check_refused(tmp):
    vocab = os.path.join(CONF, "vocab", "ggml-vocab-llama-bpe.gguf")
    for args in (["generate", "-m", vocab, "-p", "hi", "-n", "1"],
                 ["logits", "-m", vocab, "-p", "hi", "-o", os.path.join(tmp, "logits.f32")],
                 ["bench", "-m", vocab, "--minutes", "0.1"],
                 ["devices", "-m", vocab]):
        p = run(*args)
        err = p.stderr.decode(errors="replace").splitlines()
        want = f"agentxpu {args[0]}: ggml-vocab-llama-bpe.gguf holds a vocabulary only (no tensors)"
        if p.returncode != 1 or len(err) != 1 or not err[0].startswith(want):
            fail(f"{' '.join(args)}: status {p.returncode}, stderr {err}")
    if os.path.exists(os.path.join(tmp, "logits.f32")):
        fail("logits wrote a file for a vocabulary")
    print("ok   generate, logits, bench and devices -m refuse a vocabulary-only file")


def main():
    if not os.path.isdir(os.path.join(CONF, "vocab")):
        clitest.skip(f"no conformance data at '{CONF}' (AXP_CONFORMANCE_DIR)")
    with tempfile.TemporaryDirectory() as tmp:
        check_vectors(tmp)
        check_refused(tmp)
    sys.exit(clitest.status())


main()
