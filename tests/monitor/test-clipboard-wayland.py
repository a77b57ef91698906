#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Wayland through a data-control protocol (`wl-paste --watch`, here a stand-in driven by the
test): plain text gives a suggestion; content offered with x-kde-passwordManagerHint, or that
wl-paste itself reports as sensitive, is never fetched and appears nowhere, the engine's log
and state included; a slow owner's copies are each read; a compositor without data-control
(and no X11) gives one clear log line."""
import os

from harness import FAKE_WL_PASTE, check, run, wait_for

SECRET = "correct-horse-battery-staple-41ab"


def body(s):
    wl = os.path.join(s.tmp, "wl")
    bindir = os.path.join(s.tmp, "bin")
    os.makedirs(wl)
    os.makedirs(bindir)
    os.symlink(FAKE_WL_PASTE, os.path.join(bindir, "wl-paste"))
    os.mkfifo(os.path.join(wl, "changes"))
    reads = os.path.join(wl, "reads")
    open(reads, "w").close()
    s.env.update(WAYLAND_DISPLAY="wayland-test", FAKE_WL_DIR=wl,
                 PATH=bindir + os.pathsep + s.env["PATH"])

    def offer(types, content, state="data"):
        with open(os.path.join(wl, "types"), "w") as f:
            f.write("\n".join(types) + "\n")
        with open(os.path.join(wl, "content"), "w") as f:
            f.write(content)
        fd = os.open(os.path.join(wl, "changes"), os.O_WRONLY)
        os.write(fd, (state + "\n").encode())
        os.close(fd)

    def clip():
        return [r for r in s.store() if r.get("source") == "clipboard"]

    s.start_recorder()
    s.start_engine()
    config = {
        "files": {"watch": ""},
        "clipboard": {"enabled": True, "template": "CLIP\n{text}"},
        "limits": {"requests_per_minute": 600, "burst": 20},
    }
    s.start_monitor(config)
    s.wait_log("clipboard: watching the Wayland clipboard")

    text = ["text/plain;charset=utf-8", "text/plain", "TEXT", "UTF8_STRING"]
    offer(text, "sudo systemctl restart agentxpu-engine")
    wait_for(lambda: len(clip()) == 1, "a suggestion for the Wayland copy")
    offer(text + ["x-kde-passwordManagerHint"], SECRET)
    s.wait_log("a password manager marked it sensitive")
    offer(text, SECRET, state="sensitive")
    wait_for(lambda: s.log().count("a password manager marked it sensitive") == 2,
             "wl-paste's own sensitive state to be honoured")
    offer(text, "journalctl --user -u agentxpu-monitor -f")
    wait_for(lambda: len(clip()) == 2, "a suggestion for the second Wayland copy")
    wait_for(lambda: not s.pending_ids(), "no pending events")

    check(s.prompts() == ["CLIP\nsudo systemctl restart agentxpu-engine",
                          "CLIP\njournalctl --user -u agentxpu-monitor -f"],
          f"unexpected requests: {s.prompts()}")
    with open(reads) as f:
        fetched = f.read().split()
    check(fetched == ["text/plain;charset=utf-8"] * 2,
          f"the monitor fetched content other than the two plain copies: {fetched}")
    places = s.everywhere()
    check(any("calibration" in name for name, _ in places), "the engine kept no state to check")
    for name, data in places:
        check(SECRET not in data, f"the secret appears in {name}")

    # An owner that takes a second to answer each step, and a second copy as soon as the
    # first has been read, about 2 s after it: both are read (the first query's 3 s timer
    # used to outlive it, kill the second copy's fetch, and could fire after the backend was
    # freed). The second copy waits for the first's read, not for a fixed time: on a loaded
    # machine the first read could start late and find the second copy already there, as a
    # real owner would serve it, and the second then be skipped as a repeat.
    with open(os.path.join(wl, "delay"), "w") as f:
        f.write("1\n")
    def copies_read():
        return s.log().count("of text copied")
    before = copies_read()
    offer(text, "df -h /home")
    wait_for(lambda: copies_read() > before, "the slow owner's first copy read")
    offer(text, "du -sh ~/Downloads")
    wait_for(lambda: len(clip()) == 4, "suggestions for both copies of the slow owner")
    check(s.prompts()[2:] == ["CLIP\ndf -h /home", "CLIP\ndu -sh ~/Downloads"],
          f"unexpected requests: {s.prompts()[2:]}")
    os.unlink(os.path.join(wl, "delay"))

    # A compositor without data-control, and no X11 to fall back on: say so, once, clearly.
    s.stop("monitor")
    open(os.path.join(wl, "no-data-control"), "w").close()
    s.start_monitor(config)
    s.wait_log("clipboard suggestions are off")
    line = [l for l in s.log().splitlines() if "clipboard suggestions are off" in l]
    check(len(line) == 1, f"expected one line about the clipboard being off, got {line}")
    check("data-control" in line[0] and "wlroots data-control protocol" in line[0]
          and "DISPLAY is unset" in line[0], f"the line does not say why: {line[0]}")
    check(s.alive("monitor"), "the monitor died without a clipboard")


run("clipboard-wayland", body)
