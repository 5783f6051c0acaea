"""dflash_lock_wait.py: the host lock's wait, on the monotonic clock, names the holder when it gives up."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[4] / "roles" / "sglang_service" / "files" / "dflash_lock_wait.py"
_spec = importlib.util.spec_from_file_location("dflash_lock_wait", SCRIPT)
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

HOLDER = ("20261201T101500-42 from ops@ctl (ansible-playbook pid 4242, play 'Deploy SGLang with DFlash "
          "speculative decoding'), holding it as pid 777 on ct200")


class Clock:
    """A monotonic clock the test moves: each sleep advances it by exactly the interval."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_first_word_of_the_holder_is_the_token():
    assert mod.holds(HOLDER, "20261201T101500-42")
    assert not mod.holds(HOLDER, "20261201T101500-4")          # a prefix is not the token
    assert not mod.holds("", "")
    assert not mod.holds(HOLDER, "")


def test_held_when_the_holder_names_this_run(tmp_path):
    owner = tmp_path / "owner"
    owner.write_text(HOLDER + "\n")
    clock = Clock()
    assert mod.wait(str(owner), "20261201T101500-42", 5, 0.5, clock, clock.sleep) == {
        "held": True, "seconds": 0.0, "holder": HOLDER}


def test_gives_up_after_the_timeout_naming_the_other_holder(tmp_path):
    owner = tmp_path / "owner"
    owner.write_text(HOLDER)
    clock = Clock()
    result = mod.wait(str(owner), "20261201T110000-7", 3, 0.5, clock, clock.sleep)
    assert result == {"held": False, "seconds": 3.0, "holder": HOLDER}


def test_the_holder_file_appearing_later_is_seen(tmp_path):
    owner = tmp_path / "owner"
    clock = Clock()

    def sleep(seconds):
        clock.sleep(seconds)
        if clock.now >= 1002:
            owner.write_text("mine from me@ctl, holding it as pid 9 on ct200")
    result = mod.wait(str(owner), "mine", 10, 0.5, clock, sleep)
    assert result["held"] and result["seconds"] == 2.0


def test_the_script_measures_its_wait_on_the_monotonic_clock():
    assert "time.monotonic" in SCRIPT.read_text() and "time.time" not in SCRIPT.read_text()


def test_the_script_end_to_end(tmp_path):
    owner = tmp_path / "owner"
    owner.write_text(HOLDER)
    req = {"owner": str(owner), "token": "other", "timeout": 0.3, "interval": 0.1}
    proc = subprocess.run([sys.executable, str(SCRIPT), json.dumps(req)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 1 and json.loads(proc.stdout)["holder"] == HOLDER
    req["token"] = "20261201T101500-42"
    proc = subprocess.run([sys.executable, str(SCRIPT), json.dumps(req)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout)["held"] is True
