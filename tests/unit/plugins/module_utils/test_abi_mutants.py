"""abi.check: what cosmic-ray found unguarded in module_utils/abi_check.py (issue 14), as the user reads it.

The findings' detail and fix are what abi_check prints; the per-file facts (`files`) are what a
playbook registers. Small real ELF files built with gcc (abi_native), no GPU needed.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "modules"))
import abi_native as N
from test_hostile_inputs import _dist, _pkg_venv, _venv

CC = [(9, 0)]


def _by_kind(result):
    return {f["kind"]: f for f in result["findings"]}


def test_fixes_name_the_package_and_the_library(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    dep = N.build_lib(tmp_path / "build" / "libgone.so.3", "int dep(void){return 1;}", soname="libgone.so.3")
    N.build_lib(site / "pkg" / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep])
    dep.unlink()
    result = abi.check(str(venv), packages=["pkg", "absent_pkg", "../etc"], gpu_ccs=CC)
    found = _by_kind(result)
    assert found["library_not_found"]["fix"] == ("install the distribution that provides libgone.so.3 or add its "
                                                 "directory to LD_LIBRARY_PATH in environment")
    assert 0 < len(found["library_not_found"]["searched"]) <= 12
    bad = [f for f in result["findings"] if f["kind"] == "package_not_found"]
    assert [(f["path"], f["fix"]) for f in bad] == [
        ("../etc", "name the package, e.g. sgl_kernel"),
        ("absent_pkg", "install the distribution that provides absent_pkg")]
    assert "'../etc' is not an import or distribution name" in bad[0]["detail"]
    assert result["packages"] == {"pkg": {"import_name": "pkg", "distributions": ["pkg"], "files": 1}}


def test_a_library_missing_further_down_names_who_needs_it(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so", "libmid.so"])
    gone = N.build_lib(tmp_path / "build" / "libgone.so", "int g(void){return 1;}", soname="libgone.so")
    mid = N.build_lib(site / "pkg" / "libmid.so", "int g(void); int m(void){return g();}", soname="libmid.so",
                      libs=[gone])
    N.build_lib(site / "pkg" / "ext.so", "int m(void); int f(void){return m();}", libs=[mid], rpath="$ORIGIN")
    gone.unlink()
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    details = [f["detail"] for f in result["findings"] if f["kind"] == "library_not_found"]
    assert "pkg/ext.so needs libgone.so, which the loader cannot find (needed by pkg/libmid.so)" in details
    assert "pkg/libmid.so needs libgone.so, which the loader cannot find" in details


def test_distribution_named_package_counts_only_its_libraries(tmp_path):
    """A distribution name whose files live under another import name: only its .so files, never ../ paths."""
    venv, site = _venv(tmp_path)
    files = ["mykern/__init__.py", "mykern/ops.so", "mykern/data.txt", "../../../lib/libout.so"]
    _dist(site, "my-kernels", "1.0", files=files)
    (site / "my_kernels-1.0.dist-info" / "top_level.txt").write_text("mykern\n")
    (site / "mykern").mkdir()
    (site / "mykern" / "__init__.py").write_text("")
    (site / "mykern" / "data.txt").write_text("not a library\n")
    N.build_lib(site / "mykern" / "ops.so", "int f(void){return 0;}")
    N.build_lib(venv / "lib" / "libout.so", "int g(void){return 0;}")  # a library outside site-packages
    result = abi.check(str(venv), packages=["my-kernels"], gpu_ccs=CC)
    assert result["packages"]["my-kernels"] == {"import_name": "mykern", "distributions": ["my-kernels"],
                                                "files": 1}
    assert [f["path"] for f in result["files"]] == [str(site / "mykern" / "ops.so")]
    assert result["compatible"] is True, result["msg"]


def test_single_file_extension_module(tmp_path):
    """A top-level mod.<tag>.so: that file only, not the other top-level libraries nor mod.py."""
    venv, site = _venv(tmp_path)
    N.build_lib(site / "fastmod.cpython-311-x86_64-linux-gnu.so", "int f(void){return 0;}")
    N.build_lib(site / "other.so", "int g(void){return 0;}")
    (site / "fastmod.py").write_text("")
    result = abi.check(str(venv), packages=["fastmod"], gpu_ccs=CC)
    assert result["packages"]["fastmod"]["files"] == 1
    assert [f["path"] for f in result["files"]] == [str(site / "fastmod.cpython-311-x86_64-linux-gnu.so")]


def test_versions_needed_name_the_newest_missing_and_the_newest_defined(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    libdir = tmp_path / "lib"
    body = "int d1(void){return 1;} int d2(void){return 2;} int d3(void){return 3;}"
    newer = ("DEP_1.0 { global: d1; local: *; };\nDEP_2.0 { global: d2; } DEP_1.0;\n"
             "DEP_3.0 { global: d3; } DEP_2.0;\n")
    dep = N.build_lib(libdir / "libdep.so", body, soname="libdep.so", version_script=newer)
    N.build_lib(site / "pkg" / "ext.so", "int d1(void); int d2(void); int d3(void);"
                "int f(void){return d1() + d2() + d3();}", libs=[dep], rpath=str(libdir))
    ok = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert ok["compatible"] is True, ok["msg"]
    assert ok["files"][0]["version_needs"]["libdep.so"] == ["DEP_3.0"]  # the newest one needed
    older = "DEP_1.0 { global: d1; local: *; };\nDEP_1.5 { global: d2; d3; } DEP_1.0;\n"
    N.build_lib(libdir / "libdep.so", body, soname="libdep.so", version_script=older)
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["glibc_version_missing"]
    assert found["detail"] == "pkg/ext.so needs DEP_3.0 from libdep.so but %s provides up to DEP_1.5" % dep
    assert found["versions"] == ["DEP_2.0", "DEP_3.0"]


def _undefined(n, prefix="sym"):
    decl = " ".join("int %s%d(void);" % (prefix, i) for i in range(n))
    return decl + " int f(void){return %s;}" % " + ".join("%s%d()" % (prefix, i) for i in range(n))


def test_symbols_no_library_exports_sample_five_and_blame_a_dependency(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    N.build_lib(site / "pkg" / "ext.so", _undefined(7))
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["undefined_symbol"]
    assert found["count"] == 7 and found["symbols"] == ["sym0", "sym1", "sym2", "sym3", "sym4"]
    assert found["detail"] == "pkg/ext.so needs 7 symbols that no library in its load scope exports (e.g. sym0)"
    assert found["fix"] == "a dependency is older than the one the extension was built against: update it or rebuild"
    assert result["files"][0]["symbols_missing"] == 7


def test_cu_symbols_missing_blame_the_driver_only_when_libcuda_is_there(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    # no libcuda: the cu* symbols are a dependency's
    N.build_lib(site / "pkg" / "ext.so", _undefined(1, "cuNewCall"))
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["undefined_symbol"]
    assert found["detail"] == ("pkg/ext.so needs 1 symbol that no library in its load scope exports "
                               "(e.g. cuNewCall0)")
    assert found["fix"].startswith("a dependency is older")
    # an old driver library that lacks them: the driver is named
    drv = tmp_path / "driver"
    cuda = N.build_lib(drv / "libcuda.so.1", "int cuInit(void){return 0;}", soname="libcuda.so.1")
    N.build_lib(site / "pkg" / "ext.so", _undefined(1, "cuNewCall"), libs=[cuda], rpath=str(drv),
                extra_objects=["-Wl,--no-as-needed"])  # linked although none of its symbols is used
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["undefined_symbol"]
    assert found["fix"] == ("the NVIDIA driver's libcuda.so.1 (%s) is older than the extension needs: update "
                            "the driver" % cuda)


def test_record_listing_one_missing_library(tmp_path):
    """Only missing files (no broken links): still reported, singular, and an error when the library is eager."""
    venv, site = _pkg_venv(tmp_path, ["ext.so", "gone.so"])
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    found = _by_kind(result)["record_missing_file"]
    assert found["detail"] == "RECORD of pkg 1.0 lists 1 missing file (e.g. pkg/gone.so)"
    assert found["severity"] == "error" and found["fix"] == "reinstall pkg"
    assert result["compatible"] is False


def test_an_invalid_name_first_does_not_stop_the_others(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    N.build_lib(site / "pkg" / "ext.so", "int f(void){return 0;}")
    result = abi.check(str(venv), packages=["../etc", "pkg"], gpu_ccs=CC)
    assert [f["path"] for f in result["files"]] == [str(site / "pkg" / "ext.so")]


def test_a_symlink_to_a_library_is_checked_not_called_broken(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so", "libreal.so"])
    N.build_lib(site / "pkg" / "libreal.so", "int f(void){return 0;}")
    (site / "pkg" / "ext.so").symlink_to("libreal.so")
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=CC)
    assert result["compatible"] is True and "broken_symlink" not in _by_kind(result), result["findings"]
    assert len(result["files"]) == 2


def test_record_listing_several_missing_files(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["a.py", "b.py", "ext.so"])
    (site / "pkg" / "ext.so").symlink_to("nowhere.so")
    found = _by_kind(abi.check(str(venv), packages=["pkg"], gpu_ccs=CC))["record_missing_file"]
    assert found["detail"] == "RECORD of pkg 1.0 lists 3 missing files (e.g. pkg/a.py)"
