"""The lab's own tests: they run only when the lab is up (`make lab-test` brings it up and down).

Everything is checked the way a user would: through Ansible over SSH (OpenSSH and paramiko),
against the hosts' real systemd, sshd and fixture driver.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
sys.path.insert(0, str(REPO / "tools" / "lab"))
sys.path.insert(0, str(REPO / "tools"))
import collection_check  # noqa: E402, F401  (the tarball as `make collection` builds it, for the lab tests)
import lab  # noqa: E402


def ansible_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_DEPRECATION_WARNINGS"] = "false"
    env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] = "true"
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.json"
    return env


def adhoc(pattern: str, module: str, args: str = "", connection: str | None = None,
          timeout: int = 300) -> dict[str, dict]:
    """Run an ad-hoc module over SSH; return {host: result} from the json callback."""
    cmd = [str(VENV_BIN / "ansible"), pattern, "-m", module]
    if args:
        cmd += ["-a", args]
    if connection:
        cmd += ["-c", connection]
    proc = subprocess.run(cmd, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=timeout)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"ansible {module} printed no JSON (rc {proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from None
    results = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            results.update(task["hosts"])
    return results


def shell(host: str, script: str, connection: str | None = None) -> dict:
    """A shell command on one host over SSH; the result has rc, stdout, stderr."""
    return adhoc(host, "ansible.builtin.shell", script, connection=connection)[host]


@pytest.fixture(scope="session", autouse=True)
def lab_is_up():
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (podman), as CI has")
    if not lab.lab_hosts_present():
        pytest.skip("the lab is down: `make lab-test` (or `make lab-up`) brings it up")


@pytest.fixture(scope="session")
def inventory() -> dict:
    proc = subprocess.run([str(VENV_BIN / "ansible-inventory"), "--list"], cwd=REPO, env=ansible_env(),
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def lab_hosts() -> list:
    return lab.current_hosts()
