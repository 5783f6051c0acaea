"""transplant/run.py interrupted at every step, in-process (issue 14): what a user checks after each.

A kill -9 is modelled in-process: the crash hook (the one the integration tests drive with
``_DFLASH_TRANSPLANT_CRASH_AT``) copies the destination, journal and backup included, with ``cp -a``
at the step it names and aborts the run there; the copy is then put back in the destination's place,
which is exactly what a kill at that step leaves behind.  One worker, so nothing moves while the
copy is taken.  The checks:

- after a kill in a rolling-back phase and a recovery alone, the destination equals its before-state
  byte for byte (files, modes, symlinks, directories); the same after a run that fails and rolls
  itself back;
- after a kill in a finishing phase, recovery leaves the state an uninterrupted run leaves;
- a kill at ``<phase>:<n>`` comes after exactly n steps of that phase (n files backed up, n files
  placed, n dist-info directories in, n files deleted), so the crash tests hit what they name;
- a run whose rollback fails too says both reasons, keeps its journal, and the next run finishes
  the rollback;
- a rollback goes on past what changed under it (an old dist-info or a replaced file removed by
  someone else, a directory swapped for a link out of the venv) and restores everything else;
- the backup is its owner's only, a run with nothing to do keeps none, a stray file among the kept
  backups does not fail the run, and a file found where a new dist-info goes comes back.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import open_venv
from ansible_collections.dflash.deploy.plugins.module_utils.site_packages_transplant import (
    TransplantError,
    transplant,
)
from ansible_collections.dflash.deploy.plugins.module_utils.transplant import journal as J
from ansible_collections.dflash.deploy.plugins.module_utils.transplant import run as R
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.fastcopy import Placer
from transplant_support import add_dist, leftovers, make_venv, record_state, site_packages, snapshot

TAG = sys.implementation.cache_tag
# pkg 2.0: every file's bytes differ from 1.0's, so a placed file is told from an old one.  Sizes set the
# order files are placed in (largest first): a new directory's module, then same's, then pkg/util's
NEW = {
    "pkg/__init__.py": b"VERSION = '2.0'\n",
    "pkg/core.so": b"\x7fELF new core" * 50,
    "pkg/alias.py": b"from pkg import VERSION  # 2.0\n",
    "pkg/sub/deep/new.py": b"NEW = 1\n" * 400,
    "pkg/sub/deep/more.py": b"MORE = 2\n",
    "pkg/util/__init__.py": b"# util 2.0\n" * 100,
    "pkg-2.0.dist-info/licenses/LICENSE": b"MIT 2.0\n",
    "pkg-2.0.dist-info/licenses/NOTICE": b"notice 2.0\n",
}
OLD = {
    "pkg/__init__.py": b"VERSION = '1.0'\n",
    "pkg/core.so": b"\x7fELF old core" * 40,
    "pkg/core_impl.py": b"# 1.0 implementation\n",
    "pkg/old_only.py": b"OLD = 1\n",
    "pkg/util/__init__.py": b"",
}
SAME_NEW = b"# rebuilt\n" * 200
PAYLOAD = dict((k, v) for k, v in NEW.items() if ".dist-info/" not in k)
PAYLOAD["same/__init__.py"] = SAME_NEW
DELETED = ("pkg/core_impl.py", "pkg/old_only.py", "gone/__init__.py", "gone/data/x.txt")


def _make_world(root: Path) -> tuple[Path, Path]:
    """src (pkg 2.0, same 1.0) and dest (pkg 1.0 with a symlink and bytecode, same 1.0 with other bytes, gone)."""
    src = make_venv(root / "src")
    add_dist(src, "pkg", "2.0", NEW, scripts={"pkgtool": "print('2.0')\n"})
    add_dist(src, "same", "1.0", {"same/__init__.py": SAME_NEW})
    (site_packages(src) / "pkg" / "core.so").chmod(0o755)
    dest = make_venv(root / "dest")
    add_dist(dest, "pkg", "1.0", dict(OLD, **{"pkg/alias.py": b""}), scripts={"pkgtool": "print('1.0')\n"})
    add_dist(dest, "same", "1.0", {"same/__init__.py": b"first build\n"})  # same dist-info name, other bytes
    add_dist(dest, "gone", "0.1", {"gone/__init__.py": b"", "gone/data/x.txt": b"x"})
    sp = site_packages(dest)
    (sp / "pkg" / "alias.py").unlink()
    (sp / "pkg" / "alias.py").symlink_to("core_impl.py")  # replaced by a regular file; must come back a link
    (sp / "pkg" / "core.so").chmod(0o750)
    (sp / "pkg" / "__init__.py").chmod(0o600)
    cache = sp / "pkg" / "__pycache__"
    cache.mkdir()
    for stem in ("__init__", "old_only", "unrelated"):
        (cache / f"{stem}.{TAG}.pyc").write_bytes(b"stale " + stem.encode())
    outside = root / "outside-cache"  # a symlinked __pycache__ is never followed
    outside.mkdir()
    (outside / f"__init__.{TAG}.pyc").write_bytes(b"not ours")
    (sp / "same" / "__pycache__").symlink_to(outside)
    return src, dest


@pytest.fixture
def world(tmp_path):
    src, dest = _make_world(tmp_path)
    template = tmp_path / "template"
    subprocess.run(["cp", "-a", str(dest), str(template)], check=True)
    return {"src": src, "dest": dest, "template": template, "frozen": tmp_path / "frozen"}


def _reset(world):
    shutil.rmtree(world["dest"])
    subprocess.run(["cp", "-a", str(world["template"]), str(world["dest"])], check=True)


class _Killed(BaseException):
    """Not an Exception: nothing in the run handles it as a failure of its own."""


class _Hook:
    """The crash hook: records every (phase, step); at ``point`` freezes the destination and aborts."""

    def __init__(self, point=None, dest=None, frozen=None, error=None, action=None):
        self.phase, dummy, count = (point or "").partition(":")
        self.count = int(count or 0)
        self.dest, self.frozen, self.error, self.action = dest, frozen, error, action
        self.steps = {}
        self.fired = False

    def __call__(self, phase, done):
        self.steps.setdefault(phase, []).append(done)
        if phase == self.phase and done >= self.count and not self.fired:
            self.fired = True
            if self.action is not None:  # something else changes the destination there; the run goes on
                self.action()
                return
            if self.frozen is not None:
                subprocess.run(["cp", "-a", str(self.dest), str(self.frozen)], check=True)
            raise self.error or _Killed("%s:%d" % (phase, done))


def _run(world, hook, monkeypatch, **extra):
    monkeypatch.setattr(J, "CrashHook", lambda: hook)
    args = dict(src=str(world["src"]), distributions=["pkg", "same"], remove=["gone"], link="copy", workers=1)
    args.update(extra)
    return transplant(str(world["dest"]), **args)


def _killed_at(world, point, monkeypatch, **extra):
    """Run until the hook at point; leave the destination as a kill there leaves it.  Returns the hook."""
    hook = _Hook(point, world["dest"], world["frozen"])
    with pytest.raises(_Killed):
        _run(world, hook, monkeypatch, **extra)
    monkeypatch.setattr(J, "CrashHook", J.CrashHook)
    shutil.rmtree(world["dest"])
    os.rename(world["frozen"], world["dest"])
    return hook


def _recover_only(dest: Path) -> dict:
    """What the next run does first, and nothing more: roll back (or finish) the interrupted run."""
    venv = open_venv(str(dest))
    journal = J.Journal(str(Path(venv.root) / J.STATE_DIRNAME))
    journal.lock()
    try:
        return R.Runner(journal, Placer("copy", False, 1), 0, 1).recover(venv.site_packages)
    finally:
        journal.unlock()


def _steps(world, monkeypatch, **extra):
    """{phase: [steps reported]} of an uninterrupted run (which is then undone)."""
    hook = _Hook()
    _run(world, hook, monkeypatch, **extra)
    monkeypatch.setattr(J, "CrashHook", J.CrashHook)
    after = snapshot(world["dest"])
    _reset(world)
    return hook.steps, after


def _journal_phase(dest: Path):
    path = dest / J.STATE_DIRNAME / "journal.json"
    return json.loads(path.read_text())["phase"] if path.exists() else None


def _assert_end_state(world):
    """What an uninterrupted run leaves, as a user would look at it."""
    dest = world["dest"]
    sp = site_packages(dest)
    state = record_state(dest)
    assert state["problems"] == [] and state["dists"] == {"pkg": "2.0", "same": "1.0"}
    assert _dist_infos(dest) == ["pkg-2.0.dist-info", "same-1.0.dist-info"]
    assert {rel: (sp / rel).read_bytes() for rel in PAYLOAD} == PAYLOAD
    assert not (sp / "pkg" / "alias.py").is_symlink()
    assert sorted(p for p in DELETED if os.path.lexists(sp / p)) == [] and not (sp / "gone").exists()
    assert (sp / "pkg-2.0.dist-info" / "licenses" / "NOTICE").read_bytes() == b"notice 2.0\n"
    # bytecode of the replaced and deleted modules is gone; the rest, and what a symlink points to, stays
    assert sorted(p.name for p in (sp / "pkg" / "__pycache__").iterdir()) == [f"unrelated.{TAG}.pyc"]
    assert os.listdir(sp / "same" / "__pycache__") == [f"__init__.{TAG}.pyc"]
    src_sp = site_packages(world["src"])
    assert {rel: (sp / rel).stat().st_mode & 0o7777 for rel in ("pkg/__init__.py", "pkg/core.so")} == {
        rel: (src_sp / rel).stat().st_mode & 0o7777 for rel in ("pkg/__init__.py", "pkg/core.so")}
    script = (dest / "bin" / "pkgtool").read_text()
    assert script.startswith("#!%s/bin/python\n" % dest) and "2.0" in script
    assert leftovers(dest) == [] and not (dest / J.STATE_DIRNAME).exists()


def test_an_uninterrupted_run_leaves_the_intended_state(world, monkeypatch):
    result = _run(world, _Hook(), monkeypatch)
    assert result["changed"] is True and result["backup_kept"] is False
    assert result["moved"] == [{"name": "pkg", "from": "1.0", "to": "2.0"},
                               {"name": "same", "from": "1.0", "to": "1.0"}]
    assert result["removed"] == [{"name": "gone", "version": "0.1"}] and result["files_removed"] == 4
    _assert_end_state(world)


def test_each_phase_reports_every_step_once_in_order(world, monkeypatch):
    """The crash points a test can name: 0 as a phase starts, then 1..n, one per file or directory done."""
    steps, dummy = _steps(world, monkeypatch)
    assert steps["planned"] == [0]
    # six files replaced (pkg's __init__.py, core.so, alias.py, util/__init__.py and bin/pkgtool;
    # same/__init__.py) and four deleted
    assert steps["backing_up"] == list(range(0, 11))
    # pkg 2.0's six files and its script, same's one file: eight placed
    assert steps["writing_files"] == list(range(0, 9))
    # the old dist-infos out (1), then pkg's and same's new ones (2, 3)
    assert steps["writing_dist_info"] == [0, 1, 2, 3]
    # core_impl.py, old_only.py, gone/__init__.py, gone/data/x.txt
    assert steps["committing"] == [0, 1, 2, 3, 4]
    assert steps["cleaning_up"] == [0, 1]


def _placed(world) -> int:
    sp = site_packages(world["dest"])
    count = sum(1 for rel, data in PAYLOAD.items() if (sp / rel).is_file() and not (sp / rel).is_symlink()
                and (sp / rel).read_bytes() == data)
    script = Path(world["dest"], "bin", "pkgtool")
    return count + (script.exists() and b"2.0" in script.read_bytes())


def _in_backup(dest: Path) -> int:
    backups = list((dest / J.STATE_DIRNAME).glob("backup-*"))
    if not backups:
        return 0
    return sum(1 for p in backups[0].rglob("*") if p.is_symlink() or p.is_file())


def _dist_infos(dest: Path) -> list:
    return sorted(p.name for p in site_packages(dest).glob("*.dist-info"))


BEFORE_INFOS = ["gone-0.1.dist-info", "pkg-1.0.dist-info", "same-1.0.dist-info"]


def _killed_at_each_step(world, monkeypatch, phase, steps, **extra):
    """For each step an uninterrupted run reported in phase: the fresh destination killed there, its journal
    at that phase.  Yields (step, point, destination)."""
    for step in steps[phase]:
        _reset(world)
        point = "%s:%d" % (phase, step)
        _killed_at(world, point, monkeypatch, **extra)
        dest = world["dest"]
        assert _journal_phase(dest) == phase, point
        yield step, point, dest


@pytest.mark.parametrize("phase", ["planned", "backing_up", "writing_files", "writing_dist_info"])
def test_a_kill_in_a_rolling_back_phase_then_recovery_restores_the_before_state(world, monkeypatch, phase):
    """At every step of the phase: the kill leaves what the step count says; recovery alone restores the
    destination byte for byte and forgets the run."""
    steps, dummy = _steps(world, monkeypatch)
    before = snapshot(world["dest"], skip_state=True)
    for step, point, dest in _killed_at_each_step(world, monkeypatch, phase, steps):
        if phase == "backing_up":
            assert _in_backup(dest) == step, point
        if phase == "writing_files":
            assert _placed(world) == step, point
        if phase == "writing_dist_info":
            infos = _dist_infos(dest)
            if step == 0:
                assert infos == BEFORE_INFOS, point
            else:  # the old ones left for the backup at step 1, then one new one per step
                assert "pkg-1.0.dist-info" not in infos and "gone-0.1.dist-info" not in infos, point
                new = [n for n in ("pkg-2.0.dist-info", "same-1.0.dist-info") if n in infos]
                assert len(new) == step - 1, (point, infos)
        recovered = _recover_only(dest)
        assert recovered == {"run_id": recovered["run_id"], "phase": phase, "action": "rolled_back",
                             "phase_index": J.PHASES.index(phase)}, point
        assert snapshot(dest, skip_state=True) == before, point
        assert leftovers(dest) == [] and _journal_phase(dest) is None, point
        assert os.readlink(site_packages(dest) / "pkg" / "alias.py") == "core_impl.py"


@pytest.mark.parametrize("phase", ["committing", "cleaning_up"])
def test_a_kill_in_a_finishing_phase_then_recovery_finishes_the_run(world, monkeypatch, phase):
    steps, after = _steps(world, monkeypatch)
    for step, point, dest in _killed_at_each_step(world, monkeypatch, phase, steps):
        sp = site_packages(dest)
        if phase == "committing":
            gone = [p for p in DELETED if not (sp / p).exists()]
            assert len(gone) == step, (point, gone)
        if phase == "cleaning_up":
            assert (_in_backup(dest) > 0) == (step == 0), point  # dropped (keep_backups 0) at step 1
        recovered = _recover_only(dest)
        assert recovered["action"] == "finished" and recovered["phase"] == phase, point
        assert recovered["phase_index"] == J.PHASES.index(phase)
        _assert_end_state(world)
        assert snapshot(dest) == after, point


@pytest.mark.parametrize("point", ["backing_up:2", "writing_files:0", "writing_files:4", "writing_dist_info:1",
                                   "writing_dist_info:2"])
def test_a_run_that_fails_rolls_itself_back(world, monkeypatch, point):
    """A failure inside the run (here a disk error at the named step): the error is the failure's, and the
    destination is what it was before, with no journal or backup left."""
    before = snapshot(world["dest"])
    hook = _Hook(point, error=OSError(errno.EIO, "Input/output error", "disk"))
    with pytest.raises(TransplantError, match="Input/output error"):
        _run(world, hook, monkeypatch)
    assert snapshot(world["dest"]) == before


def test_a_failed_rollback_says_both_reasons_and_the_next_run_finishes_it(world, monkeypatch):
    dest = world["dest"]
    before = snapshot(dest, skip_state=True)
    sp = str(site_packages(dest))
    real_rename = os.rename
    broken = []

    def rename(src, dst, *args, **kwargs):
        # the rollback moving the old pkg dist-info back fails once, as on a failing disk
        if hook.fired and not broken and str(dst) == sp + "/pkg-1.0.dist-info":
            broken.append(dst)
            raise OSError(errno.EIO, "Input/output error", str(dst))
        return real_rename(src, dst, *args, **kwargs)

    hook = _Hook("writing_dist_info:2", error=OSError(errno.ENOSPC, "No space left on device", "x"))
    monkeypatch.setattr(R.os, "rename", rename)
    with pytest.raises(TransplantError) as info:
        _run(world, hook, monkeypatch)
    monkeypatch.setattr(R.os, "rename", real_rename)
    msg = str(info.value)
    state_dir = str(dest / J.STATE_DIRNAME)
    assert msg.startswith("run failed ("), msg
    assert "No space left on device" in msg and "and rolling back failed too (" in msg and "Input/output error" in msg
    assert msg.endswith("the journal in %s will finish the rollback on the next run" % state_dir), msg
    assert broken and _journal_phase(dest) == "writing_dist_info"
    assert _recover_only(dest)["action"] == "rolled_back"
    assert snapshot(dest, skip_state=True) == before and leftovers(dest) == []


def _meddled(world, monkeypatch, point, action, **extra):
    """A run during which, at point, something else changes the destination: its result."""
    return _run(world, _Hook(point, action=action), monkeypatch, **extra)


def test_a_file_gone_before_its_backup_does_not_stop_the_run(world, monkeypatch):
    dummy, after = _steps(world, monkeypatch)
    sp = site_packages(world["dest"])
    result = _meddled(world, monkeypatch, "backing_up:0",
                      lambda: [(sp / p).unlink() for p in ("pkg/old_only.py", "pkg/__init__.py")])
    assert result["changed"] is True
    assert snapshot(world["dest"]) == after


def test_a_directory_made_by_someone_else_mid_run_is_used(world, monkeypatch):
    dummy, after = _steps(world, monkeypatch)
    sp = site_packages(world["dest"])
    _meddled(world, monkeypatch, "writing_files:0", lambda: (sp / "pkg" / "sub").mkdir(mode=0o755))
    assert snapshot(world["dest"]) == after


def test_a_directory_removed_mid_run_is_made_again(world, monkeypatch):
    dummy, after = _steps(world, monkeypatch)
    sp = site_packages(world["dest"])
    _meddled(world, monkeypatch, "writing_files:0", lambda: shutil.rmtree(sp / "pkg" / "util"))
    assert snapshot(world["dest"]) == after


def test_what_appears_at_a_dist_info_name_mid_run_is_kept_in_the_backup(world, monkeypatch):
    """After the old dist-infos went to the backup, something makes same-1.0.dist-info again (a pip run
    beside this one): the new dist-info goes in, the stray one is kept in the backup beside the old one."""
    sp = site_packages(world["dest"])

    def stray():
        (sp / "same-1.0.dist-info").mkdir()
        (sp / "same-1.0.dist-info" / "STRAY").write_bytes(b"stray")

    result = _meddled(world, monkeypatch, "writing_dist_info:1", stray, keep_backups=1)
    assert result["backup_kept"] is True
    saved = Path(result["backup"]) / "site-packages"
    assert (saved / "same-1.0.dist-info.leftover" / "STRAY").read_bytes() == b"stray"
    assert (saved / "same-1.0.dist-info" / "RECORD").is_file()  # the old one, as it was
    assert not (sp / "same-1.0.dist-info" / "STRAY").exists()
    assert record_state(world["dest"])["problems"] == []


def test_backups_are_never_kept_through_a_symlink(world, monkeypatch, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = world["dest"] / J.STATE_DIRNAME
    state.mkdir(mode=0o700)
    (state / "backups").symlink_to(elsewhere)
    with pytest.raises(TransplantError) as info:
        _run(world, _Hook(), monkeypatch, keep_backups=1)
    assert str(info.value) == "%s is a symbolic link; refusing to keep backups through it" % (state / "backups")
    assert list(elsewhere.iterdir()) == []


def test_where_hardlinks_are_refused_the_backup_is_copied_and_restores_byte_for_byte(world, monkeypatch):
    """A filesystem that refuses link(2) (EPERM, as with protected hardlinks): the backup is made of
    copies, symlinks stay symlinks, and recovery after a kill restores the before-state."""
    before = snapshot(world["dest"], skip_state=True)

    def no_link(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(R.os, "link", no_link)
    for point in ("writing_files:0", "writing_dist_info:3"):
        _reset(world)
        _killed_at(world, point, monkeypatch)
        backup = next((world["dest"] / J.STATE_DIRNAME).glob("backup-*"))
        sp = site_packages(world["dest"])
        assert os.readlink(backup / "site-packages" / "pkg" / "alias.py") == "core_impl.py"
        assert (backup / "site-packages" / "pkg" / "core.so").stat().st_ino != (sp / "pkg" / "core.so").stat().st_ino
        assert _recover_only(world["dest"])["action"] == "rolled_back"
        assert snapshot(world["dest"], skip_state=True) == before, point


@pytest.mark.parametrize("point", ["writing_dist_info:1", "writing_dist_info:2", "writing_dist_info:3"])
def test_a_file_where_an_incoming_dist_info_goes_comes_back_after_a_kill_or_a_failed_run(world, monkeypatch, point):
    """A regular file (not a directory) sits at pkg 2.0's dist-info name: the run keeps it in the backup
    while the new dist-info goes in; a rollback, by recovery after a kill or by the failing run itself,
    puts it back, and the destination is what it was, byte for byte."""
    for venv in (world["dest"], world["template"]):
        (site_packages(venv) / "pkg-2.0.dist-info").write_bytes(b"left by another tool\n")
    before = snapshot(world["dest"], skip_state=True)
    _killed_at(world, point, monkeypatch)
    assert _recover_only(world["dest"])["action"] == "rolled_back"
    assert snapshot(world["dest"], skip_state=True) == before, point
    _reset(world)
    hook = _Hook(point, error=OSError(errno.EIO, "Input/output error", "disk"))
    with pytest.raises(TransplantError, match="Input/output error"):
        _run(world, hook, monkeypatch)
    assert snapshot(world["dest"]) == before, point


def test_in_hardlink_mode_each_file_placed_is_one_step(world, monkeypatch):
    """Placed in the run's own thread (new files linked at once, replaced ones through a temp name): the
    crash points count one per file all the same."""
    steps, after = _steps(world, monkeypatch, link="hardlink")
    assert steps["writing_files"] == list(range(0, 9))
    sp = site_packages(world["dest"])
    assert after[str((sp / "pkg" / "sub" / "deep" / "new.py").relative_to(world["dest"]))][0] == "file"


def test_the_backup_is_readable_by_its_owner_only(world, monkeypatch):
    _killed_at(world, "backing_up:1", monkeypatch)
    backup = next((world["dest"] / J.STATE_DIRNAME).glob("backup-*"))
    assert backup.stat().st_mode & 0o7777 == 0o700


def test_a_run_with_nothing_to_do_keeps_no_backup(world, monkeypatch):
    _run(world, _Hook(), monkeypatch)
    result = _run(world, _Hook(), monkeypatch)
    assert result["changed"] is False and result["backup_kept"] is False and result["backup"] is None


def test_a_stray_file_among_the_kept_backups_does_not_fail_the_run(world, monkeypatch):
    """Rotation drops the oldest kept backups; a file someone left in backups/ sorts first and stays."""
    state = world["dest"] / J.STATE_DIRNAME
    (state / "backups").mkdir(parents=True)
    (state / "backups" / "0-notes.txt").write_bytes(b"mine")
    result = _run(world, _Hook(), monkeypatch, keep_backups=1)
    assert result["backup_kept"] is True
    assert sorted(os.listdir(state / "backups")) == ["0-notes.txt", os.path.basename(result["backup"])]
    assert (state / "backups" / "0-notes.txt").read_bytes() == b"mine"
    assert record_state(world["dest"])["dists"] == {"pkg": "2.0", "same": "1.0"}


class _Script(_Hook):
    """The crash hook running an action at each point named: {point: callable}; an action may raise."""

    def __init__(self, actions):
        super().__init__()
        self.actions = dict(actions)

    def __call__(self, phase, done):
        super().__call__(phase, done)
        action = self.actions.pop("%s:%d" % (phase, done), None)
        if action is not None:
            action()


def _disk_error():
    raise OSError(errno.EIO, "Input/output error", "disk")


def _failed_after(world, monkeypatch, meddle):
    """A run during which meddle() removes something before it is backed up, and which then fails at
    writing_dist_info:2: the destination's snapshot before the run, and the error."""
    before = snapshot(world["dest"])
    script = _Script({"backing_up:0": meddle, "writing_dist_info:2": _disk_error})
    with pytest.raises(TransplantError) as info:
        _run(world, script, monkeypatch)
    assert not script.actions, "both actions ran"
    assert "Input/output error" in str(info.value) and "rolling back failed" not in str(info.value)
    assert _journal_phase(world["dest"]) is None and leftovers(world["dest"]) == []
    return before


