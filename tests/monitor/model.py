# SPDX-License-Identifier: MIT
"""The small model the monitor's tests run the real engine on, made by `agentxpu mkmodel`.

Its weights are random, so what it says is noise; what matters is that every answer has
text. A random model may pick end-of-generation as its first token now and then, and the
monitor rightly drops an empty answer, which would leave a test waiting for a suggestion
that never comes. So the model is made with `--no-eog`: the LM head's rows for the
vocabulary's control tokens (end-of-generation among them) are zero, their logits always 0
while among thousands of random logits dozens are above 0, so neither greedy decoding nor
the engine's top-k sampling ever picks one, and every answer runs to max_tokens.
"""
import os
import subprocess

# Where the conformance data keeps a real tokenizer (Llama 3's byte-level BPE); tests fall
# back to mkmodel's small built-in vocabulary without it.
VOCAB = "vocab/ggml-vocab-llama-bpe.gguf"

# A context as long as the engine allows: a 40-file batch summary fits, and a request can
# be made to run long (the restart tests keep a request running while they act).
CTX = 4096


def make_model(folder, cli, conformance_dir=""):
    """Writes the test model into folder; returns (path, description)."""
    path = os.path.join(folder, "monitor-test.gguf")
    argv = [cli, "mkmodel", "-o", path, "--seed", "11", "--ctx", str(CTX), "--threads", "2",
            "--no-eog"]
    vocab = os.path.join(conformance_dir, VOCAB) if conformance_dir else ""
    if vocab and os.path.exists(vocab):
        argv += ["--vocab-from", vocab]
        what = "llama-bpe vocabulary"
    else:
        what = "built-in vocabulary"
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"agentxpu mkmodel failed: {r.stderr.strip()}")
    return path, f"{what}, control tokens never chosen (--no-eog)"
