#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What the command line says when it is used wrongly, checked for every subcommand: an option
it does not know names the command and points to its --help; a number option refuses
garbage and numbers out of range in one line that gives the range (status 2); text that is
not valid UTF-8 (a prompt, a prompt file, --stop, --system) is refused in one line that says
where (status 1); without a bus, the bus commands say what to check; a model whose chat
template is not understood is said to be prompted raw (one warning line); `devices -m` gives
the dynamic role to the CPU for a model a discrete GPU streams slower; a file read whole (a
prompt, a schema, a grammar, a tool list, the suggestion store) is refused over 64 MiB. The
bus commands' behaviour against an engine, or a bus without one, is in
tests/daemon/test-daemon-fake.py.
Env: AXP_CLI."""
import json
import os
import resource
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import CLI, fail  # noqa: E402


def run(*args, **kw):
    """Output as bytes: some of the tests' arguments and messages are not UTF-8."""
    return clitest.run(*args, text=False, timeout=120, **kw)


BUS_COMMANDS = [["ask", "hi"], ["submit", "hi"], ["chat"], ["status"],
                ["cancel", "/org/agentxpu/Engine/request/1"], ["forget"]]


def lines(b):
    return b.decode("utf-8", "replace").splitlines()


# What every subcommand needs besides the option under test to get past its own checks.
COMMANDS = {
    "generate": ["-m", "/nonexistent.gguf", "-p", "hi"],
    "logits": ["-m", "/nonexistent.gguf", "-p", "hi", "-o", "/nonexistent.f32"],
    "tokenize": ["-m", "/nonexistent.gguf", "-p", "hi"],
    "inspect": ["-m", "/nonexistent.gguf"],
    "mkmodel": ["-o", "/nonexistent/m.gguf"],
    "sim": [],
    "bench": ["-m", "/nonexistent.gguf"],
    "suggestions": ["--store", "/nonexistent.jsonl"],
    "devices": [],
    "ask": ["hi"],
    "submit": ["hi"],
    "chat": [],
    "status": [],
    "cancel": ["/org/agentxpu/Engine/request/1"],
    "forget": [],
}

# Every number option: (command, option, kind). "bus" doubles are any finite number: the
# engine judges their range.
NUMBERS = [
    ("generate", "-n", "uint"), ("generate", "--temperature", "double"),
    ("generate", "--top-k", "uint"), ("generate", "--top-p", "double"),
    ("generate", "--min-p", "double"), ("generate", "--repeat-penalty", "double"),
    ("generate", "--seed", "uint"), ("generate", "--threads", "uint"),
    ("generate", "--chunk", "uint"), ("generate", "--parallel", "uint"), ("generate", "--logprobs", "uint"),
    ("logits", "--threads", "uint"), ("logits", "--chunk", "uint"),
    ("bench", "--reactive-rate", "double"), ("bench", "--proactive-rate", "double"),
    ("bench", "--minutes", "double"), ("bench", "--seed", "uint"), ("bench", "--threads", "uint"),
    ("bench", "--drain", "double"), ("bench", "--b-cap", "uint"),
    ("bench", "--piggyback-slack", "double"), ("bench", "--cpu-share", "double"),
    ("bench", "--aging", "double"),
    ("sim", "--reactive-rate", "double"), ("sim", "--proactive-rate", "double"),
    ("sim", "--minutes", "double"), ("sim", "--seed", "uint"), ("sim", "--preempt-bound", "double"),
    ("sim", "--s-chk", "uint"), ("sim", "--b-cap", "uint"), ("sim", "--max-batch", "uint"),
    ("sim", "--aging", "double"), ("sim", "--duty", "double"), ("sim", "--gpu-busy", "double"),
    ("sim", "--warmup", "double"),
    ("mkmodel", "--dim", "uint"), ("mkmodel", "--layers", "uint"), ("mkmodel", "--heads", "uint"),
    ("mkmodel", "--kv-heads", "uint"), ("mkmodel", "--ffn", "uint"), ("mkmodel", "--ctx", "uint"),
    ("mkmodel", "--head-dim", "uint"), ("mkmodel", "--rope-base", "double"),
    ("mkmodel", "--seed", "uint"), ("mkmodel", "--threads", "uint"),
    ("suggestions", "--last", "uint"),
]
for cmd in ("ask", "submit", "chat"):
    NUMBERS += [(cmd, "-n", "uint"), (cmd, "--top-k", "uint"), (cmd, "--seed", "uint"),
                (cmd, "--temperature", "bus"), (cmd, "--top-p", "bus"), (cmd, "--min-p", "bus"),
                (cmd, "--repeat-penalty", "bus")]

