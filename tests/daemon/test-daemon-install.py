#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Installing models: the real agentxpu-engine on a private bus with its own models and state
folders (--models-dir, --state-dir), the polkit stand-in answering for uid 0 alone, and
`agentxpu model install|list|use|remove` as the client: from a file, from a fake Ollama store
and a fake Hugging Face cache laid out as those tools lay them out, and every bad input the
engine must refuse leaving nothing in the models folder and its model served.

polkit itself (polkitd) is not started here: it could serve this bus (it takes the bus
DBUS_SYSTEM_BUS_ADDRESS names), but it decides from the actions installed in
/usr/share/polkit-1/actions and the rules in /etc/polkit-1/rules.d, not from the build tree,
and runs as its own user. So this test asks the stand-in, which sees the same
CheckAuthorization call; tests/packaging/check-installed.sh runs the real polkitd on its test
bus against the installed action and a rule of its own; the action and its defaults are
checked by `meson test --suite data`. Needs root for `setpriv` (the unauthorized user) and to
mount the small tmpfs of the full-disk tests. Run one test: test-daemon-install.py NAME."""

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bustest import (IFACE, JOB_IFACE, NAME, PATH, Daemon, Skip, TestBus, as_nobody, gvariant_first_string,  # noqa: E402
                     is_root, main, need_tools, run, wait_for)

DAEMON = os.environ.get("AXP_ENGINE_DAEMON", "")
CLI = os.environ.get("AXP_CLI", "")
STANDIN = os.environ.get("AXP_POLKIT_STANDIN", "")
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_files = {}


def folder():
    if "dir" not in _files:
        d = tempfile.mkdtemp(prefix="axp-test-install-")
        os.chmod(d, 0o755)
        atexit.register(shutil.rmtree, d, True)
        _files["dir"] = d
    return _files["dir"]


def mkmodel(name, *args):
    """A synthetic model, made once per run, readable by everyone."""
    if not DAEMON or not CLI or not STANDIN:
        raise Skip("agentxpu-engine, agentxpu or the polkit stand-in is not built (run through meson test)")
    path = os.path.join(folder(), name + ".gguf")
    if not os.path.exists(path):
        r = run([CLI, "mkmodel", "-o", path, "--no-eog"] + list(args))
        if r.rc != 0:
            raise Skip(f"agentxpu mkmodel failed: {r.err.strip()}")
        os.chmod(path, 0o644)
    return path


def small():
    return mkmodel("small", "--seed", "7", "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                   "--ffn", "256", "--ctx", "256")


def other():
    return mkmodel("other", "--seed", "8", "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                   "--ffn", "256", "--ctx", "256", "--name", "other-model")


# Tiny models of the other architectures the engine runs: what the install check accepts is
# what the loader accepts (model.c's table).
ARCHS = {
    "phi3": ["--arch", "phi3"],
    "gemma3": ["--arch", "gemma3", "--swa", "16"],
    "qwen3moe": ["--arch", "qwen3moe", "--experts", "4", "--experts-used", "2", "--ffn", "64"],
}


def of_arch(arch):
    return mkmodel(arch, "--seed", "10", "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                   "--ffn", "256", "--ctx", "256", *ARCHS[arch])


def big():
    """About 13 MB: several chunks of the copy, so a test can act in the middle of one."""
    return mkmodel("big", "--seed", "9", "--dim", "512", "--layers", "4", "--heads", "8", "--kv-heads", "4",
                   "--ffn", "1536", "--ctx", "512")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def gguf(path, arch="llama", tensor_type=0, split=None):
    """A small GGUF file by hand: general.architecture and one 32x2 tensor of a type id; with
    split (no, count), llama.cpp's split.no and split.count (uint16) of a split model's part."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    # IQ2_XXS (16) blocks: 256 elements in 66 bytes
    ne, nbytes = ((256, 2), 132) if tensor_type == 16 else ((32, 2), 256)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 3 if split else 1)
    head += s("general.architecture") + struct.pack("<I", 8) + s(arch)
    if split:
        head += s("split.no") + struct.pack("<IH", 2, split[0]) + s("split.count") + struct.pack("<IH", 2, split[1])
    head += s("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<qq", *ne)
    head += struct.pack("<IQ", tensor_type, 0)
    head += b"\0" * (-len(head) % 32)
    with open(path, "wb") as f:
        f.write(head + b"\x01" * nbytes)
    os.chmod(path, 0o644)
    return path


class Engine:
    def __init__(self, bus, models, state, args=(), env=None, wrapper=None):
        exe = DAEMON
        if wrapper:
            exe = bus.path("engine-wrapper.sh")
            with open(exe, "w") as f:
                f.write(f"#!/bin/sh\nexec {wrapper} {DAEMON} \"$@\"\n")
            os.chmod(exe, 0o755)
        e = {"AGENTXPU_LOG_LEVEL": "debug"}
        e.update(env or {})
        self.d = Daemon(bus, exe, args=["--models-dir", models, "--state-dir", state] + list(args), env=e)


