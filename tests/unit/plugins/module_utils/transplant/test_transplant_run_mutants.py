"""transplant_run's small rules that the cosmic-ray run of transplant/run.py found unguarded (issue 14).

What a user relies on: a run never deletes or lists outside the venv nor inside its own state directory
(Guard); emptied directories are pruned up to, never past, the site-packages/bin roots; a file already at
the destination is replaced by the new one, a symlink stays a symlink; run ids sort by start time and
differ between processes; the stale bytecode purge removes the bytecode of replaced or deleted modules
only; a rollback goes on past what it must leave alone; the directory maker lets a file be placed as
soon as its own directory exists, hands over what making one raised, and makes nothing once closed.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.transplant import journal as J
from ansible_collections.dflash.deploy.plugins.module_utils.transplant import run as R
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.fastcopy import Placer

TAG = sys.implementation.cache_tag


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


def test_run_ids_of_processes_starting_in_the_same_microsecond_differ(monkeypatch):
    monkeypatch.setattr(R.time, "time", lambda: 1796073150.654321)
    ids = set()
    for pid in range(1, 4097):
        monkeypatch.setattr(R.os, "getpid", lambda pid=pid: pid)
        run_id = R.new_run_id()
        assert re.fullmatch(r"20261130T\d{6}654321-[0-9a-f]{6}", run_id), run_id
        ids.add(run_id)
    assert len(ids) == 4096


def test_prune_goes_on_past_a_directory_the_guard_refuses(tmp_path):
    """Directories reached through a link out of the venv are left, deepest first; a shallower emptied one
    elsewhere is still pruned."""
    venv = tmp_path / "venv"
    site = venv / "site"
    (tmp_path / "outside" / "a" / "b").mkdir(parents=True)
    site.mkdir(parents=True)
    (site / "out").symlink_to(tmp_path / "outside")
    (site / "emptied").mkdir()
    guard = R.Guard(str(venv), str(venv / "state"))
    R._prune_dirs([str(site / "out" / "a" / "b" / "f.py"), str(site / "emptied" / "g.py")], {str(site)}, guard)
    assert not (site / "emptied").exists()
    assert (tmp_path / "outside" / "a" / "b").is_dir()
    assert guard.refused == [str(site / "out" / "a" / "b"), str(site / "out" / "a")]


def _runner(tmp_path):
    """A Runner of a bare venv-like tree (state directory inside it), and its site-packages."""
    venv = tmp_path / "venv"
    sp = venv / "lib" / "python3" / "site-packages"
    sp.mkdir(parents=True)
    (venv / "bin").mkdir()
    return R.Runner(J.Journal(str(venv / J.STATE_DIRNAME)), Placer("copy", False, 1), 0, 1), sp


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_commit_purges_the_bytecode_of_replaced_and_deleted_modules_only(tmp_path):
    runner, sp = _runner(tmp_path)
    outside = tmp_path / "outside"
    (outside / "__pycache__").mkdir(parents=True)
    (outside / "__pycache__" / f"x.{TAG}.pyc").write_bytes(b"not ours")
    (sp / "out").symlink_to(outside)  # a directory reached through a link out of the venv
    pyc = {
        "pkg/__pycache__": ["mod", "settings.local", "core", "other", "claimed"],
        "solo/__pycache__": ["only"],  # all of it stale: the emptied __pycache__ goes too
        "newpkg/__pycache__": ["fresh"],  # compiled from the new file in a directory the run made
    }
    for cache, stems in pyc.items():
        (sp / cache).mkdir(parents=True)
        for stem in stems:
            (sp / cache / f"{stem}.{TAG}.pyc").write_bytes(b"bytecode")
    for rel in ("pkg/mod.py", "pkg/core.so", "pkg/claimed.py", "solo/only.py", "newpkg/fresh.py"):
        (sp / rel).write_bytes(b"new")
    jplan = {
        "site_packages": str(sp),
        "writes": [["out/x.py", True], ["pkg/mod.py", True], ["pkg/core.so", True], ["pkg/claimed.py", True],
                   ["solo/only.py", True], ["newpkg/fresh.py", False]],
        "deletes": ["pkg/settings.local.py"],  # already gone from disk: removed by hand
        "final_claims": [f"pkg/__pycache__/claimed.{TAG}.pyc"],
        "new_dirs": [str(sp / "newpkg")],
    }
    runner.commit(jplan)
    assert _files(sp) == sorted([
        "newpkg", "newpkg/__pycache__", f"newpkg/__pycache__/fresh.{TAG}.pyc", "newpkg/fresh.py",
        "out",
        "pkg", "pkg/__pycache__", f"pkg/__pycache__/claimed.{TAG}.pyc", f"pkg/__pycache__/core.{TAG}.pyc",
        f"pkg/__pycache__/other.{TAG}.pyc", "pkg/claimed.py", "pkg/core.so", "pkg/mod.py",
        "solo", "solo/only.py"])
    assert (outside / "__pycache__" / f"x.{TAG}.pyc").read_bytes() == b"not ours"
    assert runner.guard.refused == [str(sp / "out" / "__pycache__" / "x")]


def test_rollback_removes_the_directories_it_made_past_one_the_guard_refuses(tmp_path):
    """new_dirs are removed deepest first when empty; one reached through a link out of the venv is left."""
    runner, sp = _runner(tmp_path)
    (tmp_path / "outside" / "c").mkdir(parents=True)
    (sp / "a").mkdir()
    (sp / "b").symlink_to(tmp_path / "outside")
    jplan = {"site_packages": str(sp), "run_id": "r1", "dist_info_writes": [], "old_dist_infos": [],
             "writes": [], "new_dirs": [str(sp / "a"), str(sp / "b" / "c")]}
    runner.rollback(jplan)
    assert _files(sp) == ["b"] and (tmp_path / "outside" / "c").is_dir()
    assert runner.guard.refused == [str(sp / "b" / "c")]


# -- the directory maker ---------------------------------------------------------------------------------
@pytest.fixture
def gates(monkeypatch):
    """os.mkdir of a path named here waits until its Event is set (a slow disk); others run at once."""
    real = os.mkdir
    named = {}

    def mkdir(path, *args, **kwargs):
        gate = named.get(str(path))
        if gate is not None:
            assert gate.wait(10)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(R.os, "mkdir", mkdir)
    return named


def _background(func):
    """func() on a daemon thread; returns (thread, {'value' or 'error'})."""
    out = {}

    def run():
        try:
            out["value"] = func()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _waited_until_released(maker, gate, directory):
    """wait() for a file in directory blocks while its mkdir is held, returns once it is made."""
    thread, out = _background(lambda: (maker.wait(directory + "/f.py"), os.path.isdir(directory))[1])
    thread.join(0.3)
    assert thread.is_alive(), "wait() returned before %s was made" % directory
    gate.set()
    thread.join(5)
    assert not thread.is_alive() and out == {"value": True}, out


def test_dir_maker_lets_a_file_go_as_soon_as_its_own_directory_exists(tmp_path, gates):
    a, b = str(tmp_path / "a"), str(tmp_path / "a" / "b")
    gates[a], gates[b] = threading.Event(), threading.Event()
    maker = R._DirMaker([a, b])
    try:
        _waited_until_released(maker, gates[a], a)  # b is still held: no need to wait for it
        _waited_until_released(maker, gates[b], b)
    finally:
        gates[a].set()
        gates[b].set()
        maker.close()
    assert maker.wait(b + "/g.py") is None  # made: returns at once
    assert maker.wait(str(tmp_path / "f.py")) is None  # not the maker's: returns at once


def test_dir_maker_hands_over_what_making_a_directory_raised(tmp_path):
    ok, taken, below = str(tmp_path / "ok"), str(tmp_path / "taken"), str(tmp_path / "taken" / "below")
    (tmp_path / "taken").write_bytes(b"a file, not a directory")
    maker = R._DirMaker([ok, taken, below])
    maker.wait(ok + "/f.py")
    assert os.path.isdir(ok)
    for directory in (taken, below):
        thread, out = _background(lambda directory=directory: maker.wait(directory + "/f.py"))
        thread.join(5)
        assert not thread.is_alive(), "wait() for %s never returned" % directory
        assert isinstance(out.get("error"), FileExistsError) and out["error"].filename == taken, out
    with pytest.raises(FileExistsError):
        maker.close()
    maker = R._DirMaker([taken])
    maker.close(raise_error=False)  # what a failing run calls before its rollback: its own error goes on


def test_dir_maker_makes_nothing_once_closed(tmp_path, gates):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    gates[a] = threading.Event()
    maker = R._DirMaker([a, b])
    closing, out = _background(maker.close)
    deadline = time.monotonic() + 10
    while not maker.stop and time.monotonic() < deadline:  # close() has asked the thread to stop
        time.sleep(0.01)
    gates[a].set()  # the mkdir under way finishes; nothing after it starts
    closing.join(5)
    assert not closing.is_alive() and out == {"value": None}
    assert os.path.isdir(a) and not os.path.exists(b)
    with pytest.raises(R.RunError) as info:
        maker.wait(b + "/f.py")
    assert str(info.value) == "directory %s was not made" % b


def test_dir_maker_orders_files_of_existing_directories_first_then_as_their_directories_are_made(tmp_path):
    first, second = str(tmp_path / "n0"), str(tmp_path / "n0" / "n1")
    maker = R._DirMaker([first, second])
    maker.close()
    there = str(tmp_path)
    assert list(maker.order([second, there, first, there + "/x", second])) == [1, 3, 2, 0, 4]
    assert list(R._DirMaker([]).order([second, there])) == [0, 1]


def test_rollback_of_a_journal_without_new_dirs_prunes_what_its_files_emptied(tmp_path):
    """A journal written before the directories made were recorded: the files the run added go, and so do
    the directories that leaves empty (up to site-packages)."""
    runner, sp = _runner(tmp_path)
    (sp / "pkg" / "sub").mkdir(parents=True)
    (sp / "pkg" / "sub" / "new.py").write_bytes(b"new")
    (sp / "pkg" / "kept.py").write_bytes(b"old")
    jplan = {"site_packages": str(sp), "run_id": "r1", "dist_info_writes": [], "old_dist_infos": [],
             "writes": [["pkg/sub/new.py", False]]}
    runner.rollback(jplan)
    assert _files(sp) == ["pkg", "pkg/kept.py"]
