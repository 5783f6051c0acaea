"""playbooks/audit.yml over ct129 and a ct200 left the way the incident left it names what differs."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import REPO, VENV_BIN, ansible_env, lab

BROKEN = "/root/venv_sglang"


@pytest.fixture
def broken_ct200():
    """The incident's ct200: PyPI sglang[all] 0.5.9 (sgl-kernel 0.3.21), then sglang-kernel 0.4.2 and a
    cu128 torch 2.11 on top, no DFlash sources. Built with uv from the lab index; removed afterwards."""
    ct200 = next(h for h in lab.hosts() if h.name == "ct200")
    lab.push_uv(ct200)
    idx = f"http://{lab.GATEWAY}:{lab.INDEX_PORT}/simple"
    lab.hexec(ct200, f"""
export UV_NO_PROGRESS=1
uv venv -q --clear {BROKEN}
uv pip install -q --python {BROKEN}/bin/python --index-url {idx} 'sglang[all]==0.5.9'
uv pip install -q --python {BROKEN}/bin/python --index-url {idx} torch==2.11.0+cu128 sglang-kernel==0.4.2
""")
    yield
    lab.hexec(ct200, f"rm -rf {BROKEN}")


def test_audit_names_the_differences_the_incident_found_by_hand(broken_ct200):
    env = ansible_env()
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "playbooks/audit.yml", "-l", "ct129,ct200",
                           "-e", json.dumps({"audit_venvs": [lab.REFERENCE_VENV, BROKEN]})],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    stats = out["stats"]
    assert all(s["changed"] == 0 for s in stats.values()), stats  # the audit changes nothing
    table = next(h["msg"] for t in out["plays"][0]["tasks"] if t["task"]["name"] == "Print where the hosts differ"
                 for h in t["hosts"].values() if "msg" in h)
    rows = {line.split("  ")[0]: line for line in table[2:]}
    assert "2.11.0+cu130 (CUDA 13.0)" in rows["torch build"] and "2.11.0+cu128 (CUDA 12.8)" in rows["torch build"]
    assert "sgl-kernel + sglang-kernel" in rows["owner of sgl_kernel"]
    assert "dflash_worker.py" in rows["DFlash files"] and "(none)" in rows["DFlash files"]
    assert "dist sgl-kernel" in rows and "dist nvidia-cuda-runtime-cu12" in rows
    assert "python" not in rows  # the same Python on both: not a difference
