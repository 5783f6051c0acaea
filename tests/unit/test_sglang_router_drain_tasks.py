"""The drain around a restart as the rollout runs it: its wave.yml's and main.yml's own tasks
(the drain's include, the registration again, the waves, the note for the deploy summary), taken from the files
as they are, run on this
machine in external mode against stand-ins of the router's worker API and of the instances' /v1/loads
(tests/support). With the router on, an instance that is a worker is out of the router while the step
asks its load, the step ends once nothing runs, and it is registered again; with the router off, neither
the router nor the instances get a request and the deploy's notes are unchanged. After a roll-back
(roll_back.yml's and roll_back_one.yml's own steps, the failure left out), the drained instance is
registered again only when it serves again, and the diagnosis says so. Two instances of one model restart in
two waves, the router keeping the other while each restarts. The restart itself,
readiness and the roll-back's restart are the lab's to prove: they need systemd and a served model."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from loads_standin import loads_standin
from role_collection import role_collection
from router_standin import router_standin

REPO = Path(__file__).resolve().parents[2]
READINESS = yaml.safe_load((REPO / "roles" / "rollout" / "tasks" / "main.yml").read_text())
WAVE = yaml.safe_load((REPO / "roles" / "rollout" / "tasks" / "wave.yml").read_text())
WAVES, NOTE = (next(t for t in READINESS if t["name"].startswith(prefix)) for prefix in (
    "Decide the restart waves", "Note the drains"))
DRAIN, REJOIN = (next(t for t in WAVE if t["name"].startswith(prefix)) for prefix in (
    "Take the wave's instances out of their routers", "Register the wave's drained instances again"))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-router-drain")
    role_collection(root, ("host_layout", "instances", "sglang_router"))
    (root / "etc").mkdir()
    (root / "etc" / "q1.env").write_text("SGLANG_API_KEY=sekret\n")
    return root


def run(root: Path, variables: dict, between=(), ready=True):
    """main.yml's drain, ``between`` (tasks standing for the restart) and, when every restarted instance is
    ``ready``, its registration again and its note (after a roll-back the run fails before them); (rc, the
    facts the steps left, output)."""
    facts = root / "facts.json"
    facts.unlink(missing_ok=True)
    play = [{"name": "Drain around a restart", "hosts": "localhost", "gather_facts": False,
             "vars": {"sglang_service_config_dir": str(root / "etc"), **variables,
                      # what the service's switch hands the rollout (sglang_service_switched): the restart set
                      "_rollout_switched": {"restart": variables.get("_rollout_restart", [])},
                      "_rollout_failure": {},  # nothing of the wave failed (ready.yml notes it when one does)
                      # one wave of the instances restarted (as rollout_wave_plan plans it: drained with the
                      # router on), unless the steps decide the waves (WAVES)
                      **({} if WAVES in between else {"_rollout_wave_plan": {
                          "restart": variables.get("_rollout_restart", []),
                          "drain": variables.get("_rollout_restart", [])
                          if variables.get("sglang_router_enabled") else []}})},
             "tasks": [*([] if WAVES in between else [DRAIN]), *between,
                       *([] if WAVES in between or not ready else [REJOIN]), *([NOTE] if ready else []), {
                 "name": "Keep the facts", "ansible.builtin.copy": {
                     "dest": str(facts), "mode": "0644",
                     "content": "{{ {'drains': sglang_router_drains | default(None), 'rejoins': sglang_router_rejoins"
                                " | default(None), 'changes': rollout_changes | default(None)} | to_json }}"}}]}]
    (root / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(root / "play.yml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, (json.loads(facts.read_text()) if facts.exists() else None), proc.stdout + proc.stderr


def instances(q1_port, q2_port):
    return [{"name": "q1", "port": q1_port, "served_model_name": "qwen3-8b", "state": "present"},
            {"name": "q2", "port": q2_port, "served_model_name": "qwen3-8b", "state": "present"}]


def test_with_the_router_off_nothing_is_asked_and_nothing_noted(root):
    with router_standin() as (url, router), loads_standin() as (w1, one):
        router.register(w1)
        rc, facts, out = run(root, {"sglang_router_mode": "external", "sglang_router_url": url,
                                    "instances_present": instances(int(w1.rsplit(":", 1)[1]), 30002),
                                    "_rollout_restart": ["q1"], "rollout_changes": ["unit"]})
        assert rc == 0, out[-3000:]
        assert router.requests == [] and one.requests == [] and router.urls() == [w1]
        assert facts == {"drains": None, "rejoins": None, "changes": ["unit"]}


def test_a_worker_leaves_its_router_until_nothing_runs_and_comes_back(root):
    with router_standin() as (url, router), loads_standin() as (w1, one), loads_standin() as (w2, two):
        other = "http://127.0.0.1:39999"  # another host's worker of the same model, left alone
        router.register(other)
        router.register(w1)
        one.key, one.running = "sekret", [2, 1, 0]
        seen = []
        one.on_request = lambda: seen.append(sorted(router.urls()))
        on = {"sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
              "sglang_router_drain_interval": 0.2, "rollout_changes": ["unit"],
              "instances_present": instances(int(w1.rsplit(":", 1)[1]), int(w2.rsplit(":", 1)[1])),
              "_rollout_restart": ["q1", "q2"]}
        between = [{"name": "The restart: the router has the others only", "ansible.builtin.uri": {
            "url": url + "/workers", "use_proxy": False}, "register": "listing"},
            {"name": "Check it", "ansible.builtin.assert": {"that": [
                "listing.json.workers | map(attribute='url') | list == ['" + other + "']"]}}]
        rc, facts, out = run(root, on, between)
        assert rc == 0, out[-3000:]
        assert seen == [[other]] * 3  # asked three times, each time out of the router
        assert {auth for _path, auth in one.requests} == {"Bearer sekret"}
        # q2 was no worker: not removed, its load read once (nothing ran, so no wait)
        assert [path for path, _auth in two.requests] == ["/v1/loads"]
        assert sorted(router.urls()) == sorted([other, w1])
        (drain,) = [d for d in facts["drains"] if d["registered"]]
        assert drain["instance"] == "q1" and drain["removed"] and drain["drained"] and not drain["timed_out"]
        assert drain["bound"] == 120 and drain["in_flight"] == 0
        assert facts["rejoins"] == [{"router": url, "workers": [w1], "registered": True, "error": None}]
        assert facts["changes"] == ["unit", "router: q1 taken out of %s, drained in %gs" % (url, drain["seconds"]),
                                    "router: q1 registered again with %s" % url]


def test_two_instances_of_one_model_restart_in_two_waves_and_the_router_keeps_one(root):
    """main.yml's waves, each run as wave.yml runs it (the drain, a stand-in for the restart that
    reads the router's workers, the registration again): while q1 restarts the router has q2 and the other
    model's worker; while q2 restarts, q1, registered again before q2 was taken out."""
    with router_standin() as (url, router), loads_standin() as (w1, _one), loads_standin() as (w2, _two), \
            loads_standin() as (w3, _three):
        for w in (w1, w2, w3):
            router.register(w)
        present = instances(int(w1.rsplit(":", 1)[1]), int(w2.rsplit(":", 1)[1])) + [
            {"name": "l1", "port": int(w3.rsplit(":", 1)[1]), "served_model_name": "llama", "state": "present"}]
        listing = {"name": "The restart: what the router has", "register": "listing",
                   "ansible.builtin.uri": {"url": url + "/workers", "use_proxy": False}}
        keep_it = {"name": "Keep it", "ansible.builtin.set_fact": {
            "seen": "{{ seen | default([]) + [{'wave': _rollout_wave_plan.restart,"
                    " 'workers': listing.json.workers | map(attribute='url') | sort}] }}"}}
        (root / "wave.yml").write_text(yaml.safe_dump([DRAIN, listing, keep_it, REJOIN]))
        loop = {"name": "The waves", "ansible.builtin.include_tasks": str(root / "wave.yml"),
                "loop": "{{ _rollout_wave_plans }}", "loop_control": {"loop_var": "_rollout_wave_plan"}}
        keep = {"name": "Keep what each wave saw", "ansible.builtin.copy": {
            "dest": str(root / "waves.json"), "mode": "0644",
            "content": "{{ {'waves': rollout_waves, 'seen': seen} | to_json }}"}}
        rc, facts, out = run(root, {
            "sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
            "sglang_router_drain_interval": 0.2, "instances_present": present,
            "_rollout_restart": ["q1", "l1", "q2"]}, between=[WAVES, loop, keep])
        assert rc == 0, out[-3000:]
        seen = json.loads((root / "waves.json").read_text())
        assert seen["waves"] == [["q1", "l1"], ["q2"]]
        assert seen["seen"] == [{"wave": ["q1", "l1"], "workers": [w2]}, {"wave": ["q2"], "workers": sorted([w1, w3])}]
        assert sorted(router.urls()) == sorted([w1, w2, w3])  # all back at the end
        assert [d["instance"] for d in facts["drains"] if d["removed"]] == ["q1", "l1", "q2"]
        assert [r["workers"] for r in facts["rejoins"]] == [sorted([w1, w3]), [w2]]


