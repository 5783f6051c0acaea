"""The collection run the way AWX runs a job: ansible-runner over the example AWX project.

A private data directory laid out as AWX lays one out for a job:

    project/                  examples/awx-project as it is (its wrapper playbooks and ansible.cfg)
    requirements_collections/ the collection, where AWX installs the project's collections/requirements.yml;
                              here from the tarball `make collection` builds (the requirements name
                              dflash.deploy at this checkout's version: tests/unit/test_awx_project.py)
    inventory/hosts.yml       the lab inventory as a file, its group_vars beside it; the instance's API key
                              from Ansible Vault (group_vars/dflash_targets/vault.yml)
    env/envvars               ANSIBLE_COLLECTIONS_PATH (the job's collections)
    env/cmdline               --ask-vault-pass, and env/passwords answers the prompt: AWX's Vault credential
    env/ssh_key               the lab's key, which runner hands to ssh-agent: AWX's Machine credential

The deploy job runs with the reference host ct129 stopped (the artifacts are staged on the controller) and
limit ct200. It must end `successful` with rc 0, and its artifacts (the playbook_on_stats event's
artifact_data in artifacts/<ident>/job_events, what AWX keeps as the job's artifacts) must hold ct200's
report: the release ct200 now runs, the health URL and the model that /v1/models answers with the vaulted
key. The project's ansible.cfg is read (the deploy summary is in the job's output), and neither the
job's output nor any of its events holds the API key. Then the audit job over ct129 and ct200 publishes
every venv's facts and those that differ.

ct200 keeps the API key until the next deploy from the lab inventory (test_command_forms.py's first one).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request

import ansible_runner
import pytest
import yaml
from conftest import REPO, VENV_BIN, ansible_env, collection_check, lab

API_KEY = "sk-lab-awx-runner"
VAULT_PASSWORD = "lab awx vault password"
INSTANCE = "qwen3-8b"
CURRENT = f"/opt/dflash/instances/{INSTANCE}/current"
BUNDLE = REPO / "build" / "artifacts" / "cuda-cu130.tar"


def lab_power(action: str, host: str) -> None:
    """The lab's fault switch (tools/lab/lab.py stop|start HOST)."""
    subprocess.run([str(VENV_BIN / "python"), str(REPO / "tools" / "lab" / "lab.py"), action, host],
                   cwd=REPO, check=True, timeout=300)


def models(port: int, key: str | None) -> list:
    req = urllib.request.Request(f"http://10.89.64.200:{port}/v1/models")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return [m["id"] for m in json.load(resp)["data"]]


def vaulted(name: str, value: str, workdir) -> str:
    """`ansible-vault encrypt_string` of value, as the inventory holds it (the password file is gone after)."""
    password = workdir / "vault-pass"
    password.write_text(VAULT_PASSWORD + "\n")
    try:
        out = subprocess.run([str(VENV_BIN / "ansible-vault"), "encrypt_string", "--vault-password-file",
                              str(password), "--name", name, value], cwd=workdir, env=ansible_env(),
                             capture_output=True, text=True, check=True).stdout
    finally:
        password.unlink()
    return out


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    pdd = tmp_path_factory.mktemp("awx-job")
    build = tmp_path_factory.mktemp("awx-build")
    shutil.copytree(REPO / "examples" / "awx-project", pdd / "project")
    collection_check.install(collection_check.build(build), pdd / "requirements_collections")

    # The lab inventory as a file: its paths made absolute (the artifact store is the lab's, REPO/build),
    # the key left to the Machine credential, the instance's API key from the vault.
    inventory = yaml.safe_load(lab.INVENTORY.read_text().replace("{{ inventory_dir }}/..", str(REPO)))
    del inventory["lab"]["vars"]["ansible_ssh_private_key_file"]
    assert inventory["lab"]["vars"]["dflash_controller_dir"] == str(REPO / "build")
    assert "ct129" in inventory["lab"]["children"]["dflash_reference"]["hosts"]
    group_vars = yaml.safe_load((REPO / "inventory" / "group_vars" / "lab.yml").read_text())
    for inst in group_vars["sglang_service_instances"]:
        inst["api_key"] = "{{ vault_sglang_api_key }}"
    (pdd / "inventory" / "group_vars" / "dflash_targets").mkdir(parents=True)
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (pdd / "inventory" / "group_vars" / "lab.yml").write_text(yaml.safe_dump(group_vars, sort_keys=False))
    (pdd / "inventory" / "group_vars" / "dflash_targets" / "vault.yml").write_text(
        vaulted("vault_sglang_api_key", API_KEY, build))

    (pdd / "env").mkdir()
    (pdd / "env" / "envvars").write_text(yaml.safe_dump(
        {"ANSIBLE_COLLECTIONS_PATH": str(pdd / "requirements_collections")}))
    (pdd / "env" / "cmdline").write_text("--ask-vault-pass")
    (pdd / "env" / "passwords").write_text(yaml.safe_dump({r"Vault password:\s*?$": VAULT_PASSWORD}))
    (pdd / "env" / "ssh_key").write_text((lab.SSH_DIR / "id_ed25519").read_text())
    return pdd


