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


# --- a roll-back: who is ready, who goes back in which order, where to, with what, and the operator's line ---

def waited(name, **answer):
    return dict(answer, _rollout_instance={"name": name, "port": 30000 + len(name)})


@pytest.mark.parametrize(("case", "results", "refused", "want"), [
    ("all ready", [waited("a", ready=True), waited("b", ready=True)], {}, {"ready": ["a", "b"], "not_ready": []}),
    ("one not ready", [waited("a", ready=True), waited("b", ready=False, reason="crashed")], {},
     {"ready": ["a"], "not_ready": ["b"]}),
    ("a wait without an answer is not ready", [waited("a", failed=True, msg="boom")], {},
     {"ready": [], "not_ready": ["a"]}),
    ("the performance gate's refusal counts as not ready", [waited("a", ready=True), waited("b", ready=True)],
     {"b": "the performance gate refused release r2"}, {"ready": ["a"], "not_ready": ["b"]}),
    ("nothing waited for", [], None, {"ready": [], "not_ready": []}),
])
def test_readiness(case, results, refused, want):
    assert R.readiness(results, refused) == want, case


WAVED = [{"name": n} for n in ("e1", "a", "b", "l1")]


def order(results, refused=None, earlier=(), later=()):
    return R.rollback_order(results, refused, WAVED, list(earlier), list(later))


@pytest.mark.parametrize(("case", "steps", "want"), [
    ("the failed one first, then the ready one of its wave",
     order([waited("a", ready=True), waited("b", ready=False)]), [("b", False, False), ("a", True, False)]),
    ("then the earlier waves' (ready), then the later waves' (untouched)",
     order([waited("a", ready=False)], earlier=["e1"], later=["l1"]),
     [("a", False, False), ("e1", True, False), ("l1", True, True)]),
    ("a surge worker not ready: nothing of the wave waited, the wave counted with the later waves",
     order([], earlier=["e1"], later=["a", "b", "l1"]),
     [("e1", True, False), ("a", True, True), ("b", True, True), ("l1", True, True)]),
    ("a refused instance goes first, as one not ready",
     order([waited("a", ready=True), waited("b", ready=True)], {"a": "slower"}),
     [("a", False, False), ("b", True, False)]),
])
def test_rollback_order(case, steps, want):
    assert [(s["instance"]["name"], s["was_ready"], s["untouched"]) for s in steps] == want, case


def test_each_step_carries_its_readiness_answer_and_refusal():
    steps = order([waited("a", ready=True), waited("b", ready=False, reason="crashed")], {"a": "slower"},
                  earlier=["e1"])
    assert [s["ready_result"].get("reason") for s in steps] == [None, "crashed", None]
    assert [s["refusal"] for s in steps] == ["slower", "", ""]
    assert steps[2]["ready_result"] == {} and steps[1]["instance"] == {"name": "b", "port": 30001}


R1, R2 = "/opt/dflash/releases/r1", "/opt/dflash/releases/r2"
TRUSTED_R1 = {"target": R1, "errors": []}


def target(before=None, running=True, previous=None, exists=True):
    previous = TRUSTED_R1 if previous is None else previous
    current = [link("a", before)] if before else [item("a", stat={"exists": False})]
    active = [item("a", status={"ActiveState": "active" if running else "failed"})]
    return R.rollback_target("a", R2, current, active, previous, exists)


@pytest.mark.parametrize(("case", "got", "want"), [
    ("a new release: back to the trusted previous", target(before=R1), {"to": R1, "untrusted": []}),
    ("the same release, running: only the configuration changed, the same release goes back",
     target(before=R2), {"to": R2, "untrusted": []}),
    ("the same release, not running: its previous", target(before=R2, running=False), {"to": R1, "untrusted": []}),
    ("no current before (a first deploy) and a trusted previous", target(), {"to": R1, "untrusted": []}),
    ("previous untrusted: nowhere, and why",
     target(before=R1, previous={"target": "/srv/evil", "errors": ["previous resolves to /srv/evil, outside"]}),
     {"to": "", "untrusted": ["previous resolves to /srv/evil, outside"]}),
    ("no previous link: nowhere, nothing to say",
     target(previous={"target": "", "errors": ["previous does not exist"]}, exists=False), {"to": "", "untrusted": []}),
    ("previous is the failed release itself: nowhere", target(before=R1, previous={"target": R2, "errors": []}),
     {"to": "", "untrusted": []}),
])
def test_rollback_target(case, got, want):
    assert got == want, case


