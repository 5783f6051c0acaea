"""Scratch releases, trees and venvs for the dflash_tree modules' tests (logic and module shells)."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import tarfile
from pathlib import Path

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


def record_digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_tar(path: Path, files: dict) -> Path:
    with tarfile.open(path, "w") as tf:
        for rel, text in files.items():
            data = text.encode() if isinstance(text, str) else text
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def make_release(tmp_path: Path):
    """(venv, site-packages, tar): a release that installed BASE (RECORD, bytecode, a verified marker) and a
    tar of TREE."""
    venv = tmp_path / "release"
    site = venv / "lib" / "python3.11" / "site-packages"
    rows = []
    for rel, text in BASE.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
        rows.append([rel, record_digest(text.encode()), str(len(text))])
    dist_info = site / "sglang-0.5.9.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    rows += [["sglang-0.5.9.dist-info/METADATA", record_digest((dist_info / "METADATA").read_bytes()), "52"],
             ["sglang-0.5.9.dist-info/RECORD", "", ""]]
    with open(dist_info / "RECORD", "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    (site / "sglang" / "srt" / "models" / "__pycache__").mkdir()
    (site / "sglang" / "srt" / "models" / "__pycache__" / "mimo_v2_flash.cpython-311.pyc").write_bytes(b"pyc")
    (venv / ".dflash-release").mkdir()
    (venv / ".dflash-release" / "verified.json").write_text("{}")
    return venv, site, write_tar(tmp_path / "tree.tar", TREE)


def release_paths(venv: Path) -> tuple:
    """(manifest, verified marker) of a release."""
    return venv / ".dflash-release" / "dflash-overlay.sha256", venv / ".dflash-release" / "verified.json"


def on_disk(site: Path) -> dict:
    return {p.relative_to(site).as_posix(): p.read_text() for p in (site / "sglang").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def snapshot(root: Path) -> dict:
    """Every entry under root: relative path -> bytes of a file, the target of a link, or None for a directory."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = str(p.readlink()) if p.is_symlink() else (p.read_bytes() if p.is_file() else None)
    return out


def make_reference_venv(tmp_path: Path) -> Path:
    """A venv holding real sglang 0.5.11's shape: version.py importing _version.py, the METADATA head whose
    License continues over whitespace-only lines, bytecode beside the sources."""
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
    return tmp_path / "venv"
