# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which ELF files does a name in ``packages`` stand for, and which distributions own them?

A name is an import name (a package directory or a single-file module in site-packages) or a
distribution name (its RECORD lists the files).  A name is never a path: ``../../usr/lib`` is
refused before anything is read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import normalize_name

_SO = re.compile(r"\.so(\.\d+)*$")
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class PackageFiles:
    """``import_name``: the import package the files belong to; ``files``: candidate ELF paths;
    ``owners``: the keys of the distributions claiming the import name."""

    import_name: str
    files: list[str]
    owners: list[str]


def is_library_name(path):
    """A shared object's name: ``.so``, optionally followed by numeric versions (``.so.1.2``)."""
    return bool(_SO.search(os.path.basename(path)))


def is_package_name(name):
    """An import or distribution name, not a path."""
    return bool(_PACKAGE_NAME.match(name)) and ".." not in name


def claimants(dists, import_name):
    """The keys of the distributions whose top-level names include ``import_name``."""
    return {k for k, d in dists.items() if import_name in d.get("top_level", ())}


def distribution_files(site, dists, key, name):
    """The libraries the distribution ``key``'s RECORD lists (never ``../`` paths out of site-packages)."""
    dist = dists[key]
    files = []
    for p, _h, _s in dist.get("record", ()):
        if p.startswith("..") or not is_library_name(p):
            continue
        files.append(os.path.normpath(os.path.join(site, p)))
    pkg = dist["top_level"][0] if dist.get("top_level") else name
    # the other distributions claiming its import name too (the look-alike), as when named by import name
    return PackageFiles(pkg, sorted(set(files)), sorted({key} | claimants(dists, pkg)))


def directory_files(pkg_dir):
    """The libraries under an import package's directory, top down (a directory's files in name order, then its
    subdirectories in name order), ``__pycache__`` skipped."""
    candidates = []
    for root, dirs, files in os.walk(pkg_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if is_library_name(f):
                candidates.append(os.path.join(root, f))
    return candidates


def single_module_files(site, name):
    """A top-level extension module ``name.<tag>.so``."""
    return [os.path.join(site, f) for f in sorted(os.listdir(site)) if f.startswith(name + ".") and is_library_name(f)]


def find_package_files(site, dists, name):
    """The PackageFiles of ``name`` (a distribution name whose files are not a directory of that name, an
    import package directory, a single-file module), or None when nothing is installed under it."""
    key = normalize_name(name)
    pkg_dir = os.path.join(site, name)
    if key in dists and not os.path.isdir(pkg_dir):
        return distribution_files(site, dists, key, name)
    owners = sorted(claimants(dists, name))
    if os.path.isdir(pkg_dir):
        return PackageFiles(name, directory_files(pkg_dir), owners)
    single = single_module_files(site, name)
    if single or owners:
        return PackageFiles(name, single, owners)
    return None
