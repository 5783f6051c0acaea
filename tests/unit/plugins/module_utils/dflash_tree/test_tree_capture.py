"""dflash_tree/capture.py: the whole tree of a reference venv and what it declares, as one reproducible tar."""
from __future__ import annotations

import tarfile

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree import capture as C
from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree import info as I
from dflash_tree_support import make_reference_venv


def test_the_capture_takes_the_whole_tree_and_real_0_5_11_s_version(tmp_path):
    """Real sglang 0.5.11's version.py imports _version.py and holds only an indented fallback (0.0.0.dev0)."""
    venv = make_reference_venv(tmp_path)
    out = tmp_path / "tree.tar"
    result = C.capture(str(venv), str(out))
    assert result.tree.version == "0.5.11" and len(result.tree.files) == 3
    # the dist-info describes the tree
    assert list(result.tree.requires) == ["sglang-kernel==0.4.2", "transformers==5.6.0"]
    with tarfile.open(out) as tf:
        names = sorted(tf.getnames())
        pyproject = tf.extractfile("pyproject.toml").read().decode()
    assert names == ["pyproject.toml", "sglang/_version.py", "sglang/srt/speculative/dflash_worker.py",
                     "sglang/version.py"]
    assert 'version = "0.5.11"' in pyproject
    src = tmp_path / "src"
    (src / "python").mkdir(parents=True)
    with tarfile.open(out) as tf:
        tf.extractall(src / "python")
    info = I.tree_info(str(src), "python/sglang")
    assert info.version == "0.5.11" and list(info.requires) == ["sglang-kernel==0.4.2", "transformers==5.6.0"]


def test_a_dist_info_of_another_version_gives_the_kernel_stack(tmp_path):
    """A tree copied over another release: its dist-info no longer describes the code."""
    venv = make_reference_venv(tmp_path)
    site = venv / "lib" / "python3.11" / "site-packages"
    meta = site / "sglang-0.5.11.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.11", "Version: 0.5.9"))
    for name, version in (("sglang_kernel", "0.4.2"), ("torch", "2.11.0+cu130"), ("requests", "2.32.0")):
        (site / ("%s-%s.dist-info" % (name, version))).mkdir()
        (site / ("%s-%s.dist-info" % (name, version)) / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name.replace("_", "-"), version))
    tree = C.read_tree(str(venv))
    assert list(tree.requires) == ["sglang-kernel==0.4.2", "torch==2.11.0"]
    assert tree.declared == ("the kernel stack the tree runs with in the reference venv "
                             "(its sglang dist-info says 0.5.9)")


def test_the_same_tree_gives_the_same_bytes_and_check_mode_writes_nothing(tmp_path):
    venv = make_reference_venv(tmp_path)
    out = tmp_path / "tree.tar"
    dry = C.capture(str(venv), str(out), check_mode=True, diff=True)
    assert dry.changed and not out.exists()
    assert list(dry.changes) == ["add pyproject.toml", "add sglang/_version.py",
                                 "add sglang/srt/speculative/dflash_worker.py", "add sglang/version.py"]
    first = C.capture(str(venv), str(out))
    assert first.changed and first.sha256 == dry.sha256
    again = C.capture(str(venv), str(out), diff=True)
    assert not again.changed and again.changes == () and again.sha256 == first.sha256
    (venv / "lib" / "python3.11" / "site-packages" / "sglang" / "srt" / "speculative" / "dflash_worker.py").unlink()
    (venv / "lib" / "python3.11" / "site-packages" / "sglang" / "new.py").write_text("new\n")
    assert list(C.capture(str(venv), str(out), check_mode=True, diff=True).changes) == [
        "add sglang/new.py", "remove sglang/srt/speculative/dflash_worker.py"]
    assert C.capture(str(venv), str(out), check_mode=True).sha256 != first.sha256
    assert C.member_digests(out.read_bytes())["sglang/version.py"]  # untouched by the check


def test_a_venv_without_a_tree_is_named(tmp_path):
    with pytest.raises(C.CaptureError, match="has no lib/python3\\*/site-packages"):
        C.read_tree(str(tmp_path / "nothing"))
    site = tmp_path / "v" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    with pytest.raises(C.CaptureError, match="has no sglang package"):
        C.read_tree(str(tmp_path / "v"))
    (site / "sglang").mkdir()
    (site / "sglang" / "version.py").write_text("def version():\n    __version__ = '1'\n")
    with pytest.raises(C.CaptureError, match="declares no __version__"):
        C.read_tree(str(tmp_path / "v"))
