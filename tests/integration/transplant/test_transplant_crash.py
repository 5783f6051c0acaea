"""Crash safety: named crash points in every journal phase, and kill -9 at seeded random moments.

After each crash the next run must converge to exactly the state an uninterrupted run leaves
(byte for byte, same tree), with every RECORD verifying and nothing of the journal left behind.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transplant_support import (
    CPTAG,
    add_dist,
    leftovers,
    make_venv,
    module_env,
    record_state,
    run_module,
    snapshot,
)

TAG = f"{CPTAG}-{CPTAG}-linux_x86_64"
MODULE = "ansible_collections.dflash.deploy.plugins.modules.site_packages_transplant"
INTENDED = {"nvidia-cublas": "13.1.0", "nvidia-cuda-runtime": "13.0.96", "nvidia-nccl-cu12": "2.27.3",
            "torch": "2.11.0+cu130"}


def _big_torch(label: bytes, n_large: int, large: int, n_small: int) -> dict:
    files = {f"torch/lib/libbig{i}.so": bytes([i % 251]) * large + label for i in range(n_large)}
    files.update({f"torch/pkg{i % 20}/mod{i}.py": b"# %s %d\n" % (label, i) * 20 for i in range(n_small)})
    files["torch/__init__.py"] = b"VERSION = %r\n" % label
    return files


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """src venv (torch cu130, ~90 MB in 230 files), a bundle of it, a template dest, and the reference end state."""
    root = tmp_path_factory.mktemp("crash")
    src = make_venv(root / "src")
    add_dist(src, "torch", "2.11.0+cu130", dict(_big_torch(b"cu130", 9, 10_000_000, 220), **{"torch/n.py": b"n"}),
             scripts={"torchrun": "print('new')\n"}, tag=TAG)
    add_dist(src, "nvidia-cuda-runtime", "13.0.96", {"nvidia/cu13/lib/libcudart.so.13": b"c13" * 100000})
    add_dist(src, "nvidia-cublas", "13.1.0", {"nvidia/cu13/lib/libcublas.so.13": b"b13" * 100000})
    template = make_venv(root / "template")
    add_dist(template, "torch", "2.11.0+cu128", dict(_big_torch(b"cu128", 3, 2_000_000, 200), **{"torch/o.py": b"o"}),
             scripts={"torchrun": "print('old')\n"}, tag=TAG)
    add_dist(template, "nvidia-cuda-runtime-cu12", "12.8.90",
             {"nvidia/__init__.py": b"", "nvidia/cuda_runtime/lib/libcudart.so.12": b"c12"})
    add_dist(template, "nvidia-nccl-cu12", "2.27.3", {"nvidia/__init__.py": b"", "nvidia/nccl/lib/libnccl.so.2": b"n"})
    bundle = root / "torch.tar"
    rc, result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle),
                             "distributions": ["torch", "nvidia-*"]})
    assert rc == 0, result
    dest = root / "dest"
    _reset(template, dest)
    rc, result = run_module(_args(src, dest, "copy"))
    assert rc == 0, result
    reference = snapshot(dest)
    _reset(template, dest)
    return {"src": src, "template": template, "bundle": bundle, "dest": dest, "reference": reference}


def _reset(template: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run(["cp", "-a", str(template), str(dest)], check=True)
    # cp -a keeps the template's absolute paths in scripts; the reference is made the same way


def _args(src, dest, link, bundle=None):
    args = {"dest": str(dest), "remove": ["nvidia-cuda-runtime-cu12"], "link": link}
    if bundle:
        args["bundle"] = str(bundle)
    else:
        args.update(src=str(src), distributions=["torch", "nvidia-*"])
    return args


def _assert_converged(world, recovered_action=None):
    dest = world["dest"]
    rc, result = run_module(_args(world["src"], dest, "copy"))
    assert rc == 0, result
    if recovered_action:
        assert result["recovered"] and result["recovered"]["action"] == recovered_action, result
    state = record_state(dest)
    assert state["problems"] == []
    assert state["dists"] == INTENDED
    assert [p for p, owners in state["owners"].items() if len(owners) > 1] == []
    assert leftovers(dest) == [] and not (dest / ".dflash-transplant").exists()
    assert snapshot(dest) == world["reference"]
    rc, again = run_module(_args(world["src"], dest, "copy"))
    assert rc == 0 and again["changed"] is False


CRASH_POINTS = [
    ("planned:0", "rolled_back"),
    ("backing_up:0", "rolled_back"),
    ("backing_up:100", "rolled_back"),
    ("writing_files:0", "rolled_back"),
    ("writing_files:3", "rolled_back"),
    ("writing_files:120", "rolled_back"),
    ("writing_dist_info:0", "rolled_back"),
    ("writing_dist_info:1", "rolled_back"),  # old dist-infos moved out, new not yet in
    ("writing_dist_info:3", "rolled_back"),  # some new dist-infos in place
    ("committing:0", "finished"),
    ("committing:2", "finished"),
    ("cleaning_up:0", "finished"),
    ("cleaning_up:1", "finished"),
]


@pytest.mark.parametrize("point,action", CRASH_POINTS, ids=[p for p, _a in CRASH_POINTS])
def test_named_crash_point(world, point, action):
    _reset(world["template"], world["dest"])
    rc, result = run_module(_args(world["src"], world["dest"], "copy"),
                            env_extra={"_DFLASH_TRANSPLANT_CRASH_AT": point})
    assert rc == -9, result
    journal = json.loads((world["dest"] / ".dflash-transplant" / "journal.json").read_text())
    assert journal["phase"] == point.split(":")[0]
    if action == "rolled_back":
        # check mode sees the interrupted run and touches nothing
        before = snapshot(world["dest"])
        rc, check = run_module(_args(world["src"], world["dest"], "copy"), check=True)
        assert rc == 0 and check["recovered"]["action"] == "pending"
        assert snapshot(world["dest"]) == before
    _assert_converged(world, action)


def _recover_only(dest: Path) -> dict:
    """What the next run does first, and nothing more: roll back (or finish) the interrupted run."""
    from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import open_venv
    from ansible_collections.dflash.deploy.plugins.module_utils.transplant.fastcopy import Placer
    from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import STATE_DIRNAME, Journal
    from ansible_collections.dflash.deploy.plugins.module_utils.transplant.run import Runner

    venv = open_venv(str(dest))
    journal = Journal(str(Path(venv.root) / STATE_DIRNAME))
    journal.lock()
    try:
        return Runner(journal, Placer("copy", False, 2), 0, 2).recover(venv.site_packages)
    finally:
        journal.unlock()


ROLLED_BACK = [p for p, a in CRASH_POINTS if a == "rolled_back"] + ["writing_files:30"]


@pytest.mark.parametrize("point", ROLLED_BACK)
def test_rollback_restores_the_before_state_byte_for_byte(world, point):
    """A crash in a rolling-back phase, then recovery alone: the destination is what it was before the run
    (every file's bytes and mode, every directory, link and script), and no journal is left."""
    _reset(world["template"], world["dest"])
    before = snapshot(world["dest"], skip_state=True)
    rc, _result = run_module(_args(world["src"], world["dest"], "copy"),
                             env_extra={"_DFLASH_TRANSPLANT_CRASH_AT": point})
    assert rc == -9
    if point.startswith("writing_") and point != "writing_files:0":  # the crash left the destination half-written
        assert snapshot(world["dest"], skip_state=True) != before
    recovered = _recover_only(world["dest"])
    assert recovered["action"] == "rolled_back", recovered
    assert snapshot(world["dest"], skip_state=True) == before
    assert leftovers(world["dest"]) == []
    assert not (world["dest"] / ".dflash-transplant" / "journal.json").exists()


def test_bundle_extraction_rollback_restores_the_before_state(world):
    _reset(world["template"], world["dest"])
    before = snapshot(world["dest"], skip_state=True)
    rc, _result = run_module(_args(None, world["dest"], "auto", bundle=world["bundle"]),
                             env_extra={"_DFLASH_TRANSPLANT_CRASH_AT": "writing_files:50"})
    assert rc == -9 and snapshot(world["dest"], skip_state=True) != before
    assert _recover_only(world["dest"])["action"] == "rolled_back"
    assert snapshot(world["dest"], skip_state=True) == before


def test_crash_during_bundle_extraction(world):
    _reset(world["template"], world["dest"])
    rc, _result = run_module(_args(None, world["dest"], "auto", bundle=world["bundle"]),
                             env_extra={"_DFLASH_TRANSPLANT_CRASH_AT": "writing_files:50"})
    assert rc == -9
    _assert_converged(world, "rolled_back")


def _start(world, mode, env_extra):
    link = "auto" if mode == "bundle" else mode
    payload = {"ANSIBLE_MODULE_ARGS": _args(world["src"], world["dest"], link,
                                            world["bundle"] if mode == "bundle" else None)}
    proc = subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(module_env(), **env_extra), text=True)
    proc.stdin.write(json.dumps(payload))
    proc.stdin.close()
    return proc


