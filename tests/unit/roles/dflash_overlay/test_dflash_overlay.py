"""roles/dflash_overlay/files: the whole-tree overlay and the tree's declaration, on a scratch site-packages."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
FILES = REPO / "roles" / "dflash_overlay" / "files"
CAPTURE = REPO / "playbooks" / "files" / "capture_dflash_sources.py"
OVERLAY = FILES / "dflash_overlay.py"
TREE_INFO = FILES / "dflash_tree_info.py"

BASE = {  # what "sglang 0.5.9" installed
    "sglang/__init__.py": "base init\n",
    "sglang/version.py": '__version__ = "0.5.9"\n',
    "sglang/srt/models/mimo_v2_flash.py": "stale\n",
    "sglang/srt/layers/sampler.py": "old sampler\n",
}
TREE = {  # the DFlash-capable tree
    "sglang/__init__.py": "base init\n",
    "sglang/version.py": '__version__ = "0.5.11"\n',
    "sglang/srt/layers/sampler.py": "new sampler\n",
    "sglang/srt/models/mimo_v2.py": "both archs\n",
    "sglang/srt/speculative/dflash_worker.py": "worker\n",
}


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def release(tmp_path):
    venv = tmp_path / "release"
    site = venv / "lib" / "python3.11" / "site-packages"
    rows = []
    for rel, text in BASE.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
        rows.append([rel, _digest(text.encode()), str(len(text))])
    dist_info = site / "sglang-0.5.9.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    rows += [["sglang-0.5.9.dist-info/METADATA", _digest((dist_info / "METADATA").read_bytes()), "52"],
             ["sglang-0.5.9.dist-info/RECORD", "", ""]]
    with open(dist_info / "RECORD", "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    (site / "sglang" / "srt" / "models" / "__pycache__").mkdir()
    (site / "sglang" / "srt" / "models" / "__pycache__" / "mimo_v2_flash.cpython-311.pyc").write_bytes(b"pyc")
    (venv / ".dflash-release").mkdir()
    (venv / ".dflash-release" / "verified.json").write_text("{}")
    tar = tmp_path / "tree.tar"
    with tarfile.open(tar, "w") as tf:
        for rel, text in TREE.items():
            info = tarfile.TarInfo(rel)
            info.size = len(text)
            tf.addfile(info, io.BytesIO(text.encode()))
    return venv, site, tar


def run(venv, site, tar, dry=False):
    env = dict(os.environ, DRY="1" if dry else "0")
    proc = subprocess.run([sys.executable, str(OVERLAY), str(tar), str(site),
                           str(venv / ".dflash-release" / "dflash-overlay.sha256"),
                           str(venv / ".dflash-release" / "verified.json")],
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def on_disk(site):
    return {p.relative_to(site).as_posix(): p.read_text() for p in (site / "sglang").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


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
        assert sglang_rows[rel][1:] == [_digest(text.encode()), str(len(text))]
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
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tf:
        info = tarfile.TarInfo("other/x.py")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    proc = subprocess.run([sys.executable, str(OVERLAY), str(bad), str(site), str(tmp_path / "m")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "outside sglang/" in proc.stderr
    assert on_disk(site) == BASE


def test_the_tree_declares_its_requirements(tmp_path):
    src = tmp_path / "src"
    (src / "python" / "sglang").mkdir(parents=True)
    (src / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.11"\n')
    (src / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\nversion = "0.5.11"\ndependencies = ["sglang-kernel==0.4.2", "torch==2.11.0"]\n')
    out = subprocess.run([sys.executable, str(TREE_INFO), str(src), "python/sglang"], capture_output=True, text=True,
                         check=True)
    info = json.loads(out.stdout)
    assert info["version"] == "0.5.11" and info["requires"] == ["sglang-kernel==0.4.2", "torch==2.11.0"]
    (src / "python" / "pyproject.toml").unlink()
    (src / "python" / "METADATA").write_text(REAL_METADATA_HEAD + "Requires-Dist: torch==2.11.0\n\nbody\n")
    info = json.loads(subprocess.run([sys.executable, str(TREE_INFO), str(src), "python/sglang"],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["requires"] == ["torch==2.11.0"]
    (src / "python" / "METADATA").unlink()
    proc = subprocess.run([sys.executable, str(TREE_INFO), str(src), "python/sglang"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1 and "declares no requirements" in proc.stderr


REAL_VERSION_PY = """try:
    from sglang._version import __version__, __version_tuple__
except ImportError:
    try:
        import importlib.metadata

        __version__ = importlib.metadata.version("sglang")
    except Exception:
        __version__ = "0.0.0.dev0"
"""
# The head of real sglang 0.5.11's METADATA: its License field continues over indented lines, some of
# them whitespace only; the headers end at the first truly empty line.
REAL_METADATA_HEAD = ("Metadata-Version: 2.4\nName: sglang\nVersion: 0.5.11\nSummary: SGLang is a fast serving "
                      "framework.\nLicense:                                  Apache License\n"
                      "                                   Version 2.0, January 2004\n        \n"
                      "           TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION\n        \n"
                      "Requires-Python: >=3.10\n")
REAL_UNDERSCORE_VERSION_PY = ("__version__: str\n__version__ = version = '0.5.11'\n"
                              "__version_tuple__ = version_tuple = (0, 5, 11)\n")


def test_the_capture_takes_the_whole_tree_and_real_0_5_11_s_version(tmp_path):
    """Real sglang 0.5.11's version.py imports _version.py and holds only an indented fallback (0.0.0.dev0)."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    pkg = site / "sglang"
    (pkg / "srt" / "speculative").mkdir(parents=True)
    (pkg / "version.py").write_text(REAL_VERSION_PY)
    (pkg / "_version.py").write_text(REAL_UNDERSCORE_VERSION_PY)
    (pkg / "srt" / "speculative" / "dflash_worker.py").write_text("worker\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "version.cpython-311.pyc").write_bytes(b"pyc")
    meta = site / "sglang-0.5.11.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(REAL_METADATA_HEAD + "Requires-Dist: sglang-kernel==0.4.2\n"
                                   "Requires-Dist: transformers==5.6.0\n\nbody\nRequires-Dist: not-a-header\n")
    out = tmp_path / "tree.tar"
    proc = subprocess.run([sys.executable, str(CAPTURE), str(tmp_path / "venv"), str(out)], capture_output=True,
                          text=True, check=True)
    result = json.loads(proc.stdout)
    assert result["version"] == "0.5.11" and result["files"] == 3
    assert result["requires"] == ["sglang-kernel==0.4.2", "transformers==5.6.0"]  # the dist-info describes the tree
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
    info = json.loads(subprocess.run([sys.executable, str(TREE_INFO), str(src), "python/sglang"], capture_output=True,
                                     text=True, check=True).stdout)
    assert info["version"] == "0.5.11" and info["requires"] == ["sglang-kernel==0.4.2", "transformers==5.6.0"]
