#!/bin/sh
# The main job on a fresh Debian 12 machine: install packages, build, make a small demo model
# (random weights: the text is gibberish, the machinery is real), start the engine on a
# private D-Bus bus, and ask it something reactive and something proactive.
set -eu
cd "$(dirname "$0")"
tools/install-deps
BUILD=${BUILD:-build}
[ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=release >/dev/null
ninja -C "$BUILD" >/dev/null
AXP="$BUILD/service/cli/agentxpu"
ENGINE="$BUILD/service/daemon/agentxpu-engine"
MODEL="$BUILD/demo-model.gguf"
VOCAB=../shared/conformance/vocab/ggml-vocab-llama-bpe.gguf

if [ ! -f "$MODEL" ]; then
        if [ -f "$VOCAB" ]; then set -- --vocab-from "$VOCAB"; else set --; fi
        echo "== making a demo model (llama, Q8_0, random weights): $MODEL"
        "$AXP" mkmodel --arch llama --type q8_0 --dim 512 --layers 4 --heads 8 --kv-heads 4 \
                --ffn 1536 --ctx 2048 --tied --seed 1 "$@" -o "$MODEL"
fi

echo "== agentxpu generate (in-process, no service)"
"$AXP" generate -m "$MODEL" -p "Hello, what can you do?" -n 16 --temperature 0

# A private bus, so the demo needs no installation and no root.
DIR=$(mktemp -d)
cleanup() {
        [ -n "${ENGINE_PID:-}" ] && kill "$ENGINE_PID" 2>/dev/null && wait "$ENGINE_PID" 2>/dev/null
        [ -n "${BUS_PID:-}" ] && kill "$BUS_PID" 2>/dev/null
        rm -rf "$DIR"
}
trap cleanup EXIT INT TERM
mkdir -p "$DIR/services"
sed "s|@DIR@|$DIR|g" tests/daemon/test-bus.conf.in > "$DIR/bus.conf"
dbus-daemon --config-file="$DIR/bus.conf" --fork --print-address=1 --print-pid=3 \
        1> "$DIR/address" 3> "$DIR/pid"
ADDR=$(head -n1 "$DIR/address")
BUS_PID=$(cat "$DIR/pid")
echo "== starting agentxpu-engine on a private bus: $ADDR"
"$ENGINE" --address "$ADDR" --model "$MODEL" 2> "$DIR/engine.log" &
ENGINE_PID=$!
i=0
until "$AXP" status --address "$ADDR" > /dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 100 ] || ! kill -0 "$ENGINE_PID" 2>/dev/null; then
                echo "the engine did not start:" >&2
                cat "$DIR/engine.log" >&2
                exit 1
        fi
        sleep 0.1
done
"$AXP" status --address "$ADDR"

echo "== a proactive request (background), started first"
"$AXP" submit --address "$ADDR" --wait -n 48 "Summarize the file I just saved." > "$DIR/proactive.txt" &
SUBMIT_PID=$!
sleep 0.3
echo "== a reactive request (foreground): agentxpu ask"
"$AXP" ask --address "$ADDR" -v -n 24 "What is on my calendar today?"
wait "$SUBMIT_PID"
echo "== the proactive answer"
cat "$DIR/proactive.txt"
echo "== the same engine through gdbus: org.agentxpu.Engine.Complete"
gdbus call --address "$ADDR" --dest org.agentxpu.Engine --object-path /org/agentxpu/Engine \
        --method org.agentxpu.Engine.Complete "Hello" \
        "{'max_tokens': <uint32 8>, 'temperature': <0.0>, 'raw': <true>}"
echo "== an embedding of a text (the first numbers of its vector): agentxpu embed"
"$AXP" embed --address "$ADDR" --stats "The cat sat on the mat." | cut -c1-100
