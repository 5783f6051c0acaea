"""An ephemeral controller (an AWX job) with the artifacts on an inventory host: dflash_artifact_store_host.

Two jobs run with ansible-runner over the example AWX project, as test_awx_runner.py runs them, with an
inventory that declares no dflash_controller_dir (the job's container keeps nothing) and
`dflash_artifact_store_host: ct129` (the reference host keeps the store, /opt/dflash/artifacts/store):

1. stage_artifacts.yml (with dflash_uv_path: the job's uv goes into the store too) packs the bundle on
   ct129 straight into its store.
2. deploy_dflash.yml, limit ct200, with ct129's reference venv renamed away, no dflash_reference group
   and no dflash_uv_path in the inventory: the bundle and uv can come from ct129's store only. The job
   ends successful, ct200's report names the release ct200 runs, and ct200's bundle manifest and uv are
   the store's.

ct129's venv is renamed back and its store removed at the end, whatever the outcome.
"""
from __future__ import annotations

import os
import shutil

import pytest
import yaml
from conftest import REPO, collection_check, lab
from test_awx_runner import CURRENT, artifact_data, events, run_job

STORE = "/opt/dflash/artifacts/store"
VENV = "/root/venv_sglang211"


def host(name: str):
    return next(h for h in lab.hosts() if h.name == name)


def write_inventory(pdd, stage: bool) -> None:
    inventory = yaml.safe_load(lab.INVENTORY.read_text().replace("{{ inventory_dir }}/..", str(REPO)))
    lab_vars = inventory["lab"]["vars"]
    del lab_vars["ansible_ssh_private_key_file"]                  # the Machine credential's
    del lab_vars["dflash_controller_dir"]                         # the job's container keeps nothing
    lab_vars["dflash_artifact_store_host"] = "ct129"
    if not stage:
        del lab_vars["dflash_uv_path"]                            # uv from the store
        del inventory["lab"]["children"]["dflash_reference"]      # no reference host to stage from
        inventory["lab"]["hosts"] = {"ct129": {"ansible_host": "10.89.64.129"}}
    (pdd / "inventory").mkdir(exist_ok=True)
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    pdd = tmp_path_factory.mktemp("awx-store-job")
    build = tmp_path_factory.mktemp("awx-store-build")
    shutil.copytree(REPO / "examples" / "awx-project", pdd / "project")
    collection_check.install(collection_check.build(build), pdd / "requirements_collections")
    (pdd / "inventory" / "group_vars").mkdir(parents=True)
    shutil.copy(REPO / "inventory" / "group_vars" / "lab.yml", pdd / "inventory" / "group_vars" / "lab.yml")
    (pdd / "env").mkdir()
    (pdd / "env" / "envvars").write_text(yaml.safe_dump(
        {"ANSIBLE_COLLECTIONS_PATH": str(pdd / "requirements_collections")}))
    (pdd / "env" / "ssh_key").write_text((lab.SSH_DIR / "id_ed25519").read_text())
    return pdd


MANIFEST_DIGEST = "tar -xOf {} MANIFEST.json | sha256sum | cut -c1-64"


def test_an_ephemeral_controller_deploys_from_the_store_host_with_the_reference_venv_gone(job_dir, monkeypatch):
    ct129, ct200 = host("ct129"), host("ct200")
    try:
        write_inventory(job_dir, stage=True)
        run_job(job_dir, "stage_artifacts.yml", "ct129", "stage", monkeypatch)
        held = lab.hexec(ct129, f"ls {STORE}").stdout.split()
        assert sorted(held) == ["cuda-cu130.tar", "uv"], held       # dflash_source upstream: no sources
        store_manifest = lab.hexec(ct129, MANIFEST_DIGEST.format(f"{STORE}/cuda-cu130.tar")).stdout
        store_uv = lab.hexec(ct129, f"sha256sum < {STORE}/uv").stdout

        lab.hexec(ct129, f"mv {VENV} {VENV}.away")
        write_inventory(job_dir, stage=False)
        artifacts, stdout = run_job(job_dir, "deploy_dflash.yml", "ct200", "deploy", monkeypatch)
    finally:
        lab.hexec(ct129, f"if [ -d {VENV}.away ]; then mv {VENV}.away {VENV}; fi; rm -rf {STORE}", check=False)

    report = artifact_data(artifacts)["dflash_deploy"]
    running = os.path.basename(lab.hexec(ct200, f"readlink {CURRENT}").stdout.strip())
    assert report["ct200"]["status"] == "ok", report
    assert report["ct200"]["release"] == running, (report, running)
    assert f"ct200: ok, release {running}" in stdout
    # ct200 runs the store's bundle (its manifest) and the store's uv.
    assert lab.hexec(ct200, MANIFEST_DIGEST.format("/opt/dflash/artifacts/cuda-cu130.tar")).stdout == store_manifest
    assert lab.hexec(ct200, "sha256sum < /opt/dflash/tools/uv").stdout == store_uv
    # The deploy's stage step read ct129's store and staged nothing: no capture ran (a skipped task has
    # its own event, runner_on_skipped; what ran has runner_on_ok or runner_on_failed).
    names = {e["event_data"].get("task", "") for e in events(artifacts)
             if e.get("event") in ("runner_on_ok", "runner_on_failed")}
    assert "Read what the artifact store holds" in names, sorted(names)
    assert not {"Pack the CUDA 13 distributions into one bundle",
                "Capture the DFlash-capable sglang tree (the whole sglang/ and what it needs)"} & names
