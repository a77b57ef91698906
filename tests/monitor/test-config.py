#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The shipped data/monitor.conf is exactly the built-in defaults; a bad value stops the
monitor with a message naming it (exit 78, which the unit does not restart); an unknown key
is reported and ignored; --watch and --no-clipboard override the file. The user unit and
the autostart entry start the monitor with the session."""
import os
import shutil
import subprocess

from harness import MONITOR, check, run


def monitor(s, *args):
    return subprocess.run([MONITOR, *args], capture_output=True, text=True, env=s.env)


def body(s):
    shipped = os.path.join(os.environ["AXP_SOURCE_DIR"], "data", "monitor.conf")
    defaults = monitor(s, "--dump-config")
    check(defaults.returncode == 0 and "[files]" in defaults.stdout, defaults.stderr)
    from_file = monitor(s, "--config", shipped, "--dump-config")
    check(from_file.returncode == 0, from_file.stderr)
    check(from_file.stdout == defaults.stdout,
          "data/monitor.conf differs from the built-in defaults:\n" + from_file.stdout)
    check(from_file.stderr == "", f"data/monitor.conf has unknown keys: {from_file.stderr}")

    # The user's file is found where the XDG spec says.
    conf_dir = os.path.join(s.env["XDG_CONFIG_HOME"], "agentxpu")
    os.makedirs(conf_dir)
    with open(os.path.join(conf_dir, "monitor.conf"), "w") as f:
        f.write("[limits]\nrequests_per_minute=2.5\n[files]\nignore=*.log\nwatch=~/src;/srv/notes\n")
    out = monitor(s, "--dump-config")
    check("requests_per_minute=2.5" in out.stdout, "the user's config was not read")
    check(f"watch={s.home}/src;/srv/notes;" in out.stdout, f"watch paths: {out.stdout}")
    check("*.log" in out.stdout and ".ssh/" in out.stdout,
          "the user's ignore globs must add to the defaults, not replace them")
    out = monitor(s, "--dump-config", "--watch", "/tmp/a", "--watch", "~/b", "--no-clipboard")
    check(f"watch=/tmp/a;{s.home}/b;" in out.stdout and "enabled=false" in out.stdout,
          f"--watch and --no-clipboard: {out.stdout}")

    bad = os.path.join(s.tmp, "bad.conf")
    for text, word in (("[limits]\nburst=lots\n", "burst=lots"),
                       ("[files]\nmax_size=12Q\n", "max_size=12Q"),
                       ("[limits]\nmemory_cap_mb=1\n", "memory_cap_mb=1"),
                       ("[clipboard]\nenabled=maybe\n", "enabled"),
                       ("not a key file\n", "bad.conf")):
        with open(bad, "w") as f:
            f.write(text)
        out = monitor(s, "--config", bad)
        check(out.returncode == 78 and word in out.stderr,
              f"{text!r}: exit {out.returncode}, {out.stderr!r}")
    with open(bad, "w") as f:
        f.write("[limits]\nburts=3\n")
    out = monitor(s, "--config", bad, "--dump-config")
    check(out.returncode == 0 and "unknown key [limits] burts" in out.stderr,
          f"an unknown key: {out.returncode} {out.stderr!r}")


    # The user unit: bound to the graphical session, not restarted over a bad config.
    build = os.environ["AXP_BUILD_DIR"]
    with open(os.path.join(build, "data", "agentxpu-monitor.service")) as f:
        unit = f.read()
    for line in ("PartOf=graphical-session.target", "WantedBy=graphical-session.target",
                 "RestartPreventExitStatus=78"):
        check(line in unit, f"the unit lacks {line}")
    exec_line = next(l for l in unit.splitlines() if l.startswith("ExecStart="))
    check(exec_line.endswith("/agentxpu-monitor"), exec_line)
    if shutil.which("systemd-analyze"):
        local = os.path.join(s.tmp, "agentxpu-monitor.service")
        with open(local, "w") as f:
            f.write(unit.replace(exec_line, "ExecStart=" + MONITOR))
        out = subprocess.run(["systemd-analyze", "verify", "--user", local], capture_output=True,
                             text=True, env=s.env)
        check(out.returncode == 0, f"systemd-analyze verify: {out.stdout}{out.stderr}")
    with open(os.path.join(build, "data", "agentxpu-monitor.desktop")) as f:
        entry = f.read()
    check("Type=Application" in entry and "Exec=" + exec_line[len("ExecStart="):] in entry,
          "the autostart entry does not run the monitor")
    check("X-systemd-skip=true" in entry, "the autostart entry would start a second monitor")


run("config", body)