def write(dest, name=None, backup=True):
    result = {"dest": dest, "mode": "0640", "owner": "root", "group": "dflash", "changed": backup, "diff": "x"}
    if backup:
        result["backup_file"] = dest + ".1~"
    return dict(result, item={"name": name}) if name else result


@pytest.mark.parametrize(("case", "kwargs", "want"), [
    ("nothing changed: nothing to restore", {"unit": write("/u", backup=False)}, []),
    ("the shared unit template and launcher, and this instance's env file and drop-in",
     {"unit": write("/u"), "launcher": write("/l"), "env": [write("/a.env", "a"), write("/b.env", "b")],
      "dropin": [write("/a.d", "a"), write("/b.d", "b")]}, ["/u", "/l", "/a.env", "/a.d"]),
    ("another instance's env file is not this one's", {"env": [write("/b.env", "b")]}, []),
    ("a skipped write has no backup", {"unit": {"skipped": True}, "env": [{"skipped": True, "item": {"name": "a"}}]},
     []),
])
def test_restore_files(case, kwargs, want):
    assert [r["dest"] for r in R.restore_files("a", **kwargs)] == want, case


def test_a_restored_file_keeps_its_backup_mode_and_owner_only():
    assert R.restore_files("a", env=[write("/a.env", "a")]) == [
        {"backup_file": "/a.env.1~", "dest": "/a.env", "mode": "0640", "owner": "root", "group": "dflash"}]


U = "sglang-dflash@a.service"
RESTORED = [{"dest": "/etc/dflash/a.env", "backup_file": "/etc/dflash/a.env.1~"}]


def outcome(**kwargs):
    return R.rollback_outcome(U, R2, **kwargs)


@pytest.mark.parametrize(("case", "got", "line", "serving"), [
    ("not ready, back to a healthy previous",
     outcome(rollback_to=R1, restore=RESTORED, ready_result={"reason": "not ready within 5s"},
             back={"ready": True}, exception="RuntimeError: boom", abi="ok"),
     U + " did not become ready on release r2 (not ready within 5s): RuntimeError: boom; abi_check: ok; "
         "restored /etc/dflash/a.env as before this run; rolled back to r1, which is healthy", True),
    ("not ready, previous not healthy either",
     outcome(rollback_to=R1, ready_result={"reason": "crashed"}, back={"ready": False, "reason": "crashed too"},
             exception="no exception in the journal"),
     U + " did not become ready on release r2 (crashed): no exception in the journal; abi_check: n/a; "
         "rolled back to r1, which is NOT healthy either: crashed too", False),
    ("not ready, the readiness check never ran, nothing to go back to",
     outcome(), U + " did not become ready on release r2 (readiness check did not run): ; abi_check: n/a; "
                    "no previous release: the instance was stopped", False),
    ("not ready, previous untrusted: stopped, and why",
     outcome(untrusted=["previous resolves to /srv/evil", "no marker"], ready_result={"reason": "x"},
             exception="e"),
     U + " did not become ready on release r2 (x): e; abi_check: n/a; no previous release (previous resolves to "
         "/srv/evil; no marker): the instance was stopped", False),
    ("refused by the performance gate",
     outcome(rollback_to=R1, refusal="the performance gate refused release r2 against release r1: ITL +40%",
             back={"ready": True}, restore=RESTORED),
     U + " did not pass the performance gate: the performance gate refused release r2 against release r1: ITL "
         "+40%; restored /etc/dflash/a.env as before this run; rolled back to r1, which is healthy", True),
    ("ready, went back with the others",
     outcome(was_ready=True, rollback_to=R1, restore=RESTORED, back={"ready": True}),
     U + " was ready, and went back with the others: restored /etc/dflash/a.env as before this run; rolled back "
         "to r1, which is healthy", True),
    ("ready, nothing ran before it: left serving",
     outcome(was_ready=True), U + " was ready on release r2, and is left serving it: nothing ran before it", True),
    ("a later wave's, never restarted: current back",
     outcome(was_ready=True, untouched=True, rollback_to=R1, restore=RESTORED),
     U + " was not restarted by this run: restored /etc/dflash/a.env as before this run; current back at r1, "
         "which it still runs", False),
    ("a later wave's, nothing to point current back at",
     outcome(was_ready=True, untouched=True),
     U + " was not restarted by this run: no release to point current back at, so it runs this release at its "
         "next restart", False),
    ("flags as text, as a template may hand them over",
     outcome(was_ready="True", untouched="False"),
     U + " was ready on release r2, and is left serving it: nothing ran before it", True),
])
def test_rollback_outcome(case, got, line, serving):
    assert got == {"line": line, "serving": serving}, case