@contextlib.contextmanager
def setup(model=None, env=None, wrapper=None, models=None):
    """A bus, polkit saying yes to uid 0 alone, an engine with empty models and state folders
    (serving `model` if given; the models folder is `models` if given, made here)."""
    bus = TestBus()
    try:
        p = bus.spawn([STANDIN, "--address", bus.address, "--allow-uid", "0"], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        models, state = models or bus.path("models"), bus.path("state")
        os.mkdir(models)
        os.mkdir(state)
        args = ["--model", model] if model else []
        e = Engine(bus, models, state, args=args, env=env, wrapper=wrapper)
        bus.models, bus.state = models, state
        yield bus, e.d
        if e.d.proc.poll() is None:
            assert e.d.stop() == 0, e.d.text()
    finally:
        bus.close()


def install(bus, *args, user=None, env=None):
    cmd = [CLI, "model", "install", "--address", bus.address] + list(args)
    e = dict(os.environ)
    e.update(env or {})
    return run(as_nobody(cmd) if user == "nobody" else cmd, env=e)


def install_spawn(bus, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return bus.spawn([CLI, "model", "install", "--address", bus.address] + list(args), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, env=e)


def model_cmd(bus, *args):
    return run([CLI, "model", args[0], "--address", bus.address] + list(args[1:]))


def folder_files(bus):
    return sorted(os.listdir(bus.models))


def temp_files(bus):
    return [f for f in os.listdir(bus.models) if f.startswith(".install-")]


def still_serves(bus):
    r = bus.call("Complete", "Hello", "{'max_tokens': <uint32 2>, 'raw': <true>}")
    assert r.rc == 0, r


SLOW = {"AGENTXPU_TEST_COPY_DELAY_MS": "700"}


# --- installing, listing, choosing, removing ---------------------------------------------------------

def test_install_list_use_remove_and_restart():
    src = small()
    with setup() as (bus, d):
        r = install(bus, src, "--name", "tiny")
        assert r.rc == 0, r
        assert "Installed tiny" in r.out, r
        assert re.search(r"^100% .* done$", r.err, re.M), r.err  # the progress, as lines off a terminal
        assert folder_files(bus) == ["tiny.gguf"]
        assert sha256(os.path.join(bus.models, "tiny.gguf")) == sha256(src)
        assert os.stat(os.path.join(bus.models, "tiny.gguf")).st_mode & 0o777 == 0o644

        r = model_cmd(bus, "list")
        assert r.rc == 0 and re.search(r"^  tiny +llama ", r.out, re.M), r
        models = bus.props()["Models"]
        assert [m[0] for m in models] == ["tiny"], models
        info = {k: v["data"] for k, v in models[0][1].items()}
        assert info["architecture"] == "llama" and info["size"] == os.path.getsize(src), info
        assert info["loaded"] is False and info["default"] is False, info
        assert "Q8_0" in info["types"] and info["parameters"] > 0, info

        assert bus.props()["Model"] == ""
        r = model_cmd(bus, "use", "tiny")
        assert r.rc == 0, r
        assert bus.props()["Model"] != ""
        with open(os.path.join(bus.state, "default-model")) as f:
            assert f.read() == "tiny\n"
        r = model_cmd(bus, "list")
        assert re.search(r"^\* tiny .*\(default\)$", r.out, re.M), r
        still_serves(bus)

        r = model_cmd(bus, "remove", "tiny")
        assert r.rc == 1 and "is the model in use" in r.err, r
        assert install(bus, other()).rc == 0
        r = model_cmd(bus, "remove", "other")
        assert r.rc == 0, r
        assert folder_files(bus) == ["tiny.gguf"]
        r = model_cmd(bus, "use", "nothing-here")
        assert r.rc == 1 and "No model named 'nothing-here'" in r.err, r

        # A restart serves the model chosen, without --model.
        assert d.stop() == 0, d.text()
        d2 = Engine(bus, bus.models, bus.state).d
        try:
            assert bus.props()["Model"] != ""
            still_serves(bus)
            assert re.search(r"^\* tiny ", model_cmd(bus, "list").out, re.M)
        finally:
            assert d2.stop() == 0, d2.text()


def split_parts():
    """small() as a split model of three parts (tiny-split-0000K-of-00003.gguf), made once."""
    split_tool = os.environ.get("AXP_GGUF_SPLIT", "")
    if not split_tool:
        raise Skip("the gguf-split test program is not built (run through meson test)")
    prefix = os.path.join(folder(), "tiny-split")
    parts = [f"{prefix}-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    if not os.path.exists(parts[0]):
        r = run([split_tool, small(), prefix, "3"])
        assert r.rc == 0, r
        for p in parts:
            os.chmod(p, 0o644)
    return parts


def test_a_split_model_installs_as_one_file():
    """A split model (llama.cpp's gguf-split layout) installs from its first part: the command
    line opens the others beside it and the engine joins them into one file, the same bytes as
    the model before it was split. A later part, a missing part and the first part alone (a
    client that passes no 'parts') are refused, nothing written."""
    src = small()
    parts = split_parts()
    prefix = parts[0][:-len("-00001-of-00003.gguf")]
    with setup() as (bus, d):
        r = install(bus, parts[0])  # named as the model, the part's number left out
        assert r.rc == 0 and "Installed tiny-split" in r.out, r
        assert folder_files(bus) == ["tiny-split.gguf"], folder_files(bus)
        assert sha256(os.path.join(bus.models, "tiny-split.gguf")) == sha256(src)
        assert "3 parts joined into one file" in d.text(), d.text()
        assert model_cmd(bus, "use", "tiny-split").rc == 0
        still_serves(bus)

        r = install(bus, parts[1], "--name", "bad")
        assert r.rc == 1 and f"is part 2 of 3 of a split model; install its first part, {parts[0]}" in r.err, r
        name, message = raw_install(bus, parts[0], "bad")
        assert name == "org.agentxpu.Error.InvalidArgument" and \
            "is part 1 of 3 of a split model: it is installed from its first part with the others" in message, message
        os.rename(parts[2], prefix + "-aside.gguf")
        try:
            r = install(bus, parts[0], "--name", "bad")
            assert r.rc == 1 and "part 3 cannot be opened" in r.err, r
        finally:
            os.rename(prefix + "-aside.gguf", parts[2])
        assert folder_files(bus) == ["tiny-split.gguf"] and temp_files(bus) == [], folder_files(bus)


def test_every_architecture_the_engine_runs_installs():
    with setup() as (bus, d):
        for arch in ARCHS:
            r = install(bus, of_arch(arch), "--name", "tiny-" + arch)
            assert r.rc == 0, (arch, r)
        models = {name: {k: v["data"] for k, v in info.items()} for name, info in bus.props()["Models"]}
        assert sorted(models) == sorted("tiny-" + a for a in ARCHS), models
        for arch in ARCHS:
            info = models["tiny-" + arch]
            assert "error" not in info and info["architecture"] == arch, (arch, info)
        r = model_cmd(bus, "list")
        assert r.rc == 0, r
        for arch in ARCHS:
            assert re.search(rf"^  tiny-{arch} +{arch} ", r.out, re.M), (arch, r.out)
        for arch in ARCHS:
            r = model_cmd(bus, "use", "tiny-" + arch)
            assert r.rc == 0, (arch, r)
            still_serves(bus)


class Monitor:
    """The engine's signals as `gdbus monitor` prints them, one a line, read as they come."""

    def __init__(self, bus):
        import threading
        self.p = bus.spawn(["gdbus", "monitor", "--address", bus.address, "--dest", NAME],
                           stdout=subprocess.PIPE, text=True)
        self.p.stdout.readline()  # the name's owner: watching from here on
        self.lines = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(iter(self.p.stdout.readline, "")),
                                       daemon=True)
        self.thread.start()

    def models_changes(self):
        """The values of Models in the PropertiesChanged signals seen so far."""
        return [line for line in list(self.lines)
                if "PropertiesChanged ('org.agentxpu.Engine'" in line and "'Models'" in line]

    def after(self, action, *want, unwanted=()):
        """Run action(); wait for a Models change after it that shows each of want and none of
        unwanted (texts of the value as gdbus prints it)."""
        seen = len(self.models_changes())
        action()
        return wait_for(lambda: [c for c in self.models_changes()[seen:]
                                 if all(w in c for w in want) and not any(u in c for u in unwanted)],
                        f"a change of Models showing {want}")

    def close(self):
        self.p.terminate()
        self.p.wait(timeout=30)


def test_models_property_changes_are_announced():
    with setup() as (bus, d):
        mon = Monitor(bus)

        def ok(*args):
            r = install(bus, *args[1:]) if args[0] == "install" else model_cmd(bus, *args)
            assert r.rc == 0, (args, r)

        try:
            mon.after(lambda: ok("install", small(), "--name", "tiny"), "('tiny', {", "'loaded': <false>")
            mon.after(lambda: ok("use", "tiny"), "('tiny', {", "'loaded': <true>", "'default': <true>")
            mon.after(lambda: ok("install", other(), "--name", "other"), "('other', {", "('tiny', {")
            mon.after(lambda: ok("remove", "other"), "('tiny', {", unwanted=["('other', {"])
        finally:
            mon.close()
def test_a_template_not_understood_is_said():
    """Every architecture the loader runs installs (gemma3 here); a chat template that none of
    the families matches is said in Models (chat_template "unrecognised"), in `model list`,
    and once in the engine's log when it loads the model: its prompts are used raw."""
    odd = mkmodel("odd", "--arch", "gemma3", "--seed", "10", "--dim", "128", "--layers", "2", "--heads", "4",
                  "--kv-heads", "2", "--ffn", "256", "--ctx", "256", "--chat-template", "{{ messages | tojson }}")
    warning = "is not one agentxpu recognises"
    with setup() as (bus, d):
        assert install(bus, odd, "--name", "odd").rc == 0
        assert install(bus, small(), "--name", "tiny").rc == 0
        info = {m[0]: {k: v["data"] for k, v in m[1].items()} for m in bus.props()["Models"]}
        assert info["odd"]["architecture"] == "gemma3", info
        assert info["odd"]["chat_template"] == "unrecognised", info
        assert info["tiny"]["chat_template"] == "llama3", info
        r = model_cmd(bus, "list")
        assert r.rc == 0 and re.search(r"^  odd +gemma3 .*  \(chat template not recognised: prompts raw\)$",
                                       r.out, re.M), r
        assert re.search(r"^  tiny +llama .*[^)]$", r.out, re.M), r
        assert warning not in d.text()
        r = model_cmd(bus, "use", "odd")
        assert r.rc == 0, r
        wait_for(lambda: warning in d.text(), "the warning in the log")
        assert d.text().count(warning) == 1, d.text()
        still_serves(bus)


def test_job_object_matches_the_interface_xml():
    with setup(env=SLOW) as (bus, d):
        p = install_spawn(bus, big(), "--name", "big")
        wait_for(lambda: "as /org/agentxpu/Engine/job/" in d.text(), "the job to start")
        path = re.search(r"as (/org/agentxpu/Engine/job/\d+)", d.text()).group(1)
        r = bus.gdbus(path, "org.freedesktop.DBus.Introspectable.Introspect")
        assert r.rc == 0, r
        live = {i.get("name"): sorted((m.tag, m.get("name")) for m in i)
                for i in ET.fromstring(gvariant_first_string(r.out)).findall("interface")}
        xml = ET.parse(os.path.join(SOURCE, "dbus", "org.agentxpu.Engine.xml")).getroot()
        contract = {i.get("name"): sorted((m.tag, m.get("name")) for m in i if m.tag != "annotation")
                    for i in xml.findall("interface")}
        assert live[JOB_IFACE] == contract[JOB_IFACE], (live[JOB_IFACE], contract[JOB_IFACE])
        r = bus.busctl("get-property", NAME, path, JOB_IFACE, "BytesTotal")
        assert r.json["data"] == os.path.getsize(big()), r
        assert p.wait(timeout=120) == 0, p.stderr.read()


# --- the stores ---------------------------------------------------------------------------------------

def ollama_store(root, name, tag, blob_src, digest=None):
    digest = digest or sha256(blob_src)
    os.makedirs(os.path.join(root, "blobs"), exist_ok=True)
    blob = os.path.join(root, "blobs", "sha256-" + digest)
    shutil.copy(blob_src, blob)
    with open(os.path.join(root, "blobs", "sha256-" + "1" * 64), "w") as f:
        f.write("{{ .Prompt }}")
    mdir = os.path.join(root, "manifests", "registry.ollama.ai", "library", name)
    os.makedirs(mdir, exist_ok=True)
    with open(os.path.join(mdir, tag), "w") as f:
        json.dump({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                   "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                              "digest": "sha256:" + "2" * 64, "size": 10},
                   "layers": [{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64,
                               "size": 13},
                              {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + digest,
                               "size": os.path.getsize(blob_src)}]}, f)


def test_install_from_an_ollama_store():
    src = small()
    home = tempfile.mkdtemp(prefix="axp-test-home-")
    try:
        root = os.path.join(home, ".ollama", "models")
        ollama_store(root, "tiny", "7b", src)
        with setup() as (bus, d):
            r = install(bus, "ollama:tiny:7b", env={"HOME": home})
            assert r.rc == 0, r
            assert folder_files(bus) == ["tiny-7b.gguf"]
            assert sha256(os.path.join(bus.models, "tiny-7b.gguf")) == sha256(src)
            # OLLAMA_MODELS, the latest tag, --name
            r = install(bus, "ollama:tiny:7b", "--name", "again", env={"HOME": "/nonexistent", "OLLAMA_MODELS": root})
            assert r.rc == 0, r
            r = install(bus, "ollama:missing", env={"HOME": home})
            assert r.rc == 1 and "no Ollama model missing:latest" in r.err, r
            # A blob that is not what its digest says: refused after the copy, nothing kept.
            ollama_store(root, "damaged", "latest", src, digest="3" * 64)
            r = install(bus, "ollama:damaged", env={"HOME": home})
            assert r.rc == 1 and "SHA-256" in r.err and "damaged" in r.err, r
            assert folder_files(bus) == ["again.gguf", "tiny-7b.gguf"]
    finally:
        shutil.rmtree(home, True)


def hf_cache(hub, repo, rev, files):
    """The hub cache's layout: blobs named by their SHA-256, snapshots/REV/FILE links to them,
    refs/main naming REV."""
    base = os.path.join(hub, "models--" + repo.replace("/", "--"))
    os.makedirs(os.path.join(base, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(base, "snapshots", rev), exist_ok=True)
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    for name, src in files.items():
        digest = sha256(src)
        shutil.copy(src, os.path.join(base, "blobs", digest))
        os.symlink(os.path.join("..", "..", "blobs", digest), os.path.join(base, "snapshots", rev, name))
    with open(os.path.join(base, "refs", "main"), "w") as f:
        f.write(rev)


def test_install_from_a_hugging_face_cache():
    home = tempfile.mkdtemp(prefix="axp-test-home-")
    try:
        hub = os.path.join(home, ".cache", "huggingface", "hub")
        # where huggingface_hub looks, and the command line with it: $XDG_CACHE_HOME, which
        # test.sh sets for every test, over ~/.cache
        env = {"HOME": home, "XDG_CACHE_HOME": os.path.join(home, ".cache"), "HF_HOME": "",
               "HF_HUB_CACHE": ""}
        hf_cache(hub, "acme/Tiny-GGUF", "0123abcd", {"tiny-q8_0.gguf": small()})
        hf_cache(hub, "acme/Two-GGUF", "4567cdef", {"a-q8_0.gguf": small(), "b-q8_0.gguf": other()})
        # a split model's parts: the first stands for them, and the others are opened beside it
        hf_cache(hub, "acme/Split-GGUF", "89abcdef", {os.path.basename(p): p for p in split_parts()})
        with setup() as (bus, d):
            r = install(bus, "hf:acme/Tiny-GGUF", env=env)
            assert r.rc == 0, r
            assert folder_files(bus) == ["tiny-q8_0.gguf"]
            r = install(bus, "hf:acme/Two-GGUF", env=env)
            assert r.rc == 2 and "has 2 .gguf files" in r.err, r
            r = install(bus, "hf:acme/Two-GGUF:b-q8_0", env={"HOME": "/nonexistent", "HF_HUB_CACHE": hub})
            assert r.rc == 0, r
            assert sha256(os.path.join(bus.models, "b-q8_0.gguf")) == sha256(other())
            r = install(bus, "hf:acme/Split-GGUF", env=env)
            assert r.rc == 0, r
            assert sha256(os.path.join(bus.models, "tiny-split.gguf")) == sha256(small())
            r = install(bus, "hf:acme/Missing", env=env)
            assert r.rc == 1 and "not in the Hugging Face cache" in r.err, r
    finally:
        shutil.rmtree(home, True)


# --- bad input -------------------------------------------------------------------------------------------

def test_bad_files_are_refused_before_anything_is_written():
    src = small()
    d0 = folder()
    trunc = os.path.join(d0, "truncated.gguf")
    with open(src, "rb") as f, open(trunc, "wb") as g:
        g.write(f.read(os.path.getsize(src) * 2 // 3))
    text = os.path.join(d0, "notes.gguf")
    with open(text, "w") as f:
        f.write("these are not weights\n")
    cases = [
        (trunc, "InvalidArgument", "extends past the end of the file"),
        (text, "InvalidArgument", "not a GGUF file"),
        (gguf(os.path.join(d0, "mamba.gguf"), arch="mamba"), "Unsupported", "architecture 'mamba'"),
        (gguf(os.path.join(d0, "iq2xxs.gguf"), tensor_type=16), "Unsupported", "has type IQ2_XXS"),
        # a split model's first part without its second (test_a_split_model_installs_as_one_file)
        (gguf(os.path.join(d0, "big-00001-of-00002.gguf"), split=(0, 2)), "InvalidArgument",
         "is part 1 of 2 of a split model"),
    ]
    with setup(model=other()) as (bus, d):
        for path, error, msg in cases:
            r = install(bus, path, "--name", "bad")
            assert r.rc == 1 and msg in r.err, (path, r)
            name, message = raw_install(bus, path, "bad")
            assert name == f"org.agentxpu.Error.{error}" and msg in message, (path, name, message)
            assert folder_files(bus) == [], (path, folder_files(bus))
        assert "Installing bad" not in d.text(), d.text()  # no job, nothing written
        still_serves(bus)


class RawBus:
    """A D-Bus client in the standard library, enough to pass a file descriptor (no tool
    the tests use can send an 'h' argument): EXTERNAL authentication with fd passing, Hello,
    and one InstallModel call. Returns (error name or None, message or object path)."""

    def __init__(self, address):
        import socket
        path = re.match(r"unix:path=([^,]+)", address).group(1)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.settimeout(120)  # a liveness bound only
        self.sock.sendall(b"\0AUTH EXTERNAL " + str(os.geteuid()).encode().hex().encode() + b"\r\n")
        assert self.sock.recv(4096).startswith(b"OK"), "authentication failed"
        self.sock.sendall(b"NEGOTIATE_UNIX_FD\r\n")
        assert self.sock.recv(4096).startswith(b"AGREE_UNIX_FD")
        self.sock.sendall(b"BEGIN\r\n")
        self.serial = 0
        self.buf = b""
        self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", "", b"")

    class Out:
        """Marshalling into a buffer whose offset 0 is 8-aligned, as a message and its body are."""

        def __init__(self):
            self.b = bytearray()

        def align(self, n):
            self.b += b"\0" * (-len(self.b) % n)

        def u32(self, v):
            self.align(4)
            self.b += struct.pack("<I", v)

        def str(self, v, code="s"):
            e = v.encode()
            if code == "g":
                self.b += bytes([len(e)]) + e + b"\0"
            else:
                self.u32(len(e))
                self.b += e + b"\0"

        def variant(self, code, v):
            self.str(code, "g")
            self.u32(v) if code == "u" else self.str(v, code)

    def call(self, dest, path, iface, member, sig, body, fds=()):
        import socket
        self.serial += 1
        fields = [(1, "o", path), (2, "s", iface), (3, "s", member), (6, "s", dest)]
        if sig:
            fields.append((8, "g", sig))
        if fds:
            fields.append((9, "u", len(fds)))
        m = self.Out()
        m.b += b"l\x01\x00\x01" + struct.pack("<II", len(body), self.serial)
        m.u32(0)  # the fields' length, set below
        start = len(m.b)
        for code, t, v in fields:
            m.align(8)
            m.b += bytes([code])
            m.variant(t, v)
        struct.pack_into("<I", m.b, 12, len(m.b) - start)
        m.align(8)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"<{len(fds)}i", *fds))] if fds else []
        self.sock.sendmsg([bytes(m.b) + body], anc)
        return self.reply(self.serial)

    def message(self):
        """The next message: (type, header fields by code, body)."""
        while len(self.buf) < 16:
            self.buf += self.sock.recv(65536)
        blen, _, flen = struct.unpack_from("<III", self.buf, 4)
        total = 16 + flen + (-(16 + flen) % 8) + blen
        while len(self.buf) < total:
            self.buf += self.sock.recv(65536)
        msg, self.buf = self.buf[:total], self.buf[total:]
        fields, pos = {}, 16
        while pos < 16 + flen:
            pos += -pos % 8
            code, slen = msg[pos], msg[pos + 1]
            t = msg[pos + 2:pos + 2 + slen].decode()
            pos += 3 + slen
            if t == "u":
                pos += -pos % 4
                fields[code] = struct.unpack_from("<I", msg, pos)[0]
                pos += 4
            elif t == "g":
                n = msg[pos]
                fields[code] = msg[pos + 1:pos + 1 + n].decode()
                pos += n + 2
            else:
                pos += -pos % 4
                n = struct.unpack_from("<I", msg, pos)[0]
                fields[code] = msg[pos + 4:pos + 4 + n].decode()
                pos += n + 5
        return msg[1], fields, msg[16 + flen + (-(16 + flen) % 8):]

    @staticmethod
    def strings(body, n):
        """The first n strings of a body of strings."""
        out, pos = [], 0
        for _ in range(n):
            pos += -pos % 4
            k = struct.unpack_from("<I", body, pos)[0]
            out.append(body[pos + 4:pos + 4 + k].decode())
            pos += 5 + k
        return out

    def reply(self, serial):
        while True:
            mtype, fields, body = self.message()
            if mtype in (2, 3) and fields.get(5) == serial:
                first = None
                if body and fields.get(8, "")[:1] in ("s", "o"):
                    first = self.strings(body, 1)[0]
                return (fields.get(4) if mtype == 3 else None), first

    def finished(self, job):
        """The job's Finished signal, sent to this connection: (result, error name, message)."""
        while True:
            mtype, fields, body = self.message()
            if mtype == 4 and fields.get(1) == job and fields.get(3) == "Finished":
                return tuple(self.strings(body, 3))

    def install(self, fd, name, sha=None):
        o = self.Out()
        o.u32(0)  # the index of the fd
        o.str(name)
        o.align(4)
        lenpos = len(o.b)
        o.u32(0)  # the options' length, set below
        o.align(8)
        start = len(o.b)
        if sha is not None:
            o.align(8)
            o.str("sha256")
            o.variant("s", sha)
        struct.pack_into("<I", o.b, lenpos, len(o.b) - start)
        return self.call(NAME, PATH, IFACE, "InstallModel", "hsa{sv}", bytes(o.b), fds=(fd,))

    def close(self):
        self.sock.close()


def raw_install(bus, path, name, sha=None):
    fd = os.open(path, os.O_RDONLY)
    rb = RawBus(bus.address)
    try:
        return rb.install(fd, name, sha)
    finally:
        rb.close()
        os.close(fd)


def raw_install_as_nobody(bus, path, name):
    """raw_install from a client running as nobody (this file, run with --raw-install)."""
    r = run(as_nobody([sys.executable, os.path.abspath(__file__), "--raw-install", bus.address, path, name]))
    assert r.rc == 0, r
    return tuple(json.loads(r.out))


def test_bad_names_and_duplicates():
    with setup(model=other()) as (bus, d):
        for name in ("a/b", "..", "../etc", ".hidden", "-x", "", "x" * 101):
            error, msg = raw_install(bus, small(), name)
            assert error == "org.agentxpu.Error.InvalidArgument" and "is not a model name" in msg, (name, error, msg)
        error, msg = raw_install(bus, small(), "tiny", sha="0" * 63)
        assert error == "org.agentxpu.Error.InvalidArgument" and "'sha256' must be" in msg, (error, msg)
        r = install(bus, small(), "--name", "../escape")
        assert r.rc == 2 and "is not a model name" in r.err, r
        assert install(bus, small(), "--name", "tiny").rc == 0
        r = install(bus, small(), "--name", "tiny")
        assert r.rc == 1 and "is installed already" in r.err, r
        assert raw_install(bus, small(), "tiny")[0] == "org.agentxpu.Error.Exists"
        # A caller that leaves as soon as the job starts: the job ends (cancelled, or failed on
        # the digest), leaving nothing.
        error, job = raw_install(bus, small(), "digest", sha="0" * 64)
        assert error is None and job.startswith(PATH + "/job/"), (error, job)
        wait_for(lambda: re.search(r"Installing digest(: cancelled| failed)", d.text()), "the job to end")
        wait_for(lambda: folder_files(bus) == ["tiny.gguf"], "nothing left of the job")
        assert folder_files(bus) == ["tiny.gguf"]
        still_serves(bus)


def test_two_installs_of_one_name_at_once():
    with setup(env=SLOW) as (bus, d):
        p = install_spawn(bus, big(), "--name", "same")
        wait_for(lambda: temp_files(bus), "the first copy to start")
        r = install(bus, small(), "--name", "same")
        assert r.rc == 1 and "is being installed already" in r.err, r
        error, msg = raw_install(bus, small(), "same")
        assert error == "org.agentxpu.Error.Busy" and "is being installed already" in msg, (error, msg)
        assert p.wait(timeout=120) == 0, p.stderr.read()
        assert folder_files(bus) == ["same.gguf"]
        assert sha256(os.path.join(bus.models, "same.gguf")) == sha256(big())


def test_unauthorized_caller_is_refused():
    if not is_root():
        raise Skip("needs root to run the client as nobody")
    with setup(model=other()) as (bus, d):
        r = install(bus, small(), "--name", "mine", user="nobody")
        assert r.rc == 1 and "Not authorized" in r.err, r
        error, msg = raw_install_as_nobody(bus, small(), "mine")
        assert error == "org.agentxpu.Error.AccessDenied" and "Not authorized" in msg, (error, msg)
        assert folder_files(bus) == []
        assert run(as_nobody([CLI, "model", "use", "--address", bus.address, "x"])).rc == 1
        still_serves(bus)


def test_cancel_mid_copy_leaves_nothing():
    # Slower than SLOW, as below: on a loaded machine the first progress line can come when the
    # copy is well on; at SLOW's pace the copy once ended first (CI, 2026-11-29, when a Ctrl-C
    # that landed just before the command waited on the bus was seen at the next progress
    # signal only).
    with setup(model=other(), env={"AGENTXPU_TEST_COPY_DELAY_MS": "2500"}) as (bus, d):
        p = install_spawn(bus, big(), "--name", "big")
        line = p.stderr.readline()  # the first progress: the command follows its job
        assert re.match(r"\s*\d+% ", line), line
        p.send_signal(signal.SIGINT)
        rc, err = p.wait(timeout=120), p.stderr.read()
        assert rc == 1 and "cancelled; nothing was installed" in err, (rc, err)
        assert folder_files(bus) == []
        still_serves(bus)


def test_a_client_that_leaves_cancels_its_install():
    # Slower than SLOW: on a loaded machine the copy (four chunks) could end before the kill
    # below is seen, and a finished job has no caller left to watch.
    with setup(model=other(), env={"AGENTXPU_TEST_COPY_DELAY_MS": "2500"}) as (bus, d):
        p = install_spawn(bus, big(), "--name", "big")
        wait_for(lambda: temp_files(bus), "the copy to start")
        p.kill()
        p.wait(timeout=30)
        wait_for(lambda: "Installing big: cancelled (its caller left the bus)" in d.text(), "the job to be cancelled",
                 timeout=30)
        wait_for(lambda: folder_files(bus) == [], "the temporary file to go")
        still_serves(bus)


def test_a_full_disk_fails_the_copy_and_leaves_nothing():
    need_tools("prlimit")
    # A file size limit below the model's size: the engine's write fails as on a full disk.
    with setup(model=other(), wrapper="prlimit --fsize=2000000 --") as (bus, d):
        r = install(bus, big(), "--name", "big")
        assert r.rc == 1 and "no room left" in r.err, r
        assert folder_files(bus) == []
        still_serves(bus)
        assert install(bus, small(), "--name", "small").rc == 0  # what fits still goes in


_own_mounts = []


@contextlib.contextmanager
def small_tmpfs(size):
    """A tmpfs of `size` on a temporary folder, in a mount namespace of this test's own where
    it can have one (so that nothing mounted outlives it), unmounted after."""
    if not is_root():
        raise Skip("mounting a tmpfs needs root")
    need_tools("mount", "umount")
    if not _own_mounts:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x00020000) == 0:  # CLONE_NEWNS
            _own_mounts.append(run(["mount", "--make-rprivate", "/"]).rc == 0)
        else:
            _own_mounts.append(False)
    where = tempfile.mkdtemp(prefix="axp-test-tmpfs-")
    r = run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "axp-test-tmpfs", where])
    if r.rc != 0:
        os.rmdir(where)
        raise Skip(f"cannot mount a tmpfs here: {r.err.strip() or r.rc}")
    try:
        yield where
    finally:
        r = run(["umount", where])
        if r.rc != 0:
            run(["umount", "--lazy", where])
        os.rmdir(where)


