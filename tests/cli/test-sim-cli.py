#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu sim from the command line: --json prints the documented fields for every policy,
the same seed gives the same output, --trace logs every kernel, and bad options get a clear
error. Env: AXP_CLI."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import fail, number  # noqa: E402


def run(*args):
    return clitest.run("sim", *args)


def check_policy(name, p):
    r, q = p.get("reactive", {}), p.get("proactive", {})
    for k in ("mean_latency_s", "p90_latency_s", "mean_prefill_wait_s", "completed"):
        if not number(r.get(k)):
            fail(f"{name}: reactive.{k} missing")
    for k in ("normalized_latency_s_per_token", "throughput_req_per_min", "completed"):
        if not number(q.get(k)):
            fail(f"{name}: proactive.{k} missing")
    for k in ("igpu_busy_fraction", "energy_j_per_token"):
        if not number(p.get(k)):
            fail(f"{name}: {k} missing")
    if not 0 < p.get("igpu_busy_fraction", -1) <= 1:
        fail(f"{name}: igpu_busy_fraction {p.get('igpu_busy_fraction')}")
    if r.get("completed") != r.get("submitted") or q.get("completed") != q.get("submitted"):
        fail(f"{name}: not every request completed")
    if r.get("p90_latency_s", 0) < 0 or r.get("mean_latency_s", 0) <= 0:
        fail(f"{name}: reactive latencies {r}")


args = ["--model", "llama-8b", "--reactive-rate", "3", "--proactive-rate", "6", "--minutes", "3",
        "--seed", "5", "--json"]
p = run(*args, "--policy", "all")
if p.returncode != 0:
    fail(f"sim --policy all: status {p.returncode}: {p.stderr.strip()}")
else:
    doc = json.loads(p.stdout)
    if set(doc) != {"policies"} or set(doc["policies"]) != {"agentxpu", "fcfs", "serial"}:
        fail(f"unexpected keys: {list(doc)} {list(doc.get('policies', {}))}")
    for name, pol in doc.get("policies", {}).items():
        check_policy(name, pol)
    again = run(*args, "--policy", "all")
    if again.stdout != p.stdout:
        fail("the same seed gave different output")
    one = run(*args, "--policy", "agentxpu")
    if one.returncode != 0 or list(json.loads(one.stdout)["policies"]) != ["agentxpu"]:
        fail("--policy agentxpu should report that policy only")
    elif json.loads(one.stdout)["policies"]["agentxpu"] != doc["policies"]["agentxpu"]:
        fail("a policy's numbers depend on which other policies ran")

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "trace.log")
    t = run("--minutes", "1", "--policy", "agentxpu", "--trace", path)
    if t.returncode != 0:
        fail(f"--trace: {t.stderr.strip()}")
    else:
        with open(path) as fh:
            lines = fh.read().splitlines()
        if not any(" arrive " in l for l in lines) or not any(" k3 " in l for l in lines):
            fail("the trace log lacks arrivals or kernels")

# a value the option does not take is a usage error (status 2) of one line naming the option
for bad in (["--policy", "fastest"], ["--reactive-rate", "-1"], ["--minutes", "abc"],
            ["--seed", "99999999999999999999"], ["--model", "llama-99b"], ["--soc", "pentium"],
            ["--disable", "everything"], ["--proactive-set", "lmsys"]):
    b = run(*bad)
    if b.returncode != 2:
        fail(f"sim {' '.join(bad)}: status {b.returncode}, expected 2")
    if len(b.stderr.strip().splitlines()) != 1 or not b.stderr.startswith("agentxpu sim: "):
        fail(f"sim {' '.join(bad)}: expected one line on stderr, got {b.stderr!r}")
b = run("--frobnicate")
if b.returncode != 2 or "agentxpu sim: unrecognized option '--frobnicate'" not in b.stderr:
    fail(f"sim --frobnicate: status {b.returncode}, stderr {b.stderr!r}")

print("ok" if not clitest.failures else f"{clitest.failures} failures")
sys.exit(clitest.status())