def test_the_bound_lets_the_restart_go_on_and_says_so(root):
    with router_standin() as (url, router), loads_standin() as (w1, one):
        router.register(w1)
        one.running = 3
        rc, facts, out = run(root, {
            "sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
            "sglang_router_drain_timeout": 1, "sglang_router_drain_interval": 0.2,
            "instances_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_rollout_restart": ["q1"]})
        assert rc == 0, out[-3000:]
        assert facts["drains"][0]["timed_out"] and facts["drains"][0]["in_flight"] == 3
        assert facts["changes"][0] == ("router: q1 taken out of %s, NOT drained: 3 requests still in flight at the 1s "
                                       "bound, restarted with them" % url)
        assert router.urls() == [w1]


def test_router_settings_that_cannot_work_leave_the_restart_to_go_on_undrained(root):
    with router_standin() as (url, router), loads_standin() as (w1, one):
        router.register(w1)
        rc, facts, out = run(root, {
            "sglang_router_enabled": True, "sglang_router_mode": "managed", "sglang_router_models": {},
            "instances_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_rollout_restart": ["q1"]})
        assert rc == 0, out[-3000:]
        assert "not drained: served model 'qwen3-8b' has no entry in sglang_router_models" in out
        assert router.requests == [] and one.requests == [] and facts["drains"] == []


