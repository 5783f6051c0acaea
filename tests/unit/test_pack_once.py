"""The controller packs what it pushes once per run, not once per host.

The real dflash_overlay (tasks_from: stage) and sglang_venv (tasks_from: wheelhouse) run over three
local hosts, two at a time (serial: 2). The DFlash tree and the wheelhouse are each packed once: the
pack task has one result per batch (run_once), the first batch packs, the second reuses the tar the
first left in the run's scratch directory (same key: same tree). Every host gets the same bytes, and
the scratch directory (Ansible's own temporary directory of the run) is gone when the run ends.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from role_collection import role_collection

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("h1", "h2", "h3")
PACK_TREE = "Pack the tree on the controller (reproducible tar) and read its digest"
PACK_WHEELHOUSE = "Pack the wheelhouse on the controller (reproducible tar)"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the roles write root:root files")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack-once")
    role_collection(root, ("host_layout", "dflash_overlay", "sglang_venv"))

    tree = root / "tree" / "python"
    (tree / "sglang" / "srt").mkdir(parents=True)
    (tree / "sglang" / "__init__.py").write_text("")
    (tree / "sglang" / "version.py").write_text('__version__ = "0.5.11"\n')
    (tree / "sglang" / "srt" / "dflash_worker.py").write_text("DFLASH = True\n")
    (tree / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.11"\n'
                                         'dependencies = ["sglang-kernel==0.4.2", "requests"]\n')
    wheels = root / "wheels"
    wheels.mkdir()
    for name in ("a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"):
        (wheels / name).write_bytes(name.encode() * 100)

    inventory = {"targets": {"hosts": {h: {} for h in HOSTS}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "dflash_source": "overlay", "dflash_overlay_source_dir": str(root / "tree"),
        "dflash_overlay_artifacts_dir": str(root / "hosts") + "/{{ inventory_hostname }}/artifacts",
        "sglang_venv_base_dir": str(root / "hosts") + "/{{ inventory_hostname }}",
        "sglang_venv_wheelhouse_controller_dir": str(wheels)}}}
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (root / "play.yml").write_text(yaml.safe_dump([{
        "name": "Stage over three hosts, two at a time", "hosts": "targets", "gather_facts": False,
        "serial": 2, "tasks": [
            {"name": "Stage the DFlash tree", "ansible.builtin.include_role": {
                "name": "dflash.deploy.dflash_overlay", "tasks_from": "stage"}},
            {"name": "Push the wheelhouse", "ansible.builtin.include_role": {
                "name": "dflash.deploy.sglang_venv", "tasks_from": "wheelhouse"}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_LOCAL_TEMP=str(root / "local-tmp"))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(root / "hosts.yml"),
                           str(root / "play.yml")], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    return root, out


def results(out: dict, name: str) -> list[tuple[str, dict]]:
    """(host, result) of every run of the task called `name`, in the order they ran."""
    return [(host, result) for play in out["plays"] for task in play["tasks"]
            if task["task"]["name"].rsplit(" : ", 1)[-1] == name for host, result in task["hosts"].items()]


def test_the_tree_is_packed_once_for_three_hosts_in_two_batches(run):
    root, out = run
    packs = results(out, PACK_TREE)
    assert [host for host, result in packs] == ["h1", "h3"], packs            # one result per batch
    assert [r["stdout_lines"][2] for host, r in packs] == ["packed", "reused"]
    assert packs[0][1]["stdout_lines"][:2] == packs[1][1]["stdout_lines"][:2]
    path, digest = packs[0][1]["stdout_lines"][:2]
    pushed = {h: (root / "hosts" / h / "artifacts" / f"dflash-overlay-{digest[:16]}.tar").read_bytes() for h in HOSTS}
    assert len(set(pushed.values())) == 1
    assert not Path(path).exists() and Path(path).parent.parent.parent == root / "local-tmp"   # removed with the run


def test_the_wheelhouse_is_packed_once_for_three_hosts_in_two_batches(run):
    root, out = run
    packs = results(out, PACK_WHEELHOUSE)
    assert [host for host, result in packs] == ["h1", "h3"], packs
    assert [r["stdout_lines"][1] for host, r in packs] == ["packed", "reused"]
    assert len({r["stdout_lines"][0] for host, r in packs}) == 1
    for h in HOSTS:
        assert sorted(p.name for p in (root / "hosts" / h / "artifacts" / "wheelhouse").iterdir()) == [
            "a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"]
    assert not Path(packs[0][1]["stdout_lines"][0]).exists()
