#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`agentxpu suggestions` lists the store: oldest first, filtered by source, the newest N,
or as JSON; structured records (kind, title, body) and those from before them (text); a
missing store is no error; malformed lines are skipped with a message; what the model wrote
cannot smuggle terminal escape sequences through."""
import json
import os

from harness import check, run


def body(s):
    store = s.store_path
    os.makedirs(os.path.dirname(store))
    out = s.cli()
    check(out.returncode == 0 and "No suggestions yet" in out.stdout,
          f"a missing store: {out.returncode} {out.stdout!r} {out.stderr!r}")
    records = [
        {"id": 1, "source": "file", "path": "/home/u/notes.txt", "created": "2025-01-02T03:04:05Z",
         "text": "You added an action item.\nConsider a due date."},
        {"id": 2, "source": "clipboard", "created": "2025-01-02T03:05:00Z", "kind": "explanation",
         "title": "A git \x1b[2Jcommand",
         "body": "That is a git command; \x1b[31mred\x1b[0m \u009b2J it rebases.\nIt is safe."},
        {"id": 3, "source": "file", "path": "/home/u/src", "files": 5000,
         "created": "2025-01-02T03:06:00Z", "text": "A checkout of 5000 files."},
    ]
    with open(store, "w") as f:
        f.write(json.dumps(records[0]) + "\n")
        f.write("{not json\n")
        f.write(json.dumps(records[1]) + "\n")
        f.write(json.dumps(records[2]) + "\n")

    out = s.cli()
    check(out.returncode == 0, f"exit status {out.returncode}: {out.stderr}")
    check("skipped" in out.stderr and ":2:" in out.stderr, f"no word on the bad line: {out.stderr!r}")
    text = out.stdout
    check(text.index("/home/u/notes.txt") < text.index("clipboard") < text.index("/home/u/src"),
          "not oldest first")
    check("    Consider a due date." in text, "continuation lines are not indented")
    check("(5000 files)" in text, "a summary does not say how many files")
    # the title's escape character is dropped; what followed it is plain text
    check("    explanation: A git [2Jcommand\n    That is a git command" in text,
          f"a structured record is not shown as kind: title, then its body: {text!r}")
    check("\n    It is safe." in text, "a body's continuation lines are not indented")
    check("\x1b" not in text and "\u009b" not in text, "an escape sequence reached the terminal")

    out = s.cli("--source", "clipboard")
    check("git command" in out.stdout and "notes.txt" not in out.stdout, "--source clipboard")
    out = s.cli("--last", "1")
    check("/home/u/src" in out.stdout and "notes.txt" not in out.stdout, "--last 1")
    out = s.cli("--json", "--source", "file")
    lines = [json.loads(l) for l in out.stdout.splitlines()]
    check([r["id"] for r in lines] == [1, 3], f"--json --source file: {lines}")
    for bad in (["--source", "mail"], ["--last", "0"], ["extra"]):
        out = s.cli(*bad)
        check(out.returncode == 2 and out.stderr, f"{bad} was not refused")
    out = s.cli("--store", os.path.join(s.tmp, "elsewhere.jsonl"))
    check(out.returncode == 0 and "No suggestions yet" in out.stdout, "--store")


run("cli", body)
