"""playbooks/deploy_dflash.yml publishes each host's report with set_stats (dflash_deploy), failed hosts too.

The real playbook runs over three local hosts, two at a time, with the collection's roles replaced by
stubs (each stub task file does nothing, or fails where the test says): the first batch has a host that
fails in sglang_service and one that deploys; the second batch is held back. What AWX and ansible-runner
keep (the run's custom stats, `_run`) holds all three, and the deploy summary still names the failure
where it happened, not the play's rescue that fails the host again.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = ("host_lock", "host_preflight", "sglang_service", "rollout", "sglang_venv", "dflash_overlay", "cuda_overlay",
         "kernel_pin", "deploy_state")
ENTRIES = ("main", "stage", "release", "settings", "check", "absent", "prune", "forget", "record", "surge_leftovers")
# The stub deploy_state compares nothing: every host takes the full path, with no reason to give.
NO_FAST_PATH = {"taken": False, "reasons": []}
FAILURE = "instance qwen3-8b did not become ready on release 5c1e; rolled back\nRuntimeError: injected on h1"
# What the performance gate reports for an instance it measured (rollout_perf).
PERF = {"release": "5c1e0000aaaabbbb", "status": "passed", "baseline_release": "38daf6d080f8bba8",
        "figures": {"ttft_ms": 41.2, "itl_ms": 7.95, "output_tokens_per_s": 118.3, "acceptance": 3.12},
        "reason": None, "message": "4 requests of 64 tokens"}


def stub_entry(role: str, entry: str) -> list:
    tasks = [{"name": f"Stub {role} {entry}", "ansible.builtin.fail": {"msg": FAILURE},
              "when": f"(stub_fail | default({{}})).get(inventory_hostname) == '{role}:{entry}'"}]
    if (role, entry) == ("sglang_venv", "main"):
        tasks.append({"name": "Name the release", "ansible.builtin.set_fact": {
            "sglang_venv_release_id": "5c1e0000aaaabbbb", "sglang_venv_changes": ["release 5c1e0000aaaabbbb is new"]}})
    if (role, entry) == ("sglang_service", "main"):
        tasks.append({"name": "List the instances", "ansible.builtin.set_fact": {
            "instances_present": [{"name": "qwen3-8b", "port": 30001, "served_model_name": "qwen3-8b-dflash"}]}})
    if (role, entry) == ("rollout", "main"):
        tasks.append({"name": "Measure the instances",
                      "ansible.builtin.set_fact": {"rollout_perf": {"qwen3-8b": PERF}}})
    return tasks


@pytest.fixture(scope="module")
def stub_collection(tmp_path_factory) -> Path:
    """dflash.deploy with its own plugins and playbook, and stub roles."""
    root = tmp_path_factory.mktemp("collections")
    coll = root / "ansible_collections" / "dflash" / "deploy"
    (coll / "playbooks" / "tasks").mkdir(parents=True)
    (coll / "plugins").symlink_to(REPO / "plugins")
    (coll / "meta").symlink_to(REPO / "meta")
    (coll / "playbooks" / "deploy_dflash.yml").write_text((REPO / "playbooks" / "deploy_dflash.yml").read_text())
    for name in ("deploy_locked.yml", "deploy_finish.yml"):
        (coll / "playbooks" / "tasks" / name).write_text((REPO / "playbooks" / "tasks" / name).read_text())
    (coll / "playbooks" / "tasks" / "stage_artifacts.yml").write_text(
        yaml.safe_dump(stub_entry("stage", "artifacts")))
    for role in ROLES:
        (coll / "roles" / role / "tasks").mkdir(parents=True)
        for entry in ENTRIES:
            (coll / "roles" / role / "tasks" / f"{entry}.yml").write_text(yaml.safe_dump(stub_entry(role, entry)))
    inventory = {"dflash_targets": {"hosts": {h: {"ansible_host": f"192.0.2.{i}"} for i, h in enumerate(
        ("h1", "h2", "h3"), start=1)}, "vars": {
        "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
        "dflash_controller_dir": str(root / "controller")}}}
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (root / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {root}\nretry_files_enabled = false\n"
                                      "callbacks_enabled = dflash.deploy.deploy_summary\n")
    return root


def deploy(root: Path, stdout_callback: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK=stdout_callback, ANSIBLE_SHOW_CUSTOM_STATS="1",
               ANSIBLE_DEPRECATION_WARNINGS="false", DFLASH_PROGRESS_INTERVAL="0")
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    return subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(root / "hosts.yml"),
                           "dflash.deploy.deploy_dflash", "-e", "deploy_dflash_serial=2",
                           "-e", json.dumps({"stub_fail": {"h1": "sglang_service:main"}})],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_every_host_has_its_report_in_the_runs_stats(stub_collection):
    run = deploy(stub_collection, "ansible.posix.json")
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout[run.stdout.index("{"):])
    assert out["global_custom_stats"]["dflash_deploy"] == {
        "h1": {"status": "failed", "failed": {
            "task": "Stub sglang_service main",
            "cause": "instance qwen3-8b did not become ready on release 5c1e; rolled back",
            "journal": ["RuntimeError: injected on h1"]}, "perf": {}, "fast_path": NO_FAST_PATH},
        "h2": {"status": "ok", "release": "5c1e0000aaaabbbb", "health_url": ["http://192.0.2.2:30001/health_generate"],
               "models": ["qwen3-8b-dflash"], "changes": ["release 5c1e0000aaaabbbb is new"],
               "perf": {"qwen3-8b": PERF}, "fast_path": NO_FAST_PATH},
        "h3": {"status": "failed", "failed": {
            "task": "Stop before any change (a host of an earlier batch failed)",
            "cause": "not deployed: h1 failed in an earlier batch (1 of 2 hosts tried, 50% > "
                     "deploy_dflash_max_fail_percentage 0%); fix the failure and run the same command again",
            "journal": []}, "perf": {}, "fast_path": NO_FAST_PATH}}
    stats = out["stats"]
    assert (stats["h1"]["failures"], stats["h2"]["failures"], stats["h3"]["failures"]) == (1, 0, 1), stats
    # The host fails again with the failure's own message: the last failed message of h1 is still it.
    failed = [task["hosts"]["h1"]["msg"] for play in out["plays"] for task in play["tasks"]
              if task["hosts"].get("h1", {}).get("failed")]
    assert failed == [FAILURE, FAILURE]


def test_the_summary_names_the_failure_where_it_happened(stub_collection):
    run = deploy(stub_collection, "ansible.builtin.default")
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    summary = run.stdout.split("DFLASH DEPLOY SUMMARY", 1)[1].splitlines()
    assert summary[1] == 'h1: FAILED in sglang_service at "Stub sglang_service main"', summary
    assert summary[2] == "  cause: instance qwen3-8b did not become ready on release 5c1e; rolled back"
    assert "  journal: RuntimeError: injected on h1" in summary
    assert any(line.startswith("h2: ok, release 5c1e0000aaaabbbb") for line in summary), summary
    assert ("  performance qwen3-8b: passed against release 38daf6d080f8bba8; time to first token 41.2 ms, "
            "inter-token latency 7.95 ms, 118 tokens/s, acceptance 3.12 tokens per verify step") in summary, summary
    assert 'h3: FAILED in play at "Stop before any change (a host of an earlier batch failed)"' in summary
    assert not any("Fail the host again" in line for line in summary), summary