def run_job(pdd, playbook: str, limit: str, ident: str, monkeypatch):
    """ansible_runner.run as AWX calls it: the job's environment has no ANSIBLE_* of the caller's."""
    for name in [n for n in os.environ if n.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    job = ansible_runner.run(private_data_dir=str(pdd), playbook=playbook, limit=limit, ident=ident,
                             quiet=True, timeout=1200)
    artifacts = pdd / "artifacts" / ident
    stdout = (artifacts / "stdout").read_text()
    assert (job.status, job.rc) == ("successful", 0), f"{job.status} rc {job.rc}\n{stdout[-6000:]}"
    return artifacts, stdout


def events(artifacts) -> list:
    return [json.loads(p.read_text()) for p in sorted((artifacts / "job_events").glob("*.json"))]


def artifact_data(artifacts) -> dict:
    """What set_stats published: the playbook_on_stats event's artifact_data (AWX: the job's artifacts)."""
    [stats] = [e for e in events(artifacts) if e.get("event") == "playbook_on_stats"]
    return stats["event_data"]["artifact_data"]


def no_secret_in(artifacts, stdout: str) -> None:
    texts = {str(p.relative_to(artifacts)): p.read_text(errors="replace")
             for p in artifacts.rglob("*") if p.is_file()}
    texts["stdout"] = stdout
    leaks = [name for name, text in texts.items() if API_KEY in text or VAULT_PASSWORD in text]
    assert leaks == [], leaks


def ensure_staged() -> None:
    """The artifacts a deploy needs with the reference host down (stage_artifacts.yml from the checkout)."""
    if BUNDLE.is_file():
        return
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "playbooks/stage_artifacts.yml"], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and BUNDLE.is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]


def test_a_deploy_job_with_the_reference_host_down_publishes_the_hosts_report(job_dir, monkeypatch):
    ensure_staged()
    try:
        lab_power("stop", "ct129")
        artifacts, stdout = run_job(job_dir, "deploy_dflash.yml", "ct200", "deploy", monkeypatch)
    finally:
        lab_power("start", "ct129")

    report = artifact_data(artifacts)["dflash_deploy"]
    assert list(report) == ["ct200"], report
    ct200 = next(h for h in lab.hosts() if h.name == "ct200")
    running = os.path.basename(lab.hexec(ct200, f"readlink {CURRENT}").stdout.strip())
    assert report["ct200"]["status"] == "ok", report
    assert report["ct200"]["release"] == running, (report, running)
    assert report["ct200"]["health_url"] == ["http://10.89.64.200:30001/health_generate"], report
    assert report["ct200"]["models"] == ["qwen3-8b-dflash"], report
    assert models(30001, API_KEY) == report["ct200"]["models"]
    with pytest.raises(urllib.error.HTTPError):                # the vaulted key reached the server
        models(30001, None)

    assert f"ct200: ok, release {running}" in stdout          # the project's ansible.cfg was read
    no_secret_in(artifacts, stdout)


def test_an_audit_job_publishes_every_venvs_facts_and_what_differs(job_dir, monkeypatch):
    artifacts, stdout = run_job(job_dir, "audit.yml", "ct129,ct200", "audit", monkeypatch)
    audit = artifact_data(artifacts)["dflash_audit"]
    reference, deployed = audit["columns"]["ct129:/root/venv_sglang211"], audit["columns"][f"ct200:{CURRENT}"]
    assert deployed["torch build"] == reference["torch build"], audit   # the deploy's CUDA 13 torch is the reference's
    assert "dflash_worker.py" in deployed["DFlash files"], deployed
    assert f"sglang-dflash@{INSTANCE}.service running" in deployed["units"], deployed
    assert reference["units"] == "(none)", reference
    assert "units" in audit["differ"], audit["differ"]
    assert "ct129:/root/venv_sglang211" in stdout                      # the table is in the job's output too
    no_secret_in(artifacts, stdout)
