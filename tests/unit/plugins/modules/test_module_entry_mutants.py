"""pkg_probe and abi_check as a playbook sees them: what the cosmic-ray run of the module files found
unguarded (issue 14). Both only read: they run in check mode, never report a change (not even when they
fail), need a venv, and pkg_probe looks at no GPU unless asked.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ansible_collections.dflash.deploy.plugins.modules import abi_check, pkg_probe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_inputs import _pkg_venv, run_module

CHECK = {"_ansible_check_mode": True}


def test_both_run_in_check_mode_and_report_no_change(tmp_path, capsys):
    venv, _site = _pkg_venv(tmp_path, [])
    res = run_module(pkg_probe, dict(CHECK, venv=str(venv)), capsys)
    assert res["changed"] is False and "pkg" in res["distributions"], res
    assert not res.get("skipped"), res
    assert "gpus" not in res and "driver_version" not in res  # no GPU probe unless asked
    res = run_module(abi_check, dict(CHECK, venv=str(venv), packages=["pkg"], gpu_compute_capabilities=["9.0"]),
                     capsys)
    assert res["changed"] is False and res["compatible"] is True and not res.get("skipped"), res


def test_failures_report_no_change(tmp_path, capsys):
    venv, _site = _pkg_venv(tmp_path, [])
    bad_env = {"environment": {"A=B": "1"}}
    for mod, extra in ((pkg_probe, {}), (abi_check, {"packages": ["pkg"]})):
        res = run_module(mod, dict(extra, venv=str(venv), **bad_env), capsys)
        assert res["failed"] is True and res["changed"] is False
        assert "is not a valid variable name" in res["msg"]
        res = run_module(mod, dict(extra, venv=str(tmp_path / "nowhere")), capsys)
        assert res["failed"] is True and res["changed"] is False, res
        assert "does not exist" in res["msg"]
    res = run_module(pkg_probe, {"venv": str(tmp_path / "nowhere")}, capsys)
    assert res["venv"] == str(tmp_path / "nowhere")


def test_venv_is_required(capsys):
    for mod in (pkg_probe, abi_check):
        res = run_module(mod, {}, capsys)
        assert res["failed"] is True and "missing required arguments: venv" in res["msg"]
