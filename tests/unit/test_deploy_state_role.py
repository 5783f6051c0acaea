"""roles/deploy_state as ansible-playbook runs it on this machine (round 3, N2 and M6).

- The check runs the package lock command of this run, never one read from the record: the role names it on the
  controller (``deploy_state_lock_command``) before sglang_venv ran. It must be the very command sglang_venv then
  runs and records (package_lock.yml, its env from uv.yml): rendered here from the role's own task files and
  defaults, for several inventories, and compared.
- ``deploy_state_file`` outside the collection's own directory is refused in one line before anything runs on the
  host; the shared directory it named keeps its mode.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml
from role_collection import role_collection

REPO = Path(__file__).resolve().parents[2]

HOSTS = {
    "plain": {},
    "overlay": {"dflash_source": "overlay", "host_layout_base_dir": "/srv/dflash"},
    "wheelhouse": {"sglang_venv_source": "wheelhouse", "sglang_venv_base_dir": "/data/d f",
                   "sglang_venv_python": "/usr/bin/python3.11"},
    "index": {"sglang_venv_index_url": "http://127.0.0.1:9/simple", "sglang_venv_extra_index_urls":
              ["http://127.0.0.1:9/a b", "http://127.0.0.1:9/it's"], "sglang_venv_sglang_version": "0.5.12",
              "sglang_venv_uv_path": "/opt/uv dir/uv"},
    # security m4 and issue 44 item 4: credentials in the index and the proxy, from the collection-wide variable
    "credentials": {"sglang_venv_index_url": "https://deploy:s3cr3t-T0ken@127.0.0.1:9/simple",
                    "sglang_venv_extra_index_urls": ["https://deploy:s3cr3t-T0ken@127.0.0.1:9/extra"],
                    "dflash_proxy_env": {"https_proxy": "http://ops:hunter22@127.0.0.1:3128", "NO_PROXY": "localhost"}},
    "requirements": {"sglang_venv_requirements": ["sglang[all]==0.5.9", "nvidia-cuda-runtime==13.0.96"],
                     "lab_index": "http://127.0.0.1:9/lab", "sglang_venv_index_url": "{{ lab_index }}/simple"},
}


def _task(path: str, name: str) -> dict:
    return next(t for t in yaml.safe_load((REPO / path).read_text()) if t.get("name") == name)


def _playbook(root: Path, play: list, inventory: dict, extra: list | None = None) -> subprocess.CompletedProcess:
    (root / "play.yml").write_text(yaml.safe_dump(play))
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_LOCALHOST_WARNING="false")
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    return subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(root / "hosts.yml"),
                           *(extra or []), str(root / "play.yml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_check_runs_the_command_sglang_venv_runs_and_records(tmp_path):
    role_collection(tmp_path, ("deploy_state",))
    probe = tmp_path / "roles" / "lockprobe"
    (probe / "defaults").mkdir(parents=True)
    (probe / "tasks").mkdir()
    defaults = {}
    for role in ("host_layout", "sglang_venv"):
        defaults.update(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()))
    (probe / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults))
    uv_facts = _task("roles/sglang_venv/tasks/uv.yml", "Set uv facts")
    uv_facts["ansible.builtin.set_fact"] = {"sglang_venv_uv_env": uv_facts["ansible.builtin.set_fact"][
        "sglang_venv_uv_env"]}
    tasks = [
        # named before sglang_venv runs, as roles/deploy_state/tasks/main.yml names it
        {"name": "Ours", "ansible.builtin.set_fact": {
            "ours": "{{ hostvars[inventory_hostname] | dflash.deploy.deploy_state_lock_command }}"}},
        uv_facts,
        _task("roles/sglang_venv/tasks/package_lock.yml", "Set the uv index arguments and environment"),
        _task("roles/sglang_venv/tasks/package_lock.yml", "Name the lock command"),
        {"name": "Both", "ansible.builtin.debug": {"msg": {"ours": "{{ ours }}",
                                                           "theirs": "{{ sglang_venv_lock_command }}"}}},
    ]
    (probe / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks))
    hosts = {name: dict(values, ansible_connection="local", ansible_python_interpreter=sys.executable)
             for name, values in HOSTS.items()}
    inventory = {"all": {"hosts": hosts}}
    play = [{"hosts": "all", "gather_facts": False, "roles": ["lockprobe"]}]
    proc = _playbook(tmp_path, play, inventory)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    tasks = json.loads(proc.stdout[proc.stdout.index("{"):])["plays"][0]["tasks"]
    results = tasks[-1]["hosts"]
    # -v prints a set_fact's facts: the role's tasks that hold the index or the proxy hide them (no_log) when a URL
    # has credentials, and only then; only this test's own two tasks (its fact and its debug of both commands)
    # show the token (deploy_state gives the command to its module directly, no fact)
    printing = [t["task"]["name"] for t in tasks if "s3cr3t-T0ken" in json.dumps(t["hosts"].get("credentials"))]
    assert printing == ["lockprobe : Ours", "lockprobe : Both"]
    named = [t for t in tasks if t["task"]["name"] == "lockprobe : Name the lock command"][0]["hosts"]
    assert "censored" in json.dumps(named["credentials"]) and "censored" not in json.dumps(named["index"])
    assert sorted(results) == sorted(HOSTS)
    for name, result in results.items():
        ours, theirs = result["msg"]["ours"], result["msg"]["theirs"]
        assert ours and ours["argv"], name
        assert ours == theirs, name
    assert "--no-index" in results["wheelhouse"]["msg"]["ours"]["argv"][2]
    # the indexes are uv's environment, in the order they are searched; never its command line
    assert results["index"]["msg"]["ours"]["env"]["UV_DEFAULT_INDEX"] == "http://127.0.0.1:9/simple"
    assert results["index"]["msg"]["ours"]["env"]["UV_INDEX"] == "http://127.0.0.1:9/a%20b http://127.0.0.1:9/it's"
    assert "index-url" not in results["index"]["msg"]["ours"]["argv"][2]
    creds = results["credentials"]["msg"]["ours"]
    assert "s3cr3t-T0ken" not in json.dumps(creds["argv"]) and "hunter22" not in json.dumps(creds["argv"])
    assert creds["env"]["UV_DEFAULT_INDEX"] == "https://deploy:s3cr3t-T0ken@127.0.0.1:9/simple"
    assert creds["env"]["https_proxy"] == "http://ops:hunter22@127.0.0.1:3128"
    assert creds["env"]["NO_PROXY"] == "localhost"
    assert results["requirements"]["msg"]["ours"]["stdin"] == "sglang[all]==0.5.9\nnvidia-cuda-runtime==13.0.96"


def test_a_record_in_a_shared_directory_is_refused_before_anything_runs(tmp_path):
    """M6: deploy_state_file=/var/lib/<name>.json made /var/lib 0700. Replayed with a 0755 directory of this
    machine: the role refuses in one line and the directory keeps its mode, and no record appears."""
    role_collection(tmp_path, ("deploy_state",))
    shared = tmp_path / "varlib"
    shared.mkdir()
    shared.chmod(0o755)
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Fast path", "ansible.builtin.include_role": {"name": "dflash.deploy.deploy_state"}}]}]
    inventory = {"all": {"hosts": {"h": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                         "deploy_state_file": str(shared / "rt3-converged.json")}}}}
    proc = _playbook(tmp_path, play, inventory)
    assert proc.returncode != 0
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    failed = [t for t in out["plays"][0]["tasks"] if t["hosts"]["h"].get("failed")]
    assert [t["task"]["name"] for t in failed] == [
        "dflash.deploy.deploy_state : Refuse a record outside the collection's own directory"]
    msg = failed[0]["hosts"]["h"]["msg"]
    assert msg == (f"deploy_state_file {shared}/rt3-converged.json: the record must be a file directly in "
                   "/var/lib/dflash-deploy, the directory the collection owns (a shared directory would be made "
                   "root's alone); nothing was changed")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755 and list(shared.iterdir()) == []
