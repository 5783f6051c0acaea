"""The fixture package index on the gateway address: its port, pid and delay files, and how it is
started, found running and stopped (index_server.py serves it)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from common import FIXTURES, HERE, STATE, LabError, log
from network import GATEWAY

INDEX_PORT = 8631
INDEX_PID = STATE / "index.pid"
INDEX_DELAY = STATE / "index-delay"  # seconds each wheel download waits (tests widen a build window)
INDEX_ONLY_FROM = STATE / "index-only-from"  # while it lists addresses, only they are served (the proxy test)


def index_running() -> bool:
    try:
        pid = int(INDEX_PID.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    try:
        with socket.create_connection((GATEWAY, INDEX_PORT), timeout=2):
            return True
    except OSError:
        return False


def ensure_index() -> str:
    url = f"http://{GATEWAY}:{INDEX_PORT}/simple"
    if not (FIXTURES / "simple" / "index.html").is_file():
        raise LabError(f"{FIXTURES}/simple is missing: run `make fixtures` first")
    if index_running():
        return url
    stop_foreign_index()
    try:
        with socket.create_connection((GATEWAY, INDEX_PORT), timeout=2):
            raise LabError(f"{GATEWAY}:{INDEX_PORT} is already served by a process that is not a lab index: "
                           "stop it and run lab-up again")
    except OSError:
        pass
    STATE.mkdir(parents=True, exist_ok=True)
    logf = open(STATE / "index.log", "ab")
    proc = subprocess.Popen([sys.executable, str(HERE / "index_server.py"), "--bind", GATEWAY, "--port",
                             str(INDEX_PORT), "--directory", str(FIXTURES), "--delay-file", str(INDEX_DELAY),
                             "--only-from-file", str(INDEX_ONLY_FROM)],
                            stdout=logf, stderr=logf,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    INDEX_PID.write_text(str(proc.pid))
    for _ in range(50):
        if index_running():
            log(f"package index {url} (serving {FIXTURES})")
            return url
        time.sleep(0.1)
    raise LabError(f"the package index did not start on {GATEWAY}:{INDEX_PORT} (see {STATE}/index.log)")


def stop_foreign_index() -> None:
    """Another checkout's lab index on our address and port (its lab is being replaced by this one,
    as its hosts are): stop it. Only processes running this same tool are touched."""
    needle = ["--bind", GATEWAY, "--port", str(INDEX_PORT)]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if any(a.endswith("tools/lab/index_server.py") for a in args) and \
                all(n in args for n in needle) and f"{FIXTURES}" not in args:
            log(f"stopping another checkout's lab index (pid {proc.name})")
            try:
                os.kill(int(proc.name), signal.SIGTERM)
            except OSError:
                pass
            time.sleep(0.5)


def stop_index() -> None:
    try:
        pid = int(INDEX_PID.read_text())
        os.killpg(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass
    INDEX_PID.unlink(missing_ok=True)
