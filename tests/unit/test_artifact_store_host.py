"""An artifact store host (dflash_artifact_store_host): deploys take the staged artifacts from it.

A local "store" host keeps cuda-cu130.tar, dflash-src.tar and uv in its store directory; the controller
declares no dflash_controller_dir and no dflash_uv_path (an ephemeral controller). The real deploy stage
step (playbooks/tasks/stage_artifacts.yml) and the real roles (dflash_overlay and cuda_overlay's stage,
sglang_venv's uv) run over three local hosts, two at a time: every artifact comes to the controller once
(one fetch in the run, the later batch finds it in the run's scratch directory), every host gets the same
bytes, and a second run brings nothing (the hosts' copies have the store's manifest and checksum). A store
without uv, and a store host that does not answer, are refused in one line by the stage step, before the
host lock or any change.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from bundle_tar import manifest_bytes
from role_collection import role_collection

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("h1", "h2", "h3")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the roles write root:root files")


def tar_of(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("store-host")
    coll = role_collection(root, ("host_layout", "dflash_overlay", "cuda_overlay", "sglang_venv"), playbook_tasks=True)
    store = root / "store"
    store.mkdir()
    tar_of(store / "cuda-cu130.tar", {"MANIFEST.json": manifest_bytes(members=["torch/__init__.py"]),
                                      "torch/__init__.py": b"# +cu130\n"})
    tar_of(store / "dflash-src.tar", {
        "pyproject.toml": b'[project]\nname = "sglang"\nversion = "0.5.11"\ndependencies = ["sglang-kernel==0.4.2"]\n',
        "sglang/__init__.py": b"", "sglang/version.py": b'__version__ = "0.5.11"\n',
        "sglang/srt/speculative/dflash_worker.py": b"DFLASH = True\n"})
    (store / "uv").write_text("#!/bin/sh\necho uv 0.13.9\n")
    (store / "uv").chmod(0o755)
    (root / "play.yml").write_text(yaml.safe_dump([{
        "name": "Deploy's staging over three hosts, two at a time", "hosts": "dflash_targets",
        "gather_facts": False, "serial": 2, "tasks": [
            {"name": "Stage", "ansible.builtin.include_tasks": {
                "file": str(coll / "playbooks" / "tasks" / "stage_artifacts.yml")},
             "vars": {"_stage_reference": "{{ groups['dflash_reference'] | default([]) | first | default('') }}"}},
            {"name": "Stage the DFlash sources", "ansible.builtin.include_role": {
                "name": "dflash.deploy.dflash_overlay", "tasks_from": "stage"}},
            {"name": "Stage the CUDA bundle", "ansible.builtin.include_role": {
                "name": "dflash.deploy.cuda_overlay", "tasks_from": "stage"}},
            {"name": "Push uv", "ansible.builtin.include_role": {
                "name": "dflash.deploy.sglang_venv", "tasks_from": "uv"}}]}]))
    return root


def inventory(root: Path, store: dict | None = None, controller: bool = False) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    where = ({"dflash_controller_dir": str(root / "controller"), "dflash_uv_path": str(root / "store" / "uv")}
             if controller else
             {"dflash_artifact_store_host": "store", "dflash_artifact_store_dir": str(root / "store")})
    hosts = {"all": {"vars": {
        **local, **where, "dflash_source": "overlay",
        "dflash_overlay_artifacts_dir": str(root / "hosts") + "/{{ inventory_hostname }}/artifacts",
        "cuda_overlay_artifacts_dir": str(root / "hosts") + "/{{ inventory_hostname }}/artifacts",
        "sglang_venv_base_dir": str(root / "hosts") + "/{{ inventory_hostname }}"},
        "hosts": {"store": store or {}},
        "children": {"dflash_targets": {"hosts": {h: {} for h in HOSTS}}}}}
    path = root / "hosts.yml"
    path.write_text(yaml.safe_dump(hosts))
    return path


def deploy(root: Path, store: dict | None = None, controller: bool = False) -> tuple[int, dict]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_LOCAL_TEMP=str(root / "local-tmp"), PATH="/usr/bin:/bin")   # no uv on the controller
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    hosts = inventory(root, store, controller)
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(hosts), str(root / "play.yml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        return proc.returncode, json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-3000:]) from None


def results(out: dict, name: str) -> list[tuple[str, dict]]:
    return [(host, result) for play in out["plays"] for task in play["tasks"]
            if task["task"]["name"].rsplit(" : ", 1)[-1] == name for host, result in task["hosts"].items()]


def ran(out: dict, name: str) -> list[str]:
    """The hosts for which the task called `name` did something (not skipped)."""
    return [host for host, result in results(out, name) if not result.get("skipped")]


def test_every_artifact_comes_from_the_store_once_per_run(lab):
    rc, out = deploy(lab)
    assert rc == 0, [(t["task"]["name"], r.get("msg")) for play in out["plays"] for t in play["tasks"]
                     for r in t["hosts"].values() if r.get("failed")]
    assert ran(out, "Bring the bundle from the artifact store to the controller") == ["h1"]
    assert ran(out, "Fetch the DFlash sources from the artifact store") == ["h1"]
    assert ran(out, "Bring uv from the artifact store to the controller") == ["h1"]
    store = lab / "store"
    for h in HOSTS:
        artifacts = lab / "hosts" / h / "artifacts"
        assert (artifacts / "cuda-cu130.tar").read_bytes() == (store / "cuda-cu130.tar").read_bytes()
        assert (lab / "hosts" / h / "tools" / "uv").read_bytes() == (store / "uv").read_bytes()
        assert len(list(artifacts.glob("dflash-overlay-*.tar"))) == 1
    assert not list((lab / "local-tmp").glob("*/dflash-*"))             # the run's scratch went with the run

    rc, out = deploy(lab)                                                 # the hosts have it all: nothing comes
    assert rc == 0, [(t["task"]["name"], r.get("msg")) for play in out["plays"] for t in play["tasks"]
                     for r in t["hosts"].values() if r.get("failed")]
    assert ran(out, "Bring the bundle from the artifact store to the controller") == []
    assert ran(out, "Bring uv from the artifact store to the controller") == []
    assert [h for h, r in results(out, "Push the bundle") + results(out, "Push uv from the controller")
            if r.get("changed")] == []


def test_a_store_without_uv_is_refused_in_one_line_before_any_change(lab):
    (lab / "store" / "uv").rename(lab / "store" / "uv.away")
    try:
        rc, out = deploy(lab)
    finally:
        (lab / "store" / "uv.away").rename(lab / "store" / "uv")
    assert rc == 2
    [(host, refusal)] = results(out, "Refuse what the store cannot have (before any change)")[:1]
    assert refusal["msg"] == (
        f"the artifact store store:{lab / 'store'} has no uv and the controller has no uv (dflash_uv_path, or uv on "
        "its PATH): run playbooks/stage_artifacts.yml from a controller that has uv, or set dflash_uv_path to push "
        "the controller's uv")
    assert [t["task"]["name"] for play in out["plays"] for t in play["tasks"]][-1].endswith(
        "Refuse what the store cannot have (before any change)")


def test_a_store_host_that_does_not_answer_is_refused_in_one_line(lab):
    rc, out = deploy(lab, {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9,
                           "ansible_ssh_common_args": "-o ConnectTimeout=2 -o BatchMode=yes"})
    assert rc == 2
    [(host, refusal)] = results(out, "Refuse what the store cannot have (before any change)")[:1]
    assert refusal["msg"] == (
        "the artifact store host store (dflash_artifact_store_host) does not answer and the inventory has no "
        "reference host (group dflash_reference): start store, or unset dflash_artifact_store_host to deploy from "
        "the controller's store (dflash_controller_dir)")


def test_without_a_store_host_the_controllers_store_is_used_as_before(lab):
    artifacts = lab / "controller" / "artifacts"
    (artifacts / "dflash-src" / "python").mkdir(parents=True, exist_ok=True)
    (artifacts / "cuda-cu130.tar").write_bytes((lab / "store" / "cuda-cu130.tar").read_bytes())
    with tarfile.open(lab / "store" / "dflash-src.tar") as tar:
        tar.extractall(artifacts / "dflash-src" / "python", filter="data")
    rc, out = deploy(lab, controller=True)
    assert rc == 0, [(t["task"]["name"], r.get("msg")) for play in out["plays"] for t in play["tasks"]
                     for r in t["hosts"].values() if r.get("failed")]
    assert ran(out, "Read what the artifact store holds") == []
    assert ran(out, "Bring the bundle from the artifact store to the controller") == []
    assert len(ran(out, "Read the bundle's manifest digest")) == 2                  # once per batch
