"""playbooks/ansible.cfg (read when running from playbooks/) says what the checkout's ansible.cfg says."""
from __future__ import annotations

import configparser
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATH_KEYS = {"inventory", "collections_path"}


def settings(path: Path) -> dict:
    cfg = configparser.ConfigParser()
    cfg.read(path)
    out = {}
    for section in cfg.sections():
        for key, value in cfg.items(section):
            if key in PATH_KEYS:
                value = os.path.normpath(path.parent / value)
            out[(section, key)] = value
    return out


def test_playbooks_cfg_matches_the_root_cfg():
    root, sub = settings(REPO / "ansible.cfg"), settings(REPO / "playbooks" / "ansible.cfg")
    assert root == sub
    assert root[("defaults", "inventory")] == str(REPO / "inventory" / "lab.yml")


def test_roles_resolve_by_fqcn_only():
    # No roles_path: every play names its roles dflash.deploy.<role>, as an installed collection needs.
    for path in (REPO / "ansible.cfg", REPO / "playbooks" / "ansible.cfg"):
        assert not any(key == "roles_path" for (section, key) in settings(path)), path
