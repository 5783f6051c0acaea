"""abi_check and pkg_probe: the verdicts a mutation run found unguarded (issue 14), each as a user reads them."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import abi_native as N
import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi
from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe
from ansible_collections.dflash.deploy.plugins.modules import abi_check, pkg_probe
from test_hostile_inputs import _dist, _pkg_venv, _venv, run_module

CC = [(9, 0)]


def _kinds(result):
    return [f["kind"] for f in result["findings"] if f["severity"] == "error"]


def _ext_needing(tmp_path, site, soname, keep=False, **kw):
    """pkg/ext.so linked against a library called soname, which is then removed unless keep."""
    dep = N.build_lib(tmp_path / "build" / soname, "int dep(void){return 1;}", soname=soname)
    N.build_lib(site / "pkg" / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep], **kw)
    if not keep:
        dep.unlink()
    return dep


def test_library_not_found(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    _ext_needing(tmp_path, site, "libnothere.so.7")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["compatible"] is False and _kinds(result) == ["library_not_found"]
    assert result["msg"].startswith("pkg/ext.so needs libnothere.so.7, which the loader cannot find")


def test_torch_missing(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    _ext_needing(tmp_path, site, "libc10.so")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["compatible"] is False and _kinds(result) == ["torch_missing"]
    assert "needs libc10.so but torch is not installed in the venv" in result["msg"]


def test_dependency_unreadable(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    dep = _ext_needing(tmp_path, site, "libdep.so", keep=True, rpath="$ORIGIN")
    os.mkfifo(site / "pkg" / "libdep.so")  # what $ORIGIN finds is a FIFO
    dep.unlink()
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert "dependency_unreadable" in _kinds(result), result["findings"]
    assert result["compatible"] is False
    assert any("dependency pkg/libdep.so" in f["detail"] for f in result["findings"]), result["findings"]


def test_version_needed_that_the_library_does_not_define(tmp_path):
    """The GLIBC_/GLIBCXX_ rule on a library of our own: built against DEP_2.0, the one found defines DEP_1.0."""
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    libdir = tmp_path / "lib"
    newer = "DEP_1.0 { global: dep; local: *; };\nDEP_2.0 { global: dep2; } DEP_1.0;\n"
    dep = N.build_lib(libdir / "libdep.so", "int dep(void){return 1;} int dep2(void){return 2;}",
                      soname="libdep.so", version_script=newer)
    N.build_lib(site / "pkg" / "ext.so", "int dep2(void); int f(void){return dep2();}", libs=[dep],
                rpath=str(libdir))
    ok = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert ok["compatible"] is True, ok["msg"]
    older = "DEP_1.0 { global: dep; dep2; local: *; };\n"
    N.build_lib(libdir / "libdep.so", "int dep(void){return 1;} int dep2(void){return 2;}",
                soname="libdep.so", version_script=older)
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["compatible"] is False and "glibc_version_missing" in _kinds(result), result["findings"]
    assert "pkg/ext.so needs DEP_2.0 from libdep.so but %s provides up to DEP_1.0" % dep in result["msg"]


def test_package_not_installed_and_package_without_extensions(tmp_path):
    venv, _site = _pkg_venv(tmp_path, [])
    result = abi.check(str(venv), packages=["absent_pkg"], gpu_ccs=CC)
    assert _kinds(result) == ["package_not_found"] and "absent_pkg is not installed in" in result["msg"]
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)  # pure Python: nothing to load, nothing wrong
    assert result["compatible"] is True and _kinds(result) == []
    assert [(f["kind"], f["detail"]) for f in result["findings"]] == [
        ("package_not_found", "pkg has no compiled extension files")]


@pytest.fixture
def importable(tmp_path):
    """A venv with a real interpreter (this one, so the site-packages of its version) whose pkg/ext.so is
    statically fine."""
    version = "%d.%d.%d" % sys.version_info[:3]
    venv, site = _pkg_venv(tmp_path, ["ext.so"], version)
    (venv / "bin").mkdir()
    os.symlink(sys.executable, venv / "bin" / "python")
    (venv / "pyvenv.cfg").write_text("home = %s\nversion_info = %s\n" % (Path(sys.executable).parent, version))
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}")
    return venv, site


def test_import_test_failure_flips_compatible(importable, capsys):
    venv, site = importable
    args = {"venv": str(venv), "packages": ["pkg"], "gpu_compute_capabilities": ["9.0"], "fail_on_error": False}
    res = run_module(abi_check, dict(args, import_test=True), capsys)
    assert res["compatible"] is True, res["msg"]
    (site / "pkg" / "__init__.py").write_text("raise ImportError('pkg is broken on purpose')\n")
    res = run_module(abi_check, dict(args), capsys)
    assert res["compatible"] is True  # the static check cannot see it
    res = run_module(abi_check, dict(args, import_test=True), capsys)
    assert res["compatible"] is False and res["import_test"]["pkg"]["ok"] is False
    assert "pkg is broken on purpose" in res["msg"], res["msg"]
    res = run_module(abi_check, dict(args, import_test=True, fail_on_error=True), capsys)
    assert res["failed"] is True


def test_torch_cuda_version_from_the_local_tag(tmp_path):
    venv, site = _venv(tmp_path)
    _dist(site, "torch", "2.11.0+cu130", files=["torch/__init__.py"])
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("")
    res = probe(str(venv))
    assert res["torch"]["version"] == "2.11.0+cu130"
    assert res["torch"]["cuda"] == "13.0" and res["torch"]["cuda_major"] == 13


def test_distributions_filter_details_only_the_selected(tmp_path, capsys):
    venv, site = _venv(tmp_path)
    _dist(site, "torch", "2.11.0+cu130", files=["torch/__init__.py"], requires=["filelock"])
    _dist(site, "filelock", "3.0", files=["filelock/__init__.py"])
    for top in ("torch", "filelock"):
        (site / top).mkdir()
        (site / top / "__init__.py").write_text("")
    res = run_module(pkg_probe, {"venv": str(venv), "distributions": ["torch"]}, capsys)
    assert res["distributions"]["filelock"] == {"name": "filelock", "version": "3.0"}
    assert res["distributions"]["torch"]["requires"] == ["filelock"] and res["distributions"]["torch"]["files"] == 2
    res = run_module(pkg_probe, {"venv": str(venv)}, capsys)
    assert res["distributions"]["filelock"]["files"] == 2
