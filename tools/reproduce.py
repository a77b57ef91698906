#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Replay the Agent.xpu paper's evaluation settings with `agentxpu sim` on the simulated
Core Ultra 5 125H, and write what docs/reproduction.md shows: the raw numbers
(docs/reproduction/data.json), SVG plots (docs/reproduction/*.svg) and the tables between
the GENERATED markers of docs/reproduction.md.

    tools/reproduce.py --cli build/service/cli/agentxpu

Python standard library only. A full run replays a few hundred 15-minute traces and takes
a few minutes on one core; --quick runs a smaller sweep for a look."""
import argparse
import json
import math
import os
import re
import subprocess
import sys

POLICIES = ["agentxpu", "fcfs", "serial"]
COLORS = {"agentxpu": "#1b7837", "fcfs": "#c51b7d", "serial": "#4d4d4d"}
MODELS = [("llama-3b", "Llama-3.2-3B"), ("llama-8b", "Llama-3.1-8B")]
# (proactive, reactive) per minute: the paper's Fig. 11 settings
MIXED = [(6, 1), (6, 3), (6, 5), (4, 3), (8, 3), (10, 3)]
PRO_SETS = ["proactivebench", "samsum", "cnndm"]
PRO_RATES = [1, 2, 4, 6, 8, 10, 15, 20, 25, 30, 40, 50]
# SAMSum's short requests saturate only at higher rates
PRO_RATES_SAMSUM = PRO_RATES + [70, 100, 140]
# the paper's reductions of mean reactive latency against OpenVINO iGPU serving (%)
PAPER_REDUCTION = {
    "llama-3b": {(6, 1): 91.61, (6, 3): 93.84, (6, 5): 96.01},
    "llama-8b": {(6, 1): 96.23, (6, 3): 96.01, (6, 5): 96.70},
}
ABLATIONS = ["preemption", "prefill-first", "contention-guard", "elastic-split",
             "reactive-first"]


def sim(cli, model, p, r, seed, minutes, pset="proactive-mixed", policy="all", extra=()):
    cmd = [cli, "sim", "--model", model, "--proactive-rate", str(p), "--reactive-rate", str(r),
           "--seed", str(seed), "--minutes", str(minutes), "--proactive-set", pset,
           "--policy", policy, "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)["policies"]


def mean_runs(runs):
    """Average every number of several seeds' results (same structure)."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: mean_runs([r[k] for r in runs]) for k in first}
    return sum(runs) / len(runs)


def collect(cli, seeds, minutes, quick):
    data = {"seeds": seeds, "minutes": minutes, "mixed": {}, "proactive_only": {},
            "ablations": {}, "load": {}}
    quick_rates = [1, 4, 10, 20, 30]
    for model, _ in MODELS:
        data["mixed"][model] = {}
        for p, r in MIXED:
            runs = [sim(cli, model, p, r, s, minutes) for s in seeds]
            data["mixed"][model][f"{p},{r}"] = mean_runs(runs)
            print(f"mixed {model} P={p} R={r}", file=sys.stderr)
        data["proactive_only"][model] = {}
        for pset in PRO_SETS:
            data["proactive_only"][model][pset] = {}
            rates = PRO_RATES_SAMSUM if pset == "samsum" else PRO_RATES
            for rate in quick_rates if quick else rates:
                data["proactive_only"][model][pset][str(rate)] = sim(cli, model, rate, 0, seeds[0],
                                                                     minutes, pset)
                print(f"proactive-only {model} {pset} {rate}/min", file=sys.stderr)
        # how the reduction grows with load (3 reactive per minute)
        data["load"][model] = {}
        for p in ([6, 20] if quick else [6, 12, 16, 20, 25]):
            data["load"][model][str(p)] = mean_runs([sim(cli, model, p, 3, s, minutes) for s in seeds])
        data["ablations"][model] = {}
        for mech in ABLATIONS:
            runs = [sim(cli, model, 6, 3, s, minutes, policy="agentxpu",
                        extra=("--disable", mech)) for s in seeds]
            data["ablations"][model][mech] = mean_runs(runs)["agentxpu"]
        for name, extra in (("no aging", ("--aging", "0")), ("no duty budget", ("--duty", "1")),
                            ("GPU 50% busy elsewhere", ("--gpu-busy", "0.5"))):
            runs = [sim(cli, model, 6, 3, s, minutes, policy="agentxpu", extra=extra)
                    for s in seeds]
            data["ablations"][model][name] = mean_runs(runs)["agentxpu"]
    data["alone"] = collect_alone(cli, seeds, minutes)
    return data


def collect_alone(cli, seeds, minutes):
    """The mixed settings' reactive requests with no proactive load at all: the same reactive
    trace (each kind has its own random stream), the floor of any policy's reactive latency."""
    alone = {}
    for model, _ in MODELS:
        alone[model] = {}
        for r in sorted({r for _, r in MIXED}):
            runs = [sim(cli, model, 0, r, s, minutes, policy="agentxpu") for s in seeds]
            alone[model][str(r)] = mean_runs(runs)["agentxpu"]["reactive"]["mean_latency_s"]
    return alone


# SVG ------------------------------------------------------------------------------------------

def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Svg:
    def __init__(self, w, h):
        self.w, self.h, self.parts = w, h, []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", rotate=None, weight="normal"):
        tr = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'font-weight="{weight}" font-family="sans-serif"{tr}>{esc(s)}</text>')

    def line(self, x1, y1, x2, y2, color="#000", width=1, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                 f'stroke="{color}" stroke-width="{width}"{d}/>')

    def rect(self, x, y, w, h, color):
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
                 f'fill="{color}"/>')

    def poly(self, pts, color, width=2):
        p = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        self.add(f'<polyline points="{p}" fill="none" stroke="{color}" stroke-width="{width}"/>')

    def circle(self, x, y, r, color):
        self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{color}"/>')

    def save(self, path):
        with open(path, "w") as f:
            f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                    f'viewBox="0 0 {self.w} {self.h}">\n<rect width="100%" height="100%" fill="white"/>\n')
            f.write("\n".join(self.parts))
            f.write("\n</svg>\n")


class LogAxis:
    """A log10 y axis over [lo, hi] mapped to pixels [y0 (bottom), y1 (top)]."""

    def __init__(self, lo, hi, y0, y1):
        self.lo = 10 ** math.floor(math.log10(lo))
        self.hi = 10 ** math.ceil(math.log10(hi))
        self.y0, self.y1 = y0, y1

    def y(self, v):
        v = max(v, self.lo)
        f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return self.y0 - f * (self.y0 - self.y1)

    def draw(self, svg, x0, x1, label):
        e = int(round(math.log10(self.lo)))
        while 10 ** e <= self.hi * 1.0001:
            y = self.y(10 ** e)
            svg.line(x0, y, x1, y, "#ddd")
            svg.text(x0 - 6, y + 4, f"{10 ** e:g}", 11, "end")
            e += 1
        svg.line(x0, self.y0, x0, self.y1)
        svg.text(x0 - 44, (self.y0 + self.y1) / 2, label, 12, "middle", rotate=-90)


def legend(svg, x, y):
    for i, p in enumerate(POLICIES):
        svg.rect(x + i * 110, y - 10, 12, 12, COLORS[p])
        svg.text(x + i * 110 + 17, y, p, 12)


def plot_mixed(data, model, title, path):
    rows = data["mixed"][model]
    keys = [f"{p},{r}" for p, r in MIXED]
    vals = [rows[k][pol]["reactive"][m] for k in keys for pol in POLICIES
            for m in ("mean_latency_s", "p90_latency_s")]
    svg = Svg(760, 380)
    ax = LogAxis(min(v for v in vals if v > 0), max(vals), 320, 50)
    x0, x1 = 70, 740
    ax.draw(svg, x0, x1, "reactive latency (s), log scale")
    svg.line(x0, 320, x1, 320)
    gw = (x1 - x0) / len(keys)
    bw = gw / (len(POLICIES) + 1)
    for i, k in enumerate(keys):
        p, r = k.split(",")
        gx = x0 + i * gw + bw / 2
        for j, pol in enumerate(POLICIES):
            rec = rows[k][pol]["reactive"]
            y = ax.y(rec["mean_latency_s"])
            svg.rect(gx + j * bw, y, bw * 0.9, 320 - y, COLORS[pol])
            yp = ax.y(rec["p90_latency_s"])
            svg.line(gx + j * bw, yp, gx + j * bw + bw * 0.9, yp, "#000", 2)
        svg.text(x0 + (i + 0.5) * gw, 338, f"P{p} R{r}", 11, "middle")
    svg.text(x0 + (x1 - x0) / 2, 358, "proactive (P) and reactive (R) requests per minute", 12, "middle")
    svg.text(x0, 24, f"{title}: mean reactive latency (bars) and P90 (black ticks)", 14, weight="bold")
    legend(svg, 420, 44)
    svg.save(path)


def nice_ticks(rmax):
    step = next(t for t in (5, 10, 20, 25, 50, 100) if rmax / t <= 6)
    return [1] + list(range(step, rmax + 1, step))


def plot_proactive(data, model, title, path):
    sets = data["proactive_only"][model]
    pw, gap, left = 270, 80, 70
    svg = Svg(left + 3 * pw + 2 * gap + 20, 380)
    vals = [sets[s][r][pol]["proactive"]["normalized_latency_s_per_token"]
            for s in PRO_SETS for r in sets[s] for pol in POLICIES]
    ax = LogAxis(min(v for v in vals if v > 0), max(vals), 320, 80)
    for i, s in enumerate(PRO_SETS):
        x0 = left + i * (pw + gap)
        x1 = x0 + pw
        rates = sorted(int(r) for r in sets[s])
        rmax = max(rates)
        ax.draw(svg, x0, x1, "normalized latency (s/token)" if i == 0 else "")
        svg.line(x0, 320, x1, 320)
        for r in nice_ticks(rmax):
            x = x0 + r / rmax * pw
            svg.line(x, 320, x, 324)
            svg.text(x, 336, str(r), 11, "middle")
        for pol in POLICIES:
            pts = [(x0 + r / rmax * pw,
                    ax.y(sets[s][str(r)][pol]["proactive"]["normalized_latency_s_per_token"]))
                   for r in rates]
            svg.poly(pts, COLORS[pol])
            for x, y in pts:
                svg.circle(x, y, 2.5, COLORS[pol])
        svg.text(x0 + pw / 2, 72, s, 13, "middle", weight="bold")
        svg.text(x0 + pw / 2, 356, "proactive requests per minute", 11, "middle")
    svg.text(left, 24, f"{title}, proactive only: normalized latency against request rate", 14,
             weight="bold")
    legend(svg, left, 48)
    svg.save(path)


# Tables ---------------------------------------------------------------------------------------

def f(v, nd=2):
    return f"{v:.{nd}f}"


def change(a, b):
    """a against b as a signed percentage: −40.0% when a is 40% lower."""
    r = 100.0 * (a / b - 1) if b > 0 else float("nan")
    return f"{'−' if r < 0 else '+'}{abs(r):.1f}%"


def table_mixed(data):
    out = ["| model | P/min | R/min | policy | reactive mean s | reactive P90 s | prefill wait s "
           "| proactive s/token | iGPU busy | J/token | reactive vs fcfs | paper vs OpenVINO |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, name in MODELS:
        for p, r in MIXED:
            row = data["mixed"][model][f"{p},{r}"]
            fc = row["fcfs"]["reactive"]["mean_latency_s"]
            for pol in POLICIES:
                x = row[pol]
                cmp = change(x["reactive"]["mean_latency_s"], fc) if pol != "fcfs" else ""
                paper = PAPER_REDUCTION[model].get((p, r)) if pol == "agentxpu" else None
                out.append(
                    f"| {name} | {p} | {r} | {pol} | {f(x['reactive']['mean_latency_s'])} "
                    f"| {f(x['reactive']['p90_latency_s'])} | {f(x['reactive']['mean_prefill_wait_s'], 3)} "
                    f"| {f(x['proactive']['normalized_latency_s_per_token'], 4)} "
                    f"| {100 * x['igpu_busy_fraction']:.1f}% | {f(x['energy_j_per_token'], 3)} "
                    f"| {cmp} | {'−%.1f%%' % paper if paper else ''} |")
    return "\n".join(out)


def saturation(runs, pol):
    """Proactive throughput at saturation: the most requests per minute completed over the
    sweep (past saturation the completion rate stays at the service capacity)."""
    return max(runs[r][pol]["proactive"]["throughput_req_per_min"] for r in runs)


def table_saturation(data):
    out = ["| model | set | agentxpu req/min | fcfs req/min | serial req/min | agentxpu / fcfs "
           "| agentxpu / serial | iGPU busy agentxpu / fcfs at the highest rate |",
           "|---|---|---|---|---|---|---|---|"]
    for model, name in MODELS:
        for s in PRO_SETS:
            runs = data["proactive_only"][model][s]
            a, fc, se = (saturation(runs, p) for p in POLICIES)
            at = runs[max(runs, key=int)]
            out.append(f"| {name} | {s} | {f(a, 1)} | {f(fc, 1)} | {f(se, 1)} | {a / fc:.2f}× "
                       f"| {a / se:.2f}× | {100 * at['agentxpu']['igpu_busy_fraction']:.0f}% / "
                       f"{100 * at['fcfs']['igpu_busy_fraction']:.0f}% |")
    return "\n".join(out)


def table_load(data):
    out = ["| model | P/min | R/min | agentxpu reactive s | fcfs reactive s | reduction | fcfs iGPU busy |",
           "|---|---|---|---|---|---|---|"]
    for model, name in MODELS:
        for p, row in sorted(data["load"][model].items(), key=lambda kv: int(kv[0])):
            a = row["agentxpu"]["reactive"]["mean_latency_s"]
            fc = row["fcfs"]["reactive"]["mean_latency_s"]
            out.append(f"| {name} | {p} | 3 | {f(a)} | {f(fc)} | {change(a, fc)} "
                       f"| {100 * row['fcfs']['igpu_busy_fraction']:.0f}% |")
    return "\n".join(out)


def table_ablations(data):
    out = ["| model | agentxpu with | reactive mean s | reactive P90 s | prefill wait s "
           "| proactive s/token | iGPU busy | J/token |",
           "|---|---|---|---|---|---|---|---|"]
    for model, name in MODELS:
        base = data["mixed"][model]["6,3"]["agentxpu"]
        rows = [("everything (default)", base)] + [
            (f"no {k}" if k in ABLATIONS else k, v) for k, v in data["ablations"][model].items()]
        for label, x in rows:
            out.append(f"| {name} | {label} | {f(x['reactive']['mean_latency_s'])} "
                       f"| {f(x['reactive']['p90_latency_s'])} | {f(x['reactive']['mean_prefill_wait_s'], 3)} "
                       f"| {f(x['proactive']['normalized_latency_s_per_token'], 4)} "
                       f"| {100 * x['igpu_busy_fraction']:.1f}% | {f(x['energy_j_per_token'], 3)} |")
    return "\n".join(out)


def table_floor(data):
    out = ["| model | P/min | R/min | reactive alone s | agentxpu s | fcfs s | agentxpu vs fcfs "
           "| alone vs fcfs (the most any policy can gain) | agentxpu over alone | paper vs OpenVINO |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for model, name in MODELS:
        for p, r in MIXED:
            row = data["mixed"][model][f"{p},{r}"]
            alone = data["alone"][model][str(r)]
            a = row["agentxpu"]["reactive"]["mean_latency_s"]
            fc = row["fcfs"]["reactive"]["mean_latency_s"]
            paper = PAPER_REDUCTION[model].get((p, r))
            out.append(f"| {name} | {p} | {r} | {f(alone)} | {f(a)} | {f(fc)} | {change(a, fc)} "
                       f"| {change(alone, fc)} | {change(a, alone)} "
                       f"| {'−%.1f%%' % paper if paper else ''} |")
    return "\n".join(out)


def replace_generated(doc, name, body):
    pat = re.compile(rf"(<!-- BEGIN GENERATED {name} -->\n).*?(<!-- END GENERATED {name} -->)",
                     re.S)
    if not pat.search(doc):
        sys.exit(f"docs/reproduction.md has no GENERATED {name} markers")
    return pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default="build/service/cli/agentxpu")
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(__file__), "..", "docs"))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--quick", action="store_true", help="fewer rates, one seed")
    ap.add_argument("--data", help="reuse a data.json instead of running the simulator")
    a = ap.parse_args()

    outdir = os.path.join(a.docs, "reproduction")
    os.makedirs(outdir, exist_ok=True)
    if a.data:
        with open(a.data) as fh:
            data = json.load(fh)
        if "alone" not in data:  # data of an older run: add what it lacks
            data["alone"] = collect_alone(a.cli, data["seeds"], data["minutes"])
            with open(os.path.join(outdir, "data.json"), "w") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
    else:
        seeds = [int(s) for s in a.seeds.split(",")]
        if a.quick:
            seeds = seeds[:1]
        data = collect(a.cli, seeds, a.minutes, a.quick)
        with open(os.path.join(outdir, "data.json"), "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
    for model, name in MODELS:
        plot_mixed(data, model, name, os.path.join(outdir, f"mixed-{model}.svg"))
        plot_proactive(data, model, name, os.path.join(outdir, f"proactive-only-{model}.svg"))

    path = os.path.join(a.docs, "reproduction.md")
    with open(path) as fh:
        doc = fh.read()
    doc = replace_generated(doc, "mixed", table_mixed(data))
    doc = replace_generated(doc, "saturation", table_saturation(data))
    doc = replace_generated(doc, "load", table_load(data))
    doc = replace_generated(doc, "floor", table_floor(data))
    doc = replace_generated(doc, "ablations", table_ablations(data))
    with open(path, "w") as fh:
        fh.write(doc)


if __name__ == "__main__":
    main()
