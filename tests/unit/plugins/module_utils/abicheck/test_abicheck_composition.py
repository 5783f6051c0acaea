"""abicheck: how a step's problem becomes a finding, where a file sits and when it loads, the shared process,
the verdict, python_api's start and the import test on top of the static result."""
from __future__ import annotations

import dataclasses
import importlib
import sys

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import import_test as T
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import python_api as A
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.file_check import place
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import Problem, short_path
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.process import Process, running_identity
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.verdict import judge
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldresolve import Resolver
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.closure import ClosureResult, Unparsed

SITE = "/venv/lib/python3.11/site-packages"


def test_a_problem_becomes_a_finding_of_the_file():
    plain = Problem("library_not_found", "x needs y", fix="install y", extra=(("searched", ["/a"]), ("b", 1)))
    assert plain.finding("pkg/x.so", "warning", "lazy") == {
        "kind": "library_not_found", "path": "pkg/x.so", "detail": "x needs y", "severity": "warning",
        "load": "lazy", "fix": "install y", "searched": ["/a"], "b": 1}
    own = Problem("symbols_unchecked", "not checked", severity="info")
    assert own.finding("pkg/x.so", "error", "import")["severity"] == "info"
    with pytest.raises(ValueError):
        Problem("no_such_kind", "x").finding("p", "error", "import")


def test_short_path_is_relative_inside_site_packages_only():
    assert short_path(SITE + "/pkg/x.so", SITE) == "pkg/x.so"
    assert short_path("/usr/lib/libc.so.6", SITE) == "/usr/lib/libc.so.6"


def _process(gpu_ccs, features=(), python=None):
    return Process(SITE, Resolver(SystemLibraries("/", None)), None, gpu_ccs, features, python)


def test_place_sgl_kernel_libraries_by_the_gpus_and_features():
    on_90 = place(_process([(9, 0)]), SITE + "/sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel")
    assert (on_90.short, on_90.load, on_90.users, on_90.severity) == (
        "sgl_kernel/sm90/common_ops.abi3.so", "import", [(9, 0)], "error")
    unused = place(_process([(12, 0)]), SITE + "/sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel")
    assert (unused.load, unused.severity) == ("unused", "info")
    lazy = place(_process([(12, 0)]), SITE + "/sgl_kernel/flash_ops.abi3.so", "sgl_kernel")
    assert (lazy.load, lazy.severity, lazy.optional) == ("lazy", "warning", True)
    needed = place(_process([(12, 0)], ["fa3"]), SITE + "/sgl_kernel/flash_ops.abi3.so", "sgl_kernel")
    assert (needed.required, needed.severity, needed.optional) == (True, "error", False)
    single = place(_process(None), SITE + "/fastmod.cpython-311-x86_64-linux-gnu.so", "")
    assert (single.short, single.load, single.users) == ("fastmod.cpython-311-x86_64-linux-gnu.so", "import", None)


def test_the_process_identity_is_the_venvs_python_else_the_running_one(tmp_path):
    assert running_identity()[0] in (32, 64) and running_identity()[1] == sys.byteorder
    assert _process(None, python=str(tmp_path / "no-python")).host_identity() == running_identity()
    assert _process(None, python=str(tmp_path / "no-python")).interpreter_objects() == []
    process = _process(None, python=sys.executable)
    assert process.host_identity()[1] == sys.byteorder
    assert process.interpreter_objects()[0] == __import__("os").path.realpath(sys.executable)
    assert process.version_defs(str(tmp_path / "absent.so")) is None  # unreadable: None, asked once
    assert str(tmp_path / "absent.so") in process.verdefs


def test_the_verdict_orders_the_findings_and_names_the_root_cause():
    warn = {"kind": "no_gpu_code", "path": "b", "detail": "no code", "severity": "warning"}
    err = {"kind": "library_not_found", "path": "a", "detail": "a needs x", "severity": "error", "fix": "install x"}
    result = judge({"findings": [warn, err]})
    assert result["findings"] == [err, warn] and result["compatible"] is False
    assert result["msg"] == "a needs x: install x"
    assert judge({"findings": [warn]})["compatible"] is True


