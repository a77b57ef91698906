#!/bin/sh
# The main job on a fresh Debian 12 machine: install packages, build, make a small demo model
# (random weights: the text is gibberish, the machinery is real) and generate from it.
set -eu
cd "$(dirname "$0")"
tools/install-deps
BUILD=${BUILD:-build}
[ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=release >/dev/null
ninja -C "$BUILD" >/dev/null
AXP="$BUILD/service/agentxpu"
MODEL="$BUILD/demo-model.gguf"
VOCAB=../shared/conformance/vocab/ggml-vocab-llama-bpe.gguf
if [ ! -f "$MODEL" ]; then
        if [ -f "$VOCAB" ]; then
                set -- --vocab-from "$VOCAB"
        else
                set --
        fi
        echo "== making a demo model (llama, Q8_0, random weights): $MODEL"
        "$AXP" mkmodel --arch llama --type q8_0 --dim 512 --layers 4 --heads 8 --kv-heads 4 \
                --ffn 1536 --ctx 2048 --tied --seed 1 "$@" -o "$MODEL"
fi
echo "== agentxpu generate (in-process, greedy)"
"$AXP" generate -m "$MODEL" -p "Hello, what can you do?" -n 24 --temperature 0
echo "== agentxpu generate --json"
"$AXP" generate -m "$MODEL" -p "Summarize the file I just saved." -n 16 --seed 7 --json
