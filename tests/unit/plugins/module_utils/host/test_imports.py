"""host/imports.py: the import test's verdicts on an import that hangs, an interpreter that dies, bad environments."""
from __future__ import annotations

import sys
import time

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import imports as I


def _module(tmp_path, name, body):
    (tmp_path / f"{name}.py").write_text(body)
    return I.service_env({"PYTHONPATH": str(tmp_path)})


def test_import_that_hangs_is_reported_as_timed_out(tmp_path):
    env = _module(tmp_path, "hangs", "import time\ntime.sleep(60)\n")
    began = time.monotonic()
    res = I.import_one(sys.executable, "hangs", timeout=1, env=env)
    waited = time.monotonic() - began
    assert res["ok"] is False and res["error"] == "timed out after 1s"
    assert 1 <= res["seconds"] <= waited + 0.001  # what it reports is the time it waited


def test_interpreter_that_dies_before_reporting(tmp_path):
    env = _module(tmp_path, "dies", "import os, sys\nsys.stderr.write('first\\nthe last words\\n')\n"
                                    "sys.stderr.flush()\nos._exit(3)\n")
    res = I.import_one(sys.executable, "dies", env=env)
    assert res == {"ok": False, "version": None, "seconds": res["seconds"],
                   "error": "interpreter exited with rc 3 before reporting: the last words"}
    env = _module(tmp_path, "silent", "import os\nos._exit(4)\n")
    assert I.import_one(sys.executable, "silent", env=env)["error"] == (
        "interpreter exited with rc 4 before reporting: no output")


def test_garbled_report_line_is_not_a_verdict(tmp_path):
    env = _module(tmp_path, "garbled", "import os, sys\nsys.stdout.write('\\n@@DFLASH@@{not json\\n')\n"
                                       "sys.stdout.flush()\nos._exit(0)\n")
    res = I.import_one(sys.executable, "garbled", env=env)
    assert res["ok"] is False and res["error"] == "interpreter exited with rc 0 before reporting: no output"
    # an earlier line in the report's form (printed by the imported code) is not taken instead of the last
    env = _module(tmp_path, "forged", "import os, sys\nsys.stdout.write('@@DFLASH@@{\"ok\": true}\\n')\n"
                                      "sys.stdout.write('@@DFLASH@@{cut off\\n')\nsys.stdout.flush()\nos._exit(0)\n")
    res = I.import_one(sys.executable, "forged", env=env)
    assert res["ok"] is False and res["error"].startswith("interpreter exited with rc 0 before reporting")


def test_import_many_keeps_the_order_and_the_verdicts(tmp_path):
    env = _module(tmp_path, "good", "__version__ = '1.2'\n")
    res = I.import_many(sys.executable, ["good", "no_such_mod", "good"], env=env, workers=1)
    assert list(res) == ["good", "no_such_mod"]
    assert res["good"]["ok"] is True and res["good"]["version"] == "1.2"
    assert res["no_such_mod"]["error"].startswith("ModuleNotFoundError")
    assert I.import_many(sys.executable, []) == {}


def test_environment_and_timeouts_checked_before_anything_runs():
    assert I.check_environment({"A=B": "x"}) == (
        "environment: name 'A=B' is not a valid variable name (empty, or holds '=' or a NUL byte)")
    assert I.check_environment({"": "x"}).startswith("environment: name '' is not a valid")
    assert I.check_environment({"X": "a\x00b"}) == (
        "environment: the value of X holds a NUL byte, which no process environment can carry")
    assert I.check_environment({"X": None, "Y": "1"}) is None
    assert I.check_timeouts(smoke_timeout=0) == "smoke_timeout must be a positive number of seconds, not 0"
    assert I.check_timeouts(a=1, b=0.5, c=None) is None
    env = I.service_env({"DROP": None, "N": 3}, base={"DROP": "1", "KEEP": "k"})
    assert env == {"KEEP": "k", "N": "3"}


