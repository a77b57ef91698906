#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""5,000 files created at once (a checkout): the requests stay within the rate limit, the
monitor's memory within its cap, and every file is accounted for — named in a request or
counted in a summary."""
import math
import os
import time

from burst import check_accounted, vm_hwm_kib
from harness import TEST_TEMPLATES, check, run, wait_for

FILES = 5000
FOLDERS = 10
RATE = 6          # requests per minute
BURST = 2
CAP_MB = 48


def body(s):
    s.start_recorder()
    s.start_engine()
    s.start_monitor({
        "files": dict(watch=s.watched, debounce_ms=300, burst_threshold=20, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        "limits": {"requests_per_minute": RATE, "burst": BURST, "max_in_flight": 1,
                   "max_queued": 8, "batch_list_max": 40, "memory_cap_mb": CAP_MB},
    })
    s.wait_log("files: watching")
    start = time.monotonic()
    created = []
    for d in range(FOLDERS):
        folder = os.path.join(s.watched, "checkout", f"module{d}")
        os.makedirs(folder)
        for i in range(FILES // FOLDERS):
            path = os.path.join(folder, f"source{i:04d}.c")
            with open(path, "w") as f:
                f.write(f"/* file {d}/{i} */\nint f{i}(void) {{ return {i}; }}\n")
            created.append(path)

    wait_for(lambda: s.pending_ids() == {} and "summarized" in s.log()
             and any(r.get("files") for r in s.store()), "the burst to be summarized and answered")
    time.sleep(2)  # a second request, if one were coming, would show up here
    wait_for(lambda: not s.pending_ids(), "no pending events")
    elapsed = time.monotonic() - start
    hwm = vm_hwm_kib(s.monitor_pid())

    prompts = s.prompts()
    allowed = BURST + math.ceil(RATE * elapsed / 60)
    check(len(prompts) <= allowed,
          f"{len(prompts)} requests in {elapsed:.0f} s exceed the limit ({allowed})")
    problems, named, counted = check_accounted(created, prompts)
    check(not problems, "files unaccounted for: " + "; ".join(problems))
    check(named + counted == FILES, f"{named} named + {counted} counted != {FILES}")
    check(hwm < CAP_MB * 1024, f"peak resident memory {hwm} KiB is over the {CAP_MB} MiB cap")
    batch = [r for r in s.store() if r.get("files")]
    check(batch and batch[-1]["source"] == "file" and batch[-1]["path"].startswith(s.watched),
          f"the summary's suggestion is malformed: {batch}")
    print(f"{len(prompts)} requests in {elapsed:.1f} s (limit {allowed}), {named} files named, "
          f"{counted} counted, peak RSS {hwm / 1024:.1f} MiB")


run("burst", body)
