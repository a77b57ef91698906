#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Under Xvfb: text set with xclip gives a suggestion with source "clipboard"; a repeat gives
none; an owner offering x-kde-passwordManagerHint gives none, and its secret appears in no
request, log, journal or store, nor in the engine's log or state (nor is it ever fetched);
oversized text gives none."""
import os
import shutil
import subprocess

from harness import SECRET_OWNER, Skip, check, run, start_xvfb, wait_for

SECRET = "hunter2-Pa55w0rd-9c3e1b"


def xclip(s, text):
    p = subprocess.Popen(["xclip", "-selection", "clipboard", "-quiet"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=s.env,
                         start_new_session=True)
    p.stdin.write(text.encode())
    p.stdin.close()
    s.procs[f"xclip-{len(s.procs)}"] = p


def clipboard_suggestions(s):
    return [r for r in s.store() if r.get("source") == "clipboard"]


def body(s):
    if not shutil.which("xclip"):
        raise Skip("xclip is not installed")
    if not SECRET_OWNER:
        raise Skip("built without X11")
    s.env["DISPLAY"] = start_xvfb(s)
    s.start_recorder()
    s.start_engine()
    s.start_monitor({
        "files": {"watch": ""},
        "clipboard": {"enabled": True, "max_size": 4096, "template": "CLIP\n{text}"},
        "limits": {"requests_per_minute": 600, "burst": 20},
    })
    s.wait_log("clipboard: watching the X11 clipboard")

    first = "git rebase --onto main feature~3 feature"
    xclip(s, first)
    wait_for(lambda: len(clipboard_suggestions(s)) == 1, "a clipboard suggestion")
    check(s.prompts() == ["CLIP\n" + first], f"the request is not the copied text: {s.prompts()}")
    check("path" not in clipboard_suggestions(s)[0], "a clipboard suggestion carries a path")

    # The same text again (a new owner, same content) is a repeat.
    xclip(s, first)
    s.wait_log("a repeat of a recent copy")
    # A password manager's copy: offered with the hint, never fetched.
    log = os.path.join(s.tmp, "owner-requests.log")
    s._ready_line("secret-owner", [SECRET_OWNER, SECRET, log], "owned")
    s.wait_log("a password manager marked it sensitive")
    # The same with the hint after 1100 other formats, past what one read of TARGETS takes:
    # a list not read whole cannot rule a secret out (its content used to be fetched).
    log_long = os.path.join(s.tmp, "owner-long-requests.log")
    s._ready_line("secret-owner-long", [SECRET_OWNER, SECRET, log_long, "1100"], "owned")
    s.wait_log("the owner's TARGETS are unreadable")
    # Oversized: over max_size, skipped before it is fetched whole.
    xclip(s, "OVERSIZE-" + "x" * 6000)
    s.wait_log("over [clipboard] max_size")
    second = "https://example.org/agentxpu/docs?page=2"
    xclip(s, second)
    wait_for(lambda: len(clipboard_suggestions(s)) == 2, "the second clipboard suggestion")
    wait_for(lambda: not s.pending_ids(), "no pending events")

    prompts = s.prompts()
    check(prompts == ["CLIP\n" + first, "CLIP\n" + second],
          f"expected exactly the two plain copies as requests, got {prompts}")
    with open(log) as f:
        asked = f.read().split()
    check("TARGETS" in asked, "the monitor never asked the secret owner for its TARGETS")
    check("UTF8_STRING" not in asked and "x-kde-passwordManagerHint" not in asked,
          f"the monitor fetched the password manager's content: {asked}")
    with open(log_long) as f:
        asked = f.read().split()
    check("TARGETS" in asked and "UTF8_STRING" not in asked,
          f"the monitor fetched the content of the long list's owner: {asked}")
    places = s.everywhere()
    check(any("calibration" in name for name, _ in places), "the engine kept no state to check")
    check("finished: stop" in s.log("engine") or "finished: length" in s.log("engine"),
          "the engine's log says nothing of the requests")
    for name, text in places:
        check(SECRET not in text, f"the secret appears in {name}")
        check("OVERSIZE-" not in text, f"the oversized text appears in {name}")


run("clipboard-x11", body)
