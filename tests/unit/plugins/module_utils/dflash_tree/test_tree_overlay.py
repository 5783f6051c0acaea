"""dflash_tree/overlay.py: the whole-tree overlay on a scratch site-packages."""
from __future__ import annotations

import csv
import os
import tarfile

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree import overlay as O
from dflash_tree_support import BASE, TREE, make_release, on_disk, record_digest, release_paths, write_tar


@pytest.fixture
def release(tmp_path):
    return make_release(tmp_path)


def run(venv, site, tar, dry=False):
    manifest, marker = release_paths(venv)
    return O.overlay(str(tar), str(site), str(manifest), str(marker), check_mode=dry).changes


def test_the_tree_replaces_sglang_as_a_whole_and_record_tells_the_truth(release):
    venv, site, tar = release
    assert run(venv, site, tar, dry=True) == [
        "replace sglang/srt/layers/sampler.py", "add sglang/srt/models/mimo_v2.py",
        "add sglang/srt/speculative/dflash_worker.py", "replace sglang/version.py",
        "remove sglang/srt/models/mimo_v2_flash.py", "record", "manifest"]
    assert on_disk(site) == BASE and (venv / ".dflash-release" / "verified.json").exists()  # a dry run writes nothing
    run(venv, site, tar)
    assert on_disk(site) == TREE
    assert not (site / "sglang" / "srt" / "models" / "__pycache__" / "mimo_v2_flash.cpython-311.pyc").exists()
    assert not (venv / ".dflash-release" / "verified.json").exists()
    rows = list(csv.reader(open(site / "sglang-0.5.9.dist-info" / "RECORD", newline="")))
    sglang_rows = {r[0]: r for r in rows if r[0].startswith("sglang/")}
    assert set(sglang_rows) == set(TREE)
    for rel, text in TREE.items():
        assert sglang_rows[rel][1:] == [record_digest(text.encode()), str(len(text))]
    assert ["sglang-0.5.9.dist-info/RECORD", "", ""] in rows
    manifest = (venv / ".dflash-release" / "dflash-overlay.sha256").read_text().splitlines()
    assert [line.split("  ")[1] for line in manifest] == sorted(TREE)
    assert run(venv, site, tar) == []  # idempotent


def test_drift_an_edit_and_a_stale_file_back_are_corrected(release):
    venv, site, tar = release
    run(venv, site, tar)
    (site / "sglang" / "srt" / "speculative" / "dflash_worker.py").write_text("edited\n")
    (site / "sglang" / "srt" / "models" / "mimo_v2_flash.py").write_text("stale\n")
    (site / "sglang" / "srt" / "legacy").mkdir()
    (site / "sglang" / "srt" / "legacy" / "old.py").write_text("x\n")
    lines = run(venv, site, tar)
    assert lines == ["drift sglang/srt/speculative/dflash_worker.py", "stale sglang/srt/legacy/old.py",
                     "stale sglang/srt/models/mimo_v2_flash.py"]  # RECORD already describes the tree
    assert on_disk(site) == TREE
    assert not (site / "sglang" / "srt" / "legacy").exists()  # emptied directories go too
    assert run(venv, site, tar) == []


def test_a_tar_reaching_outside_sglang_is_refused(tmp_path, release):
    venv, site, _tar = release
    bad = write_tar(tmp_path / "bad.tar", {"other/x.py": "x"})
    with pytest.raises(O.OverlayError, match="outside sglang/"):
        O.overlay(str(bad), str(site), str(tmp_path / "m"))
    assert on_disk(site) == BASE


def test_an_interrupted_run_is_finished_by_the_next(release, monkeypatch):
    """Killed after the files and before RECORD and the manifest: the next run rewrites only those two."""
    venv, site, tar = release
    real = O.write_atomic

    def dies_at_record(dest, data, mode=0o644):
        if dest.endswith("RECORD"):
            raise KeyboardInterrupt
        real(dest, data, mode)

    monkeypatch.setattr(O, "write_atomic", dies_at_record)
    with pytest.raises(KeyboardInterrupt):
        run(venv, site, tar)
    monkeypatch.setattr(O, "write_atomic", real)
    assert on_disk(site) == TREE and not (venv / ".dflash-release" / "verified.json").exists()
    assert run(venv, site, tar) == ["record", "manifest"]
    assert run(venv, site, tar) == []


def test_bytecode_in_the_tar_and_a_link_in_the_release():
    """Bytecode members are not part of the tree; a link where the tree has a file is replaced by the file."""
    assert O.check_member(tarfile.TarInfo("./sglang/x.py")) == "sglang/x.py"
    for name in ("sglang/__pycache__/x.cpython-311.pyc", "sglang/a/__pycache__/y.txt", "sglang/z.pyc"):
        assert O.skipped(name)
    assert not O.skipped("sglang/__pycache__.py")


def test_a_link_member_and_an_empty_tree_are_refused(tmp_path, release):
    venv, site, _tar = release
    link = tmp_path / "link.tar"
    with tarfile.open(link, "w") as tf:
        info = tarfile.TarInfo("sglang/evil.py")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tf.addfile(info)
    with pytest.raises(O.OverlayError, match="neither a file nor a directory"):
        O.overlay(str(link), str(site), str(tmp_path / "m"))
    empty = write_tar(tmp_path / "empty.tar", {"sglang/__pycache__/x.pyc": b"pyc"})
    with pytest.raises(O.OverlayError, match="the tar holds no sglang/ files"):
        O.overlay(str(empty), str(site), str(tmp_path / "m"))
    with pytest.raises(O.OverlayError, match="site-packages .* does not exist"):
        O.overlay(str(empty), str(tmp_path / "nowhere"), str(tmp_path / "m"))
    assert on_disk(site) == BASE


def test_files_are_new_inodes(release):
    """uv hard-links venv files from its cache: a replaced file is a new inode, the cache's stays as it was."""
    venv, site, tar = release
    cache = site.parent / "cache-sampler.py"
    os.link(site / "sglang" / "srt" / "layers" / "sampler.py", cache)
    run(venv, site, tar)
    assert cache.read_text() == "old sampler\n"
    assert (site / "sglang" / "srt" / "layers" / "sampler.py").read_text() == "new sampler\n"
