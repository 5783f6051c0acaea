# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capture the DFlash-capable sglang tree of a working venv as one reproducible tar.

The tar holds the venv's WHOLE installed ``sglang/`` package (a DFlash-capable sglang is a
whole tree, not the files that differ from PyPI's) and a ``pyproject.toml`` declaring what
the tree needs:

- the tree's version (tree.tree_version: ``sglang/_version.py``, else ``sglang/version.py``);
- its requirements: the venv's sglang METADATA Requires-Dist when that dist-info describes
  this tree (same version), else the kernel stack the tree runs with there (sglang-kernel,
  sgl-kernel, flashinfer-python, flashinfer-cubin, torch, transformers at their installed
  versions, local tags dropped; 0.5.11's models need transformers 5.6.0, 0.5.9 pins
  4.57.1): a tree copied over another release leaves a dist-info that no longer describes
  the code.

Members are sorted, mode 0644, mtime 0, owner 0 (GNU format): the same tree gives the same
bytes. The tar is written beside its destination and renamed over it, only when its bytes
differ. Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree.tree import (
    PKG,
    requires_dist,
    tree_files,
    tree_version,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import field, list_dists, normalize_name
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError, read_venv

STACK = ("sglang-kernel", "sgl-kernel", "flashinfer-python", "flashinfer-cubin", "torch", "transformers")
PYPROJECT = "pyproject.toml"
_CHUNK = 1 << 20


class CaptureError(Exception):
    """A venv with no tree to capture; the message is the one line to show."""


@dataclass(frozen=True)
class Tree:
    """What the venv's sglang tree is and declares."""

    site_packages: str
    version: str
    requires: tuple
    declared: str  # where the requirements come from, in words
    files: tuple  # paths relative to site-packages, sorted


def installed(site):
    """{normalized name: (version, Requires-Dist)} of the distributions whose METADATA names them."""
    try:
        dists = list_dists(site)
    except VenvError as exc:
        raise CaptureError(str(exc)) from None
    out = {}
    for dist in dists:
        name = field(dist.fields, "Name") if dist.metadata_error is None else None
        if name:
            out[normalize_name(name)] = (field(dist.fields, "Version"), requires_dist(dist.fields))
    return out


def read_tree(venv):
    """The Tree of the venv's site-packages/sglang; CaptureError when there is none or it has no version."""
    site = read_venv(venv, lenient=True).site_packages
    if site is None:
        raise CaptureError("%s has no lib/python3*/site-packages" % venv)
    pkg = os.path.join(site, PKG)
    if not os.path.isdir(pkg):
        raise CaptureError("%s has no %s package" % (site, PKG))
    version = tree_version(pkg)
    if version is None:
        raise CaptureError("%s declares no __version__ (_version.py, version.py)" % pkg)
    dists = installed(site)
    sglang = dists.get(PKG)
    if sglang and sglang[0] == version:
        requires, declared = sglang[1], "the sglang %s METADATA of the reference venv" % version
    else:
        requires = ["%s==%s" % (name, (dists[name][0] or "").split("+", 1)[0]) for name in STACK if name in dists]
        declared = "the kernel stack the tree runs with in the reference venv (its sglang dist-info says %s)" % (
            sglang[0] if sglang else "nothing")
    return Tree(site, version, tuple(requires), declared, tuple(tree_files(site)))


def toml_list(items):
    return "[\n" + "".join("  %s,\n" % json.dumps(i) for i in items) + "]"


def pyproject_text(venv, tree):
    """The pyproject.toml that declares the tree (name, version, dependencies)."""
    return (
        "# Written by dflash.deploy.dflash_tree_capture: the DFlash-capable sglang tree captured from %s.\n"
        "# Requirements: %s.\n"
        "[project]\nname = \"sglang\"\nversion = %s\ndependencies = %s\n"
    ) % (venv, tree.declared, json.dumps(tree.version), toml_list(tree.requires))


def tar_bytes(venv, tree):
    """The reproducible tar of the tree: pyproject.toml, then sglang/... in sorted order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        entries = [(PYPROJECT, pyproject_text(venv, tree).encode("utf-8"))]
        for rel in tree.files:
            with open(os.path.join(tree.site_packages, rel), "rb") as handle:
                entries.append((rel, handle.read()))
        for rel, data in entries:
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def member_digests(data):
    """{member name: sha256 hex} of the regular files of a tar held in memory; {} when it is no tar."""
    out = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    out[member.name] = hashlib.sha256(tar.extractfile(member).read()).hexdigest()
    except (tarfile.TarError, OSError):
        return {}
    return out


def tar_changes(old, new):
    """``add|replace|remove <member>`` lines from the tar ``old`` (bytes, or None) to ``new``."""
    before = member_digests(old) if old else {}
    after = member_digests(new)
    lines = []
    for name in sorted(set(before) | set(after)):
        if name not in before:
            lines.append("add " + name)
        elif name not in after:
            lines.append("remove " + name)
        elif before[name] != after[name]:
            lines.append("replace " + name)
    return lines


def read_existing(dest):
    """The bytes of the file at dest, or None when there is none (a directory or link is an error)."""
    if not os.path.lexists(dest):
        return None
    if os.path.islink(dest) or not os.path.isfile(dest):
        raise CaptureError("%s exists and is not a regular file" % dest)
    with open(dest, "rb") as handle:
        return handle.read()


def write(dest, data):
    """Write dest under a temporary name beside it and rename it over."""
    tmp = dest + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.rename(tmp, dest)


@dataclass(frozen=True)
class Result:
    tree: Tree
    sha256: str
    changed: bool
    changes: tuple  # add|replace|remove lines of the tar's members; only when asked for


def capture(venv, dest, check_mode=False, diff=False):
    """Capture the venv's tree into the tar at dest (check_mode: compare only, write nothing)."""
    tree = read_tree(venv)
    data = tar_bytes(venv, tree)
    old = read_existing(dest)
    changed = old != data
    changes = tuple(tar_changes(old, data)) if diff and changed else ()
    if changed and not check_mode:
        write(dest, data)
    return Result(tree, hashlib.sha256(data).hexdigest(), changed, changes)