def test_an_old_dist_info_removed_mid_run_does_not_fail_the_rollback(world, monkeypatch):
    gone = site_packages(world["dest"]) / "gone-0.1.dist-info"
    before = _failed_after(world, monkeypatch, lambda: shutil.rmtree(gone))
    prefix = str(gone.relative_to(world["dest"]))
    assert snapshot(world["dest"]) == {k: v for k, v in before.items() if not k.startswith(prefix)}


def test_a_replaced_file_removed_before_its_backup_does_not_stop_the_rollback(world, monkeypatch):
    """same/__init__.py goes before it is backed up, so it cannot come back; every other file does."""
    removed = site_packages(world["dest"]) / "same" / "__init__.py"
    before = _failed_after(world, monkeypatch, removed.unlink)
    key = str(removed.relative_to(world["dest"]))
    assert {k: v for k, v in snapshot(world["dest"]).items() if k != key} == \
        {k: v for k, v in before.items() if k != key}


def test_recovery_restores_a_replaced_file_removed_after_the_kill(world, monkeypatch):
    before = snapshot(world["dest"], skip_state=True)
    _killed_at(world, "writing_files:8", monkeypatch)
    (site_packages(world["dest"]) / "pkg" / "util" / "__init__.py").unlink()
    assert _recover_only(world["dest"])["action"] == "rolled_back"
    assert snapshot(world["dest"], skip_state=True) == before


