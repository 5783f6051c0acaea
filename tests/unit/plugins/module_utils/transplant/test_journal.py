"""transplant/journal.py: phases, atomic writes, lock, crash hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import (
    COMMIT_PHASE,
    PHASES,
    CrashHook,
    Journal,
    JournalError,
    is_committed,
    write_atomic,
)
from transplant_support import module_env


def test_phase_order():
    assert PHASES == ("planned", "backing_up", "writing_files", "writing_dist_info", "committing", "cleaning_up")
    assert [is_committed(p) for p in PHASES] == [False, False, False, False, True, True]
    assert COMMIT_PHASE == "committing"


def test_begin_phase_finish(tmp_path):
    journal = Journal(str(tmp_path / "state"))
    journal.lock()
    assert journal.pending() is None
    journal.begin("run1", {"run_id": "run1", "writes": []})
    state, plan = journal.pending()
    assert state["phase"] == "planned" and plan["run_id"] == "run1"
    journal.set_phase("writing_files")
    assert Journal(str(tmp_path / "state")).pending()[0]["phase"] == "writing_files"
    journal.finish()
    assert journal.pending() is None
    assert sorted(os.listdir(tmp_path / "state")) == []  # the lock lives on the venv directory itself
    journal.unlock()
    assert not (tmp_path / "state").exists()  # nothing left behind once the run is over


def test_lock_is_exclusive(tmp_path):
    first = Journal(str(tmp_path / "s"))
    first.lock()
    assert not (tmp_path / "s").exists()  # taking the lock creates nothing
    with pytest.raises(JournalError, match="another transplant"):
        Journal(str(tmp_path / "s")).lock()
    first.unlock()
    second = Journal(str(tmp_path / "s"))
    second.lock()
    second.unlock()


def test_corrupt_journal(tmp_path):
    (tmp_path / "journal.json").write_text("{not json")
    with pytest.raises(JournalError, match="unreadable"):
        Journal(str(tmp_path)).pending()
    (tmp_path / "journal.json").write_text(json.dumps({"run_id": "x", "phase": "bogus", "plan": "p"}))
    with pytest.raises(JournalError, match="unknown phase"):
        Journal(str(tmp_path)).pending()


def test_write_atomic_replaces(tmp_path):
    target = tmp_path / "f"
    write_atomic(str(target), b"one")
    inode = target.stat().st_ino
    write_atomic(str(target), b"two")
    assert target.read_bytes() == b"two" and target.stat().st_ino != inode
    assert os.listdir(tmp_path) == ["f"]


def test_crash_hook_parsing():
    assert CrashHook("").phase is None
    hook = CrashHook("writing_files:7")
    assert (hook.phase, hook.count) == ("writing_files", 7)
    hook("writing_files", 3)  # below the count: nothing happens
    hook("committing", 100)
    with pytest.raises(JournalError):
        CrashHook("nonsense")


def test_crash_hook_kills():
    code = ("from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import CrashHook\n"
            "CrashHook('committing:2')('committing', 2)\nprint('survived')")
    proc = subprocess.run([sys.executable, "-c", code], env=module_env(), capture_output=True, text=True,
                          check=False)
    assert proc.returncode == -9 and "survived" not in proc.stdout
