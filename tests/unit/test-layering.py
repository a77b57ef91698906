#!/usr/bin/env python3
"""The folders are the architecture: every #include and every room's meson.build may only
reach the rooms below it (README "Source layout", docs/architecture.md).

    kernels < engine/base < model < heg < devices < sched < sim; engine.c on top of sched
    service/daemon: the engine's API (engine.h) and base only; service/monitor and
    service/bridge: base and service/common (the engine's GDBus request table) only

Run as `test-layering.py [SOURCE_DIR]`; prints one line per violation and exits 1."""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
    "AXP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = os.path.abspath(SRC)

BELOW = {
    "kernels": set(),
    "engine/base": {"kernels"},
    "engine/model": {"engine/base", "kernels"},
    "engine/heg": {"engine/model", "engine/base", "kernels"},
    "engine/devices": {"engine/heg", "engine/model", "engine/base", "kernels"},
    "engine/sched": {"engine/devices", "engine/heg", "engine/model", "engine/base", "kernels"},
    "engine/sim": {"engine/sched", "engine/devices", "engine/heg", "engine/model", "engine/base",
                   "kernels"},
    "engine": {"engine/sched", "engine/devices", "engine/heg", "engine/model", "engine/base",
               "kernels"},
    "service/common": {"engine/base"},
    "service/monitor": {"engine/base", "service/common"},
    "service/bridge": {"engine/base", "service/common"},
    "service/daemon": {"engine", "engine/base", "service/common"},
    "service/cli": {"engine", "engine/sim", "engine/sched", "engine/devices", "engine/heg",
                    "engine/model", "engine/base", "kernels", "service/common"},
}
# The meson variables each room exports, to check that a room's meson.build names only the
# rooms below it.
DEPS = {
    "kernels": {"kernels_dep", "kernels_lib"},
    "engine/base": {"base_dep", "base_lib"},
    "engine/model": {"model_dep", "model_lib"},
    "engine/heg": {"heg_dep", "heg_lib"},
    "engine/devices": {"devices_dep", "devices_lib"},
    "engine/sched": {"sched_dep", "sched_lib"},
    "engine/sim": {"sim_dep", "sim_lib"},
    "engine": {"engine_dep", "engine_lib"},
}
# Where quoted includes are looked up, after the including file's own folder.
INCLUDE_ROOTS = ["", "engine", "service"]


def room_of(rel):
    """The room a repository-relative path belongs to, or None outside the rooms."""
    parts = rel.split("/")
    if parts[0] == "kernels":
        return "kernels"
    if parts[0] == "engine":
        if len(parts) == 2:
            return "engine"
        return "engine/" + parts[1]
    if parts[0] == "service" and len(parts) > 2:
        return "service/" + parts[1]
    return None


def resolve(including, name):
    cands = [os.path.join(os.path.dirname(including), name)]
    cands += [os.path.join(SRC, r, name) for r in INCLUDE_ROOTS]
    for c in cands:
        if os.path.isfile(c):
            return os.path.relpath(os.path.normpath(c), SRC)
    return None


def check_includes():
    bad = []
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for top in ("kernels", "engine", "service"):
        for dp, _, files in os.walk(os.path.join(SRC, top)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(dp, f)
                rel = os.path.relpath(path, SRC)
                room = room_of(rel)
                if room is None:
                    continue
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                for name in inc.findall(text):
                    target = resolve(path, name)
                    if target is None:
                        continue  # generated (config.h) or a system header in quotes
                    troom = room_of(target)
                    if troom is None or troom == room:
                        continue
                    if troom not in BELOW.get(room, set()):
                        bad.append(f"{rel}: includes {target}, from {troom}, which is not below {room}")
    return bad


def check_meson():
    bad = []
    for room, below in BELOW.items():
        if room not in DEPS:
            continue
        mb = os.path.join(SRC, room, "meson.build")
        if not os.path.isfile(mb):
            bad.append(f"{room}: has no meson.build of its own")
            continue
        with open(mb, encoding="utf-8") as fh:
            text = re.sub(r"#.*", "", fh.read())
        for other, names in DEPS.items():
            if other == room or other in below:
                continue
            for n in names:
                if re.search(r"\b%s\b" % n, text):
                    bad.append(f"{room}/meson.build: names {n} of {other}, which is not below it")
    return bad


def self_test():
    """The check must catch what it is for: a kernel that includes an engine header, a room
    that includes one above it, and a room's meson.build that names a room above it."""
    global SRC
    import tempfile
    saved = SRC
    with tempfile.TemporaryDirectory() as tmp:
        SRC = tmp
        for d in ("kernels/cpu", "engine/base", "engine/model", "engine/sched"):
            os.makedirs(os.path.join(tmp, d))
        files = {
            "engine/model/model.h": "#pragma once\n",
            "engine/sched/scheduler.h": "#pragma once\n",
            "kernels/cpu/matmul.c": '#include "model/model.h"\n',
            "engine/model/model.c": '#include "sched/scheduler.h"\n#include "base/util.h"\n',
            "engine/base/util.h": "#pragma once\n",
            "engine/base/meson.build": "base_lib = static_library('b', dependencies: [model_dep])\n",
        }
        for name, text in files.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        got = check_includes() + check_meson()
    SRC = saved
    want = ["kernels/cpu/matmul.c: includes engine/model/model.h",
            "engine/model/model.c: includes engine/sched/scheduler.h",
            "engine/base/meson.build: names model_dep"]
    got = [g for g in got if "has no meson.build" not in g]
    missed = [w for w in want if not any(g.startswith(w) for g in got)]
    if missed or len(got) != len(want):
        print("test-layering: the check itself is broken; planted violations gave:", got)
        return False
    return True


def main():
    if not self_test():
        return 1
    bad = check_includes() + check_meson()
    for b in bad:
        print(b)
    print(f"{len(bad)} layering violation(s)" if bad else "layering: every room reaches only the rooms below it")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