BAD = {
    "uint": ["abc", "", "12abc", "-1", "1.5", "0x10", " 7", "18446744073709551616",
             "99999999999999999999999"],
    "double": ["abc", "", "1.5x", "nan", "1e999", "-1e999", " 1", "-1"],
    "bus": ["abc", "", "1.5x", "nan", "1e999", "-1e999", " 1"],
}


def check_unknown_options():
    for cmd, extra in COMMANDS.items():
        for opt in ("--colour", "--colour=always"):
            p = run(cmd, opt, *extra)
            err = lines(p.stderr)
            want = f"agentxpu {cmd}: unrecognized option '{opt}'"
            if p.returncode != 2 or len(err) != 2 or err[0] != want or f"'agentxpu {cmd} --help'" not in err[1]:
                fail(f"{cmd} {opt}: status {p.returncode}, stderr {err}")
    # an option without its value, one that takes none, an ambiguous abbreviation
    for args, want in ((["ask", "-n"], "agentxpu ask: option requires an argument -- 'n'"),
                       (["generate", "--json=1", "-p", "x"], "agentxpu generate: option '--json' doesn't allow an argument"),
                       (["ask", "--top", "1", "x"], "agentxpu ask: option '--top' is ambiguous")):
        p = run(*args)
        err = lines(p.stderr)
        if p.returncode != 2 or len(err) != 2 or not err[0].startswith(want) or "--help" not in err[1]:
            fail(f"{' '.join(args)}: status {p.returncode}, stderr {err}")
    # an argument too many
    for cmd, extra in COMMANDS.items():
        if cmd in ("ask", "submit", "cancel"):
            extra = extra + ["extra"]
            want = "exactly one"
        else:
            extra = extra + ["extra"]
            want = "argument"
        p = run(cmd, *extra)
        err = lines(p.stderr)
        if p.returncode != 2 or len(err) != 1 or not err[0].startswith(f"agentxpu {cmd}: ") or want not in err[0]:
            fail(f"{cmd} with an argument too many: status {p.returncode}, stderr {err}")
    print("ok   unknown options and arguments name the command and point to --help")


def check_numbers():
    for cmd, opt, kind in NUMBERS:
        for value in BAD[kind]:
            p = run(cmd, opt, value, *COMMANDS[cmd])
            err = lines(p.stderr)
            want = f"agentxpu {cmd}: {opt} must be a number"
            if p.returncode != 2 or len(err) != 1 or not err[0].startswith(want) or f"got '{value}'" not in err[0]:
                fail(f"{cmd} {opt} '{value}': status {p.returncode}, stderr {err}")
    # the range is in the message, and its ends are accepted
    p = run("ask", "-n", "4294967296", "hi")
    want = "agentxpu ask: -n must be a number from 1 to 4294967295, got '4294967296'"
    if p.returncode != 2 or lines(p.stderr) != [want]:
        fail(f"ask -n 4294967296: status {p.returncode}, stderr {lines(p.stderr)}")
    p = run("ask", "-n", "0", "hi")
    if p.returncode != 2 or "from 1 to 4294967295, got '0'" not in p.stderr.decode():
        fail(f"ask -n 0: status {p.returncode}, stderr {lines(p.stderr)}")
    for args in (["ask", "-n", "4294967295", "--seed", "18446744073709551615", "--temperature", "-3",
                  "--address", "unix:path=/nonexistent", "hi"],
                 ["generate", "-n", "1048576", "--top-p", "1", "--seed", "18446744073709551615",
                  "-m", "/nonexistent.gguf", "-p", "hi"]):
        p = run(*args)
        # past the options: the command fails later, on the bus or the file
        if p.returncode != 1 or "must be a number" in p.stderr.decode():
            fail(f"{' '.join(args)}: status {p.returncode}, stderr {lines(p.stderr)}")
    # generate --logprobs: 0 to 20 alternatives, with --json only
    for args, want in ((["--logprobs", "21", "--json"], "--logprobs must be a number from 0 to 20, got '21'"),
                       (["--logprobs", "2"], "--logprobs goes with --json")):
        p = run("generate", "-m", "/nonexistent.gguf", "-p", "hi", *args)
        if p.returncode != 2 or want not in p.stderr.decode():
            fail(f"generate {' '.join(args)}: status {p.returncode}, stderr {lines(p.stderr)}")
    print(f"ok   {len(NUMBERS)} number options refuse garbage and numbers out of range")


