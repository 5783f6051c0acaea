"""The fast path knows every phase tag: a --skip-tags naming one leaves a phase out, so that run neither
takes the fast path nor records (roles/deploy_state/vars/main.yml). A tag added to a task without being
added there would let a run that skipped that phase record the host as converged."""
from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _tags(node, found):
    if isinstance(node, dict):
        tags = node.get("tags")
        found.update([tags] if isinstance(tags, str) else tags or [])
        for value in node.values():
            _tags(value, found)
    elif isinstance(node, list):
        for value in node:
            _tags(value, found)
    return found


def test_the_phase_tags_are_every_tag_the_deploy_carries():
    found = set()
    files = list(REPO.glob("roles/*/tasks/*.yml")) + list(REPO.glob("roles/*/handlers/*.yml")) \
        + list(REPO.glob("playbooks/**/*.yml"))
    for path in files:
        _tags(yaml.safe_load(path.read_text()), found)
    listed = yaml.safe_load((REPO / "roles/deploy_state/vars/main.yml").read_text())["_deploy_state_phase_tags"]
    assert sorted(listed) == listed, "keep the list sorted"
    assert set(listed) == found - {"always"}
