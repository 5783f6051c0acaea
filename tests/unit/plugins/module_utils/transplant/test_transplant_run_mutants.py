"""transplant_run's small rules that the cosmic-ray run of transplant/run.py found unguarded (issue 14).

What a user relies on: a run never deletes or lists outside the venv nor inside its own state directory
(Guard); emptied directories are pruned up to, never past, the site-packages/bin roots; a file already at
the destination is replaced by the new one, a symlink stays a symlink; run ids sort by start time.
"""
from __future__ import annotations

import os
import re

from ansible_collections.dflash.deploy.plugins.module_utils.transplant import run as R


def test_guard_allows_the_venv_only_and_never_the_state_directory(tmp_path):
    venv = tmp_path / "venv"
    state = venv / ".dflash-transplant"
    (venv / "lib" / "site").mkdir(parents=True)
    (state / "backup-1").mkdir(parents=True)
    (tmp_path / "venv2").mkdir()
    (venv / "lib" / "out").symlink_to(tmp_path / "venv2")
    guard = R.Guard(str(venv), str(state))
    assert guard.dir_ok(str(venv)) and guard.dir_ok(str(venv / "lib" / "site"))
    assert not guard.dir_ok(str(tmp_path / "venv2"))  # a sibling whose name starts like the venv's
    assert not guard.dir_ok(str(venv / "lib" / "out"))  # a symlink out of the venv
    assert not guard.dir_ok(str(state)) and not guard.dir_ok(str(state / "backup-1"))
    assert not guard.dir_ok(str(tmp_path))
    assert guard.ok(str(venv / "lib" / "site" / "a.py")) is True
    assert guard.ok(str(state / "journal.json")) is False
    assert guard.refused == [str(state / "journal.json")]


def test_prune_removes_emptied_parents_up_to_the_stop_directory(tmp_path):
    site = tmp_path / "site"
    (site / "pkg" / "sub" / "deep").mkdir(parents=True)
    (site / "pkg" / "other").mkdir()
    (site / "pkg" / "other" / "keep.py").write_text("")
    (site / "lonely" / "a").mkdir(parents=True)
    gone = [str(site / "pkg" / "sub" / "deep" / "x.py"), str(site / "lonely" / "a" / "y.py")]
    R._prune_dirs(gone, {str(site)})
    assert sorted(p.relative_to(site).as_posix() for p in site.rglob("*")) == [
        "pkg", "pkg/other", "pkg/other/keep.py"]
    assert site.is_dir()  # the stop directory itself stays, even when empty
    R._prune_dirs([str(site / "pkg" / "other" / "keep.py")], {str(site)})
    assert (site / "pkg" / "other").is_dir()  # not empty: kept


def test_prune_leaves_what_the_guard_refuses(tmp_path):
    venv = tmp_path / "venv"
    state = venv / "state"
    (state / "empty").mkdir(parents=True)
    (venv / "site" / "empty").mkdir(parents=True)
    guard = R.Guard(str(venv), str(state))
    R._prune_dirs([str(state / "empty" / "f"), str(venv / "site" / "empty" / "f")], {str(venv)}, guard)
    assert (state / "empty").is_dir() and not (venv / "site" / "empty").exists()
    assert str(state / "empty") in guard.refused


def test_link_or_copy_replaces_what_is_there_and_keeps_symlinks(tmp_path):
    src = tmp_path / "new.so"
    src.write_bytes(b"new")
    dst = tmp_path / "dest.so"
    dst.write_bytes(b"old")
    R._link_or_copy(str(src), str(dst))
    assert dst.read_bytes() == b"new" and os.path.samefile(src, dst)
    link = tmp_path / "link.so"
    link.symlink_to("new.so")
    R._link_or_copy(str(link), str(tmp_path / "linked.so"))
    assert os.readlink(tmp_path / "linked.so") == "new.so"  # the link itself, not its target
    R._link_or_copy(str(link), str(dst))  # over an existing file, still the link
    assert os.readlink(dst) == "new.so"


def test_run_ids_carry_the_start_time_to_the_microsecond(monkeypatch):
    monkeypatch.setattr(R.time, "time", lambda: 1796073150.654321)
    run_id = R.new_run_id()
    assert re.fullmatch(r"20261130T\d{6}65432[01]-[0-9a-f]{6}", run_id), run_id
    assert R.backup_root("/v/.dflash-transplant", run_id) == "/v/.dflash-transplant/backup-" + run_id
    monkeypatch.setattr(R.time, "time", lambda: 1796073150.654399)
    assert R.new_run_id() > run_id


def test_prune_keeps_the_stop_directory_when_it_becomes_empty(tmp_path):
    site = tmp_path / "venv" / "site"
    (site / "only" / "deep").mkdir(parents=True)
    R._prune_dirs([str(site / "only" / "deep" / "x.py")], {str(site)})
    assert site.is_dir() and list(site.iterdir()) == []
    assert (tmp_path / "venv").is_dir()
