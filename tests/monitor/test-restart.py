#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The monitor killed (SIGKILL) with events pending — queued behind the rate limit, submitted
and unanswered, or still in the debounce window — and started again submits each pending
event exactly once; an event answered before the kill is never submitted again."""
import os
import signal
import time

from harness import TEST_TEMPLATES, check, run, wait_for


def first_line(prompt):
    return prompt.split("\n", 1)[0]


def body(s):
    s.start_recorder()
    # The stand-in answers slowly, so that the first request is still open at the kill.
    s.start_engine("--delay-ms 1500")
    files = [os.path.join(s.watched, f"draft-{i}.txt") for i in range(5)]
    slow = {
        "files": dict(watch=s.watched, debounce_ms=1000, burst_threshold=100, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        # One request now, the next a minute later: the rest wait in the queue.
        "limits": {"requests_per_minute": 1, "burst": 1, "max_in_flight": 1, "max_queued": 50},
    }
    s.start_monitor(slow)
    s.wait_log("files: watching")
    for i, path in enumerate(files[:4]):
        with open(path, "w") as f:
            f.write(f"draft number {i}\nwith some text to read\n")
    wait_for(lambda: len([r for r in s.journal() if r.get("op") == "event"]) == 4,
             "four journaled events")
    wait_for(lambda: any(r.get("op") == "submit" for r in s.journal()), "a submission")
    # One more change, killed inside its debounce window if the machine keeps up.
    with open(files[4], "w") as f:
        f.write("the last draft\n")
    wait_for(lambda: any(r.get("op") == "seen" and r.get("path") == files[4] for r in s.journal()),
             "the last draft to be journaled as seen")
    os.kill(s.monitor_pid(), signal.SIGKILL)
    s.procs.pop("monitor").wait()

    answered = {r.get("path") for r in s.store()}
    journal = s.journal()
    pending_paths = {r["path"] for r in s.pending_ids().values()}
    seen = {r["path"] for r in journal if r.get("op") == "seen"}
    settled = {r.get("settles") for r in journal if r.get("op") == "event"}
    pending_paths |= seen - settled
    before = len(s.prompts())
    check(pending_paths == set(files) - answered,
          f"the journal lost track: pending {sorted(pending_paths)}, answered {sorted(answered)}")
    check(len(pending_paths) >= 4, "the test did not leave enough pending work to mean anything")

    fast = dict(slow, limits={"requests_per_minute": 600, "burst": 20, "max_in_flight": 2})
    s.start_monitor(fast)
    wait_for(lambda: {r.get("path") for r in s.store()} >= set(files), "a suggestion per draft")
    wait_for(lambda: not s.pending_ids(), "no pending events")
    time.sleep(1.5)  # anything submitted twice would show up here

    after = [first_line(p) for p in s.prompts()[before:]]
    for path in files:
        n = after.count(f"FILE {path}")
        want = 1 if path in pending_paths else 0
        check(n == want, f"{os.path.basename(path)} was submitted {n} times after the restart, "
                         f"expected {want}")
        stored = sum(1 for r in s.store() if r.get("path") == path)
        check(stored == 1, f"{os.path.basename(path)} has {stored} suggestions, expected 1")
    check(len(after) == len(pending_paths), f"unexpected requests after the restart: {after}")
    check("from before the restart" in s.log(), "the restart did not say it resubmits")


run("restart", body)