def test_child_scripts_are_the_module_utils_files_and_run_on_their_own(tmp_path):
    # what the parent sends to `python -c` is the file ruff and these tests see, and it needs nothing else
    import subprocess
    from pathlib import Path

    from ansible_collections.dflash.deploy.plugins.module_utils.host import import_child, runner, smoke_child
    for child in (import_child, smoke_child):
        assert runner.child_source(child) == Path(child.__file__).read_text()
    proc = subprocess.run([sys.executable, "-I", "-c", runner.child_source(import_child), "json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)
    report = runner.parse_report(proc.stdout)
    assert report["ok"] is True and report["seconds"] >= 0
    proc = subprocess.run([sys.executable, "-I", "-c", runner.child_source(smoke_child), "list"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)})
    report = runner.parse_report(proc.stdout)
    assert report["step"] == "load libcuda.so.1" or report["step"].startswith("cu"), report


class _Interpreters:
    """Stands in for run_with_timeout: reports a clean import (or a timeout); records the timeout it was given
    and how many ran at once. With ``crowd``, each waits (up to 2 s) until that many run, then ``hold`` s more."""

    def __init__(self, crowd=0, hold=0.0, timed_out=False):
        import threading
        self.crowd, self.hold, self.timed_out = crowd, hold, timed_out
        self.timeouts, self.running, self.peak = [], 0, 0
        self.cond = threading.Condition()

    def __call__(self, argv, timeout, env=None):
        with self.cond:
            self.timeouts.append(timeout)
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.running >= self.crowd, timeout=2)
        time.sleep(self.hold)
        with self.cond:
            self.running -= 1
        if self.timed_out:
            return -9, "", "", True
        return 0, '@@DFLASH@@{"ok": true, "version": "1.0"}\n', "", False


def test_without_a_timeout_an_import_gets_120_seconds(monkeypatch):
    # 120 s is the modules' documented import_timeout default
    monkeypatch.setattr(I, "run_with_timeout", _Interpreters(timed_out=True))
    assert I.import_one(sys.executable, "slow")["error"] == "timed out after 120s"
    res = I.import_many(sys.executable, ["slow", "slower"])
    assert [r["error"] for r in res.values()] == ["timed out after 120s"] * 2


@pytest.mark.parametrize("cpus, peak", [(2, 4), (8, 4), (16, 8), (64, 8)])
def test_import_many_runs_half_the_cpus_at_a_time_at_least_four_by_default(monkeypatch, cpus, peak):
    """A 2-core host as before (4 at a time); a 16-core GPU host takes the 8 imports in one round."""
    fake = _Interpreters(crowd=peak, hold=0.2)
    monkeypatch.setattr(I, "run_with_timeout", fake)
    monkeypatch.setattr(I.os, "cpu_count", lambda: cpus)
    res = I.import_many(sys.executable, ["m%d" % i for i in range(8)])
    assert all(r["ok"] for r in res.values()) and len(fake.timeouts) == 8
    assert fake.peak == peak


def test_the_default_is_half_the_cpus_between_four_and_sixteen():
    assert [I.default_workers(n) for n in (1, 2, 8, 10, 16, 32, 128)] == [4, 4, 4, 5, 8, 16, 16]


def test_seconds_are_reported_to_the_millisecond(monkeypatch):
    import types
    clock = iter([100.0, 101.23456])
    monkeypatch.setattr(I, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(I, "run_with_timeout", _Interpreters())
    assert I.import_one(sys.executable, "m", timeout=5)["seconds"] == 1.235


def test_an_interpreter_that_cannot_start_is_named(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(tmp_path / "gone" / "python3.11")  # a venv whose base interpreter was removed
    res = I.import_one(str(python), "json")
    assert res["ok"] is False and res["version"] is None
    assert res["error"] == "could not start the interpreter %s: [Errno 2] No such file or directory: %r" % (
        python, str(python))
