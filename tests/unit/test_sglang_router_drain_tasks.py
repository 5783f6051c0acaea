"""The drain around a restart as sglang_service runs it: its readiness.yml's own tasks (the drain's include,
the registration again, the note for the deploy summary), taken from the file as they are, run on this
machine in external mode against stand-ins of the router's worker API and of the instances' /v1/loads
(tests/support). With the router on, an instance that is a worker is out of the router while the step
asks its load, the step ends once nothing runs, and it is registered again; with the router off, neither
the router nor the instances get a request and the deploy's notes are unchanged. After a roll-back
(ready_or_roll_back.yml's and roll_back_one.yml's own steps, the failure left out), the drained instance is
registered again only when it serves again, and the diagnosis says so. The restart itself (the handlers),
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
READINESS = yaml.safe_load((REPO / "roles" / "sglang_service" / "tasks" / "readiness.yml").read_text())
DRAIN, REJOIN, NOTE = (next(t for t in READINESS if t["name"].startswith(prefix)) for prefix in (
    "Take the instances about to restart out of their routers", "Register the drained instances again",
    "Note the drains"))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-router-drain")
    role_collection(root, ("host_layout", "instances", "sglang_router"))
    (root / "etc").mkdir()
    (root / "etc" / "q1.env").write_text("SGLANG_API_KEY=sekret\n")
    return root


def run(root: Path, variables: dict, between=(), ready=True):
    """readiness.yml's drain, ``between`` (tasks standing for the restart) and, when every restarted instance is
    ``ready``, its registration again and its note (after a roll-back the run fails before them); (rc, the
    facts the steps left, output)."""
    facts = root / "facts.json"
    facts.unlink(missing_ok=True)
    play = [{"name": "Drain around a restart", "hosts": "localhost", "gather_facts": False,
             "vars": {"sglang_service_config_dir": str(root / "etc"), **variables},
             "tasks": [DRAIN, *between, *([REJOIN, NOTE] if ready else []), {
                 "name": "Keep the facts", "ansible.builtin.copy": {
                     "dest": str(facts), "mode": "0644",
                     "content": "{{ {'drains': sglang_router_drains | default(None), 'rejoins': sglang_router_rejoins"
                                " | default(None), 'changes': sglang_service_changes | default(None)} | to_json }}"}}]}]
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
                                    "_sglang_service_present": instances(int(w1.rsplit(":", 1)[1]), 30002),
                                    "_sglang_service_restart": ["q1"], "sglang_service_changes": ["unit"]})
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
              "sglang_router_drain_interval": 0.2, "sglang_service_changes": ["unit"],
              "_sglang_service_present": instances(int(w1.rsplit(":", 1)[1]), int(w2.rsplit(":", 1)[1])),
              "_sglang_service_restart": ["q1", "q2"]}
        between = [{"name": "The restart: the router has the others only", "ansible.builtin.uri": {
            "url": url + "/workers", "use_proxy": False}, "register": "listing"},
            {"name": "Check it", "ansible.builtin.assert": {"that": [
                "listing.json.workers | map(attribute='url') | list == ['" + other + "']"]}}]
        rc, facts, out = run(root, on, between)
        assert rc == 0, out[-3000:]
        assert seen == [[other]] * 3  # asked three times, each time out of the router
        assert {auth for _path, auth in one.requests} == {"Bearer sekret"}
        assert two.requests == []  # q2 was no worker: nothing to drain
        assert sorted(router.urls()) == sorted([other, w1])
        (drain,) = [d for d in facts["drains"] if d["registered"]]
        assert drain["instance"] == "q1" and drain["removed"] and drain["drained"] and not drain["timed_out"]
        assert drain["bound"] == 120 and drain["in_flight"] == 0
        assert facts["rejoins"] == [{"router": url, "workers": [w1], "registered": True, "error": None}]
        assert facts["changes"] == ["unit", "router: q1 taken out of %s, drained in %gs" % (url, drain["seconds"]),
                                    "router: q1 registered again with %s" % url]


def test_the_bound_lets_the_restart_go_on_and_says_so(root):
    with router_standin() as (url, router), loads_standin() as (w1, one):
        router.register(w1)
        one.running = 3
        rc, facts, out = run(root, {
            "sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
            "sglang_router_drain_timeout": 1, "sglang_router_drain_interval": 0.2,
            "_sglang_service_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_sglang_service_restart": ["q1"]})
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
            "_sglang_service_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_sglang_service_restart": ["q1"]})
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


ROLL_BACK = yaml.safe_load((REPO / "roles" / "sglang_service" / "tasks" / "ready_or_roll_back.yml").read_text())
ROLL_BACK_ONE = yaml.safe_load((REPO / "roles" / "sglang_service" / "tasks" / "roll_back_one.yml").read_text())
START, REJOIN_AFTER_ROLL_BACK, DIAGNOSIS = (_named(ROLL_BACK, n) for n in (
    "Start the diagnosis", "Register the drained instances that serve again", "Add the router's part to the diagnosis"))
SAY = _named(ROLL_BACK_ONE, "Say what happened to the instance")


@pytest.mark.parametrize("back_healthy", [True, False])
def test_after_a_roll_back_the_drained_instance_that_serves_again_is_registered_again(root, back_healthy):
    """ready_or_roll_back.yml's own steps: the diagnosis started, roll_back_one.yml's line for q1 (brought back to
    its previous release, healthy or not), the registration again of what serves, the router's part of the
    diagnosis; the failure itself is not run."""
    with router_standin() as (url, router), loads_standin() as (w1, one):
        router.register(w1)
        one.running = 0
        rolled = {"_sglang_service_instance": {"name": "q1"}, "_unit": "sglang-dflash@q1.service",
                  "_sglang_service_was_ready": False, "_sglang_service_refusal": "",
                  "_sglang_service_rollback_to": "/opt/dflash/releases/r1", "_sglang_service_restore": [],
                  "_sglang_service_untrusted_previous": [], "sglang_service_release_dir": "/opt/dflash/releases/r2",
                  "_sglang_service_ready_result": {"ready": False, "reason": "not ready within 5s"},
                  "__sglang_service_rollback_ready": {"ready": back_healthy, "reason": "crashed"}}
        steps = [START, {**SAY, "vars": {**SAY["vars"], **rolled}}, REJOIN_AFTER_ROLL_BACK, DIAGNOSIS,
                 {"name": "Keep the diagnosis", "ansible.builtin.copy": {
                     "dest": str(root / "diagnosis.json"), "mode": "0644",
                     "content": "{{ {'lines': _sglang_service_rollback_lines,"
                                " 'serving': _sglang_service_rollback_serving} | to_json }}"}}]
        rc, facts, out = run(root, {
            "sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": url,
            "_sglang_service_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_sglang_service_restart": ["q1"]},
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
            "_sglang_service_present": instances(int(w1.rsplit(":", 1)[1]), 30002), "_sglang_service_restart": ["q1"]})
        assert rc == 0, out[-3000:]
        (drain,) = facts["drains"]
        assert drain["error"] and "timeout" in drain["error"] and not drain["removed"]
        assert facts["changes"][0].startswith("router: q1 was not taken out of %s (" % url)
        assert facts["changes"][0].endswith("; it restarted without a drain") and router.urls() == [w1]
