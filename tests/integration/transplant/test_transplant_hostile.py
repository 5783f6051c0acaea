"""site_packages_transplant on hostile and broken trees: nothing outside the destination changes.

Each test builds a source and a destination venv beside a canary directory, runs the module as
root (as CI does), and checks the canary and everything else outside the destination: the same
tree byte for byte, and no file modified since the run began.  Numbers refer to the cases of
the attack run this suite answers (see the threat model in docs/modules/site_packages_transplant.md).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from transplant_support import (
    CPTAG,
    add_dist,
    leftovers,
    make_venv,
    module_env,
    record_hash,
    record_state,
    run_module,
    site_packages,
    snapshot,
)

TAG = f"{CPTAG}-{CPTAG}-linux_x86_64"
MODULE = "ansible_collections.dflash.deploy.plugins.modules.site_packages_transplant"
HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parents[1] / "support"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the attack cases run as root, as the module does")


def _torch(label: bytes, big: int = 50_000) -> dict:
    return {"torch/__init__.py": b"VERSION = %r\n" % label, "torch/lib/libtorch.so": label * (big // len(label)),
            "torch/nn/__init__.py": b"# nn " + label}


class World:
    """tmp/{src,dest,canary}: the canary holds files an escaping run would delete, replace or add to."""

    def __init__(self, root: Path):
        self.root = root
        self.src = make_venv(root / "src")
        self.dest = make_venv(root / "dest")
        add_dist(self.src, "torch", "2.11.0+cu130", _torch(b"cu130"), scripts={"torchrun": "print(1)\n"}, tag=TAG)
        add_dist(self.dest, "torch", "2.11.0+cu128", _torch(b"cu128"), scripts={"torchrun": "print(0)\n"}, tag=TAG)
        add_dist(self.dest, "requests", "2.32.0", {"requests/__init__.py": b"r"})
        self.canary = root / "canary"
        (self.canary / "pyc").mkdir(parents=True)
        (self.canary / "victim").write_text("must survive\n")
        (self.canary / "pyc" / "__init__.cpython-311.pyc").write_bytes(b"pyc outside")
        (self.canary / "suid").write_bytes(b"x")
        self.start = None
        self.outside_before = None

    @property
    def sp(self) -> Path:
        return site_packages(self.dest)

    def begin(self):
        time.sleep(0.01)
        self.outside_before = self._outside()
        self.start = time.time_ns()

    def _outside(self):
        snap = snapshot(self.root)
        return dict((k, v) for k, v in snap.items() if not (k == "dest" or k.startswith("dest/")))

    def assert_outside_unchanged(self):
        assert self._outside() == self.outside_before
        newer = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            if Path(dirpath) == self.root and "dest" in dirnames:
                dirnames.remove("dest")
            for name in filenames:
                st = os.lstat(os.path.join(dirpath, name))
                if st.st_mtime_ns >= self.start:
                    newer.append(os.path.join(dirpath, name))
        assert newer == []


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def _run(w: World, args: dict, **kw):
    w.begin()
    rc, result = run_module(args, **kw)
    w.assert_outside_unchanged()
    return rc, result


def _refused(w: World, args: dict, match: str, **kw):
    before = snapshot(w.dest)
    rc, result = _run(w, args, **kw)
    assert rc != 0 and result.get("failed"), result
    assert match in result["msg"], result["msg"]
    assert "Traceback" not in json.dumps(result)
    assert snapshot(w.dest) == before
    return result


def _move(w: World, **extra):
    return dict({"src": str(w.src), "dest": str(w.dest), "distributions": ["torch"]}, **extra)


def _pack(w: World, bundle: Path, distributions=("torch",)):
    rc, result = run_module({"state": "packed", "src": str(w.src), "bundle": str(bundle),
                             "distributions": list(distributions)})
    assert rc == 0, result
    return bundle


def _rewrite_manifest(bundle: Path, change) -> None:
    """Rewrite a bundle with its manifest changed by change(manifest); members stay as they are."""
    with tarfile.open(bundle) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    manifest = json.loads(dict((m.name, d) for m, d in members)["MANIFEST.json"])
    change(manifest)
    with tarfile.open(bundle, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members:
            if member.name == "MANIFEST.json":
                data = json.dumps(manifest).encode()
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


def _verifies(w: World):
    state = record_state(w.dest)
    assert state["problems"] == []
    assert len(list(w.sp.glob("torch-*.dist-info"))) == 1
    return state


# -- 1. two runs into one venv -----------------------------------------------------------------------------------

def _venv_lock_held(venv: Path, pid: int) -> bool:
    """Whether pid holds a flock on the venv directory, from /proc/locks (looking never takes the lock)."""
    inode = os.stat(venv).st_ino
    with open("/proc/locks") as handle:
        for line in handle:
            fields = line.split()
            if "FLOCK" in fields and str(pid) in fields and any(
                    f.count(":") == 2 and f.rsplit(":", 1)[1] == str(inode) for f in fields):
                return True
    return False


def _start(args: dict):
    proc = subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=module_env(), text=True)
    proc.stdin.write(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc.stdin.close()
    return proc


def _result(proc):
    out = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    lines = out.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else {"stderr": err}


def test_01_second_run_refused_while_the_first_holds_the_venv(world):
    """The lock is taken before the source is read or the plan made: a second run refuses, the first completes."""
    src2 = make_venv(world.root / "src2")
    add_dist(src2, "torch", "2.9.1", _torch(b"v291", big=20_000_000), tag=TAG)
    bundle = world.root / "torch291.tar"
    rc, result = run_module({"state": "packed", "src": str(src2), "bundle": str(bundle), "distributions": ["torch"]})
    assert rc == 0, result
    world.begin()
    first = _start({"bundle": str(bundle), "dest": str(world.dest)})
    deadline = time.monotonic() + 60
    while not _venv_lock_held(world.dest, first.pid) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert first.poll() is None, "the first run ended before it was seen holding the lock"
    os.kill(first.pid, signal.SIGSTOP)  # hold it wherever it is: reading the bundle, planning, or writing
    try:
        before = snapshot(world.dest)
        rc, second = run_module(_move(world))
        assert rc != 0 and "another transplant into this venv is running" in second["msg"], second
        assert snapshot(world.dest) == before
    finally:
        os.kill(first.pid, signal.SIGCONT)
    rc, result = _result(first)
    assert rc == 0, result
    world.assert_outside_unchanged()
    assert _verifies(world)["dists"]["torch"] == "2.9.1"


def test_01_runs_started_together_never_both_act(world):
    """Bundle and venv runs started together, five times: each succeeds or refuses, the venv always verifies."""
    src2 = make_venv(world.root / "src2")
    add_dist(src2, "torch", "2.9.1", _torch(b"v291", big=5_000_000), tag=TAG)
    bundle = world.root / "torch291.tar"
    rc, result = run_module({"state": "packed", "src": str(src2), "bundle": str(bundle), "distributions": ["torch"]})
    assert rc == 0, result
    world.begin()
    for round_no in range(5):
        first = _start({"bundle": str(bundle), "dest": str(world.dest)})
        time.sleep(0.002 * round_no)
        second = _start(_move(world))
        results = [_result(first), _result(second)]
        for rc, result in results:
            assert rc == 0 or "another transplant into this venv is running" in result.get("msg", ""), result
        assert any(rc == 0 for rc, _r in results)
        _verifies(world)
        assert leftovers(world.dest) == []
    world.assert_outside_unchanged()


# -- 2. bytecode cleanup through a symlinked __pycache__ --------------------------------------------------------

def test_02_pycache_symlink_not_followed(world):
    cache = world.sp / "torch" / "__pycache__"
    cache.symlink_to(world.canary / "pyc")
    rc, result = _run(world, _move(world))
    assert rc == 0, result
    assert (world.canary / "pyc" / "__init__.cpython-311.pyc").read_bytes() == b"pyc outside"
    _verifies(world)


# -- 3. a journal and plan written by hand ----------------------------------------------------------------------

def _forge(w: World, plan_changes: dict, phase="committing", plan_name=None):
    state_dir = w.dest / ".dflash-transplant"
    state_dir.mkdir()
    plan = {"run_id": "20250101T000000-abcdef", "dest": str(w.dest), "site_packages": str(w.sp), "writes": [],
            "dist_info_writes": [], "old_dist_infos": [], "deletes": [], "final_claims": [], "new_dirs": [],
            "moved": [], "removed": []}
    plan.update(plan_changes)
    name = plan_name or "plan-%s.json" % plan["run_id"]
    (state_dir / ("plan-%s.json" % plan["run_id"])).write_text(json.dumps(plan))
    (state_dir / "journal.json").write_text(json.dumps({"run_id": plan["run_id"], "phase": phase, "plan": name}))


@pytest.mark.parametrize("forged", [
    {"deletes": ["../../../../canary/victim"]},
    {"deletes": ["../../../../../../../../" + "x" * 3]},
    {"site_packages": "CANARY", "deletes": ["victim"]},
    {"writes": [["../../../../canary/victim", False]]},
    {"dist_info_writes": [["../../../../canary", False]]},
    {"new_dirs": ["CANARY/pyc"]},
], ids=["delete-escape", "delete-far", "other-site-packages", "rollback-unlink-escape", "dist-info-escape",
        "dir-outside"])
@pytest.mark.parametrize("phase", ["committing", "writing_files"])
def test_03_forged_journal_refused(world, forged, phase):
    forged = json.loads(json.dumps(forged).replace("CANARY", str(world.canary)))
    _forge(world, forged, phase)
    _refused(world, _move(world), "not one this module wrote")


def test_03_forged_plan_name_refused(world):
    _forge(world, {}, plan_name="../../canary/victim")
    _refused(world, _move(world), "names no run this module wrote")


# -- 4. symlinked top-level directories of the destination ------------------------------------------------------

@pytest.mark.parametrize("which", ["bin", "site-packages", ".dflash-transplant", "lib"])
def test_04_symlinked_top_level_dir_refused(world, which):
    dest = world.dest
    if which == "bin":
        target = world.canary / "bin"
        shutil.copytree(dest / "bin", target, symlinks=True)
        shutil.rmtree(dest / "bin")
        (dest / "bin").symlink_to(target)
        match = "is a symbolic link"
    elif which == "site-packages":
        target = world.canary / "site-packages"
        sp = world.sp
        shutil.copytree(sp, target, symlinks=True)
        shutil.rmtree(sp)
        sp.symlink_to(target)
        match = "is a symbolic link"
    elif which == "lib":
        target = world.canary / "lib"
        shutil.copytree(dest / "lib", target, symlinks=True)
        shutil.rmtree(dest / "lib")
        (dest / "lib").symlink_to(target)
        match = "is a symbolic link"
    else:
        (world.canary / "state").mkdir()
        (dest / ".dflash-transplant").symlink_to(world.canary / "state")
        match = "not a plain directory"
    _refused(world, _move(world), match)


# -- 5. symlinks in the source ------------------------------------------------------------------------------------

@pytest.mark.parametrize("link", ["hardlink", "copy", "auto"])
def test_05_source_symlink_to_outside_file_refused(world, link):
    secret = world.canary / "victim"
    add_dist(world.src, "evil", "1.0", {"evil/__init__.py": b""},
             record_extra=[("evil/secret.txt", record_hash(secret.read_bytes()), secret.stat().st_size)])
    (site_packages(world.src) / "evil" / "secret.txt").symlink_to(secret)
    _refused(world, _move(world, distributions=["evil"], link=link), "is a symbolic link, not a regular file")
    assert not (world.sp / "evil").exists()


def test_05_source_symlinked_directory_refused(world):
    (world.canary / "pkg").mkdir()
    (world.canary / "pkg" / "mod.py").write_bytes(b"outside")
    add_dist(world.src, "evil", "1.0", {"evil/__init__.py": b""},
             record_extra=[("evil/pkg/mod.py", record_hash(b"outside"), 7)])
    (site_packages(world.src) / "evil" / "pkg").symlink_to(world.canary / "pkg")
    _refused(world, _move(world, distributions=["evil"], link="hardlink"), "outside the source venv")


# -- 6. a bundle manifest trusted beyond its checksums ------------------------------------------------------------

def test_06_manifest_mode_is_not_trusted(world):
    bundle = _pack(world, world.root / "b.tar")

    def setuid(manifest):
        for item in manifest["distributions"][0]["files"]:
            item["mode"] = 0o4777
    _rewrite_manifest(bundle, setuid)
    rc, result = _run(world, {"bundle": str(bundle), "dest": str(world.dest)})
    assert rc == 0, result
    for path in [world.sp / "torch" / "__init__.py", world.sp / "torch" / "lib" / "libtorch.so",
                 world.dest / "bin" / "torchrun"]:
        mode = path.stat().st_mode & 0o7777
        assert mode & 0o7022 == 0, (path, oct(mode))  # no setuid/setgid/sticky, no group or world write
    _verifies(world)


@pytest.mark.parametrize("tags", [[], "cp311-cp311-linux_x86_64", ["py3-none-any"]])
def test_06_manifest_wheel_tags_are_not_trusted(world, tags):
    add_dist(world.src, "old", "1.0", {"old/__init__.py": b""}, tag="cp39-cp39-manylinux_2_28_x86_64")
    bundle = _pack(world, world.root / "b.tar", ["old"])

    def lie(manifest):
        manifest["distributions"][0]["wheel_tags"] = tags
    _rewrite_manifest(bundle, lie)
    result = _refused(world, {"bundle": str(bundle), "dest": str(world.dest)}, "bundle")
    assert "cp39-cp39" in result["msg"] or "list of strings" in result["msg"], result["msg"]


# -- 7. packing onto its own source or another file; RECORD into the state directory ------------------------------

def test_07_pack_onto_its_source_refused(world):
    target = site_packages(world.src) / "torch" / "lib" / "libtorch.so"
    before = snapshot(world.src)
    rc, result = _run(world, {"state": "packed", "src": str(world.src), "bundle": str(target),
                              "distributions": ["torch"]})
    assert rc != 0 and "inside the source venv" in result["msg"], result
    assert snapshot(world.src) == before


def test_07_pack_over_another_file_refused(world):
    rc, result = _run(world, {"state": "packed", "src": str(world.src), "bundle": str(world.canary / "victim"),
                              "distributions": ["torch"]})
    assert rc != 0 and "is not a bundle" in result["msg"], result


def test_07_pack_through_planted_temp_link(world):
    """A symlink planted at the temp name is replaced, not written through (in this process, so its pid is known)."""
    from ansible_collections.dflash.deploy.plugins.module_utils.site_packages_transplant import pack_bundle
    bundle = world.root / "out" / "b.tar"
    bundle.parent.mkdir()
    (bundle.parent / ("b.tar.tmp-%d" % os.getpid())).symlink_to(world.canary / "victim")
    world.begin()
    pack_bundle(str(world.src), str(bundle), ["torch"])
    assert (world.canary / "victim").read_text() == "must survive\n"
    assert list((world.root / "out").iterdir()) == [bundle]
    assert snapshot(world.canary) == dict((k[len("canary/"):], v) for k, v in world.outside_before.items()
                                          if k.startswith("canary/"))


def test_07_record_into_state_dir_refused(world):
    add_dist(world.src, "evil", "1.0", {"evil/__init__.py": b""},
             record_extra=[("../../../.dflash-transplant/journal.json", record_hash(b"{}"), 2)])
    _refused(world, _move(world, distributions=["evil"]), "escapes site-packages")


# -- 8. read-only site-packages or bin/ ---------------------------------------------------------------------------

INNER = r"""
import json, os, subprocess, sys
sys.path.insert(0, {support!r})
from transplant_support import run_module, snapshot
from pathlib import Path
dest, target = Path({dest!r}), {target!r}
subprocess.run(["mount", "--bind", target, target], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
before = snapshot(dest)
rc, result = run_module({args!r})
after = snapshot(dest)
print(json.dumps({{"rc": rc, "msg": result.get("msg"), "same": before == after,
                  "diff": sorted(set(before.items()) ^ set(after.items()), key=str)[:10]}}, default=str))
"""


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare for a private mount namespace")
@pytest.mark.parametrize("which", ["site-packages", "bin"])
def test_08_read_only_part_refused_before_anything_changes(world, which):
    target = str(world.sp if which == "site-packages" else world.dest / "bin")
    code = INNER.format(support=str(SUPPORT), dest=str(world.dest), target=target, args=_move(world))
    world.begin()
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", code],
                          capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("mount namespaces are not available here: " + proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rc"] != 0 and "read-only filesystem" in out["msg"] and "nothing was changed" in out["msg"], out
    assert "rolling back failed" not in out["msg"]
    assert out["same"], out["diff"]
    assert not (world.dest / ".dflash-transplant").exists()
    world.assert_outside_unchanged()


# -- 9. tracebacks instead of a one-line error --------------------------------------------------------------------

def test_09_non_utf8_record_of_source_named(world):
    di = add_dist(world.src, "bad", "1.0", {"bad/__init__.py": b""})
    (di / "RECORD").write_bytes((di / "RECORD").read_bytes() + b"bad/caf\xe9.py,,\n")
    result = _refused(world, _move(world, distributions=["bad"]), "not UTF-8")
    assert str(di / "RECORD") in result["msg"]


def test_09_non_utf8_record_of_staying_dist_does_not_block(world):
    di = world.sp / "requests-2.32.0.dist-info"
    (world.sp / "requests" / os.fsdecode(b"caf\xe9.py")).write_bytes(b"x")
    (di / "RECORD").write_bytes((di / "RECORD").read_bytes() + b"requests/caf\xe9.py,,\n")
    rc, result = _run(world, _move(world))
    assert rc == 0, result
    assert (world.sp / os.fsdecode(b"requests/caf\xe9.py")).exists()


def _tar_with_manifest_header(bundle: Path, declared: int):
    """A tar whose MANIFEST.json header declares ``declared`` bytes but holds a few."""
    info = tarfile.TarInfo("MANIFEST.json")
    info.size = declared
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    bundle.write_bytes(header + b"{}" + b"\0" * 1022)


def test_09_manifest_declaring_40_gib(world):
    bundle = world.root / "huge.tar"
    _tar_with_manifest_header(bundle, 40 << 30)
    _refused(world, {"bundle": str(bundle), "dest": str(world.dest)}, "truncated")


@pytest.mark.parametrize("field,value,match", [
    ("mode", "rwx", "mode of"), ("mtime", "yesterday", "mtime of"), ("mtime", None, "mtime of"),
    ("source", "nowhere", "source must be"), ("source", {"venv": 3}, "source must be"),
])
def test_09_manifest_wrong_types(world, field, value, match):
    bundle = _pack(world, world.root / "b.tar")

    def change(manifest):
        if field == "source":
            manifest["source"] = value
        else:
            manifest["distributions"][0]["files"][0][field] = value
    _rewrite_manifest(bundle, change)
    _refused(world, {"bundle": str(bundle), "dest": str(world.dest)}, match)


# -- 10. special files --------------------------------------------------------------------------------------------

def test_10_fifo_bundle_refused(world):
    fifo = world.root / "fifo.tar"
    os.mkfifo(fifo)
    _refused(world, {"bundle": str(fifo), "dest": str(world.dest)}, "FIFO", timeout=60)


def test_10_metadata_and_record_files_on_dev_zero(world):
    """Destination METADATA -> /dev/zero, a source RECORD-listed file -> /dev/zero: refused or skipped, never read."""
    meta = world.sp / "requests-2.32.0.dist-info" / "METADATA"
    meta.unlink()
    meta.symlink_to("/dev/zero")
    add_dist(world.src, "zero", "1.0", {"zero/__init__.py": b""}, record_extra=[("zero/z.bin", "", "")])
    (site_packages(world.src) / "zero" / "z.bin").symlink_to("/dev/zero")
    _refused(world, _move(world, distributions=["zero"], verify_source=True), "not a regular file", timeout=60)
    rc, result = _run(world, _move(world), timeout=60)  # the METADATA link does not hang a plain run either
    assert rc == 0, result
