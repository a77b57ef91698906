# SPDX-License-Identifier: MIT
"""Accounting for a burst of files: which files the requests name, and how many they count."""
import os
import re


def account(prompts, root_hint):
    """Returns (named, counted): paths named by a request (with multiplicity) and, per folder,
    the files a summary counted without naming them."""
    named = []
    counted = {}
    for p in prompts:
        lines = p.split("\n")
        head = lines[0]
        if head.startswith("FILE "):
            named.append(head[5:])
            continue
        m = re.match(r"BATCH (\d+) (.+)$", head)
        if not m:
            raise AssertionError(f"a request neither FILE nor BATCH: {head!r}")
        total, root = int(m.group(1)), m.group(2)
        seen = 0
        for line in lines[1:]:
            if line.startswith("- "):
                named.append(os.path.join(root, line[2:]))
                seen += 1
            elif line.startswith("and "):
                more = re.match(r"and (\d+) more:(.*)$", line)
                parts = [x.strip() for x in more.group(2).split(",") if x.strip()]
                for part in parts:
                    c = re.match(r"(\d+) in (.+)/$", part)
                    if not c:
                        raise AssertionError(f"cannot read the count {part!r}")
                    folder = os.path.normpath(os.path.join(root, c.group(2)))
                    counted[folder] = counted.get(folder, 0) + int(c.group(1))
                    seen += int(c.group(1))
                if seen != total:
                    raise AssertionError(f"a summary of {total} files accounts for {seen}")
        if seen != total:
            raise AssertionError(f"a summary of {total} files accounts for {seen}")
    return named, counted


def check_accounted(created, prompts):
    """Every created file is named exactly once, or counted in its folder; nothing extra."""
    named, counted = account(prompts, None)
    problems = []
    dup = {p for p in named if named.count(p) > 1} if len(named) < 20000 else set()
    if dup:
        problems.append(f"{len(dup)} files named twice, e.g. {sorted(dup)[:3]}")
    named_set = set(named)
    stray = named_set - set(created)
    if stray:
        problems.append(f"{len(stray)} named files were not created, e.g. {sorted(stray)[:3]}")
    by_folder = {}
    for p in created:
        if p not in named_set:
            by_folder.setdefault(os.path.dirname(p), 0)
            by_folder[os.path.dirname(p)] += 1
    if by_folder != counted:
        problems.append(f"unnamed files per folder {by_folder} but summaries count {counted}")
    return problems, len(named_set), sum(counted.values())


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0
