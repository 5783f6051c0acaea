"""abicheck/package_files.py and install_state.py: which files a name stands for, and whether it is installed whole."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import install_state as I
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import package_files as P


@pytest.mark.parametrize("name,ok", [
    ("common_ops.abi3.so", True), ("libcudart.so.13", True), ("libx.so.1.2.3", True), ("pkg/sub/ext.so", True),
    ("x.so.1a", False), ("x.sox", False), ("x.py", False), ("so", False), ("x.so.", False),
])
def test_library_names(name, ok):
    assert P.is_library_name(name) is ok


@pytest.mark.parametrize("name,ok", [
    ("sgl_kernel", True), ("sglang-kernel", True), ("zope.interface", True), ("_private", True),
    ("../etc", False), ("a..b", False), ("/usr/lib", False), ("pkg/sub", False), ("-x", False), ("", False),
])
def test_package_names_are_never_paths(name, ok):
    assert P.is_package_name(name) is ok


def _dists(**entries):
    return {k: dict({"name": k, "version": "1.0", "record": [], "top_level": []}, **v) for k, v in entries.items()}


def test_a_package_directory_is_walked_top_down_in_name_order_without_pycache(tmp_path):
    site = tmp_path
    for rel in ("pkg/b.so", "pkg/a/z.so", "pkg/__pycache__/c.so", "pkg/x.py", "pkg/lib.so.1"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(b"")
    dists = _dists(pkg={"top_level": ["pkg"]}, other={"top_level": ["pkg"]}, third={"top_level": ["third"]})
    found = P.find_package_files(str(site), dists, "pkg")
    # top down: a directory's own files in name order, then its subdirectories in name order
    assert found == P.PackageFiles("pkg", [str(site / "pkg/b.so"), str(site / "pkg/lib.so.1"),
                                           str(site / "pkg/a/z.so")], ["other", "pkg"])


def test_a_distribution_name_takes_its_record_and_names_the_look_alike(tmp_path):
    record = [("mykern/ops.so", "", None), ("mykern/ops.so", "", None), ("mykern/x.py", "", None),
              ("../../../lib/libout.so", "", None)]
    dists = _dists(**{"my-kernels": {"record": record, "top_level": ["mykern"]},
                      "look-alike": {"top_level": ["mykern"]}})
    found = P.find_package_files(str(tmp_path), dists, "my_kernels")
    assert found == P.PackageFiles("mykern", [str(tmp_path / "mykern/ops.so")], ["look-alike", "my-kernels"])
    # a directory of that name wins: the name is the import package
    (tmp_path / "my_kernels").mkdir()
    assert P.find_package_files(str(tmp_path), dists, "my_kernels") == P.PackageFiles("my_kernels", [], [])


def test_a_distribution_without_top_level_is_its_own_import_name(tmp_path):
    dists = _dists(solo={"record": [("solo.cpython-311-x86_64-linux-gnu.so", "", None)]})
    assert P.find_package_files(str(tmp_path), dists, "solo") == P.PackageFiles(
        "solo", [str(tmp_path / "solo.cpython-311-x86_64-linux-gnu.so")], ["solo"])


def test_a_single_file_module_or_nothing(tmp_path):
    for name in ("fastmod.cpython-311-x86_64-linux-gnu.so", "fastmodx.so", "fastmod.py", "other.so"):
        (tmp_path / name).write_bytes(b"")
    assert P.find_package_files(str(tmp_path), {}, "fastmod") == P.PackageFiles(
        "fastmod", [str(tmp_path / "fastmod.cpython-311-x86_64-linux-gnu.so")], [])
    assert P.find_package_files(str(tmp_path), {}, "absent") is None
    # claimed by a distribution but with no file: still found (it has no compiled files)
    assert P.find_package_files(str(tmp_path), _dists(d={"top_level": ["ghost"]}), "ghost") == P.PackageFiles(
        "ghost", [], ["d"])


def test_missing_files_are_an_error_only_for_a_library_loaded_at_import(tmp_path):
    site = str(tmp_path)
    assert I.missing_files_severity(site, "pkg", ["pkg/a.py", "pkg/ext.so"], [(9, 0)], ()) == "error"
    assert I.missing_files_severity(site, "pkg", ["pkg/a.py"], [(9, 0)], ()) == "warning"
    lazy = ["sgl_kernel/flash_ops.abi3.so"]
    assert I.missing_files_severity(site, "sgl_kernel", lazy, [(12, 0)], ()) == "warning"
    assert I.missing_files_severity(site, "sgl_kernel", lazy, [(12, 0)], ["fa3"]) == "error"


def test_owner_conflict_names_the_claimants_and_the_files_on_disk():
    assert I.owner_conflict("pkg", {}) is None
    owners = {"sgl_kernel": {"distributions": ["sgl-kernel", "sglang-kernel"], "on_disk": []}}
    found = I.owner_conflict("sgl_kernel", owners)
    assert (found["kind"], found["severity"], found["path"]) == ("owner_conflict", "warning", "sgl_kernel")
    assert found["detail"] == ("sgl_kernel is claimed by sgl-kernel and sglang-kernel; the files on disk match "
                               "neither RECORD")
    assert found["fix"] == "uninstall the look-alike distribution"
    owners["sgl_kernel"]["on_disk"] = ["sglang-kernel"]
    assert I.owner_conflict("sgl_kernel", owners)["detail"].endswith("the files on disk match sglang-kernel")