def check_utf8(tmp):
    bad = os.path.join(tmp, "bad.txt")
    with open(bad, "wb") as f:
        f.write("Grüße, ".encode() + b"\xff and more\n")
    good = os.path.join(tmp, "good.txt")
    with open(good, "wb") as f:
        f.write("Grüße\n".encode())
    model = ["-m", "/nonexistent.gguf"]
    cases = [
        # (args, what the message names, the bad byte, its offset)
        (["ask", b"abc\xff"], "the prompt", 0xff, 3),
        (["ask", "--stop", b"ab\xc3(", "hi"], "--stop", 0xc3, 2),
        (["ask", "--system", b"\xed\xa0\x80", "hi"], "--system", 0xed, 0),  # a surrogate
        (["submit", b"caf\xe9"], "the prompt", 0xe9, 3),
        (["submit", "--stop", "fine", "--stop", b"\xc0\xaf", "hi"], "--stop", 0xc0, 0),  # overlong
        (["chat", "--system", b"sys\x80"], "--system", 0x80, 3),
        (["generate", *model, "-p", b"abc\xff"], "the prompt", 0xff, 3),
        (["generate", *model, "-f", bad], bad, 0xff, 9),
        (["generate", *model, "-p", "hi", "--stop", b"\xf5"], "--stop", 0xf5, 0),
        (["generate", *model, "-p", "hi", "--system", b"x\xfe"], "--system", 0xfe, 1),
        (["tokenize", *model, "-p", b"\xe2\x82"], "the prompt", 0xe2, 0),  # cut short
        (["tokenize", *model, "-f", bad], bad, 0xff, 9),
        (["logits", *model, "-o", "/nonexistent.f32", "-p", b"\xff"], "the prompt", 0xff, 0),
        (["logits", *model, "-o", "/nonexistent.f32", "-f", bad], bad, 0xff, 9),
    ]
    for args, what, byte, offset in cases:
        p = run(*args)
        err = lines(p.stderr)
        want = f"agentxpu {args[0]}: {what} is not valid UTF-8 (byte 0x{byte:02x} at offset {offset})"
        if p.returncode != 1 or err != [want]:
            fail(f"{args}: status {p.returncode}, stderr {err}, want {want!r}")
    # valid text gets past the check (and fails later, on the file or the bus)
    for args in (["generate", *model, "-f", good], ["tokenize", *model, "-p", "Grüße €"],
                 ["ask", "--address", "unix:path=/nonexistent", "--stop", "ß", "Grüße 😀"]):
        p = run(*args)
        if p.returncode != 1 or "UTF-8" in p.stderr.decode():
            fail(f"{args}: status {p.returncode}, stderr {lines(p.stderr)}")
    print(f"ok   {len(cases)} texts that are not UTF-8 are refused, saying where")


def check_no_bus():
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent")
    for args in BUS_COMMANDS:
        p = run(*args, env=env, stdin=subprocess.DEVNULL)
        err = lines(p.stderr)
        want = (f"agentxpu {args[0]}: cannot connect to the system bus (No such file or directory); "
                "is the system bus running and the engine installed? Use --address ADDRESS for a private bus")
        if p.returncode != 1 or err != [want]:
            fail(f"{args} without a system bus: status {p.returncode}, stderr {err}")
        p = run(args[0], "--address", "unix:path=/nonexistent", *args[1:], stdin=subprocess.DEVNULL)
        err = lines(p.stderr)
        want = f"agentxpu {args[0]}: cannot connect to unix:path=/nonexistent (No such file or directory); "
        if p.returncode != 1 or len(err) != 1 or not err[0].startswith(want):
            fail(f"{args} --address to nowhere: status {p.returncode}, stderr {err}")
    print("ok   without a bus, the bus commands say what to check")


