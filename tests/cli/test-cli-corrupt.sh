#!/bin/sh
# The command line on corrupt GGUF files (tests/lib/gguf-corrupt.c): every command that reads a
# model must exit with status 1 and print exactly one line on stderr, naming the file and
# what is wrong. Usage: test-cli-corrupt.sh PATH-OF-gguf-corrupt (AXP_CLI = agentxpu).
set -eu
: "${AXP_CLI:?AXP_CLI must name the agentxpu binary}"
corrupt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$corrupt" "$dir" > "$dir/list.txt"

# Commands that open a model: "NAME ARGS-BEFORE-THE-FILE". Add a line per command.
commands="inspect -m
inspect --json -m"

fails=0
count=0
check() { # check "COMMAND ARGS" FILE EXPECT
        out=$dir/out.txt
        err=$dir/err.txt
        status=0
        # shellcheck disable=SC2086 # the command's words are split on purpose
        timeout 60 "$AXP_CLI" $1 "$2" > "$out" 2> "$err" || status=$?
        lines=$(wc -l < "$err")
        count=$((count + 1))
        if [ "$status" -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$2" "$err" ||
           ! grep -qF -- "$3" "$err"; then
                echo "FAIL: agentxpu $1 $2: status $status, $lines lines on stderr (want 1, naming the file and '$3'):"
                sed 's/^/    /' "$err"
                fails=$((fails + 1))
        fi
}

while IFS= read -r cmd; do
        while IFS="$(printf '\t')" read -r name expect; do
                check "$cmd" "$dir/$name.gguf" "$expect"
        done < "$dir/list.txt"
        # files that are no GGUF at all
        check "$cmd" "$dir/does-not-exist.gguf" "cannot open"
        check "$cmd" "$dir" "is a directory"
        # and the valid file they derive from is accepted
        # shellcheck disable=SC2086
        if ! "$AXP_CLI" $cmd "$dir/valid.gguf" > /dev/null; then
                echo "FAIL: agentxpu $cmd valid.gguf rejects a valid file"
                fails=$((fails + 1))
        fi
done <<END
$commands
END

# Commands that run a model reject the same files, and a real model cut short anywhere.
model_commands="generate -p hi -n 2 -m
tokenize -p hi -m
logits -p hi -o $dir/logits.f32 -m
logits --reference -p hi -o $dir/logits.f32 -m"
"$AXP_CLI" mkmodel --arch qwen2 --type q4_k --seed 3 -o "$dir/model.gguf" > /dev/null
size=$(stat -c %s "$dir/model.gguf")
for cut in 3 20 100 1000 5000 20000 $((size / 2)) $((size - 100)); do
        head -c "$cut" "$dir/model.gguf" > "$dir/model-cut-$cut.gguf"
done
while IFS= read -r cmd; do
        while IFS="$(printf '\t')" read -r name expect; do
                check "$cmd" "$dir/$name.gguf" "$expect"
        done < "$dir/list.txt"
        for cut in 3 20 100 1000 5000 20000 $((size / 2)) $((size - 100)); do
                check "$cmd" "$dir/model-cut-$cut.gguf" "model-cut-$cut.gguf"
        done
        # shellcheck disable=SC2086
        if ! "$AXP_CLI" $cmd "$dir/model.gguf" > /dev/null; then
                echo "FAIL: agentxpu $cmd model.gguf rejects a valid model"
                fails=$((fails + 1))
        fi
done <<END
$model_commands
END

echo "$count runs on corrupt files, $fails failed"
[ "$fails" -eq 0 ] && [ "$count" -gt 100 ]
