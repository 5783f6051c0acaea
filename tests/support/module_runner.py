"""Run one of the collection's modules as Ansible runs it on a host: its own Python process, the
arguments on stdin, the result the last JSON line of its stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible.module_utils.common.parameters import PASS_VARS

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".collections"
# What asks the module to return its `invocation` (the arguments as it masked them): ansible-core 2.21 returns it
# only when the controller asks (_ansible_inject_invocation); 2.19 always returns it and refuses the unknown key.
INJECT_INVOCATION = {"_ansible_inject_invocation": True} if "inject_invocation" in PASS_VARS else {}


def run_module(name: str, args: dict, check: bool = False, diff: bool = False,
               timeout: float = 120) -> tuple[int, dict]:
    """(exit status, result) of ``dflash.deploy.<name>`` with ``args``; a module that leaves a child
    holding its stdout open makes this wait until ``timeout`` and raise."""
    payload = {"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check, _ansible_diff=diff)}
    env = dict(os.environ)
    env["PYTHONPATH"] = str(COLLECTIONS) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.dflash.deploy.plugins.modules." + name],
                          input=json.dumps(payload), capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else {"stderr": proc.stderr[-4000:]}
    except ValueError:
        result = {"raw_stdout": proc.stdout, "stderr": proc.stderr}
    return proc.returncode, result
