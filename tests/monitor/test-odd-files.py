#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What a desktop's files do that a plain edit does not:
- a journal from before the restart names paths, and holds events, that the configuration
  now ignores, no longer watches or has turned off: the paths are settled, never read, and
  the events dropped (they used to be read and sent);
- a file whose name is not UTF-8: its text reaches the engine (the prompt, a D-Bus string,
  used to be replaced whole by GLib's "[Invalid UTF-8]", with a GLib-CRITICAL);
- a file whose name holds a newline, and ESC, tab and CR: the log names it with those as
  \\xNN escapes on its one line (the newline used to end the line, the rest of the name
  standing as a line of the monitor's own, forged);
- the watched folder itself deleted and made again (a sync client, a restored backup): it is
  watched again (it used to be lost until a restart);
- a pending event larger than the journal's compaction threshold while the engine is away:
  the journal is compacted once, not rewritten and fsynced every housekeeping tick."""
import json
import os
import shutil
import time

from harness import TEST_TEMPLATES, check, run, wait_for, write


def body(s):
    w = s.watched
    ignored = [os.path.join(w, "server.key"), os.path.join(w, ".ssh", "config"),
               os.path.join(s.home, "private", "diary.txt")]
    for p in ignored:
        write(p, "SECRET-CONTENT of " + os.path.basename(p) + "\n")
    os.makedirs(os.path.dirname(s.journal_path), exist_ok=True)
    with open(s.journal_path, "w") as f:
        for p in ignored:
            f.write(json.dumps({"op": "seen", "path": p}) + "\n")
        # events made before the restart, their prompts written: sent only where still allowed
        for i, p in enumerate(ignored, 1):
            f.write(json.dumps({"op": "event", "id": i, "source": "file", "path": p,
                                "prompt": f"FILE {p}\nSECRET-CONTENT"}) + "\n")
        f.write(json.dumps({"op": "event", "id": 9, "source": "clipboard",
                            "prompt": "CLIP\nSECRET-CONTENT copied before the clipboard was turned off"}) + "\n")

    s.start_recorder()
    s.start_engine()
    config = {
        "files": dict(watch=w, debounce_ms=200, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        "limits": {"requests_per_minute": 600, "burst": 20, "max_in_flight": 2},
    }
    s.start_monitor(config)
    s.wait_log("files: watching")

    odd = os.fsencode(w) + b"/caf\xe9 notes.txt"
    write(odd, b"the text of a file whose name is Latin-1\n", "wb")
    wait_for(lambda: any("whose name is Latin-1" in p for p in s.prompts()), "the odd name's request")
    prompt = next(p for p in s.prompts() if "whose name is Latin-1" in p)
    check(prompt.startswith("FILE ") and "caf\ufffd notes.txt" in prompt.split("\n", 1)[0],
          f"the request does not name the file: {prompt[:200]!r}")

    forged = "agentxpu-monitor-Message: 00:00:00.000: files: FORGED.txt changed: event 1"
    write(os.path.join(w, f"forged\n{forged}\n\x1b[2J\tand\r.txt"), "a file with a line in its name\n")
    shown = f"/forged\\x0a{forged}\\x0a\\x1b[2J\\x09and\\x0d.txt"
    wait_for(lambda: shown + " changed: event" in s.log(), "the escaped name in the log")
    lines = s.log().split("\n")
    check(not any(line.startswith(forged) for line in lines),
          "a file's name forged a line of the log")
    check(all(shown in line for line in lines if "FORGED" in line),
          f"the name is not on one line: {[line for line in lines if 'FORGED' in line]!r}")

    shutil.rmtree(w)
    s.wait_log("was deleted")
    os.makedirs(w)
    s.wait_log("is back; watching it again")
    after = os.path.join(w, "after.txt")
    write(after, "written after the watched folder came back\n")
    wait_for(lambda: any(p.startswith(f"FILE {after}") for p in s.prompts()), "the request for after.txt")
    wait_for(lambda: not s.pending_ids(), "no pending events")

    everything = "\n".join(s.prompts() + [s.log()])
    check("SECRET-CONTENT" not in everything, "a journaled path the configuration ignores was read")
    check("CRITICAL" not in s.log() and "Invalid UTF-8" not in everything,
          "GLib refused a string that was not UTF-8")

    # The engine away: a pending event of 1.4 MB (quotes, which JSON doubles) in the journal.
    s.stop("monitor")
    s.stop_engine()
    config["files"]["max_size"] = "4M"
    config["engine"] = {"prompt_max_bytes": 1048576}
    s.start_monitor(config)
    wait_for(lambda: s.log().count("files: watching") == 2, "the monitor to watch again")
    write(os.path.join(w, "quotes.txt"), ('"' * 99 + "\n") * 7000)
    s.wait_log("quotes.txt changed: event")
    time.sleep(1)
    inodes, t0 = set(), time.time()
    while time.time() - t0 < 7:
        try:
            inodes.add(os.stat(s.journal_path).st_ino)
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    check(len(inodes) <= 2, f"the journal was rewritten {len(inodes) - 1} times in 7 s with nothing new")
    check(s.alive("monitor"), "the monitor died")


run("odd-files", body)
