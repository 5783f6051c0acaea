"""The pause hook holds a transplant in a phase (so a test can stop the host there); unset it does nothing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import CrashHook, JournalError
from transplant_support import module_env

CHILD = """
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import CrashHook
hook = CrashHook()
hook("writing_files", 0)
print("passed 0", flush=True)
hook("writing_files", 1)
print("passed 1", flush=True)
"""


def test_pause_writes_the_marker_and_waits_in_the_named_phase(tmp_path):
    marker = tmp_path / "paused"
    env = module_env()
    env.update({"_DFLASH_TRANSPLANT_PAUSE_AT": "writing_files:1", "_DFLASH_TRANSPLANT_PAUSE_FILE": str(marker)})
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        for attempt in range(200):  # noqa: B007
            # the marker's text, not its name: under load the file can be seen before its line is written
            if (marker.exists() and marker.read_text().strip()) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert marker.read_text().split()[0] == "writing_files:1"
        assert proc.poll() is None  # still waiting: the step after the pause point never ran
    finally:
        proc.send_signal(signal.SIGKILL)
        out = proc.communicate()[0]
    assert out == "passed 0\n"


def test_unset_hooks_do_nothing_and_bad_phases_are_refused(monkeypatch):
    monkeypatch.delenv("_DFLASH_TRANSPLANT_PAUSE_AT", raising=False)
    monkeypatch.delenv("_DFLASH_TRANSPLANT_CRASH_AT", raising=False)
    hook = CrashHook()
    hook("writing_files", 5)  # returns
    with pytest.raises(JournalError, match="_DFLASH_TRANSPLANT_PAUSE_AT names unknown phase"):
        CrashHook(spec="", pause="sleeping")
    assert os.getpid()  # still alive
