"""A dflash.deploy collection for a test that runs real roles with ansible-playbook: the
checkout's plugins and meta and the roles it names, symlinked under
``<root>/collections/ansible_collections/dflash/deploy``, and ``<root>/ansible.cfg`` finding it
there (point ANSIBLE_CONFIG at it). ``run_play_json`` runs ``<root>/play.yml`` over ``<root>/hosts.yml``
with it and returns the json callback's answer."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def role_collection(root: Path, roles: tuple[str, ...], playbook_tasks: bool = False) -> Path:
    """The collection's directory; ``playbook_tasks`` links ``playbooks/tasks`` too."""
    coll = root / "collections" / "ansible_collections" / "dflash" / "deploy"
    (coll / "roles").mkdir(parents=True)
    for name in ("plugins", "meta"):
        (coll / name).symlink_to(REPO / name)
    if playbook_tasks:
        (coll / "playbooks").mkdir()
        (coll / "playbooks" / "tasks").symlink_to(REPO / "playbooks" / "tasks")
    for role in roles:
        (coll / "roles" / role).symlink_to(REPO / "roles" / role)
    # the collection's callback as the checkout's ansible.cfg enables it (quiet beside the json callback; it
    # preloads the collection's plugins before the first task)
    (root / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {root / 'collections'}\n"
                                      "retry_files_enabled = false\ncallbacks_enabled = dflash.deploy.deploy_summary\n")
    return coll


def run_play_json(root: Path, config: Path | None = None) -> tuple[int, dict]:
    """(exit status, the ansible.posix.json callback's result) of ``<root>/play.yml`` over ``<root>/hosts.yml``,
    with ``config`` (default ``<root>/ansible.cfg``) as ANSIBLE_CONFIG; a run that printed no JSON fails the test
    with its output."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(config or root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_LOCAL_TEMP=str(root / "local-tmp"))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(root / "hosts.yml"),
                           str(root / "play.yml")], cwd=root, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    try:
        return proc.returncode, json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-3000:]) from None
