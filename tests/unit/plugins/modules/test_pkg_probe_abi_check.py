"""The two module shells: arguments, check mode, changed=false, fail_json with the one-line root cause."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.module_utils.host import programs
from ansible_collections.dflash.deploy.plugins.modules import abi_check, pkg_probe

REPO = Path(__file__).resolve().parents[4]


def run_module(mod, args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.fixture
def driver_env(fixture_build, monkeypatch, tmp_path):
    """ct200's GPUs (8x compute capability 12.0) with device nodes in a temporary dev_dir."""
    d = fixture_build / "driver"
    dev = tmp_path / "dev"
    dev.mkdir()
    for node in ["nvidiactl"] + ["nvidia%d" % i for i in range(8)]:
        (dev / node).write_text("")
    conf = (d / "etc" / "ct200.conf").read_text().replace("dev_dir=/dev", "dev_dir=%s" % dev)
    conf = conf.replace("state_dir=/run/dflash-fixture", "state_dir=%s" % (tmp_path / "state"))
    (tmp_path / "gpus.conf").write_text(conf)
    monkeypatch.setenv("DFLASH_FIXTURE_GPU_CONFIG", str(tmp_path / "gpus.conf"))
    monkeypatch.setenv("PATH", str(d / "bin") + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(programs, "SYSTEM_DIRS", (str(d / "bin"),) + programs.SYSTEM_DIRS)  # never PATH
    return {"LD_LIBRARY_PATH": str(d / "lib")}


def test_pkg_probe_module(make_venv, capsys, driver_env):
    venv = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    res = run_module(pkg_probe, {"venv": str(venv), "imports": ["sgl_kernel", "no_such_module"], "gpus": True,
                                 "environment": driver_env, "_ansible_check_mode": True}, capsys)
    assert res["changed"] is False and "failed" not in res
    assert res["distributions"]["torch"]["version"] == "2.11.0+cu130"
    assert res["torch"]["cuda"] == "13.0" and res["import_owners"] == {}
    assert res["imports"]["sgl_kernel"]["ok"] is True and res["imports"]["sgl_kernel"]["version"] == "0.4.2"
    assert res["imports"]["no_such_module"]["error"].startswith("ModuleNotFoundError")
    assert len(res["gpus"]) == 8 and res["gpus"][0]["compute_capability"] == "12.0"
    assert res["driver_version"] == "580.95.05" and res["elapsed"] > 0


def test_pkg_probe_without_a_venv_probes_the_gpus_only(capsys, driver_env):
    res = run_module(pkg_probe, {"gpu_smoke_test": True, "environment": driver_env}, capsys)
    assert res["changed"] is False and "failed" not in res
    assert "distributions" not in res and "python" not in res
    assert len(res["gpus"]) == 8 and res["driver_version"] == "580.95.05"
    assert res["gpu_smoke_test"]["ok"] is True and len(res["gpu_smoke_test"]["gpus"]) == 8


@pytest.mark.parametrize("args, says", [
    ({}, "set gpus or gpu_smoke_test"),
    ({"gpus": True, "imports": ["sglang"]}, "set venv to use imports"),
    ({"gpus": True, "run_as": "sglang", "distributions": ["torch"]}, "set venv to use distributions, run_as"),
])
def test_pkg_probe_without_a_venv_refuses_what_needs_one(args, says, capsys):
    res = run_module(pkg_probe, args, capsys)
    assert res["failed"] is True and res["msg"] == "pkg_probe without venv probes the GPUs only: " + says


def test_pkg_probe_not_a_venv(tmp_path, capsys):
    res = run_module(pkg_probe, {"venv": str(tmp_path)}, capsys)
    assert res["failed"] is True and res["msg"].endswith("is not a venv: no pyvenv.cfg, bin/python or "
                                                         "lib/python3*/site-packages")


def test_abi_check_module(make_venv, capsys, driver_env):
    venv = make_venv(["torch==2.11.0+cu130", "sgl-kernel==0.3.21"])
    res = run_module(abi_check, {"venv": str(venv), "environment": driver_env, "import_test": True}, capsys)
    assert res["failed"] is True and res["changed"] is False and res["compatible"] is False
    assert res["gpu_detection"] == "nvidia-smi" and res["gpu_compute_capabilities"] == ["12.0"] * 8
    assert res["msg"].startswith("sgl_kernel/sm100/common_ops.abi3.so needs libcudart.so.12 (CUDA 12) but torch is "
                                 "2.11.0+cu130 (CUDA 13.0)")
    assert res["import_test"]["sgl_kernel"]["ok"] is False
    assert any(f["kind"] == "import_failed" for f in res["findings"])
    good = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    res = run_module(abi_check, {"venv": str(good), "environment": driver_env, "import_test": True,
                                 "gpu_compute_capabilities": ["12.0"], "attention_backend": "flashinfer"}, capsys)
    assert res["compatible"] is True and "failed" not in res and res["import_test"]["sgl_kernel"]["ok"] is True
    res = run_module(abi_check, {"venv": str(good), "environment": driver_env, "fail_on_error": False,
                                 "gpu_compute_capabilities": ["12.0"], "attention_backend": "fa3"}, capsys)
    assert res["compatible"] is False and "failed" not in res
    assert res["msg"] == ("sgl_kernel/flash_ops.abi3.so has no code for compute capability 12.0 (has sm_80, sm_86, "
                          "sm_90): install a build with sm_120 code")


def test_abi_check_bad_options(tmp_path, capsys):
    res = run_module(abi_check, {"venv": str(tmp_path), "gpu_compute_capabilities": ["twelve"]}, capsys)
    assert res["failed"] is True and "not a compute capability" in res["msg"]
    res = run_module(abi_check, {"venv": str(tmp_path), "system_root": "/x", "system_library_dirs": ["/y"]}, capsys)
    assert res["msg"] == "parameters are mutually exclusive: system_root|system_library_dirs"


def test_adhoc_command_and_ansible_doc():
    """`ansible localhost -m dflash.deploy.pkg_probe` and ansible-doc work from the repo root."""
    bin_dir = Path(sys.executable).parent
    out = subprocess.run([str(bin_dir / "ansible"), "localhost", "-m", "dflash.deploy.abi_check", "-a",
                          "venv=/nonexistent"], cwd=REPO, capture_output=True, text=True, check=False)
    assert "venv /nonexistent does not exist" in out.stdout
    for mod in ("pkg_probe", "abi_check"):
        doc = subprocess.run([str(bin_dir / "ansible-doc"), "dflash.deploy." + mod], cwd=REPO, capture_output=True,
                             text=True, check=False)
        assert doc.returncode == 0 and "RETURN VALUES" in doc.stdout, doc.stderr


def test_abi_check_warns_about_an_unknown_feature(tmp_path, capsys, monkeypatch):
    # a mistyped feature is named in a warning, not silently dropped; a known one and the backend are not.
    # (module.warn goes to the controller's display once a test in this process loaded controller code:
    # record the calls themselves.)
    warnings = []
    monkeypatch.setattr(abi_check.AnsibleModule, "warn", lambda self, msg, **kw: warnings.append(msg))
    run_module(abi_check, {"venv": str(tmp_path), "features": ["fa3", "flashmal"], "attention_backend": "triton",
                           "gpu_compute_capabilities": ["12.0"], "fail_on_error": False}, capsys)
    assert len(warnings) == 1 and "'flashmal' is not a feature abi_check knows" in warnings[0], warnings