def test_recovery_leaves_a_path_that_now_leads_out_of_the_venv_and_restores_the_rest(world, monkeypatch, tmp_path):
    """After the kill, the directory the run made for pkg/sub is swapped for a link out of the venv: what
    lies behind it is not touched, every other file comes back."""
    before = snapshot(world["dest"], skip_state=True)
    _killed_at(world, "writing_files:8", monkeypatch)
    sub = site_packages(world["dest"]) / "pkg" / "sub"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(sub), str(elsewhere))
    sub.symlink_to(elsewhere)
    assert _recover_only(world["dest"])["action"] == "rolled_back"
    key = str(sub.relative_to(world["dest"]))
    assert snapshot(world["dest"], skip_state=True) == dict(before, **{key: ("link", str(elsewhere))})
    assert (elsewhere / "deep" / "new.py").read_bytes() == NEW["pkg/sub/deep/new.py"]


def test_a_kill_while_hardlinking_then_recovery_restores_the_before_state(world, monkeypatch):
    """Hardlink mode places files in the run's own thread: first those of existing directories, while the
    directory maker makes pkg/sub/deep, so none lands there before all the others are in."""
    steps, dummy = _steps(world, monkeypatch, link="hardlink")
    before = snapshot(world["dest"], skip_state=True)
    deep = site_packages(world["dest"]) / "pkg" / "sub" / "deep"
    for step, point, dest in _killed_at_each_step(world, monkeypatch, "writing_files", steps, link="hardlink"):
        assert _placed(world) == step, point
        in_deep = sorted(os.listdir(deep)) if deep.is_dir() else []
        assert in_deep == (["new.py"] if step == 7 else ["more.py", "new.py"] if step == 8 else []), point
        assert _recover_only(dest)["action"] == "rolled_back", point
        assert snapshot(dest, skip_state=True) == before, point


