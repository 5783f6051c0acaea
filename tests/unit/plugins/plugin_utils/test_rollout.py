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


# Two instances of qwen, one of llama; q2 declares a surge worker, so does l1.
FLEET = [{"name": "q1", "served_model_name": "qwen"}, {"name": "q2", "served_model_name": "qwen",
                                                       "surge": {"gpus": [5], "port": 30005}},
         {"name": "l1", "served_model_name": "llama", "surge": {"gpus": [6], "port": 30006}},
         {"name": "q3", "served_model_name": "qwen"}]


def units(*running):
    return [item(i["name"], status={"ActiveState": "active" if i["name"] in running else "inactive"}) for i in FLEET]


@pytest.mark.parametrize(("case", "names", "enabled", "want"), [
    ("router on: one instance of each model per wave", ["q1", "l1", "q2", "q3"], True, [["q1", "l1"], ["q2"], ["q3"]]),
    ("the order of the names decides who goes first", ["q3", "q1"], True, [["q3"], ["q1"]]),
    ("one instance of each model: one wave", ["q2", "l1"], True, [["q2", "l1"]]),
    ("router off: one wave of all", ["q1", "q2", "l1"], False, [["q1", "q2", "l1"]]),
    ("a name twice restarts once", ["q1", "q1", "q2"], True, [["q1"], ["q2"]]),
    ("an unknown name goes in the first wave", ["q1", "gone", "q2"], True, [["q1", "gone"], ["q2"]]),
    ("nothing to restart: no wave", [], True, []),
    ("nothing to restart, router off: no wave", None, False, []),
])
def test_restart_waves(case, names, enabled, want):
    assert R.restart_waves(FLEET, names, enabled) == want, case


def test_an_instance_without_a_served_model_goes_in_the_first_wave():
    odd = [{"name": "q1", "served_model_name": "qwen"}, {"name": "q2", "served_model_name": "qwen"}, {"name": "x"}]
    assert R.restart_waves(odd, ["q1", "x", "q2"]) == [["q1", "x"], ["q2"]]


@pytest.mark.parametrize(("case", "waves", "want"), [
    ("three waves", [["qwen3-8b"], ["qwen3-8b-b"], ["qwen3-8b-c"]],
     "restart in 3 waves, one instance of each served model at a time: qwen3-8b | qwen3-8b-b | qwen3-8b-c"),
    ("two instances in a wave", [["q1", "l1"], ["q2"]],
     "restart in 2 waves, one instance of each served model at a time: q1, l1 | q2"),
    ("one wave says nothing", [["q1", "q2"]], ""),
    ("no wave says nothing", [], ""),
])
def test_the_waves_line(case, waves, want):
    assert R.waves_line(waves) == want, case


def plan_of(names, enabled=True, running=("q1", "q2", "l1", "q3")):
    return R.wave_plan(FLEET, names, enabled, units(*running))


@pytest.mark.parametrize(("case", "plan", "wave", "key", "want"), [
    ("each wave restarts its instances", plan_of(["q1", "l1", "q2"]), 0, "restart", ["q1", "l1"]),
    ("readiness waits for the wave's instances, in the list's order",
     plan_of(["l1", "q1"]), 0, "waited", [FLEET[0], FLEET[2]]),
    ("the first wave has nothing before it", plan_of(["q1", "l1", "q2", "q3"]), 0, "earlier", []),
    ("a later wave names the waves before it", plan_of(["q1", "l1", "q2", "q3"]), 2, "earlier", ["q1", "l1", "q2"]),
    ("a wave names the waves after it (not restarted yet)", plan_of(["q1", "l1", "q2", "q3"]), 0, "later",
     ["q2", "q3"]),
    ("the last wave has nothing after it", plan_of(["q1", "l1", "q2", "q3"]), 2, "later", []),
    ("router on: the wave is drained", plan_of(["q1", "l1", "q2"]), 0, "drain", ["q1", "l1"]),
    ("router off: nothing is drained", plan_of(["q1", "l1", "q2"], enabled=False), 0, "drain", []),
    ("router on: a running instance that declares surge gets a surge worker", plan_of(["q1", "q2"]), 1, "surge",
     ["q2"]),
    ("an instance without surge gets none", plan_of(["q1", "q2"]), 0, "surge", []),
    ("router off: no surge worker (it serves through the router)", plan_of(["q2", "l1"], enabled=False), 0,
     "surge", []),
    ("an instance that does not run yet gets none (nothing to keep serving)",
     plan_of(["q2", "l1"], running=("l1",)), 0, "surge", ["l1"]),
    ("surge workers in the list's order", plan_of(["l1", "q2"]), 0, "surge", ["q2", "l1"]),
    ("serving: the wave's instances that ran before", plan_of(["q1", "l1"], running=("l1", "q3")), 0, "serving",
     ["l1"]),
])
def test_the_wave_plan(case, plan, wave, key, want):
    assert plan[wave][key] == want, case


def test_router_off_plans_one_wave_and_a_unit_state_not_read_is_not_running():
    plan = R.wave_plan(FLEET, ["q1", "q2"], False, [item("q1", failed=True), item("q2", status={})])
    assert [p["restart"] for p in plan] == [["q1", "q2"]]
    assert plan[0]["serving"] == [] and plan[0]["later"] == [] and plan[0]["earlier"] == []
    assert R.wave_plan(FLEET, [], True, units("q1")) == []
