#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The monitor killed (SIGKILL) with events pending — queued behind the rate limit, submitted
and unanswered, or still in the debounce window — and started again submits each pending
event exactly once; an event answered before the kill is never submitted again.

The request is held unanswered by the engine itself: it runs the serial policy (one request
at a time, end to end) and another client's long request is running, so the monitor's
request waits in the engine's queue until that client goes. The bus recording proves it:
no signal of the request before the kill, and the engine's log says it dropped it, with no
token generated, when the monitor left.
"""
import os
import signal
import time

from harness import TEST_TEMPLATES, check, run, wait_for


def first_line(prompt):
    return prompt.split("\n", 1)[0]


def body(s):
    s.start_recorder()
    s.start_engine(policy="serial")
    files = [os.path.join(s.watched, f"draft-{i}.txt") for i in range(6)]
    slow = {
        "files": dict(watch=s.watched, debounce_ms=1000, burst_threshold=100, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        # Two requests now, the next a minute later: the rest wait in the queue.
        "limits": {"requests_per_minute": 1, "burst": 2, "max_in_flight": 1, "max_queued": 50},
    }
    s.start_monitor(slow)
    s.wait_log("files: watching")
    # The first draft is answered before the kill.
    with open(files[0], "w") as f:
        f.write("draft number 0\nanswered before the kill\n")
    wait_for(lambda: s.store(), "the first suggestion")

    blocker = s.start_blocker()
    for i, path in enumerate(files[1:5], 1):
        with open(path, "w") as f:
            f.write(f"draft number {i}\nwith some text to read\n")
    wait_for(lambda: len([r for r in s.journal() if r.get("op") == "event"]) == 5,
             "four more journaled events")
    submit = wait_for(lambda: [r for r in s.journal() if r.get("op") == "submit"][1:],
                      "a second submission")[0]
    # One more change, killed inside its debounce window if the machine keeps up.
    with open(files[5], "w") as f:
        f.write("the last draft\n")
    wait_for(lambda: any(r.get("op") == "seen" and r.get("path") == files[5] for r in s.journal()),
             "the last draft to be journaled as seen")
    os.kill(s.monitor_pid(), signal.SIGKILL)
    s.procs.pop("monitor").wait()

    # The submitted request was never answered: the engine generated nothing for it and
    # dropped it once the monitor had left (it was still running the blocker), and no
    # signal of it is on the bus.
    request = submit["request"]
    s.wait_log(f"{request} finished: cancelled, 0 tokens (its client left)", "engine")
    check(s.signals(request) == [],
          f"the submitted request was answered before the kill: {s.signals(request)}")
    check(s.blocker_held(blocker),
          f"the blocking requests ended while they should have held the queue: "
          f"{s.blocker_ends(blocker)}")
    s.stop_blocker()

    answered = {r.get("path") for r in s.store()}
    journal = s.journal()
    pending = s.pending_ids()
    check(submit["id"] in pending, "the journal lost the submitted, unanswered event")
    pending_paths = {r["path"] for r in pending.values()}
    seen = {r["path"] for r in journal if r.get("op") == "seen"}
    settled = {r.get("settles") for r in journal if r.get("op") == "event"}
    pending_paths |= seen - settled
    before = len(s.prompts())
    check(answered == {files[0]}, f"answered before the kill: {sorted(answered)}")
    check(pending_paths == set(files[1:]),
          f"the journal lost track: pending {sorted(pending_paths)}")

    fast = dict(slow, limits={"requests_per_minute": 600, "burst": 20, "max_in_flight": 2})
    s.start_monitor(fast)
    wait_for(lambda: {r.get("path") for r in s.store()} >= set(files), "a suggestion per draft")
    wait_for(lambda: not s.pending_ids(), "no pending events")
    time.sleep(1.5)  # anything submitted twice would show up here

    after = [first_line(p) for p in s.prompts()[before:]]
    for path in files:
        n = after.count(f"FILE {path}")
        want = 0 if path in answered else 1
        check(n == want, f"{os.path.basename(path)} was submitted {n} times after the restart, "
                         f"expected {want}")
        stored = sum(1 for r in s.store() if r.get("path") == path)
        check(stored == 1, f"{os.path.basename(path)} has {stored} suggestions, expected 1")
    check(len(after) == len(files) - 1, f"unexpected requests after the restart: {after}")
    check("from before the restart" in s.log(), "the restart did not say it resubmits")


run("restart", body)
