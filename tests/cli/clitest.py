# SPDX-License-Identifier: MIT
"""Helpers for the tests of the agentxpu command line (tests/cli): the binary under test
(AXP_CLI) and the conformance data (AXP_CONFORMANCE_DIR), run with its output captured; a
failure count that the test goes on past and exits on; skips (status 77); the logits files
`agentxpu logits -o` writes. Python 3 standard library only."""

import array
import importlib
import os
import subprocess
import sys

CLI = os.environ["AXP_CLI"]
CONF = os.environ.get("AXP_CONFORMANCE_DIR", "")
failures = 0


def fail(msg):
    """Says a failure and counts it; the test goes on, and exits with status()."""
    global failures
    failures += 1
    print("FAIL:", msg)


def status():
    """The test's exit status: 1 after any failure, else 0."""
    return 1 if failures else 0


def skip(why):
    """Ends the test as skipped (meson's status 77), saying why."""
    print("SKIP:", why)
    sys.exit(77)


def need_module(name, package):
    """The Python module, imported; the test is skipped where it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        skip(f"{package} is not installed")


def run(*args, timeout=300, text=True, check=False, **kw):
    """agentxpu ARGS, its standard output and error captured (str, or bytes with text=False);
    kw go to subprocess.run (env, stdin, preexec_fn, ...). check: a status other than 0 is a
    failure naming the command. The CompletedProcess."""
    p = subprocess.run([CLI, *args], capture_output=True, text=text, timeout=timeout, **kw)
    if check and p.returncode != 0:
        fail(f"agentxpu {' '.join(args)}: status {p.returncode}: {p.stderr.strip()}")
    return p


def read_f32(path):
    """The F32 values of a file of little-endian floats (`agentxpu logits -o`, llama.cpp's
    reference logits), as an array.array('f')."""
    v = array.array("f")
    with open(path, "rb") as f:
        v.frombytes(f.read())
    if sys.byteorder != "little":
        v.byteswap()
    return v


def number(x):
    """Whether a JSON value is a number (true and false are not)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def engine_daemon():
    """The agentxpu-engine binary for a test's daemon part (AXP_ENGINE_DAEMON), or None, saying
    that part is skipped, where none was built."""
    daemon = os.environ.get("AXP_ENGINE_DAEMON")
    if not daemon or not os.path.exists(daemon):
        print("skip: the daemon part (no daemon built)")
        return None
    return daemon
