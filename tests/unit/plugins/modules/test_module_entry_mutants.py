"""pkg_probe and abi_check as a playbook sees them: what the cosmic-ray run of the module files found
unguarded (issue 14). Both only read: they run in check mode, never report a change (not even when they
fail), need a venv, and pkg_probe looks at no GPU unless asked.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import import_test
from ansible_collections.dflash.deploy.plugins.module_utils.host import programs
from ansible_collections.dflash.deploy.plugins.modules import abi_check, pkg_probe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_inputs import _elf_header_only, _pkg_venv, run_module

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


def test_venv_is_required_by_abi_check_and_by_pkg_probe_for_anything_but_gpus(capsys):
    res = run_module(abi_check, {}, capsys)
    assert res["failed"] is True and "missing required arguments: venv" in res["msg"]
    res = run_module(pkg_probe, {}, capsys)
    assert res["failed"] is True
    assert res["msg"] == "pkg_probe without venv probes the GPUs only: set gpus or gpu_smoke_test"


# -- what ansible-doc promises ------------------------------------------------------------------------------------

def _argument_spec(mod, monkeypatch):
    """The argument_spec main() hands to AnsibleModule (main stops right there)."""
    seen = {}

    class Stop(Exception):
        pass

    def fake(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(mod, "AnsibleModule", fake)
    with pytest.raises(Stop):
        mod.main()
    return seen["argument_spec"]


def _documented_options(mod):
    from ansible_collections.dflash.deploy.plugins.doc_fragments.venv_reader import ModuleDocFragment
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["extends_documentation_fragment"] == ["dflash.deploy.venv_reader"]
    options = dict(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
    options.update(doc["options"])
    return options


@pytest.mark.parametrize("mod", [pkg_probe, abi_check], ids=["pkg_probe", "abi_check"])
def test_options_behave_as_documented(mod, monkeypatch):
    # ansible-doc shows DOCUMENTATION (with the venv_reader fragment); the module obeys its argument_spec
    spec = _argument_spec(mod, monkeypatch)
    documented = _documented_options(mod)
    assert sorted(spec) == sorted(documented)
    for name, opt in documented.items():
        assert (spec[name].get("type"), spec[name].get("default"), spec[name].get("required", False)) == (
            opt.get("type"), opt.get("default"), opt.get("required", False)), name


# -- a collection installed without its module_utils ----------------------------------------------------------------

@pytest.mark.parametrize("mod,missing", [
    (pkg_probe, "ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe"),
    (abi_check, "ansible_collections.dflash.deploy.plugins.module_utils.host.gpu"),
], ids=["pkg_probe", "abi_check"])
def test_missing_module_utils_fail_the_task_cleanly(mod, missing, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, missing, None)  # `import` of it raises ImportError
    spec = importlib.util.spec_from_file_location("shell_without_module_utils", mod.__file__)
    shell = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shell)
    res = run_module(shell, {"venv": "/nowhere"}, capsys)
    assert res["failed"] is True and res["msg"] == "dflash.deploy module_utils could not be imported", res


# -- abi_check: compute capabilities read from nvidia-smi ----------------------------------------------------------

def _smi_row(index, cc):
    return "%d, GPU-%d, NVIDIA H200, %s, 143771, 0, 580.95.05, 00000000:%02X:00.0" % (index, index, cc, 0x10 + index)


@pytest.fixture
def smi_path(tmp_path, monkeypatch):
    """PATH holding only a fake nvidia-smi that lists the given rows (None: no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(programs, "SYSTEM_DIRS", (str(bin_dir),))  # the modules never search PATH

    def install(rows):
        if rows is not None:
            script = bin_dir / "nvidia-smi"
            script.write_text("#!/bin/sh\ncase \"$1\" in --query-gpu=*) printf '%s\\n';; esac\n" % "\\n".join(rows))
            script.chmod(0o755)
    return install


def _abi_check_detecting(tmp_path, capsys):
    venv, _site = _pkg_venv(tmp_path, [])
    return run_module(abi_check, dict(CHECK, venv=str(venv), packages=["pkg"]), capsys)


def test_gpus_without_a_compute_capability_are_skipped_not_the_rest(tmp_path, capsys, smi_path):
    smi_path([_smi_row(0, "[N/A]"), _smi_row(1, "9.0"), _smi_row(2, "10.0")])
    res = _abi_check_detecting(tmp_path, capsys)
    assert res["gpu_detection"] == "nvidia-smi" and res["gpu_compute_capabilities"] == ["9.0", "10.0"], res


@pytest.mark.parametrize("rows,why", [
    (None, "nvidia-smi not found on PATH or in /usr/sbin, /usr/bin, /sbin, /bin, where only root can change it "
           "(no NVIDIA driver installed?)"),
    ([_smi_row(0, "[N/A]")], "nvidia-smi listed no compute capability"),
], ids=["no-nvidia-smi", "no-compute-capability"])
def test_why_no_compute_capability_was_detected(tmp_path, capsys, smi_path, rows, why):
    smi_path(rows)
    res = _abi_check_detecting(tmp_path, capsys)
    assert res["gpu_detection"] == why and res["gpu_compute_capabilities"] is None, res
    assert "arch_check_skipped" in [f["kind"] for f in res["findings"]]


def test_a_hung_nvidia_smi_is_given_15_seconds(tmp_path, capsys, smi_path, monkeypatch):
    from ansible_collections.dflash.deploy.plugins.module_utils.host import gpu
    smi_path([_smi_row(0, "9.0")])
    monkeypatch.setattr(gpu, "run_with_timeout", lambda argv, timeout, env=None: (None, "", "", True))
    res = _abi_check_detecting(tmp_path, capsys)
    assert res["gpu_detection"] == "nvidia-smi did not answer within 15s (a hung GPU or driver)", res


# -- abi_check: the import test on top of the static check ----------------------------------------------------------

def test_failed_import_points_at_the_static_findings_only_when_they_found_something(tmp_path, capsys):
    # the venv has no bin/python, so the import cannot succeed
    venv, site = _pkg_venv(tmp_path / "clean", [])
    args = dict(CHECK, packages=["pkg"], gpu_compute_capabilities=["9.0"], import_test=True, fail_on_error=False)
    res = run_module(abi_check, dict(args, venv=str(venv)), capsys)
    assert res["compatible"] is False and res["import_test"]["pkg"]["ok"] is False
    failed = [f for f in res["findings"] if f["kind"] == "import_failed"]
    assert [f["fix"] for f in failed] == ["the static check found no cause: read the import error"], res
    venv, site = _pkg_venv(tmp_path / "broken", ["ext.so"])
    _elf_header_only(site / "pkg" / "ext.so", 32, "little", machine=3)
    res = run_module(abi_check, dict(args, venv=str(venv)), capsys)
    assert "wrong_architecture" in [f["kind"] for f in res["findings"]]
    failed = [f for f in res["findings"] if f["kind"] == "import_failed"]
    assert [f["fix"] for f in failed] == ["see the static findings for the cause"], res


@pytest.mark.parametrize("seconds", [0.0, 1.234, 1.235])
def test_elapsed_adds_the_import_seconds_to_the_static_check(tmp_path, capsys, monkeypatch, seconds):
    # 0.0: an interpreter that could not even start adds nothing
    def import_many(python, names, timeout, env):
        return dict((n, {"ok": True, "version": "1.0", "seconds": seconds, "error": None}) for n in names)

    monkeypatch.setattr(import_test, "import_many", import_many)
    venv, _site = _pkg_venv(tmp_path, [])
    res = run_module(abi_check, dict(CHECK, venv=str(venv), packages=["pkg"], gpu_compute_capabilities=["9.0"],
                                     import_test=True), capsys)
    assert res["compatible"] is True and res["import_test"]["pkg"]["seconds"] == seconds
    assert res["elapsed"] == round(res["static_elapsed"] + seconds, 3), res


# -- pkg_probe: read errors the engine does not turn into findings --------------------------------------------------

@pytest.mark.parametrize("exc", [OSError(5, "Input/output error"), ValueError("embedded null byte")],
                         ids=["OSError", "ValueError"])
def test_pkg_probe_read_error_fails_with_the_venv_and_the_reason(tmp_path, capsys, monkeypatch, exc):
    def probe(venv, **_kwargs):
        raise exc

    monkeypatch.setattr(pkg_probe, "probe", probe)
    venv, _site = _pkg_venv(tmp_path, [])
    res = run_module(pkg_probe, dict(CHECK, venv=str(venv)), capsys)
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"] == "pkg_probe could not read %s: %s" % (venv, exc)
