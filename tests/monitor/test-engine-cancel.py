#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A request of the monitor's that the user cancels (`agentxpu cancel`) while the engine stays
on the bus counts as a failed attempt: the event is submitted again, and after the third
cancellation it is given up, with one warning, and no suggestion; the events behind it go on.
(Cancellations by an engine that is stopping do not count: test-engine-restart.py.)

The engine runs the serial policy behind another client's long requests, refilled as they
finish, so each of the monitor's requests waits, submitted, until the test cancels it,
however fast the machine generates."""
import os
import subprocess

import harness
from harness import CLI, TEST_TEMPLATES, check, run, wait_for


def body(s):
    del harness.FATAL["giving it up"]  # expected here, once
    s.start_recorder()
    s.start_engine(policy="serial")
    s.start_blocker(refill=True)
    s.start_monitor({
        "files": dict(watch=s.watched, debounce_ms=200, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        "limits": {"requests_per_minute": 600, "burst": 20, "max_in_flight": 1},
    })
    s.wait_log("files: watching")
    unwanted, later = (os.path.join(s.watched, n) for n in ("unwanted.txt", "later.txt"))
    with open(unwanted, "w") as f:
        f.write("the user does not want a suggestion about this\n")
    wait_for(lambda: any(r.get("op") == "event" for r in s.journal()), "the first event")
    with open(later, "w") as f:
        f.write("this one may be answered\n")

    submits = []
    for attempt in range(3):
        submit = wait_for(lambda: [r for r in s.journal() if r.get("op") == "submit"][attempt:],
                          f"submission {attempt + 1}")[0]
        r = subprocess.run([CLI, "cancel", "--address", s.address, submit["request"]],
                           capture_output=True, text=True, env=s.env)
        check(r.returncode == 0, f"agentxpu cancel: {r.returncode} {r.stderr}")
        submits.append(submit["request"])
    s.wait_log("giving it up")
    for request in submits:
        got = wait_for(lambda: [m for m, _ in s.signals(request)] or None,
                       f"{request}'s Finished signal")
        check(got == ["Finished"],
              f"{request} ran before it was cancelled (the queue was not held): {got}")
    s.stop_blocker()
    wait_for(lambda: any(r.get("path") == later for r in s.store()), "the later file's suggestion")
    wait_for(lambda: not s.pending_ids(), "no pending events")

    firsts = [p.split("\n", 1)[0] for p in s.prompts()]
    check(firsts == [f"FILE {unwanted}"] * 3 + [f"FILE {later}"],
          f"expected three submissions of unwanted.txt, then later.txt: {firsts}")
    check([r.get("path") for r in s.store()] == [later], f"suggestions: {s.store()}")
    done = {r.get("id"): r.get("outcome") for r in s.journal() if r.get("op") == "done"}
    check(sorted(done.values()) == ["cancelled", "stored"], f"outcomes: {done}")
    warnings = [l for l in s.log().splitlines() if "WARNING" in l]
    check(len(warnings) == 1 and "unwanted.txt" in warnings[0] and "3 times" in warnings[0],
          f"expected one warning about unwanted.txt: {warnings}")


run("engine-cancel", body)
