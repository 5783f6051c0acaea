"""The operator's command works as written, in each form an operator may type it.

    ansible-playbook deploy_dflash.yml -l ct200               (checkout root)
    cd playbooks; ansible-playbook deploy_dflash.yml -l ct200 (no ansible.cfg above: playbooks/ansible.cfg)
    ansible-playbook dflash.deploy.deploy_dflash -l ct200      (installed collection, no checkout,
                                                               no dflash_reference group)

The first deploys ct200 (the artifacts are staged from ct129 as needed); the others find it
deployed and must converge with nothing to change, the last from an inventory without the
dflash_reference group (the artifacts are staged already, so no reference host is needed).
An inventory that does not declare the artifact store is refused before any change. A phase can be
left out (--skip-tags) or run alone (--tags).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import urllib.request

import pytest
import yaml
from conftest import REPO, VENV_BIN, ansible_env, collection_check


def playbook(args: list, cwd, env=None, timeout=900) -> dict:
    env = env or ansible_env()
    env.pop("ANSIBLE_CONFIG", None)  # each form finds (or does not need) its own config
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"rc {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}") from None
    assert proc.returncode == 0, json.dumps(out.get("stats"), indent=1) + proc.stderr[-2000:]
    return out


def models_answer(address: str, port: int) -> list:
    with urllib.request.urlopen(f"http://{address}:{port}/v1/models", timeout=10) as resp:
        return [m["id"] for m in json.load(resp)["data"]]


@pytest.fixture(scope="module")
def deployed():
    out = playbook(["deploy_dflash.yml", "-l", "ct200"], cwd=REPO)
    assert out["stats"]["ct200"]["failures"] == 0
    assert models_answer("10.89.64.200", 30001) == ["qwen3-8b-dflash"]
    return out


def test_from_the_checkout_root(deployed):
    assert "ct200" in deployed["stats"]


def test_from_playbooks_dir(deployed):
    out = playbook(["deploy_dflash.yml", "-l", "ct200"], cwd=REPO / "playbooks")
    assert out["stats"]["ct200"]["changed"] == 0, out["stats"]


def lab_inventory_without(tmp_path, section: str, key: str) -> str:
    """A copy of the lab inventory (with its group_vars) whose lab.<section>.<key> is gone."""
    text = (REPO / "inventory" / "lab.yml").read_text().replace("{{ inventory_dir }}/..", str(REPO))
    inventory = yaml.safe_load(text)
    del inventory["lab"][section][key]
    (tmp_path / "group_vars").mkdir()
    shutil.copy(REPO / "inventory" / "group_vars" / "lab.yml", tmp_path / "group_vars" / "lab.yml")
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return str(tmp_path / "hosts.yml")


def test_from_an_installed_collection_without_a_reference_group(deployed, tmp_path):
    # An operator's controller: no checkout config, the collection installed from its tarball, and a
    # production inventory after staging, without the dflash_reference group. The staged artifacts are
    # enough; nothing delegates to a host the inventory does not name.
    env = ansible_env()
    env.pop("ANSIBLE_CONFIG")
    colls = tmp_path / "collections"
    env["ANSIBLE_COLLECTIONS_PATH"] = str(colls)
    installed = collection_check.install(collection_check.build(tmp_path), colls)
    assert (installed / "playbooks" / "deploy_dflash.yml").is_file()
    assert not (installed / "tests" / "lab").exists()  # the lab's tests are not shipped
    work = tmp_path / "operator"
    work.mkdir()
    # The inventory names the controller-side inputs (dflash_controller_dir, dflash_uv_path).
    # The lab inventory as a production one after staging: the reference host is gone from it.
    hosts = lab_inventory_without(tmp_path, "children", "dflash_reference")
    out = playbook(["dflash.deploy.deploy_dflash", "-l", "ct200", "-i", hosts], cwd=work, env=env)
    assert out["stats"]["ct200"]["changed"] == 0, out["stats"]
    assert "ct129" not in out["stats"]
    assert os.listdir(work) == []
    assert models_answer("10.89.64.200", 30001) == ["qwen3-8b-dflash"]


def test_an_inventory_without_an_artifact_store_is_refused_before_any_change(deployed, tmp_path):
    # No default is derived from the playbook's directory: an inventory that does not declare
    # dflash_controller_dir gets one line naming it, and the host is left as it was.
    hosts = lab_inventory_without(tmp_path, "vars", "dflash_controller_dir")
    before = lab_state()
    env = ansible_env()
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "deploy_dflash.yml", "-l", "ct200",
                           "-i", hosts], cwd=REPO / "playbooks", env=env,
                          capture_output=True, text=True, timeout=900)
    out = json.loads(proc.stdout)
    assert proc.returncode != 0
    assert out["stats"]["ct200"]["changed"] == 0, out["stats"]
    messages = [r.get("msg", "") for play in out["plays"] for task in play["tasks"]
                for r in task["hosts"].values() if r.get("failed")]
    assert any("dflash_controller_dir is not set: set it in the inventory" in m for m in messages), messages
    assert lab_state() == before
    assert models_answer("10.89.64.200", 30001) == ["qwen3-8b-dflash"]


def tasks_run(out: dict, host: str = "ct200") -> set:
    """The names (without the role's) of the tasks that ran on the host: a task left out by tags is not
    in the output."""
    return {task["task"]["name"].split(" : ", 1)[-1] for play in out["plays"] for task in play["tasks"]
            if host in task["hosts"]}


def env_file() -> str:
    return subprocess.run(["podman", "exec", "dflash-lab-ct200", "cat", "/etc/dflash/qwen3-8b.env"],
                          capture_output=True, text=True, check=True).stdout


def test_a_phase_is_left_out_with_skip_tags_and_run_alone_with_tags(deployed):
    # docs/architecture.md "Tags": --skip-tags PHASE runs everything else, --tags PHASE runs that
    # phase and what every run needs (the host lock, the instance list), nothing more.
    write_env = "Write the instance env files"
    lock_packages = "Find the interpreter and lock the package set (uv pip compile)"
    probe_gpus = "Probe the GPUs (nvidia-smi and a driver-API smoke test per GPU)"
    subprocess.run(["podman", "exec", "dflash-lab-ct200", "sh", "-c",
                    "echo '# edited by hand' >> /etc/dflash/qwen3-8b.env"], check=True)
    left_out = playbook(["deploy_dflash.yml", "-l", "ct200", "--skip-tags", "sglang_service_config"], cwd=REPO)
    ran = tasks_run(left_out)
    assert write_env not in ran
    assert {lock_packages, probe_gpus, "Hold the lock while the token exists"} <= ran, sorted(ran)
    assert "# edited by hand" in env_file()

    alone = playbook(["deploy_dflash.yml", "-l", "ct200", "--tags", "sglang_service_config"], cwd=REPO)
    ran = tasks_run(alone)
    assert write_env in ran and alone["stats"]["ct200"]["changed"] >= 1, alone["stats"]
    assert not {lock_packages, probe_gpus} & ran, sorted(ran)
    assert "# edited by hand" not in env_file()

    # A phase that acts on the release refuses, before any change, when --tags leaves out the phase
    # that names the release.
    before = lab_state()
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "deploy_dflash.yml", "-l", "ct200",
                           "--tags", "sglang_service"], cwd=REPO, env=ansible_env(),
                          capture_output=True, text=True, timeout=900)
    out = json.loads(proc.stdout)
    assert proc.returncode != 0 and out["stats"]["ct200"]["changed"] == 0, out["stats"]
    messages = [r.get("msg", "") for play in out["plays"] for task in play["tasks"]
                for r in task["hosts"].values() if r.get("failed")]
    refusal = "left sglang_venv out: select it too (--tags sglang_venv,sglang_service)"
    assert any(refusal in m for m in messages), messages
    assert lab_state() == before


def lab_state() -> str:
    """ct200's releases, links and the server's process: what a refused run must leave alone."""
    return subprocess.run(["podman", "exec", "dflash-lab-ct200", "sh", "-c",
                           "ls -l /opt/dflash/releases /opt/dflash/instances/qwen3-8b; "
                           "systemctl show -p MainPID sglang-dflash@qwen3-8b.service"],
                          capture_output=True, text=True, check=True).stdout


def test_a_forced_restage_replaces_stale_artifacts(tmp_path):
    # What an older capture left: a bundle that is not one, and a source file the reference no longer has.
    stage = tmp_path / "artifacts"
    stale_src = stage / "dflash-src" / "python" / "sglang" / "stale_from_an_older_capture.py"
    stale_src.parent.mkdir(parents=True)
    stale_src.write_text("raise ImportError('stale')\n")
    (stage / "cuda-cu130.tar").write_bytes(b"stale")
    out = playbook(["playbooks/stage_artifacts.yml", "-e", f"stage_artifacts_dir={stage}",
                    "-e", "dflash_source=overlay"], cwd=REPO)
    assert out["stats"]["ct129"]["failures"] == 0
    with tarfile.open(stage / "cuda-cu130.tar") as bundle:
        names = bundle.getnames()
        manifest = json.load(bundle.extractfile("MANIFEST.json"))
    assert "site-packages/torch-2.11.0+cu130.dist-info/METADATA" in names, names
    assert manifest, "the bundle's manifest is empty"
    assert not stale_src.exists()
    assert (stage / "dflash-src" / "python" / "sglang" / "srt" / "speculative" / "dflash_worker.py").is_file()
    assert (stage / "dflash-src" / "python" / "pyproject.toml").is_file()
