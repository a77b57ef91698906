#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The engine leaving the bus with requests unanswered, and coming back: each unanswered
event is submitted again exactly once, and every event ends with one suggestion."""
import os
import time

from harness import TEST_TEMPLATES, check, run, wait_for


def body(s):
    s.start_recorder()
    # The stand-in holds its requests, as an engine that dies before answering.
    s.start_engine("--hold")
    s.start_monitor({
        "files": dict(watch=s.watched, debounce_ms=200, burst_threshold=100, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        "limits": {"requests_per_minute": 600, "burst": 20, "max_in_flight": 2},
    })
    s.wait_log("files: watching")
    files = [os.path.join(s.watched, f"report-{i}.md") for i in range(3)]
    for i, path in enumerate(files):
        with open(path, "w") as f:
            f.write(f"# Report {i}\n\nnumbers go here\n")
    wait_for(lambda: sum(1 for r in s.journal() if r.get("op") == "submit") >= 2, "two submissions")
    s.stop_engine()
    answered = {r.get("path") for r in s.store()}
    before = len(s.prompts())
    s.wait_log("left the bus")

    s.start_engine()
    wait_for(lambda: {r.get("path") for r in s.store()} >= set(files), "a suggestion per report")
    wait_for(lambda: not s.pending_ids(), "no pending events")
    time.sleep(1.5)  # anything submitted twice would show up here

    after = [p.split("\n", 1)[0] for p in s.prompts()[before:]]
    for path in files:
        want = 0 if path in answered else 1
        n = after.count(f"FILE {path}")
        check(n == want, f"{os.path.basename(path)} was submitted {n} times after the engine "
                         f"came back, expected {want}")
        stored = sum(1 for r in s.store() if r.get("path") == path)
        check(stored == 1, f"{os.path.basename(path)} has {stored} suggestions, expected 1")


run("engine-restart", body)