def fill(path):
    """Write `path` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for block in (1 << 16, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * block)
    finally:
        os.close(fd)


def test_a_file_larger_than_the_free_space_is_refused_before_the_copy():
    size = os.path.getsize(big())
    with small_tmpfs(size // 2) as where:
        with setup(model=other(), models=os.path.join(where, "models")) as (bus, d):
            r = install(bus, big(), "--name", "big")
            assert r.rc == 1 and "free some space" in r.err, r
            error, msg = raw_install(bus, big(), "big")
            assert error == "org.agentxpu.Error.NoSpace" and "bytes free" in msg, (error, msg)
            assert folder_files(bus) == []
            assert "Installing big" not in d.text(), d.text()  # no job, nothing written
            still_serves(bus)
            assert install(bus, small(), "--name", "small").rc == 0  # what fits still goes in


def test_a_disk_that_fills_up_mid_copy_fails_the_job_and_leaves_nothing():
    size = os.path.getsize(big())
    # room for the model when the install starts; the test takes it while the job copies
    with small_tmpfs(size + (8 << 20)) as where:
        with setup(model=other(), env={"AGENTXPU_TEST_COPY_DELAY_MS": "1000"},
                   models=os.path.join(where, "models")) as (bus, d):
            fd = os.open(big(), os.O_RDONLY)
            rb = RawBus(bus.address)
            try:
                error, job = rb.install(fd, "big")
                assert error is None and job.startswith(PATH + "/job/"), (error, job)
                # its first chunk written, the job waits a second before the next
                wait_for(lambda: any(os.path.getsize(os.path.join(bus.models, f)) for f in temp_files(bus)),
                         "the copy to start")
                fill(os.path.join(where, "filler"))
                result, error, msg = rb.finished(job)
            finally:
                rb.close()
                os.close(fd)
            assert (result, error) == ("failed", "org.agentxpu.Error.NoSpace"), (result, error, msg)
            assert "has no room left for big" in msg and "free some space" in msg, msg
            assert folder_files(bus) == []
            os.unlink(os.path.join(where, "filler"))
            still_serves(bus)
            r = install(bus, big(), "--name", "big")  # with the room back it goes in
            assert r.rc == 0, r
            assert sha256(os.path.join(bus.models, "big.gguf")) == sha256(big())


def test_the_path_changing_under_the_install_changes_nothing():
    """The engine copies the file the client opened: a link pointed elsewhere during the copy
    (or the file replaced) is not what gets installed."""
    link = os.path.join(folder(), "current.gguf")
    with setup(env=SLOW) as (bus, d):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
        os.symlink(big(), link)
        p = install_spawn(bus, link, "--name", "current")
        wait_for(lambda: temp_files(bus), "the copy to start")
        os.unlink(link)
        os.symlink(small(), link)
        assert p.wait(timeout=120) == 0, p.stderr.read()
        assert sha256(os.path.join(bus.models, "current.gguf")) == sha256(big())
        os.unlink(link)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--raw-install"]:  # raw_install_as_nobody()'s client
        import types
        print(json.dumps(raw_install(types.SimpleNamespace(address=sys.argv[2]), sys.argv[3], sys.argv[4])))
        sys.exit(0)
    main([
        test_install_list_use_remove_and_restart,
        test_a_split_model_installs_as_one_file,
        test_every_architecture_the_engine_runs_installs,
        test_models_property_changes_are_announced,
        test_a_template_not_understood_is_said,
        test_job_object_matches_the_interface_xml,
        test_install_from_an_ollama_store,
        test_install_from_a_hugging_face_cache,
        test_bad_files_are_refused_before_anything_is_written,
        test_bad_names_and_duplicates,
        test_two_installs_of_one_name_at_once,
        test_unauthorized_caller_is_refused,
        test_cancel_mid_copy_leaves_nothing,
        test_a_client_that_leaves_cancels_its_install,
        test_a_full_disk_fails_the_copy_and_leaves_nothing,
        test_a_file_larger_than_the_free_space_is_refused_before_the_copy,
        test_a_disk_that_fills_up_mid_copy_fails_the_job_and_leaves_nothing,
        test_the_path_changing_under_the_install_changes_nothing,
    ])
