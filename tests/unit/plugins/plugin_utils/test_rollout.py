# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's decisions (plugins/plugin_utils/rollout.py), table-driven: each row a case the role meets."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.plugin_utils import rollout as R

PRESENT = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
REL = "/opt/dflash/releases/r2"


def item(name, **result):
    return dict(result, item={"name": name})


def active(*stopped):
    return [item(n, status={"ActiveState": "inactive" if n in stopped else "active"}) for n in "abc"]


def link(name, to):
    return item(name, stat={"exists": True, "islnk": True, "lnk_source": to})


@pytest.mark.parametrize(("case", "kwargs", "want"), [
    ("nothing changed", {}, []),
    ("an env file changed", {"changed": [item("b", changed=True), item("a", changed=False)]}, ["b"]),
    ("writes of several kinds, one instance twice",
     {"changed": [item("c", changed=True), item("a", changed=True), item("c", changed=True)]}, ["a", "c"]),
    ("a skipped write is no change", {"changed": [item("a", skipped=True), item("b")]}, []),
    ("the unit template changed: everyone", {"whole_unit": True, "changed": [item("b", changed=True)]},
     ["a", "b", "c"]),
    ("a stopped instance starts", {"active": active("c")}, ["c"]),
    ("a unit state not read counts as not running", {"active": [item("a", failed=True)]}, ["a"]),
    ("re-verified release: the instances already on it",
     {"reverified": True, "current": [link("a", REL), link("b", "/opt/dflash/releases/r1"),
                                      item("c", stat={"exists": False})]}, ["a"]),
    ("the same links without a re-verification", {"reverified": False, "current": [link("a", REL)]}, []),
    ("started before its files", {"started_before": [{"name": "b", "paths": ["/etc/dflash/b.env"]}]}, ["b"]),
    ("all reasons together, in the list's order", {"changed": [item("c", changed=True)], "active": active("b"),
                                                   "started_before": [{"name": "a"}]}, ["a", "b", "c"]),
])
def test_which_instances_restart(case, kwargs, want):
    assert R.restart_set(PRESENT, release_dir=REL, **kwargs) == want, case


def test_names_alone_and_odd_results_are_read():
    assert R.restart_set(["x", "y"], changed=[None, "junk", {"item": "y", "changed": True}, item("y", changed=True)]) \
        == ["y"]
    assert R.restart_set([], whole_unit=True) == []