def test_a_failing_run_reports_its_own_error_not_a_later_one_of_the_directory_maker(world, monkeypatch):
    """Placing fails (a disk error) after the directory maker failed too (pkg/sub refused): the run says
    the placing error, which stopped it, and rolls back."""
    before = snapshot(world["dest"])
    sub = str(site_packages(world["dest"]) / "pkg" / "sub")
    real_mkdir = os.mkdir
    refused = threading.Event()

    def mkdir(path, *args, **kwargs):
        if str(path) == sub:
            refused.set()
            raise OSError(errno.EACCES, "Permission denied", sub)
        return real_mkdir(path, *args, **kwargs)

    def fail_after_the_maker():
        assert refused.wait(10)
        time.sleep(0.2)  # the maker's thread hands its error over and ends
        _disk_error()

    monkeypatch.setattr(R.os, "mkdir", mkdir)
    with pytest.raises(TransplantError) as info:
        _run(world, _Script({"writing_files:1": fail_after_the_maker}), monkeypatch, link="hardlink")
    assert "Input/output error" in str(info.value) and "Permission denied" not in str(info.value)
    assert snapshot(world["dest"]) == before


def test_removing_data_files_under_the_venv_root_warns_of_nothing(tmp_path, monkeypatch):
    """A leaving distribution's share/ file (a wheel data-scheme file, as sympy's man page): its emptied
    directory is pruned up to the venv root, and no path of the venv is reported as outside it."""
    src = make_venv(tmp_path / "src")
    add_dist(src, "pkg", "2.0", {"pkg/__init__.py": b"2"})
    dest = make_venv(tmp_path / "dest")
    add_dist(dest, "pkg", "1.0", {"pkg/__init__.py": b"1"})
    add_dist(dest, "gone", "0.1", {"gone/__init__.py": b"", "../../../share/gone/man1/gone.1": b"man"})
    (dest / "share" / "other").mkdir()
    monkeypatch.setattr(J, "CrashHook", _Hook)
    result = transplant(str(dest), src=str(src), distributions=["pkg"], remove=["gone"], link="copy", workers=1)
    assert result["removed"] == [{"name": "gone", "version": "0.1"}] and result["warnings_list"] == []
    assert sorted(os.listdir(dest / "share")) == ["other"]


@pytest.mark.parametrize("step", range(9))
def test_recovery_keeps_an_empty_directory_that_was_there_before(world, monkeypatch, step):
    """pkg/sub is there, empty, before the run puts pkg/sub/deep/*.py under it: after a kill at any step
    of placing the files (0: none placed yet, 8: all) and recovery, it is still there (only the
    directories the run made go)."""
    for venv in (world["dest"], world["template"]):
        (site_packages(venv) / "pkg" / "sub").mkdir()
    before = snapshot(world["dest"], skip_state=True)
    _killed_at(world, "writing_files:%d" % step, monkeypatch)
    assert _placed(world) == step
    assert _recover_only(world["dest"])["action"] == "rolled_back"
    assert snapshot(world["dest"], skip_state=True) == before