def check_isa(tmp):
    """A CPU path forced with AXP_CPU_ISA that this CPU cannot run: said in one line, and the
    best path it can run answers (`devices` names the path it uses)."""
    model = os.path.join(tmp, "isa.gguf")
    if run("mkmodel", "-o", model).returncode != 0:
        fail("mkmodel failed")
        return
    best = run("devices", "-m", model)
    p = run("generate", "-m", model, "-p", "hi", "-n", "2", "--temperature", "0",
            env=dict(os.environ, AXP_CPU_ISA="nonesuch"))
    err = [line for line in lines(p.stderr) if "AXP_CPU_ISA" in line]
    if p.returncode != 0 or len(err) != 1 or not err[0].startswith(
            "agentxpu: AXP_CPU_ISA=nonesuch is not a path this CPU runs (it runs: "):
        fail(f"AXP_CPU_ISA=nonesuch: status {p.returncode}, stderr {lines(p.stderr)}")
    forced = run("devices", "-m", model, env=dict(os.environ, AXP_CPU_ISA="nonesuch"))
    first = lines(best.stdout)[:1]
    if best.returncode != 0 or first != lines(forced.stdout)[:1]:
        fail(f"AXP_CPU_ISA=nonesuch does not run the best path: {first} / {lines(forced.stdout)[:1]}")
    print("ok   an AXP_CPU_ISA this CPU cannot run is said, and the best path runs")


def check_devices_discrete_gpu(tmp):
    """devices -m, as the engine does when it loads a model: a discrete GPU that DynamicDevice
    auto bound (PoCL taken for one with the test hook AXP_OPENCL_KIND=dgpu) keeps the dynamic
    role only where its calibration streams the model at least as fast as the CPU's, else the
    CPU takes it and says why; named with --dynamic opencl it keeps it. The calibrations are
    set in the --calib-cache file, so the outcome does not hang on how busy the machine is."""
    env = dict(os.environ, AXP_OPENCL_KIND="dgpu")
    p = run("devices", "--json", env=env)
    if p.returncode != 0:
        fail(f"devices --json: status {p.returncode}, stderr {lines(p.stderr)}")
        return
    if not any(d["kind"] == "dgpu" for d in json.loads(p.stdout)["devices"]):
        print("ok   devices -m and a discrete GPU: no OpenCL device here, skipped")
        return
    model, cache = os.path.join(tmp, "dgpu.gguf"), os.path.join(tmp, "calib")
    if run("mkmodel", "-o", model).returncode != 0:
        fail("mkmodel failed")
        return
    run("devices", "-m", model, "--calib-cache", cache, env=env)

    def set_bandwidth(backend, gbps):
        with open(cache) as f:
            rows = f.read().splitlines()
        for i, row in enumerate(rows):
            if row.startswith(backend + ":"):
                fields = row.split()
                fields[2] = repr(gbps * 1e9)
                rows[i] = " ".join(fields)
        with open(cache, "w") as f:
            f.write("\n".join(rows) + "\n")

    set_bandwidth("cpu", 10)
    for gpu, dynamic, want in ((1, "auto", "cpu"), (100, "auto", "opencl:0"), (1, "opencl", "opencl:0")):
        set_bandwidth("opencl", gpu)
        p = run("devices", "-m", model, "--calib-cache", cache, "--dynamic", dynamic, "--json", env=env)
        role = json.loads(p.stdout)["roles"]["dynamic"] if p.returncode == 0 else {}
        why = role.get("fallback") or ""
        if role.get("device") != want or (want == "cpu") != ("streams it at 1.00 GB/s, the CPU at 10.00" in why):
            fail(f"devices -m, GPU at {gpu} GB/s, --dynamic {dynamic}: {role}")
    print("ok   devices -m: auto leaves a discrete GPU slower than the CPU for the model, and says why")


