#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""More changes than the kernel's inotify queue holds, made while the monitor is stopped
(SIGSTOP): the queue overflows, the monitor rescans, and every file is still accounted for
in a request or a summary."""
import os
import signal
import time

from burst import check_accounted
from harness import TEST_TEMPLATES, Skip, check, run, wait_for


def body(s):
    try:
        with open("/proc/sys/fs/inotify/max_queued_events") as f:
            queue = int(f.read())
    except OSError:
        raise Skip("cannot read fs.inotify.max_queued_events")
    # Each new file makes two events (create, close after writing).
    files = queue // 2 + 1000
    if files > 40000:
        raise Skip(f"the inotify queue ({queue}) is too large to overflow cheaply")
    s.start_recorder()
    s.start_engine()
    s.start_monitor({
        "files": dict(watch=s.watched, debounce_ms=300, burst_threshold=20,
                      burst_max_wait_ms=60000, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        "limits": {"requests_per_minute": 6, "burst": 2, "max_in_flight": 1},
    })
    s.wait_log("files: watching")
    folder = os.path.join(s.watched, "unpacked")
    os.makedirs(folder)
    time.sleep(1)  # the new folder's watch is in place before the monitor stops
    os.kill(s.monitor_pid(), signal.SIGSTOP)
    created = []
    try:
        for i in range(files):
            path = os.path.join(folder, f"entry{i:05d}.txt")
            with open(path, "w") as f:
                f.write(f"entry {i}\n")
            created.append(path)
    finally:
        os.kill(s.monitor_pid(), signal.SIGCONT)

    s.wait_log("overflowed; rescanning")
    wait_for(lambda: any(r.get("files") for r in s.store()) and not s.pending_ids(),
             "the rescanned files to be summarized and answered")
    time.sleep(2)
    wait_for(lambda: not s.pending_ids(), "no pending events")
    problems, named, counted = check_accounted(created, s.prompts())
    check(not problems, "files unaccounted for after the overflow: " + "; ".join(problems))
    check(named + counted == files, f"{named} named + {counted} counted != {files}")
    print(f"{files} files, queue {queue}: {len(s.prompts())} requests, {named} named, {counted} counted")


run("overflow", body)
