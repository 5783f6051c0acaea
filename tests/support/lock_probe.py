"""Watching a host lock from outside, for the host_lock tests (logic and module)."""
from __future__ import annotations

import subprocess
import time

from ansible_collections.dflash.deploy.plugins.module_utils.host import lock as HL


def locked(lock) -> bool:
    """Whether someone holds the flock on ``lock`` (a try that does not wait)."""
    return subprocess.run([HL.FLOCK, "-n", "-E", "75", str(lock), "true"], check=False).returncode == 75


def until(predicate, seconds: float = 10.0) -> bool:
    """Poll ``predicate`` every 0.1 s until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
