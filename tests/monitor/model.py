# SPDX-License-Identifier: MIT
"""The small model the monitor's tests run the real engine on, made by `agentxpu mkmodel`.

Its weights are random, so what it says is noise; what matters is that every answer has
text. A random model may pick end-of-generation as its first token now and then, and the
monitor rightly drops an empty answer, which would leave a test waiting for a suggestion
that never comes. So the rows of the LM head (output.weight) for the vocabulary's control
tokens (end-of-generation among them) are zeroed: their logits are always 0, while among
thousands of random logits dozens are above 0, so neither greedy decoding nor the engine's
top-k sampling ever picks one, and every answer runs to max_tokens.
"""
import os
import struct
import subprocess

# Where the conformance data keeps a real tokenizer (Llama 3's byte-level BPE); tests fall
# back to mkmodel's small built-in vocabulary without it.
VOCAB = "vocab/ggml-vocab-llama-bpe.gguf"

# A context as long as the engine allows: a 40-file batch summary fits, and a request can
# be made to run long (the restart tests keep a request running while they act).
CTX = 4096

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# ggml type → (values per block, bytes per block) for the types mkmodel writes for the head.
_BLOCKS = {0: (1, 4), 1: (1, 2), 8: (32, 34), 30: (1, 2)}


class _Reader:
    def __init__(self, f):
        self.f = f

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError("truncated GGUF file")
        return struct.unpack(fmt, data)[0]

    def string(self):
        n = self.unpack("<Q")
        return self.f.read(n).decode("utf-8", errors="replace")

    def value(self, vtype):
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype, n = self.unpack("<I"), self.unpack("<Q")
            return [self.value(itype) for _ in range(n)]
        return self.unpack(_SCALARS[vtype])


def _read_layout(path):
    """(key/values, {tensor name: (dims, type, absolute offset)})."""
    with open(path, "rb") as f:
        r = _Reader(f)
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version, n_tensors, n_kv = r.unpack("<I"), r.unpack("<Q"), r.unpack("<Q")
        if version != 3:
            raise ValueError(f"{path}: GGUF version {version}, expected 3")
        kv = {}
        for _ in range(n_kv):
            key = r.string()
            kv[key] = r.value(r.unpack("<I"))
        infos = {}
        for _ in range(n_tensors):
            name = r.string()
            dims = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
            infos[name] = (dims, r.unpack("<I"), r.unpack("<Q"))
        align = kv.get("general.alignment", 32)
        start = (f.tell() + align - 1) // align * align
    return kv, {n: (d, t, start + o) for n, (d, t, o) in infos.items()}


def _silence_control_tokens(path):
    """Zeroes the LM-head rows of every control token and of the end-of-generation ids.
    Returns how many rows it zeroed."""
    kv, tensors = _read_layout(path)
    types = kv.get("tokenizer.ggml.token_type", [])
    ids = {i for i, t in enumerate(types) if t == 3}
    for key in ("eos", "eot", "eom", "padding"):
        if f"tokenizer.ggml.{key}_token_id" in kv:
            ids.add(kv[f"tokenizer.ggml.{key}_token_id"])
    if "output.weight" not in tensors:
        raise ValueError(f"{path} has no output.weight (a tied head cannot be silenced alone)")
    (n_embd, n_vocab), gtype, offset = tensors["output.weight"]
    if gtype not in _BLOCKS:
        raise ValueError(f"output.weight of type {gtype} is not handled here")
    per_block, block_bytes = _BLOCKS[gtype]
    row = n_embd // per_block * block_bytes
    with open(path, "r+b") as f:
        for i in sorted(ids):
            if 0 <= i < n_vocab:
                f.seek(offset + i * row)
                f.write(bytes(row))
    return len(ids)


def make_model(folder, cli, conformance_dir=""):
    """Writes the test model into folder; returns (path, description)."""
    path = os.path.join(folder, "monitor-test.gguf")
    argv = [cli, "mkmodel", "-o", path, "--seed", "11", "--ctx", str(CTX), "--threads", "2"]
    vocab = os.path.join(conformance_dir, VOCAB) if conformance_dir else ""
    if vocab and os.path.exists(vocab):
        argv += ["--vocab-from", vocab]
        what = "llama-bpe vocabulary"
    else:
        what = "built-in vocabulary"
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"agentxpu mkmodel failed: {r.stderr.strip()}")
    n = _silence_control_tokens(path)
    return path, f"{what}, {n} control tokens silenced"