SURGE = {"name": "q.surge", "port": 30005, "gpus": [5, 6]}


def surge(**answer):
    return dict(answer, item=SURGE)


@pytest.mark.parametrize(("case", "results", "all_ready", "report", "failures"), [
    ("ready: registered, the wave restarts", [surge(ready=True, seconds=12.5)], True,
     ["surge: q.surge ready on port 30005 (GPU 5, 6) after 12.5s, registered with its router"], []),
    ("not ready: the run goes back, the diagnosis names it", [surge(ready=False, reason="exited with status 1")],
     False, ["surge: q.surge NOT ready: exited with status 1"],
     ["sglang-dflash@q.surge.service (a surge worker) did not become ready on release r2: exited with status 1"]),
    ("a wait without an answer", [surge(failed=True)], False, ["surge: q.surge NOT ready: no answer"],
     ["sglang-dflash@q.surge.service (a surge worker) did not become ready on release r2: no answer"]),
    ("one of two not ready: none serves", [surge(ready=True, seconds=3), surge(ready=False, reason="x")], False,
     ["surge: q.surge ready on port 30005 (GPU 5, 6) after 3s, registered with its router",
      "surge: q.surge NOT ready: x"],
     ["sglang-dflash@q.surge.service (a surge worker) did not become ready on release r2: x"]),
])
def test_surge_outcome(case, results, all_ready, report, failures):
    got = R.surge_outcome(results, R2)
    assert (got["all_ready"], [r["line"] for r in got["report"]], got["failures"]) == (all_ready, report, failures), \
        case


@pytest.mark.parametrize(("case", "previous", "current", "prev", "want"), [
    ("a trusted previous, another release: go", TRUSTED_R1, R2, R1, ""),
    ("previous untrusted: refused, and why",
     {"target": "/srv/evil", "errors": ["previous resolves to /srv/evil, outside /opt/dflash/releases/"]}, R2,
     "/srv/evil", "instance a: no rollback, nothing was stopped: previous resolves to /srv/evil, outside "
                  "/opt/dflash/releases/;\ndeploy the release you want instead"),
    ("previous is what current runs: refused", TRUSTED_R1, R1, R1,
     "instance a: no rollback, nothing was stopped: previous is the release current runs (" + R1 + ");\n"
     "deploy the release you want instead"),
    ("no current link, a trusted previous: go", TRUSTED_R1, "", R1, ""),
])
def test_rollback_refusal(case, previous, current, prev, want):
    assert R.rollback_refusal("a", previous, current, prev) == want, case


BASE = "/opt/dflash"
CURRENTS = [link("a", R1), link("b", R2), link("c", "/srv/copy"), item("d", stat={"exists": True, "isdir": True}),
            item("e", stat={"exists": False})]


def trust(**errors):
    return {f"{BASE}/instances/{n}/current": {"target": "", "errors": e} for n, e in errors.items()}


def test_the_links_to_check_name_another_release():
    assert [r["item"]["name"] for r in R.previous_to_check(CURRENTS, R2)] == ["a", "c"]


@pytest.mark.parametrize(("case", "trusted", "keep", "not_kept"), [
    ("a trusted other release is kept; the one switched to, a directory, none: not", trust(a=[], c=["a copy"]),
     [{"name": "a", "target": R1}], [{"name": "c", "line": "not kept as previous: a copy"}]),
    ("a link the check did not read is not kept", {}, [], []),
    ("refused for several reasons: one line", trust(a=["outside the layout", "no marker"]), [],
     [{"name": "a", "line": "not kept as previous: outside the layout; no marker"}]),
])
def test_keep_as_previous(case, trusted, keep, not_kept):
    assert R.keep_as_previous(CURRENTS, R2, trusted, BASE) == {"keep": keep, "not_kept": not_kept}, case


# --- what a call that leaves an argument out means, and results that are not what a task registers ---------

def test_left_out_a_release_is_not_reverified_and_the_router_is_off():
    # reverified left out: the instances already on the release do not restart for it
    assert R.restart_set(PRESENT, current=[link("a", REL)], release_dir=REL) == []
    # enabled left out: one wave, nothing drained, no surge worker
    plan = R.wave_plan(FLEET, ["q1", "q2", "l1"], active=units("q1", "q2", "l1"))
    assert [p["restart"] for p in plan] == [["q1", "q2", "l1"]]
    assert plan[0]["drain"] == [] and plan[0]["surge"] == []