def test_python_api_starts_from_the_entry_modules_that_exist(tmp_path):
    assert A.entry_modules(str(tmp_path), "sgl_kernel") == ["sgl_kernel"]
    assert A.entry_modules(str(tmp_path), "sglang") == ["sglang"]  # none of them installed: the package
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "launch_server.py").write_text("")
    assert A.entry_modules(str(tmp_path), "sglang") == ["sglang.launch_server"]


def test_python_api_incomplete_says_what_was_not_checked():
    walked = ClosureResult(10, 5, (), (), False)
    assert A.incomplete_finding("sglang", walked) is None
    walked = ClosureResult(20000, 5, (), (Unparsed("sglang/a.py", "invalid syntax"), Unparsed("b.py", "x")), True)
    found = A.incomplete_finding("sglang", walked)
    assert (found["kind"], found["severity"]) == ("python_api_incomplete", "info")
    assert found["detail"] == ("python_api: the imports of sglang were not all checked: 2 files not parsed (e.g. "
                               "sglang/a.py: invalid syntax); the walk stopped at 20000 modules")


def _static(compatible=True):
    findings = [] if compatible else [{"kind": "no_gpu_code", "path": "x", "detail": "d", "severity": "error"}]
    return {"site_packages": SITE, "compatible": compatible, "findings": findings, "elapsed": 0.25,
            "packages": {"sglang-kernel": {"import_name": "sgl_kernel"}, "pkg": {"import_name": "pkg"}}}


def test_import_names_follow_packages_and_skip_what_was_not_found():
    assert T.import_names(_static(), ["pkg", "absent", "sglang-kernel"]) == ["pkg", "sgl_kernel"]
    assert T.venv_python("/opt/venv/") == "/opt/venv/bin/python"


def test_with_import_test_adds_failures_and_takes_the_verdict_again(monkeypatch):
    calls = []

    def import_many(python, names, timeout, env):
        calls.append((python, names, timeout, env["DFLASH_X"]))
        return {"pkg": {"ok": False, "version": None, "seconds": 0.5, "error": "boom"},
                "sgl_kernel": {"ok": True, "version": "0.4.2", "seconds": None, "error": None}}

    monkeypatch.setattr(T, "import_many", import_many)
    result = T.with_import_test(_static(), "/opt/venv", ["pkg", "sglang-kernel"], {"DFLASH_X": "1"}, timeout=7)
    assert calls == [("/opt/venv/bin/python", ["pkg", "sgl_kernel"], 7, "1")]
    assert result["compatible"] is False and result["elapsed"] == 0.75
    assert result["msg"] == ("import pkg failed: boom: the static check found no cause: read the import error")
    static_failed = T.with_import_test(_static(compatible=False), "/opt/venv", ["pkg"], {"DFLASH_X": "1"})
    assert [f["fix"] for f in static_failed["findings"] if f["kind"] == "import_failed"] == [
        "see the static findings for the cause"]
    assert calls[-1][2] == 120  # the import test's default timeout, as the module's import_timeout


def test_with_import_test_does_nothing_for_a_venv_that_could_not_be_read(monkeypatch):
    monkeypatch.setattr(T, "import_many", lambda *a, **k: pytest.fail("no import without a venv"))
    result = {"compatible": False, "findings": [], "msg": "venv missing", "elapsed": 0.0}
    assert T.with_import_test(dict(result), "/nowhere", ["pkg"]) == result


STEPS = ("cuda_major", "dependencies", "file_check", "gpu_code", "openable", "package_files", "problem", "python_api",
         "symbol_versions", "symbols")


@pytest.mark.parametrize("step", STEPS)
def test_every_result_is_a_frozen_dataclass(step):
    mod = importlib.import_module("ansible_collections.dflash.deploy.plugins.module_utils.abicheck." + step)
    classes = [c for c in vars(mod).values() if dataclasses.is_dataclass(c) and c.__module__ == mod.__name__]
    assert classes, step
    for cls in classes:
        assert cls.__dataclass_params__.frozen, cls.__name__
