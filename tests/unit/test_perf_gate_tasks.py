"""The rollout's performance gate tasks as a deploy runs them (perf_gate.yml, then perf_promote.yml when
every instance passed), on this machine against an SGLang stand-in streaming at set delays
(tests/support/perf_server.py); the layout is a temporary directory.

The first release on an instance has no baseline: it is measured, passes, and its candidate record becomes
its record. A slower next release is refused naming the figure, and no record of it is kept. A release as fast
as the first passes against it and is recorded; an instance whose gate is off is neither measured nor recorded.
The readiness wait and the roll-back around these tasks are the lab's to prove (molecule faults).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from perf_server import sglang_stream
from role_collection import role_collection

REPO = Path(__file__).resolve().parents[2]
STEPS = (1, 2, 2, 2, 1)  # 8 tokens, 4 verify steps

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the record is written root:root")


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    root = tmp_path_factory.mktemp("perf-gate")
    role_collection(root, ("host_layout", "instances", "sglang_service", "rollout"))
    for rel in ("r1", "r2", "r3"):
        (root / "opt" / "releases" / rel / ".dflash-release").mkdir(parents=True)
    (root / "etc").mkdir()
    for name in ("qwen3-8b", "probe"):
        (root / "etc" / f"{name}.env").write_text("SGLANG_API_KEY=\n")
    return root


def unit_systemctl(root: Path) -> Path:
    """A systemctl whose units' control group is this process's: the stand-in, in this process, is then the
    unit's listener, as the real server is in its unit's (perf_probe checks who holds the port)."""
    own = [line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
           if line.split(":")[1] in ("", "name=systemd")][0]
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text("#!/bin/sh\necho '%s'\n" % own)
    (bin_dir / "systemctl").chmod(0o755)
    return bin_dir


def gate(root: Path, release: str, before: str, port: int, instances=None) -> dict:
    """Run perf_gate.yml (and perf_promote.yml when it promotes) for the instances restarted onto `release`,
    whose `current` named `before` ('' for none); the gate's decision (_rollout_perf)."""
    releases = root / "opt" / "releases"
    instances = instances or [{"name": "qwen3-8b", "port": port, "gpus": [1]}]
    link = {"exists": True, "islnk": True, "lnk_source": str(releases / before)} if before else {"exists": False}
    current = [{"item": {"name": i["name"]}, "stat": link} for i in instances]
    play = [{"name": "The performance gate", "hosts": "localhost", "gather_facts": False, "vars": {
        "sglang_service_release_dir": str(releases / release), "sglang_service_config_dir": str(root / "etc"),
        "host_preflight_gpus": [{"index": 1, "uuid": "GPU-b"}, {"index": 2, "uuid": "GPU-c"}],
        "sglang_service_perf_gate_prompts": ["a", "b"], "sglang_service_perf_gate_max_tokens": 8,
        "sglang_service_perf_gate_timeout": 10, "sglang_service_switched": {"current": current},
        "_rollout_waited": instances}, "tasks": [
        # the service's settings, exposed as the playbook exposes them to the rollout (public: true)
        {"name": "Settings", "ansible.builtin.include_role": {
            "name": "dflash.deploy.sglang_service", "tasks_from": "settings", "public": True}},
        {"name": "Gate", "ansible.builtin.include_role": {
            "name": "dflash.deploy.rollout", "tasks_from": "perf_gate"}},
        {"name": "Promote", "ansible.builtin.include_role": {
            "name": "dflash.deploy.rollout", "tasks_from": "perf_promote"},
         "when": "_rollout_perf.promote | length > 0"},
        {"name": "Decision", "ansible.builtin.debug": {"var": "_rollout_perf"}}]}]
    (root / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    env["PATH"] = "%s:%s" % (unit_systemctl(root), env["PATH"])
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(root / "play.yml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    return out["plays"][0]["tasks"][-1]["hosts"]["localhost"]["_rollout_perf"]


def record(root: Path, release: str, name: str = "qwen3-8b", candidate: bool = False) -> Path:
    return root / "opt" / "releases" / release / ".dflash-release" / f"perf-{name}{'.next' if candidate else ''}.json"


def test_the_first_release_then_a_slower_one_then_one_as_fast(layout):
    # the first release on the instance: nothing to compare with, measured and recorded
    with sglang_stream(first=0.01, gap=0.01, steps=STEPS) as base:
        first = gate(layout, "r1", "", int(base.rsplit(":", 1)[1]))
    assert first["refused"] == {}
    rep = first["instances"]["qwen3-8b"]
    assert (rep["status"], rep["release"], rep["baseline_release"]) == ("no_baseline", "r1", None)
    assert rep["figures"]["acceptance"] == 2.0
    kept = json.loads(record(layout, "r1").read_text())
    assert (kept["release"], kept["gpus"], kept["figures"]) == ("r1", ["GPU-b"], rep["figures"])
    assert not record(layout, "r1", candidate=True).exists()

    # a slower release against it: refused, the figure named, nothing of it recorded
    with sglang_stream(first=0.3, gap=0.01, steps=STEPS) as base:
        slow = gate(layout, "r2", "r1", int(base.rsplit(":", 1)[1]))
    line = slow["refused"]["qwen3-8b"]
    assert line.startswith("the performance gate refused release r2 against release r1: time to first token "), line
    assert "limit +20 %" in line and slow["promote"] == []
    assert slow["instances"]["qwen3-8b"]["status"] == "refused"
    assert not record(layout, "r2").exists() and not record(layout, "r2", candidate=True).exists()

    # as fast as the first (limits loosened for this instance: the machine's own noise is not the question
    # here), beside an instance whose gate is off
    loose = {"max_ttft_regression": 100.0, "max_itl_regression": 100.0, "max_throughput_regression": 1.0}
    with sglang_stream(first=0.01, gap=0.01, steps=STEPS) as base:
        port = int(base.rsplit(":", 1)[1])
        instances = [{"name": "qwen3-8b", "port": port, "gpus": [1], "perf_gate": loose},
                     {"name": "probe", "port": port, "gpus": [2], "perf_gate": {"enabled": False}}]
        again = gate(layout, "r3", "r1", port, instances)
    assert again["refused"] == {}
    assert again["instances"]["qwen3-8b"]["status"] == "passed"
    assert again["instances"]["qwen3-8b"]["baseline_release"] == "r1"
    assert again["instances"]["probe"]["status"] == "off"
    assert json.loads(record(layout, "r3").read_text())["release"] == "r3"
    assert not record(layout, "r3", "probe").exists()
    assert oct(record(layout, "r3").stat().st_mode & 0o777) == "0o644"