def _reap(proc):
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


# (phase, highest step): every step below the highest is reached by every mode on this world
MOMENTS = (("backing_up", 150), ("writing_files", 200), ("writing_dist_info", 3))


def test_kill9_at_random_moments(world, tmp_path):
    """kill -9 at 20 seeded random moments inside large copies (venv copy, bundle extraction, hardlink).

    The moment is an event, not a time: the run is held (the pause hook) when a seeded random step of a
    phase completes, while the copier threads go on with the large files; the kill -9 comes then. So every
    kill lands inside the run, and every trial must converge to the reference state."""
    rng = random.Random(20250101)
    modes = ("copy", "bundle", "hardlink")
    marker = tmp_path / "paused"
    phases = []
    for trial in range(20):
        _reset(world["template"], world["dest"])
        mode = modes[trial % 3]
        phase, top = MOMENTS[rng.randrange(len(MOMENTS))]
        moment = "%s:%d" % (phase, rng.randrange(top))
        marker.unlink(missing_ok=True)
        proc = _start(world, mode, {"_DFLASH_TRANSPLANT_PAUSE_AT": moment,
                                    "_DFLASH_TRANSPLANT_PAUSE_FILE": str(marker)})
        while not marker.exists() and proc.poll() is None:
            time.sleep(0.001)
        assert proc.poll() is None, (mode, moment, proc.returncode, proc.stdout.read())
        proc.kill()
        _reap(proc)
        assert proc.returncode == -9
        journal = json.loads((world["dest"] / ".dflash-transplant" / "journal.json").read_text())
        assert journal["phase"] == phase
        phases.append((mode, moment))
        _assert_converged(world)
    print("kills: %s" % phases)
