"""Security m4 and issue 44 item 4 in the roles' task files: no uv invocation passes an index on its command
line, and every task that gives uv an index or a proxy gives it as dflash.deploy.uv_command's env option (a
module option travels in the module's payload; a task's ``environment:`` is written onto the remote shell's
command line, where any local user reads it)."""
from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
NETWORK_VARS = ("index_url", "index_env", "proxy_env")


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if "name" in node:
            yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key) or [])


def _all_tasks():
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            yield path.relative_to(REPO), task


def test_no_task_puts_an_index_on_uv_s_command_line():
    offenders = [str(path) for path in REPO.glob("roles/*/tasks/*.yml")
                 if "--index-url" in path.read_text() or "--extra-index-url" in path.read_text()]
    assert offenders == []


def test_indexes_and_proxies_reach_uv_only_as_uv_command_s_env():
    users, offenders = [], []
    for path, task in _all_tasks():
        env = task.get("environment")
        if env and any(v in str(env) for v in NETWORK_VARS):
            offenders.append("%s: %s (environment:)" % (path, task["name"]))
        for module in ("ansible.builtin.command", "ansible.builtin.shell"):
            if module in task and any(v in str(task[module]) for v in NETWORK_VARS):
                offenders.append("%s: %s (%s)" % (path, task["name"], module))
        if "dflash.deploy.uv_command" in task:
            args = task["dflash.deploy.uv_command"]
            assert not any(v in str(args["argv"]) for v in ("index_url", "proxy")), (path, task["name"])
            if any(v in str(args.get("env")) for v in ("index_env", "proxy_env")):
                users.append("%s: %s" % (path.parent.parent.name, task["name"]))
    assert offenders == []
    # every install or lock that reads an index: the release venv, the CUDA overlay, the kernel pins, the router
    # (the release venv's lock gives sglang_venv_lock_command.env: test_deploy_state_role.py renders it)
    assert sorted(users) == [
        "cuda_overlay: Install the CUDA 13 packages",
        "kernel_pin: Install the pinned kernel packages and what they require (torch held)",
        "sglang_router: Find the interpreter and lock sglang-router (uv pip compile)",
        "sglang_router: Install the locked router (uv pip sync --require-hashes)",
        "sglang_venv: Install the locked package set (uv pip sync)",
    ]
