"""module_utils/transplant/converged.py: the record a bundle transplant leaves, and each reason it stops vouching."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import open_venv
from ansible_collections.dflash.deploy.plugins.module_utils.release.contract import release_file
from ansible_collections.dflash.deploy.plugins.module_utils.site_packages_transplant import pack_bundle, transplant
from ansible_collections.dflash.deploy.plugins.module_utils.transplant import converged as C
from transplant_support import CPTAG, add_dist, make_venv, record_hash, site_packages

TAG = f"{CPTAG}-{CPTAG}-linux_x86_64"
REMOVE = ["old-kernel"]


@pytest.fixture
def world(tmp_path):
    src = make_venv(tmp_path / "src")
    dest = make_venv(tmp_path / "dest")
    add_dist(src, "torch", "2.11.0", {"torch/__init__.py": b"T", "torch/nn/mod.py": b"nn", "torch/lib/x.so": b"so"},
             scripts={"torchrun": "print(1)\n"}, tag=TAG)
    info = add_dist(src, "nvidia-cublas", "13.1.0", {"nvidia/cublas/lib/libcublas.so.13": b"cublas"})
    _untag(info)
    add_dist(dest, "requests", "2.32.0", {"requests/__init__.py": b"r"})
    bundle = tmp_path / "b.tar"
    pack_bundle(str(src), str(bundle), ["torch", "nvidia-*"])
    result = transplant(str(dest), bundle=str(bundle), remove=REMOVE)
    assert result["changed"] is True and result["fast_path"] is False
    return {"src": src, "dest": dest, "bundle": bundle, "venv": open_venv(str(dest)), "tmp": tmp_path}


def _untag(info):
    """A WHEEL without Tag lines (its RECORD row kept true): every run warns that its ABI was not checked."""
    old = (info / "WHEEL").read_bytes()
    new = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
    (info / "WHEEL").write_bytes(new)
    record = (info / "RECORD").read_text()
    row = "%s/WHEEL,%s,%d" % (info.name, record_hash(old), len(old))
    assert row in record
    (info / "RECORD").write_text(record.replace(row, "%s/WHEEL,%s,%d" % (info.name, record_hash(new), len(new))))


def _check(world, distributions=None, remove=None, bundle=None):
    return C.check(open_venv(str(world["dest"])), str(bundle or world["bundle"]), distributions,
                   REMOVE if remove is None else remove)


def test_the_record_lives_in_the_release_contract_directory(world):
    record = world["dest"] / ".dflash-release" / "transplant.json"
    assert str(record) == release_file(str(world["dest"]), "transplant") == C.record_path(str(world["dest"]))
    data = json.loads(record.read_text())
    assert data["options"] == {"distributions": [], "remove": REMOVE}
    assert data["files"]["count"] == len(data["paths"].split("\0")) > 10
    assert "../../../bin/torchrun" in data["paths"].split("\0")
    assert data["unchanged"] == [{"name": "nvidia-cublas", "version": "13.1.0"}, {"name": "torch", "version": "2.11.0"}]
    assert len(data["bundle"]["manifest_sha256"]) == 64 and data["bundle"]["size"] == world["bundle"].stat().st_size


def test_a_converged_destination_is_vouched_for(world):
    answer, why = _check(world)
    assert why == "" and [d["name"] for d in answer.unchanged] == ["nvidia-cublas", "torch"]
    assert answer.warnings == ["nvidia-cublas 13.1.0 has no WHEEL tags; its Python ABI was not checked"]
    result = transplant(str(world["dest"]), bundle=str(world["bundle"]), remove=REMOVE)
    assert result["fast_path"] is True and result["warnings_list"] == answer.warnings
    os.unlink(C.record_path(str(world["dest"])))
    full = transplant(str(world["dest"]), bundle=str(world["bundle"]), remove=REMOVE)
    assert full["fast_path"] is False and full["warnings_list"] == answer.warnings  # the same warning either way


def test_no_record_is_a_miss(world):
    os.unlink(C.record_path(str(world["dest"])))
    assert _check(world) == (None, "no record of a previous run")


@pytest.mark.parametrize("options", [{"distributions": ["torch"]}, {"remove": []}, {"remove": ["old-*"]}])
def test_other_options_are_a_miss(world, options):
    answer, why = _check(world, **options)
    assert answer is None and "other options" in why


def test_a_touched_bundle_is_a_miss(world):
    st = world["bundle"].stat()
    os.utime(world["bundle"], ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert _check(world) == (None, "the bundle is not the file the recorded run read")


def test_the_bundle_by_another_path_or_gone_is_a_miss(world):
    link = world["tmp"] / "link.tar"
    os.symlink(world["bundle"], link)
    assert _check(world, bundle=link)[1] == ""  # the same file by its real path
    copy = world["tmp"] / "copy.tar"
    shutil.copyfile(world["bundle"], copy)
    assert _check(world, bundle=copy)[1] == "the bundle is not the file the recorded run read"
    world["bundle"].unlink()
    assert _check(world)[1].startswith("bundle %s: " % world["bundle"])


@pytest.mark.parametrize("change", ["chmod", "utime", "symlinked_dir", "script", "metadata_of_another",
                                    "directory_mode"])
def test_each_change_of_a_recorded_fact_is_a_miss(world, change):
    sp = site_packages(world["dest"])
    if change == "chmod":
        os.chmod(sp / "torch" / "nn" / "mod.py", 0o600)
    elif change == "utime":
        os.utime(sp / "torch" / "lib" / "x.so", ns=(0, 1))
    elif change == "symlinked_dir":
        moved = world["tmp"] / "nn-elsewhere"
        shutil.copytree(sp / "torch" / "nn", moved, copy_function=shutil.copy2)
        shutil.rmtree(sp / "torch" / "nn")
        os.symlink(moved, sp / "torch" / "nn")  # same files, same facts, reached through a link
    elif change == "script":
        os.unlink(world["dest"] / "bin" / "torchrun")
    elif change == "metadata_of_another":
        meta = sp / "requests-2.32.0.dist-info" / "METADATA"
        meta.write_text(meta.read_text().replace("Name: requests", "Name: old-kernel"))
    elif change == "directory_mode":
        os.chmod(sp / "torch", 0o700)
    assert _check(world) == (None, "files changed since the recorded run")


def test_a_new_distribution_is_a_miss(world):
    add_dist(world["dest"], "old-kernel", "0.1", {"old_kernel/__init__.py": b"k"})
    assert _check(world)[1] == "site-packages holds other distributions than after the recorded run"


def test_pycache_next_to_recorded_files_is_not_a_change(world):
    """Importing torch writes __pycache__/ beside its files: directories' mtimes are not recorded."""
    cache = site_packages(world["dest"]) / "torch" / "__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-312.pyc").write_bytes(b"pyc")
    assert _check(world)[1] == ""


