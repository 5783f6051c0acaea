"""A dflash.deploy collection for a test that runs real roles with ansible-playbook: the
checkout's plugins and meta and the roles it names, symlinked under
``<root>/collections/ansible_collections/dflash/deploy``, and ``<root>/ansible.cfg`` finding it
there (point ANSIBLE_CONFIG at it)."""

from __future__ import annotations

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
    (root / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {root / 'collections'}\n"
                                      "retry_files_enabled = false\n")
    return coll