def check_kv_type(tmp):
    """--kv-type: an unknown type is a usage error that lists the three; q8_0 runs on heads of
    64 and is refused in one line on heads of 48 (Q8_0 blocks are 32 wide)."""
    model, narrow = os.path.join(tmp, "kv.gguf"), os.path.join(tmp, "kv48.gguf")
    if (run("mkmodel", "-o", model).returncode != 0 or
            run("mkmodel", "--head-dim", "48", "-o", narrow).returncode != 0):
        fail("mkmodel failed")
        return
    gen = ["-p", "hi", "-n", "2", "--temperature", "0", "--threads", "1"]
    for cmd in ("generate", "logits", "bench"):
        p = run(cmd, *COMMANDS[cmd], "--kv-type", "q4_0")
        want = f"agentxpu {cmd}: --kv-type must be f16, f32 or q8_0, got 'q4_0'"
        if p.returncode != 2 or want not in lines(p.stderr):
            fail(f"{cmd} --kv-type q4_0: status {p.returncode}, stderr {lines(p.stderr)}")
    p = run("generate", "-m", model, *gen, "--kv-type", "q8_0")
    if p.returncode != 0:
        fail(f"generate --kv-type q8_0: status {p.returncode}, stderr {lines(p.stderr)}")
    p = run("generate", "-m", narrow, *gen, "--kv-type", "q8_0")
    want = ("agentxpu generate: a q8_0 KV cache needs a head size that is a multiple of 32; this model's is 48 "
            "(use f16 or f32)")
    if p.returncode != 1 or lines(p.stderr) != [want]:
        fail(f"generate --kv-type q8_0 on heads of 48: status {p.returncode}, stderr {lines(p.stderr)}")
    print("ok   --kv-type: q8_0 runs, an unknown type and heads not a multiple of 32 are refused")


def check_unknown_chat_template(tmp):
    """A chat template that none of the families matches: generate uses the prompt raw and
    says so in one line on stderr; with --raw, or a template it understands, nothing is said."""
    odd, known = os.path.join(tmp, "odd-template.gguf"), os.path.join(tmp, "known-template.gguf")
    if (run("mkmodel", "-o", odd, "--chat-template", "{{ messages | tojson }}").returncode != 0 or
            run("mkmodel", "-o", known).returncode != 0):
        fail("mkmodel failed")
        return
    gen = ["-p", "hi", "-n", "2", "--temperature", "0", "--threads", "1"]
    want = ("agentxpu generate: warning: the model's chat template (tokenizer.chat_template) is not one "
            "agentxpu recognises (Llama 3, ChatML, Gemma, Phi-3, Mistral, Llama 2); prompts are used raw, "
            "without a template")
    p = run("generate", "-m", odd, *gen)
    if p.returncode != 0 or lines(p.stderr) != [want]:
        fail(f"generate on an unknown template: status {p.returncode}, stderr {lines(p.stderr)}")
    raw = run("generate", "-m", odd, *gen, "--raw")
    if raw.returncode != 0 or lines(raw.stderr) != [] or raw.stdout != p.stdout:
        fail(f"generate --raw on an unknown template: status {raw.returncode}, stderr {lines(raw.stderr)}, "
             f"{raw.stdout!r} vs {p.stdout!r}")
    p = run("generate", "-m", known, *gen)
    if p.returncode != 0 or lines(p.stderr) != []:
        fail(f"generate on a known template: status {p.returncode}, stderr {lines(p.stderr)}")
    print("ok   a chat template not understood: the prompt raw, with one warning line")


