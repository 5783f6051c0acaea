"""The sglang_router role as a deploy runs it, on this machine, in external mode against a stand-in of the
router's worker API (tests/support/router_standin.py): off, it sends the router nothing; on, the router's
workers become the instances of its served model, and a second run changes nothing; check mode only reads;
a setting that cannot work stops the role before any request. The managed mode's install and units are
the lab's to prove (they need systemd and an index)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from role_collection import role_collection
from router_standin import router_standin

REPO = Path(__file__).resolve().parents[2]
INSTANCES = [{"name": "q1", "port": 30001, "served_model_name": "qwen3-8b", "state": "present"},
             {"name": "q2", "port": 30002, "served_model_name": "qwen3-8b", "state": "present"}]
WORKERS = ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-router")
    role_collection(root, ("host_layout", "instances", "sglang_router"))
    return root


def run(root: Path, variables: dict, check: bool = False, tasks_from: str = "main", after: list | None = None):
    """The role included as deploy_dflash.yml includes it (its main, or tasks_from), then the tasks of
    ``after``; (rc, the localhost stats, output)."""
    play = [{"name": "The router", "hosts": "localhost", "gather_facts": False,
             "vars": {"instances_present": INSTANCES, **variables}, "tasks": [
                 {"name": "Router", "ansible.builtin.include_role": {
                     "name": "dflash.deploy.sglang_router", "tasks_from": tasks_from, "apply": {"tags": ["router"]}},
                  "when": "sglang_router_enabled | default(false) | bool"}] + (after or [])}]
    (root / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(root / "play.yml")]
                          + (["--check"] if check else []),
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    return proc.returncode, out["stats"]["localhost"], proc.stdout


def test_off_by_default_it_sends_the_router_nothing(root):
    with router_standin() as (url, router):
        old = router.register("http://127.0.0.1:39999")
        rc, stats, out = run(root, {"sglang_router_mode": "external", "sglang_router_url": url})
        assert rc == 0, out[-3000:]
        assert stats["changed"] == 0 and router.requests == [] and list(router.workers) == [old]


def test_external_router_gets_exactly_the_instances_and_a_rerun_changes_nothing(root):
    on = {"sglang_router_enabled": True, "sglang_router_mode": "external", "sglang_router_url": ""}
    with router_standin() as (url, router):
        router.register("http://127.0.0.1:39999")  # an old instance, gone from the list
        on["sglang_router_url"] = url
        rc, stats, out = run(root, on, check=True)
        assert rc == 0, out[-3000:]
        assert all(req[0] == "GET" for req in router.requests), router.requests  # check mode only reads
        assert router.urls() == ["http://127.0.0.1:39999"]
        rc, stats, out = run(root, on)
        assert rc == 0, out[-3000:]
        assert stats["changed"] == 1 and sorted(router.urls()) == WORKERS
        router.requests.clear()
        rc, stats, out = run(root, on)
        assert rc == 0 and stats["changed"] == 0, out[-3000:]
        assert [req[0] for req in router.requests] == ["GET"] and sorted(router.urls()) == WORKERS


def test_a_setting_that_cannot_work_stops_before_any_request(root):
    with router_standin() as (url, router):
        rc, stats, out = run(root, {"sglang_router_enabled": True, "sglang_router_mode": "managed",
                                    "sglang_router_models": {"qwen3-8b": {"port": 30001, "prometheus_port": 29000}}})
        assert rc != 0 and stats["failures"] == 1
        assert ("the router was not changed: sglang_router_models['qwen3-8b'].port 30001 is also the port of "
                "instance q1") in out
        assert router.requests == []


def test_the_check_before_any_change_refuses_what_main_would_and_hands_preflight_the_router_s_ports(root):
    """deploy_dflash.yml runs the check entry point before the lock's first change: the same refusal as main's,
    and a managed router's port and metrics port published for host_preflight_other_ports."""
    with router_standin() as (url, router):
        bad = {"sglang_router_enabled": True, "sglang_router_mode": "managed",
               "sglang_router_models": {"qwen3-8b": {"port": 30001, "prometheus_port": 29000}}}
        rc, stats, out = run(root, bad, tasks_from="check")
        assert rc != 0 and stats["failures"] == 1
        assert "sglang_router_models['qwen3-8b'].port 30001 is also the port of instance q1" in out
        good = {"sglang_router_enabled": True, "sglang_router_mode": "managed",
                "sglang_router_models": {"qwen3-8b": {"port": 30100, "prometheus_port": 29100}}}
        show = [{"name": "Show", "ansible.builtin.debug": {"msg": "PORTS={{ sglang_router_host_ports | to_json }}"}}]
        rc, stats, out = run(root, good, tasks_from="check", after=show)
        assert rc == 0 and stats["changed"] == 0, out[-3000:]
        shown = json.loads(out[out.index("{"):])["plays"][0]["tasks"][-1]["hosts"]["localhost"]["msg"]
        ports = json.loads(shown.split("PORTS=", 1)[1])
        assert ports == [
            {"name": "the router of 'qwen3-8b' (port)", "port": 30100, "unit": "sglang-router@qwen3-8b.service"},
            {"name": "the router of 'qwen3-8b' (metrics port)", "port": 29100,
             "unit": "sglang-router@qwen3-8b.service"}]
        assert router.requests == []


def test_a_newline_in_a_router_value_is_refused_before_any_change_naming_the_variable(root, tmp_path):
    """Round 3, N6: the reproduction's health-check endpoint (a newline, then ExecStartPre=+/bin/sh ...) stops the
    check entry point (before the lock's first change) and main (before install and any write), in one line naming
    the variable and not its value; nothing is written under the router's directories."""
    base, config = tmp_path / "opt", tmp_path / "etc"
    base.mkdir()
    config.mkdir()
    bad = {"sglang_router_enabled": True, "sglang_router_mode": "managed",
           "sglang_router_models": {"qwen3-8b": {"port": 30100, "prometheus_port": 29100}},
           "sglang_router_base_dir": str(base), "sglang_router_config_dir": str(config),
           "sglang_router_health_check_endpoint": '/health\nExecStartPre=+/bin/sh -c "id > /run/rt3-router-inject"',
           "sglang_router_extra_args": ["--log-level", "50%"]}
    with router_standin() as (url, router):
        for entry in ("check", "main"):
            rc, stats, out = run(root, bad, tasks_from=entry)
            assert rc != 0 and stats["failures"] == 1, out[-3000:]
            assert ("the router was not changed: sglang_router_health_check_endpoint holds a newline: a unit value "
                    "must be one line (it would start a unit line of its own) | sglang_router_extra_args item 2 holds "
                    "'%', which systemd would expand as a specifier in the unit") in out
            assert "rt3-router-inject" not in out.split("the router was not changed", 1)[1].split('"', 1)[0]
            assert stats["changed"] == 0 and router.requests == []
        assert list(base.iterdir()) == [] and list(config.iterdir()) == []
        assert not Path("/run/rt3-router-inject").exists()
