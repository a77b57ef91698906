#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The engine leaving the bus with requests unanswered, and coming back: each unanswered
event is submitted again exactly once to each engine that comes, and every event ends with
one suggestion. The engine stops gracefully three times in a row (SIGTERM: it cancels its
requests, as `systemctl restart` does; three is as many failed attempts as the monitor
allows an event, and a cancellation by a stopping engine must not count as one), then
crashes (SIGKILL: no word from it at all).

Each time the engine holds the requests itself: it runs the serial policy and another
client's long request is running, so the monitor's requests wait in its queue, submitted
and without a token, when the engine goes."""
import os
import signal
import time

from harness import TEST_TEMPLATES, check, run, wait_for

STOPS = [signal.SIGTERM, signal.SIGTERM, signal.SIGTERM, signal.SIGKILL]
IN_FLIGHT = 2


def new_submits(s, known):
    """The journal's submit records after the first `known`, once there are IN_FLIGHT."""
    submits = [r for r in s.journal() if r.get("op") == "submit"][known:]
    return submits if len(submits) >= IN_FLIGHT else None


def first_lines(calls, engine):
    return sorted(p.split("\n", 1)[0] for e, p in calls if e == engine)


def body(s):
    s.start_recorder()
    files = [os.path.join(s.watched, f"report-{i}.md") for i in range(3)]
    held = []
    for round_, sig in enumerate(STOPS):
        if round_ > 0:
            # The blocker must reach the new engine before the monitor's resubmissions do.
            os.kill(s.monitor_pid(), signal.SIGSTOP)
        s.start_engine(policy="serial")
        engine = s.engine_name()
        blocker = s.start_blocker()
        submitted = len([r for r in s.journal() if r.get("op") == "submit"])
        if round_ == 0:
            s.start_monitor({
                "files": dict(watch=s.watched, debounce_ms=200, burst_threshold=100,
                              **TEST_TEMPLATES),
                "clipboard": {"enabled": False},
                "limits": {"requests_per_minute": 600, "burst": 20, "max_in_flight": IN_FLIGHT},
            })
            s.wait_log("files: watching")
            for i, path in enumerate(files):
                with open(path, "w") as f:
                    f.write(f"# Report {i}\n\nnumbers go here\n")
        else:
            os.kill(s.monitor_pid(), signal.SIGCONT)
        submits = wait_for(lambda: new_submits(s, submitted),
                           f"{IN_FLIGHT} submissions (round {round_})")
        held.append((engine, submits))
        s.stop_engine(sig)
        s.stop_blocker()
        for r in submits:
            got = s.signals(r["request"], engine)
            check(not any(m == "Token" for m, _ in got),
                  f"{r['request']} was being answered when the engine stopped: {got}")
        check(s.blocker_held(blocker, engine),
              f"the blocking requests all ended by themselves: {s.blocker_ends(blocker, engine)}")
        check(not s.store(), f"answered while the engine held them: {s.store()}")
        wait_for(lambda: s.log().count("left the bus") == round_ + 1,
                 "the monitor to see the engine leave")

    s.start_engine()
    last = s.engine_name()
    wait_for(lambda: {r.get("path") for r in s.store()} >= set(files), "a suggestion per report")
    wait_for(lambda: not s.pending_ids(), "no pending events")
    time.sleep(1.5)  # anything submitted twice would show up here

    calls = s.accepted()
    # Each engine that held requests got each of the first two events once, and no more.
    for engine, submits in held:
        check(first_lines(calls, engine) == [f"FILE {p}" for p in files[:IN_FLIGHT]],
              f"engine {engine} got {first_lines(calls, engine)}")
    check(first_lines(calls, last) == [f"FILE {p}" for p in files],
          f"the engine that came back got {first_lines(calls, last)}, expected each report once")
    for path in files:
        stored = sum(1 for r in s.store() if r.get("path") == path)
        check(stored == 1, f"{os.path.basename(path)} has {stored} suggestions, expected 1")
    outcomes = [r.get("outcome") for r in s.journal() if r.get("op") == "done"]
    check(outcomes == ["stored"] * len(files), f"events ended as {outcomes}")
    check("WARNING" not in s.log(), "an engine restart gave a warning:\n" + s.log())


run("engine-restart", body)
