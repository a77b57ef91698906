#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A text file written in a watched folder gives exactly one suggestion naming it; files
under ignored globs, binary files, symlinks and unchanged rewrites give none."""
import json
import os

from harness import TEST_TEMPLATES, check, run, suggestion_problem, wait_for, write


def body(s):
    w = s.watched
    # The monitor's own state inside the watched folder: it must not feed on its own writes.
    s.state = os.path.join(w, "state")
    s.env["XDG_STATE_HOME"] = s.state
    s.store_path = os.path.join(s.state, "agentxpu", "suggestions.jsonl")
    s.journal_path = os.path.join(s.state, "agentxpu", "monitor-journal.jsonl")
    # Folders that exist before the monitor starts: ignored ones must not even be watched.
    os.makedirs(os.path.join(w, ".git", "objects"))
    os.makedirs(os.path.join(w, "node_modules", "pkg"))
    s.start_recorder()
    s.start_engine()
    s.start_monitor({
        "files": dict(watch=w, debounce_ms=300, **TEST_TEMPLATES),
        "clipboard": {"enabled": False},
        "limits": {"requests_per_minute": 600, "burst": 20, "max_in_flight": 2},
    })
    s.wait_log("files: watching")

    # An editor's save: several writes and a rename over the file within the debounce window.
    notes = os.path.join(w, "notes.txt")
    write(notes, "Meeting notes\n")
    write(notes, "Meeting notes\nAction items: send the budget\n")
    write(notes + ".tmp-save", "Meeting notes\nAction items: send the budget to Ana\n")
    os.rename(notes + ".tmp-save", notes)

    # Ignored by glob, binary, not UTF-8, through a symlink, in a new ignored folder.
    outside = os.path.join(s.tmp, "outside-secret.txt")
    write(outside, "OUTSIDE-SECRET-7d1f\n")
    ignored = [
        os.path.join(w, ".git", "config"),
        os.path.join(w, ".git", "objects", "ab"),
        os.path.join(w, "node_modules", "pkg", "index.js"),
        os.path.join(w, ".ssh", "config"),
        os.path.join(w, "server.key"),
        os.path.join(w, "cert.pem"),
        os.path.join(w, "notes.txt~"),
        os.path.join(w, ".notes.txt.swp"),
    ]
    for p in ignored:
        write(p, "IGNORED-CONTENT " + os.path.basename(p) + "\n")
    write(os.path.join(w, "image.bin"), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "wb")
    write(os.path.join(w, "latin1.txt"), "caf\xe9 cr\xe8me\n".encode("latin-1"), "wb")
    os.symlink(outside, os.path.join(s.tmp, "link.txt"))
    os.rename(os.path.join(s.tmp, "link.txt"), os.path.join(w, "link.txt"))

    # A folder made after the start is watched, and so is what lands in it at once.
    fresh = os.path.join(w, "sub", "deeper", "new.md")
    write(fresh, "# Plan\n\n- ship the monitor\n")

    marker = os.path.join(w, "zz-marker.txt")
    write(marker, "the last file of the first round\n")
    wait_for(lambda: any(r.get("path") == marker for r in s.store()), "the marker's suggestion")
    wait_for(lambda: not s.pending_ids(), "no pending events")

    store = s.store()
    paths = sorted(r.get("path") for r in store)
    check(paths == sorted([notes, fresh, marker]),
          f"expected one suggestion each for notes.txt, new.md and the marker, got {paths}")
    for r in store:
        check(r.get("source") == "file", f"source is {r.get('source')!r}, not 'file'")
        problem = suggestion_problem(r)
        check(not problem, f"a malformed suggestion: {problem}: {r}")
        check(r.get("created", "").endswith("Z"), "created is not an ISO 8601 UTC time")
    prompts = s.prompts()
    check(len(prompts) == 3, f"expected 3 Proactive requests, got {len(prompts)}")
    firsts = sorted(p.split("\n", 1)[0] for p in prompts)
    check(firsts == sorted(f"FILE {p}" for p in (notes, fresh, marker)),
          f"requests name the wrong files: {firsts}")
    # The store without the answers' words: a random model may well say ".git".
    records = [json.dumps({k: v for k, v in r.items() if k not in ("title", "body")})
               for r in s.store()]
    everything = "\n".join(prompts + records + [s.log(), s.log("engine")] +
                            [text for name, text in s.everywhere() if "engine's state" in name])
    for needle in ("IGNORED-CONTENT", "OUTSIDE-SECRET", "image.bin", "latin1.txt", "link.txt",
                   "server.key", "cert.pem", "node_modules", ".ssh", ".git"):
        check(needle not in everything, f"{needle!r} reached a request, the store, a log or "
                                        "the engine's state")
    notes_prompt = next(p for p in prompts if p.startswith(f"FILE {notes}"))
    check("send the budget to Ana" in notes_prompt, "the request lacks the file's final content")

    # An edit says what changed; rewriting the same content says nothing.
    write(notes, "Meeting notes\nAction items: send the budget to Ana\nNext: book the room\n")
    with open(fresh, "w") as f:
        f.write("# Plan\n\n- ship the monitor\n")
    marker2 = os.path.join(w, "zz-marker2.txt")
    write(marker2, "the last file of the second round\n")
    wait_for(lambda: any(r.get("path") == marker2 for r in s.store()), "the second marker")
    wait_for(lambda: not s.pending_ids(), "no pending events")
    prompts = s.prompts()
    check(len(prompts) == 5, f"expected 2 more requests (the edit and the marker), got {len(prompts) - 3}")
    edit = [p for p in prompts[3:] if p.startswith(f"FILE {notes}")]
    check(len(edit) == 1, "the edit of notes.txt gave no request")
    check("+ Next: book the room" in edit[0] and "Changed from line 3" in edit[0],
          "the request does not say what changed:\n" + edit[0])
    check(sum(1 for r in s.store() if r.get("path") == fresh) == 1,
          "rewriting new.md unchanged gave a second suggestion")

    out = s.cli()
    check(out.returncode == 0 and notes in out.stdout and "file" in out.stdout,
          f"agentxpu suggestions does not list notes.txt: {out.stdout}{out.stderr}")


run("files", body)