@pytest.mark.parametrize("mangle", [
    lambda d: d.update(paths="../../../../etc/passwd"),
    lambda d: d.update(files={"count": "x"}),
    lambda d: d.pop("bundle"),
    lambda d: d.update(dest={"root": "/elsewhere"}),
    lambda d: d.update(version=2),
])
def test_a_mangled_record_is_a_miss_never_an_error(world, mangle):
    path = C.record_path(str(world["dest"]))
    with open(path) as handle:
        data = json.load(handle)
    mangle(data)
    with open(path, "w") as handle:
        json.dump(data, handle)
    answer, why = _check(world)
    assert answer is None and why


def test_write_refuses_a_linked_directory_and_forget_is_quiet(world, tmp_path):
    venv = world["venv"]
    meta = world["dest"] / ".dflash-release"
    shutil.rmtree(meta)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, meta)
    assert C.write(venv, {"format": C.FORMAT}) is False and list(elsewhere.iterdir()) == []
    assert C.load(str(world["dest"])) is None
    assert C.forget(str(world["dest"])) is True
    os.unlink(meta)
    assert C.forget(str(world["dest"])) is True  # nothing to forget


def test_a_file_changed_between_the_run_and_the_record_is_never_vouched_for(world, monkeypatch):
    """The record's facts are read after the run: one that no longer has the bundle's size is not recorded."""
    from ansible_collections.dflash.deploy.plugins.module_utils.transplant import run as R

    sp = site_packages(world["dest"])
    add_dist(world["dest"], "old-kernel", "0.1", {"old_kernel/__init__.py": b"k"})  # work for the next run
    real = R.Runner.execute

    def execute(self, plan):
        real(self, plan)
        with open(sp / "torch" / "nn" / "mod.py", "ab") as handle:  # someone else, just after the run
            handle.write(b"!")
    monkeypatch.setattr(R.Runner, "execute", execute)
    result = transplant(str(world["dest"]), bundle=str(world["bundle"]), remove=REMOVE)
    assert result["changed"] is True and result["removed"] == [{"name": "old-kernel", "version": "0.1"}]
    assert not os.path.exists(C.record_path(str(world["dest"])))  # forgotten before the run, not written after
    monkeypatch.setattr(R.Runner, "execute", real)
    again = transplant(str(world["dest"]), bundle=str(world["bundle"]), remove=REMOVE)
    assert again["fast_path"] is False and [m["name"] for m in again["moved"]] == ["torch"]
    assert (sp / "torch" / "nn" / "mod.py").read_bytes() == b"nn"
