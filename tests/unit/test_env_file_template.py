"""sglang_service's env file template (instance.env.j2) as Ansible renders it: an instance's API key is its own, and
a surge worker's is the instance's it stands in for (item.surge_of), read from the instances role's public
instances_api_keys; no role writes that fact but its owner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "roles" / "sglang_service" / "templates" / "instance.env.j2"


def test_a_surge_worker_gets_its_instance_s_key_and_an_instance_its_own(tmp_path):
    base = {"gpus": [0], "served_model_name": "m", "host": "0.0.0.0", "speculative_algorithm": "DFLASH",
            "num_draft_tokens": 16, "attention_backend": "fa3", "extra_args": [], "model_path": "/srv/m",
            "environment": {}}
    items = [dict(base, name="q1", port=30001), dict(base, name="q2", port=30002),
             dict(base, name="q1-surge", port=30005, surge_of="q1")]
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {
        "instances_api_keys": {"q1": "key-of-q1", "q2": "key-of-q2"}, "sglang_service_environment": {},
        "sglang_service_cuda_home": "/usr/local/cuda", "sglang_service_path": "/usr/bin",
        "sglang_service_state_dir": "/var/lib/dflash", "sglang_service_cache_dir": "/var/cache/dflash"},
        "tasks": [{"name": "Render", "loop": items, "ansible.builtin.template": {
            "src": str(TEMPLATE), "dest": f"{tmp_path}/{{{{ item.name }}}}.env", "mode": "0600"}}]}]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"))
    run = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}", "/dev/stdin"],
                         input=yaml.safe_dump(play), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    keys = {name: [line for line in (tmp_path / f"{name}.env").read_text().splitlines()
                   if line.startswith("SGLANG_API_KEY=")] for name in ("q1", "q2", "q1-surge")}
    assert keys == {"q1": ['SGLANG_API_KEY="key-of-q1"'], "q2": ['SGLANG_API_KEY="key-of-q2"'],
                    "q1-surge": ['SGLANG_API_KEY="key-of-q1"']}