def test_left_out_an_untrusted_previous_link_is_taken_to_exist_and_named():
    untrusted = {"target": "/srv/evil", "errors": ["previous resolves to /srv/evil, outside"]}
    got = R.rollback_target("a", R2, [link("a", R1)], [item("a", status={"ActiveState": "active"})], untrusted)
    assert got == {"to": "", "untrusted": ["previous resolves to /srv/evil, outside"]}


def test_results_without_an_instance_are_left_out_of_the_order_and_the_links():
    steps = order([waited("a", ready=False), {"_rollout_instance": None, "ready": True}, "junk",
                   {"ready": True}])
    assert [s["instance"]["name"] for s in steps] == ["a"]
    currents = [link("a", R1), "junk", {"item": "b", "stat": {"islnk": True, "lnk_source": R1}}, {"stat": {}}]
    kept = R.keep_as_previous(currents, R2, trust(a=[]), BASE)
    assert kept == {"keep": [{"name": "a", "target": R1}], "not_kept": []}


SECRET = "SGLANG_API_KEY=sekret"


@pytest.mark.parametrize(("case", "args", "want"), [
    ("nothing read or written", ([],), {"restart": [], "current": [], "active": [], "unit": {}, "launcher": {},
                                        "env": [], "dropin": []}),
    ("left out altogether", (None, None, None, None, None, None, None),
     {"restart": [], "current": [], "active": [], "unit": {}, "launcher": {}, "env": [], "dropin": []}),
    ("names as text, in the given order", ([2, "a"],), {"restart": ["2", "a"], "current": [], "active": [],
                                                        "unit": {}, "launcher": {}, "env": [], "dropin": []}),
])
def test_switched_carries_the_restart_set(case, args, want):
    assert R.switched(*args) == want, case


def test_switched_keeps_only_the_keys_the_rollout_reads():
    """Of each read and write the keys the rollout's decisions read; never a diff, content or the item's other
    settings (an env file's write carries its text, the key among it, in --diff)."""
    instance = {"name": "a", "port": 30001, "api_key": "sekret", "gpus": [1]}
    current = [dict(link("a", REL), item=instance, changed=False, invocation={"module_args": {"path": "/x"}}),
               {"item": instance, "stat": {"exists": False, "mode": "0777"}}, "junk"]
    active = [{"item": instance, "status": {"ActiveState": "active", "UnitFileState": "enabled", "MainPID": "7",
                                            "Environment": SECRET}}]
    write = {"changed": True, "backup_file": "/etc/dflash/a.env.1~", "dest": "/etc/dflash/a.env", "mode": "0640",
             "owner": "root", "group": "sglang", "diff": {"after": SECRET}, "checksum": "ab", "item": instance}
    unit = {"changed": False, "dest": "/etc/systemd/system/sglang-dflash@.service", "diff": {"after": "[Unit]"}}
    out = R.switched(["a"], current, active, unit, {"skipped": True}, [write, None], [dict(write, changed=False)])
    assert out == {
        "restart": ["a"],
        "current": [{"item": {"name": "a"}, "stat": {"exists": True, "islnk": True, "lnk_source": REL}},
                    {"item": {"name": "a"}, "stat": {"exists": False}}],
        "active": [{"item": {"name": "a"}, "status": {"ActiveState": "active", "UnitFileState": "enabled"}}],
        "unit": {"changed": False, "dest": "/etc/systemd/system/sglang-dflash@.service"},
        "launcher": {},
        "env": [{"changed": True, "backup_file": "/etc/dflash/a.env.1~", "dest": "/etc/dflash/a.env", "mode": "0640",
                 "owner": "root", "group": "sglang", "item": {"name": "a"}}],
        "dropin": [{"changed": False, "backup_file": "/etc/dflash/a.env.1~", "dest": "/etc/dflash/a.env",
                    "mode": "0640", "owner": "root", "group": "sglang", "item": {"name": "a"}}]}
    assert "sekret" not in repr(out) and "after" not in repr(out)
    # what the rollout then decides from it: the files an instance gets back, its target, its wave plan
    assert R.restore_files("a", out["unit"], out["launcher"], out["env"], out["dropin"]) == [
        {"backup_file": "/etc/dflash/a.env.1~", "dest": "/etc/dflash/a.env", "mode": "0640", "owner": "root",
         "group": "sglang"}] * 2
    assert R.rollback_target("a", "/opt/dflash/releases/r3", out["current"], out["active"],
                             {"target": REL, "errors": []})["to"] == REL


def test_switched_reads_an_item_that_is_not_a_mapping_as_nameless():
    out = R.switched([], [{"item": "a", "stat": {"islnk": True}}], [{"status": None}])
    assert out["current"] == [{"item": {}, "stat": {"islnk": True}}] and out["active"] == [{"status": {}}]