def _named(tasks, name):
    for task in tasks:
        if task.get("name") == name:
            return task
        for key in ("block", "rescue", "always"):
            found = _named(task.get(key) or [], name)
            if found:
                return found
    return None


ROLL_BACK = yaml.safe_load((REPO / "roles" / "rollout" / "tasks" / "roll_back.yml").read_text())
ROLL_BACK_ONE = yaml.safe_load((REPO / "roles" / "rollout" / "tasks" / "roll_back_one.yml").read_text())
START, REJOIN_AFTER_ROLL_BACK, DIAGNOSIS = (_named(ROLL_BACK, n) for n in (
    "Start the diagnosis", "Register the drained instances that serve again", "Add the router's part to the diagnosis"))
SAY = _named(ROLL_BACK_ONE, "Say what happened to the instance")


@pytest.mark.parametrize("back_healthy", [True, False])
def test_after_a_roll_back_the_drained_instance_that_serves_again_is_registered_again(root, back_healthy):
    """roll_back.yml's own steps: the diagnosis started, roll_back_one.yml's line for q1 (brought back to
    its previous release, healthy or not), the registration again of what serves, the router's part of the
    diagnosis; the failure itself is not run."""
    with router_standin() as (url, router), loads_standin() as (w1, one):
        router.register(w1)
        one.running = 0
        rolled = {"_rollout_instance": {"name": "q1"}, "_unit": "sglang-dflash@q1.service",
                  "_rollout_was_ready": False, "_rollout_refusal": "",
                  "_rollout_rollback_to": "/opt/dflash/releases/r1", "_rollout_restore": [],
                  "_rollout_untrusted_previous": [], "sglang_service_release_dir": "/opt/dflash/releases/r2",
                  "_rollout_ready_result": {"ready": False, "reason": "not ready within 5s"},
                  "__rollout_rollback_ready": {"ready": back_healthy, "reason": "crashed"}}
        steps = [START, {**SAY, "vars": {**SAY["vars"], **rolled}}, REJOIN_AFTER_ROLL_BACK, DIAGNOSIS,
                 {"name": "Keep the diagnosis", "ansible.builtin.copy": {
                     "dest": str(root / "diagnosis.json"), "mode": "0644",
                     "content": "{{ {'lines': _rollout_rollback_lines,"
                                " 'serving': _rollout_rollback_serving} | to_json }}"}}]
        rc, facts, out = run(root, {
            "sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
            "instances_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_rollout_restart": ["q1"]},
            between=[{"name": "The restart and the roll-back", "block": steps}], ready=False)
        assert rc == 0, out[-3000:]
        diagnosis = json.loads((root / "diagnosis.json").read_text())
        assert diagnosis["serving"] == (["q1"] if back_healthy else [])
        assert diagnosis["lines"][0].startswith("sglang-dflash@q1.service did not become ready on release r2")
        assert diagnosis["lines"][1].startswith("router: q1 taken out of %s, drained in " % url)
        if back_healthy:
            assert router.urls() == [w1] and diagnosis["lines"][2:] == ["router: q1 registered again with %s" % url]
        else:  # not serving: not put back in front of clients
            assert router.urls() == [] and diagnosis["lines"][2:] == []


