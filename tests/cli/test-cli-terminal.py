#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generated text on a terminal: a random model's output holds control bytes (BEL, ESC, ...);
`agentxpu generate` writes them as \\xNN escapes when standard output is a terminal (run
under util-linux `script`, a pseudo-terminal), and unchanged into a pipe. The same for ask,
submit and chat is in tests/daemon/test-daemon-fake.py. Env: AXP_CLI; skipped (77) without
`script`."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import CLI, skip  # noqa: E402


def visible(b):
    """The bytes as a terminal should get them: controls but \\n and \\t (C0, DEL, C1 as
    UTF-8) as the \\xNN escapes of their bytes."""
    def esc(m):
        return "".join(f"\\x{c:02x}" for c in m.group(0)).encode()
    return re.sub(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", esc, b)


def main():
    if not shutil.which("script"):
        skip("util-linux script is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m.gguf")
        subprocess.run([CLI, "mkmodel", "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
                        "--ffn", "128", "--ctx", "512", "--seed", "1", "--no-eog", "-o", model],
                       check=True, capture_output=True)
        cmd = [CLI, "generate", "-m", model, "-p", "hi", "--raw", "-n", "300", "--temperature", "1.5",
               "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", "3"]
        raw = subprocess.run(cmd, check=True, capture_output=True, timeout=120).stdout
        controls = re.findall(rb"[\x00-\x08\x0b-\x1f\x7f]", raw)
        if len(controls) < 3:
            print(f"FAIL: the model's text should hold control bytes to escape, has {controls}")
            sys.exit(1)
        tty = subprocess.run(["script", "-qec", shlex.join(cmd), "/dev/null"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=120)
        # the terminal turns each \n into \r\n; an \r of the text itself would be \x0d
        got = tty.stdout.replace(b"\r\n", b"\n")
        if tty.returncode != 0 or got != visible(raw):
            print(f"FAIL: on a terminal (status {tty.returncode}):\n  got  {got[:300]!r}\n"
                  f"  want {visible(raw)[:300]!r}")
            sys.exit(1)
        print(f"ok   generate: {len(controls)} control bytes escaped on a terminal, unchanged in a pipe")

        # --json escapes them too, C1 (CSI, U+009B) as well as C0 (it used to pass C1 raw)
        grammar = os.path.join(tmp, "c1.gbnf")
        with open(grammar, "w") as f:
            f.write('root ::= "ok\\u009b31mRED\\u001b[0m"\n')
        cmd = [CLI, "generate", "-m", model, "-p", "hi", "--raw", "-n", "30", "--temperature", "0",
               "--grammar", grammar, "--json"]
        tty = subprocess.run(["script", "-qec", shlex.join(cmd), "/dev/null"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=120)
        if tty.returncode != 0 or b"\xc2\x9b" in tty.stdout or b"\x1b" in tty.stdout or \
                b"ok\\u009b31mRED\\u001b[0m" not in tty.stdout:
            print(f"FAIL: generate --json on a terminal (status {tty.returncode}): {tty.stdout[:400]!r}")
            sys.exit(1)
        print("ok   generate --json: C0 and C1 controls escaped as \\u00XX")


main()
