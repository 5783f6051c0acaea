"""The lab's common ground: where its files live, its podman label, and how it runs a command
(log, LabError, run, podman). Every other part of tools/lab imports from here."""
from __future__ import annotations

import contextlib
import fcntl
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STATE = REPO / "build" / "lab"
FIXTURES = REPO / "build" / "fixtures"
UV = REPO / ".tools" / "uv" / "bin" / "uv"
LABEL = "dflash.lab"


def log(msg: str) -> None:
    print(f"[lab] {msg}", flush=True)


class LabError(RuntimeError):
    pass


def run(cmd, check=True, capture=True, input=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=capture, text=True, input=input, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): "
                       f"{(proc.stderr or proc.stdout or '').strip()[-2000:]}")
    return proc


def podman(*args, **kw) -> subprocess.CompletedProcess:
    return run(["podman", *args], **kw)


@contextlib.contextmanager
def mutation_lock():
    """Held while a command makes or removes containers (up, down, reset), and by status: make molecule's two
    streams of scenarios run beside each other, and one stream's `reset` of its host must not meet
    the other's `up` half-way (a container created twice, a known_hosts file read mid-write)."""
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / ".mutate.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
