#!/usr/bin/env python3
"""Print 'N passed, N failed' from meson's testlog.json files (skips are listed, not counted;
a log that is missing, as when meson test found no test to run, counts as one failure)."""
import json
import os
import sys

passed = failed = 0
skipped = []
for path in sys.argv[1:]:
    if not os.path.exists(path):
        failed += 1
        print(f"FAILED: no test log {path}")
        continue
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            res = r.get("result")
            if res in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif res == "SKIP":
                skipped.append(r["name"])
            else:
                failed += 1
                print(f"FAILED: {r['name']} ({res})")
for name in skipped:
    print(f"skipped: {name}")
print(f"{passed} passed, {failed} failed")
