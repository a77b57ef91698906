#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Each suggestion is offered as a desktop notification with "open" and "dismiss"; "open"
opens the file with the user's default application, "dismiss" closes the notification, and
nothing happens unless one is picked. Without a notification server the monitor says so
once and keeps to the store."""
import html
import os

from harness import NOTIFYD, TEST_TEMPLATES, check, read_jsonl, run, suggestion_problem, wait_for


def complete_lines(path):
    """Whether path exists and holds whole lines (its writer may have created it but not yet
    written to it)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return False
    return text.endswith("\n")


def body(s):
    # The user's default application for text: a script that notes what it was asked to open.
    opened = os.path.join(s.tmp, "opened.txt")
    opener = os.path.join(s.tmp, "opener.sh")
    with open(opener, "w") as f:
        f.write(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {opened}\n')
    os.chmod(opener, 0o755)
    apps = os.path.join(s.env["XDG_DATA_HOME"], "applications")
    os.makedirs(apps)
    with open(os.path.join(apps, "agentxpu-test-opener.desktop"), "w") as f:
        f.write("[Desktop Entry]\nType=Application\nName=Test opener\n"
                f"Exec={opener} %f\nMimeType=text/plain;\n")
    os.makedirs(s.env["XDG_CONFIG_HOME"], exist_ok=True)
    with open(os.path.join(s.env["XDG_CONFIG_HOME"], "mimeapps.list"), "w") as f:
        f.write("[Default Applications]\ntext/plain=agentxpu-test-opener.desktop\n")

    shown = os.path.join(s.tmp, "notifications.jsonl")
    s._ready_line("notifyd", [NOTIFYD, "--address", s.address, "--output", shown,
                              "--invoke", "open"], "ready")
    s.start_engine()
    s.start_monitor({
        "files": dict(watch=s.watched, debounce_ms=200, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        "limits": {"requests_per_minute": 600, "burst": 20},
    })
    s.wait_log("files: watching")

    first = os.path.join(s.watched, "todo.txt")
    with open(first, "w") as f:
        f.write("buy milk\ncall the plumber\n")
    # the opener's shell creates the file before printf writes its line: wait for the line
    wait_for(lambda: complete_lines(opened), "the file to be opened from the notification")
    notes = [n for n in read_jsonl(shown) if n["op"] == "notify"]
    check(len(notes) == 1, f"expected one notification, got {notes}")
    # The notification is the stored suggestion: its title as the summary, its body and
    # what it is about as the body.
    record = next(r for r in s.store() if r.get("path") == first)
    problem = suggestion_problem(record)
    check(not problem, f"a malformed suggestion: {problem}: {record}")
    check(notes[0]["summary"] == record["title"],
          f"summary {notes[0]['summary']!r} is not the suggestion's title {record['title']!r}")
    body = html.unescape(notes[0]["body"])  # escaped where the server takes markup
    check(body.startswith(record["body"])
          and body.endswith(f"({record['kind']}: todo.txt)"),
          f"body {notes[0]['body']!r} is not the suggestion's body, kind and file")
    check("open" in notes[0]["actions"] and "dismiss" in notes[0]["actions"],
          f"actions: {notes[0]['actions']}")
    with open(opened) as f:
        check(f.read().split() == [first], "'open' did not open exactly the suggested file")

    # "dismiss" closes the notification and opens nothing.
    s.stop("notifyd")
    s._ready_line("notifyd", [NOTIFYD, "--address", s.address, "--output", shown,
                              "--invoke", "dismiss"], "ready")
    second = os.path.join(s.watched, "later.txt")
    with open(second, "w") as f:
        f.write("read the paper\n")
    wait_for(lambda: any(n["op"] == "close" for n in read_jsonl(shown)), "the dismissal")
    with open(opened) as f:
        check(f.read().split() == [first], "'dismiss' opened something")

    # No server: one line in the log, and the suggestions still reach the store.
    s.stop("notifyd")
    for name in ("third.txt", "fourth.txt"):
        with open(os.path.join(s.watched, name), "w") as f:
            f.write(f"{name}\n")
    wait_for(lambda: len(s.store()) == 4, "four stored suggestions")
    lines = [l for l in s.log().splitlines() if "no notification server" in l]
    check(len(lines) == 1, f"expected one line about the missing server, got {len(lines)}")
    check("agentxpu suggestions" in lines[0], "the line does not say where suggestions are")


run("notify", body)