def test_a_router_variable_that_cannot_work_does_not_stop_the_restart(root):
    """`current` is switched when the drain runs: a router setting that cannot work leaves the drain out (or
    fails it alone) and the restart goes on; the router's own step validates it after readiness."""
    with router_standin() as (url, router), loads_standin() as (w1, one):
        router.register(w1)
        rc, facts, out = run(root, {
            "sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
            "sglang_router_drain_timeout": "soon", "sglang_router_workers_state": "sometimes",
            "instances_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_rollout_restart": ["q1"]})
        assert rc == 0, out[-3000:]
        (drain,) = facts["drains"]
        assert drain["error"] and "timeout" in drain["error"] and not drain["removed"]
        assert facts["changes"][0].startswith("router: q1 was not taken out of %s (" % url)
        assert facts["changes"][0].endswith("; it restarted without a drain") and router.urls() == [w1]


@pytest.mark.parametrize("rollback_to", ["/opt/dflash/releases/r1", ""])
def test_a_later_wave_that_never_restarted_is_said_so_and_is_not_registered_again(root, rollback_to):
    """roll_back_one.yml's line for an instance of a later restart wave (_rollout_untouched): it was not
    restarted, its configuration went back, and it is not among those to register again (it never left its
    router)."""
    untouched = {"_rollout_instance": {"name": "q2"}, "_unit": "sglang-dflash@q2.service",
                 "_rollout_was_ready": True, "_rollout_untouched": True, "_rollout_refusal": "",
                 "_rollout_rollback_to": rollback_to, "_rollout_untrusted_previous": [],
                 "_rollout_restore": [{"dest": "/etc/dflash/q2.env", "backup_file": "/etc/dflash/q2.env.1~"}],
                 "sglang_service_release_dir": "/opt/dflash/releases/r2", "_rollout_ready_result": {}}
    steps = [START, {**SAY, "vars": {**SAY["vars"], **untouched}}, {
        "name": "Keep the diagnosis", "ansible.builtin.copy": {
            "dest": str(root / "diagnosis.json"), "mode": "0644",
            "content": "{{ {'lines': _rollout_rollback_lines, 'serving': _rollout_rollback_serving}"
                       " | to_json }}"}}]
    rc, _facts, out = run(root, {"instances_present": instances(30001, 30002)},
                          between=[{"name": "The roll-back's line", "block": steps}], ready=False)
    assert rc == 0, out[-3000:]
    diagnosis = json.loads((root / "diagnosis.json").read_text())
    back = "current back at r1, which it still runs" if rollback_to else \
        "no release to point current back at, so it runs this release at its next restart"
    assert diagnosis == {"lines": ["sglang-dflash@q2.service was not restarted by this run: restored "
                                   "/etc/dflash/q2.env as before this run; " + back], "serving": []}


def test_a_surge_worker_is_registered_beside_its_instance_then_drained_out(root):
    """The router role's surge entry point as surge_up.yml and surge_down.yml include it: present adds the surge
    worker to the model's router and leaves the instance registered; absent takes it out once it runs nothing."""
    surge_step = {"name": "The surge", "ansible.builtin.include_role": {
        "name": "dflash.deploy.sglang_router", "tasks_from": "surge", "rolespec_validate": False},
        "vars": {"sglang_router_surge_workers": "{{ _surge }}", "sglang_router_surge_state": "{{ _state }}"}}
    with router_standin() as (url, router), loads_standin() as (w1, _one), loads_standin() as (ws, surge):
        router.register(w1)
        surge.running = [1, 0]
        present = instances(int(w1.rsplit(":", 1)[1]), 30002)[:1]
        worker = {**present[0], "name": "q1.surge", "surge_of": "q1", "port": int(ws.rsplit(":", 1)[1])}
        (root / "etc" / "q1.surge.env").write_text("SGLANG_API_KEY=sekret\n")
        seen = []
        surge.on_request = lambda: seen.append(sorted(router.urls()))
        on = {"sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
              "sglang_router_drain_interval": 0.2, "sglang_router_instance_config_dir": str(root / "etc"),
              "instances_present": present, "_surge": [worker]}
        rc, _facts, out = run(root, {**on, "_state": "present"}, between=[surge_step], ready=False)
        assert rc == 0, out[-3000:]
        assert sorted(router.urls()) == sorted([w1, ws])   # both serve the model now
        rc, _facts, out = run(root, {**on, "_state": "absent"}, between=[surge_step], ready=False)
        assert rc == 0, out[-3000:]
        assert router.urls() == [w1]                       # the surge worker is out, the instance stays
        assert seen and all(ws not in urls for urls in seen)   # its load was asked once it was out
