#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agentxpu bench from the command line, on a small synthetic model: --json prints the
documented fields for each policy, every request of the trace completes under each, the
trace is the one `agentxpu sim` replays for the same rates and seed, the ratios are those of
the numbers printed, and bad options or models get a clear error. Timings are not judged
here (the machines are noisy); the README reports them. Env: AXP_CLI."""
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import fail, number  # noqa: E402


def run(*args, timeout=600):
    return clitest.run(*args, timeout=timeout)


tmp = tempfile.mkdtemp(prefix="axp-bench-test-")
model = os.path.join(tmp, "m.gguf")
r = run("mkmodel", "-o", model, "--seed", "4", "--ctx", "1024", "--no-eog")
if r.returncode != 0:
    print("mkmodel failed:", r.stderr)
    sys.exit(1)

rates = ["--reactive-rate", "30", "--proactive-rate", "60", "--minutes", "0.1", "--seed", "3"]
r = run("bench", "-m", model, *rates, "--json")
if r.returncode != 0:
    fail(f"bench: status {r.returncode}: {r.stderr.strip()}")
    doc = {}
else:
    doc = json.loads(r.stdout)
pols = doc.get("policies", {})
if r.returncode == 0 and set(pols) != {"agentxpu", "fcfs"}:
    fail(f"--policy all (the default) runs agentxpu and fcfs: {list(pols)}")
for name, p in pols.items():
    re_, pro = p.get("reactive", {}), p.get("proactive", {})
    for k in ("mean_latency_s", "p90_latency_s", "mean_ttft_s", "mean_prefill_wait_s",
              "p99_prefill_wait_s", "max_prefill_wait_s", "completed", "submitted"):
        if not number(re_.get(k)):
            fail(f"{name}: reactive.{k} missing")
    for k in ("mean_latency_s", "normalized_latency_s_per_token", "throughput_req_per_min",
              "completed", "submitted"):
        if not number(pro.get(k)):
            fail(f"{name}: proactive.{k} missing")
    if re_.get("completed") != re_.get("submitted") or pro.get("completed") != pro.get("submitted"):
        fail(f"{name}: not every request completed: {p}")
    if p.get("cancelled_at_drain") != 0:
        fail(f"{name}: requests cancelled at the drain: {p}")
    if not 0 < re_.get("mean_latency_s", 0) <= re_.get("p90_latency_s", 0) * 10:
        fail(f"{name}: reactive latencies {re_}")
    if not re_.get("mean_prefill_wait_s", -1) <= re_.get("p99_prefill_wait_s", -1) \
            <= re_.get("max_prefill_wait_s", -1):
        fail(f"{name}: prefill waits out of order: {re_}")
    if not pro.get("throughput_req_per_min", 0) > 0:
        fail(f"{name}: no proactive throughput: {pro}")
    # device time by kind of work: the parts add up to at most the total, and under agentxpu
    # reactive prompts run as prefill kernels of their own, under fcfs inside the steps
    dt, steps = p.get("device_time_s", {}), p.get("steps", {})
    parts = [dt.get(k) for k in ("prefill_reactive", "prefill_proactive", "steps_reactive",
                                 "steps_proactive")]
    if not (number(dt.get("total")) and all(number(x) and x >= 0 for x in parts)
            and 0 < sum(parts) <= dt["total"] * 1.0001 + 0.003):  # printed to the ms
        fail(f"{name}: device time {dt}")
    if not (number(steps.get("reactive")) and number(steps.get("proactive"))
            and steps["reactive"] > 0 and steps["proactive"] > 0):
        fail(f"{name}: steps {steps}")
    if name == "agentxpu" and not dt.get("prefill_reactive", 0) > 0:
        fail(f"agentxpu ran no reactive prefill kernels of their own: {dt}")
    if name == "fcfs" and (dt.get("prefill_reactive") or dt.get("prefill_proactive")):
        fail(f"fcfs ran prefill kernels outside its steps: {dt}")

if pols:
    a, f = pols["agentxpu"], pols["fcfs"]
    ratios = doc.get("agentxpu_over_fcfs", {})
    want = (a["reactive"]["p90_latency_s"] / f["reactive"]["p90_latency_s"],
            a["proactive"]["throughput_req_per_min"] / f["proactive"]["throughput_req_per_min"])
    got = (ratios.get("reactive_p90_latency"), ratios.get("proactive_throughput"))
    if not all(number(g) and math.isclose(g, w, rel_tol=2e-3, abs_tol=2e-4)
               for g, w in zip(got, want)):
        fail(f"ratios {got}, from the numbers {want}")
    # the same trace as the simulator's for these rates and seed
    s = run("sim", "--model", "llama-3b", *rates, "--policy", "fcfs", "--json")
    if s.returncode != 0:
        fail(f"sim: {s.stderr.strip()}")
    else:
        sp = json.loads(s.stdout)["policies"]["fcfs"]
        for kind in ("reactive", "proactive"):
            if sp[kind]["submitted"] != f[kind]["submitted"]:
                fail(f"{kind}: bench replayed {f[kind]['submitted']} requests, sim "
                     f"{sp[kind]['submitted']}")
        tr = doc.get("trace", {})
        if (tr.get("reactive_requests"), tr.get("proactive_requests")) != \
                (sp["reactive"]["submitted"], sp["proactive"]["submitted"]):
            fail(f"trace counts {tr}")

# one policy, as a table
r = run("bench", "-m", model, "--reactive-rate", "60", "--proactive-rate", "0", "--minutes",
        "0.05", "--policy", "serial")
if r.returncode != 0 or "serial" not in r.stdout or "agentxpu/fcfs" in r.stdout:
    fail(f"bench --policy serial: status {r.returncode}: {r.stdout} {r.stderr}")

# without reactive requests there is no P90 ratio: null, and the JSON still parses
r = run("bench", "-m", model, "--reactive-rate", "0", "--proactive-rate", "60", "--minutes",
        "0.05", "--piggyback-slack", "0.5", "--json")
try:
    ratios = json.loads(r.stdout).get("agentxpu_over_fcfs", {}) if r.returncode == 0 else None
except ValueError as e:
    ratios = None
    fail(f"bench --reactive-rate 0 --json: not JSON ({e}): {r.stdout[-300:]}")
if r.returncode != 0:
    fail(f"bench --reactive-rate 0: status {r.returncode}: {r.stderr.strip()}")
elif ratios is not None and (ratios.get("reactive_p90_latency", 0) is not None or
                             not number(ratios.get("proactive_throughput"))):
    fail(f"bench --reactive-rate 0: ratios {ratios}")

# and as a table it says so in words
r = run("bench", "-m", model, "--reactive-rate", "0", "--proactive-rate", "60", "--minutes",
        "0.05")
if r.returncode != 0 or "reactive P90 latency none" not in r.stdout or "nan" in r.stdout:
    fail(f"bench --reactive-rate 0 (table): status {r.returncode}: {r.stdout[-300:]}")

# bad input: a clear one-line error, status 2 for usage, 1 for a model that cannot load
cut = os.path.join(tmp, "cut.gguf")
with open(model, "rb") as src, open(cut, "wb") as dst:
    dst.write(src.read(5000))
for args, status, words in (
        ((), 2, "no model"),
        (("-m", model, "--policy", "fastest"), 2, "--policy"),
        (("-m", model, "--minutes", "0"), 2, "--minutes"),
        (("-m", model, "--reactive-rate", "x"), 2, "--reactive-rate"),
        (("-m", model, "--piggyback-slack", "-1"), 2, "--piggyback-slack"),
        (("-m", model, "--proactive-set", "lmsys"), 2, "lmsys"),
        (("-m", model, "extra"), 2, "extra"),
        (("-m", model, "--seed", "4294967296"), 2, "--seed must be a number from 0 to 2147483647"),
        (("-m", cut), 1, "cut.gguf"),
        (("-m", os.path.join(tmp, "missing.gguf")), 1, "missing.gguf")):
    r = run("bench", *args, timeout=60)
    err = r.stderr.strip()
    if r.returncode != status or words not in err or "\n" in err:
        fail(f"bench {' '.join(args)}: status {r.returncode} (want {status}), stderr {err!r}")

print(f"{'FAILED' if clitest.failures else 'ok'}: agentxpu bench ({clitest.failures} failures)")
sys.exit(clitest.status())