def check_odd_outputs_and_files(tmp):
    """Output that cannot be written fails (it used to exit 0 with the text lost); a NUL byte
    in a prompt file is refused where the text goes on as a C string (the chat template),
    not cut off there; a folder as a file says so; an output path that is a FIFO or a device
    is refused, not replaced by a regular file (as root, /dev/null)."""
    model = os.path.join(tmp, "odd-io.gguf")
    if run("mkmodel", "-o", model, "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
           "--ffn", "128", "--ctx", "512").returncode != 0:
        fail("mkmodel failed")
        return
    gen = ["-m", model, "-n", "4", "--temperature", "0", "--threads", "1"]
    with open("/dev/full", "w") as full:
        for args, what in ((["generate", *gen, "-p", "hi"], "agentxpu generate"),
                           (["tokenize", "-m", model, "-p", "hi"], "agentxpu tokenize"),
                           (["version"], "agentxpu")):
            p = subprocess.run([CLI, *args], stdout=full, stderr=subprocess.PIPE, timeout=120)
            want = f"{what}: cannot write the output: No space left on device"
            if p.returncode != 1 or lines(p.stderr) != [want]:
                fail(f"{args} > /dev/full: status {p.returncode}, stderr {lines(p.stderr)}")
    nul = os.path.join(tmp, "nul.txt")
    with open(nul, "wb") as f:
        f.write(b"hi\0and the rest")
    p = run("generate", *gen, "-f", nul)
    if p.returncode != 1 or lines(p.stderr) != [f"agentxpu generate: {nul} holds a NUL byte at offset 2, "
                                                "which text cannot carry"]:
        fail(f"generate -f with a NUL: status {p.returncode}, stderr {lines(p.stderr)}")
    if run("generate", *gen, "-f", nul, "--raw").returncode != 0:
        fail("generate --raw -f with a NUL byte: the raw tokens carry it")
    p = run("generate", *gen, "-f", tmp)
    if p.returncode != 1 or lines(p.stderr) != [f"agentxpu generate: {tmp}: cannot read: Is a directory"]:
        fail(f"generate -f on a folder: status {p.returncode}, stderr {lines(p.stderr)}")
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    for args in (["mkmodel", "-o", fifo], ["quantize", model, fifo, "q8_0"]):
        p = run(*args)
        want = f"agentxpu {args[0]}: {fifo}: is a device, FIFO or socket, not a regular file; give a file's path"
        if p.returncode != 1 or lines(p.stderr) != [want] or not stat.S_ISFIFO(os.stat(fifo).st_mode):
            fail(f"{args}: status {p.returncode}, stderr {lines(p.stderr)}")
    p = run("submit", "--flow", "foo", "hi")
    if p.returncode != 2 or lines(p.stderr) != ["agentxpu submit: --flow 'foo' is not a flow path "
                                                "(/org/agentxpu/Engine/flow/N)"]:
        fail(f"submit --flow foo: status {p.returncode}, stderr {lines(p.stderr)}")
    p = run("suggestions", "--json", "--store", os.path.join(tmp, "none.jsonl"))
    if p.returncode != 0 or p.stdout != b"":
        fail(f"suggestions --json without a store: status {p.returncode}, stdout {p.stdout!r}")
    print("ok   unwritable output fails; NUL bytes, folders and FIFOs are named, not mistaken")


def check_endless_files(tmp):
    """A file the command line reads whole is capped: /dev/zero as a prompt file, a schema, a
    grammar, a tool list or a suggestion store fails at once, saying so (it used to be read
    until memory ran out); a regular file over the cap is refused before it is read, and one
    at the cap is read."""
    def limited():
        # what the old code did, without taking the machine's memory: it ran out here
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    model = ["-m", "/nonexistent.gguf"]
    big = os.path.join(tmp, "big.txt")
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)
    at_cap = os.path.join(tmp, "at-cap.txt")
    with open(at_cap, "wb") as f:
        f.truncate(64 << 20)
    cases = [
        ["generate", *model, "-f", "/dev/zero"],
        ["tokenize", *model, "-f", "/dev/zero"],
        ["logits", *model, "-o", "/nonexistent.f32", "-f", "/dev/zero"],
        ["ask", "--json-schema", "/dev/zero", "hi"],
        ["submit", "--grammar", "/dev/zero", "hi"],
        ["chat", "--tools", "/dev/zero"],
        ["suggestions", "--store", "/dev/zero"],
        ["generate", *model, "-f", big],
        ["ask", "--tools", big, "hi"],
    ]
    for args in cases:
        name = args[args.index("-f") + 1] if "-f" in args else next(a for a in args if a in ("/dev/zero", big))
        try:
            p = run(*args, stdin=subprocess.DEVNULL, preexec_fn=limited)
        except subprocess.TimeoutExpired:
            fail(f"{args}: still reading after 120 s")
            continue
        want = [f"agentxpu {args[0]}: {name} is larger than 64 MiB"]
        if p.returncode != 1 or lines(p.stderr) != want:
            fail(f"{args}: status {p.returncode}, stderr {lines(p.stderr)}, want {want}")
    p = run("tokenize", *model, "-f", at_cap, preexec_fn=limited)
    if p.returncode != 1 or "larger than" in p.stderr.decode() or "/nonexistent.gguf" not in p.stderr.decode():
        fail(f"tokenize -f of a file at the cap: status {p.returncode}, stderr {lines(p.stderr)}")
    print(f"ok   {len(cases)} endless or oversized files are refused, saying the cap")


check_unknown_options()
check_numbers()
check_no_bus()
with tempfile.TemporaryDirectory() as tmp:
    check_utf8(tmp)
    check_isa(tmp)
    check_devices_discrete_gpu(tmp)
    check_kv_type(tmp)
    check_unknown_chat_template(tmp)
    check_odd_outputs_and_files(tmp)
    check_endless_files(tmp)
print("ok" if not clitest.failures else f"{clitest.failures} failures")
sys.exit(clitest.status())
