# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Installed distributions of a site-packages directory, read from their
``*.dist-info`` files with the standard library only (METADATA headers,
INSTALLER, top_level.txt, RECORD), and the import names that more than one
distribution claims (``sgl_kernel`` from both ``sgl-kernel`` and
``sglang-kernel``).
"""

from __future__ import annotations

import csv
import hashlib
import importlib.machinery
import os
import re
import sys

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_text
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import (
    MAX_REQUIREMENTS,
    MAX_SMALL_FILE_BYTES,
    field,
    field_all,
    list_dists,
    normalize_name,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import RecordError, hash_file
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import parse_record as _parse_record

# RECORD of the largest real distributions (torch: 11,678 files) is about 1.5 MB.
MAX_RECORD_BYTES = 64 << 20
_SO_SUFFIX = re.compile(r"\.(cpython-[^.]*|abi3|pypy[^.]*)?\.?(so|pyd)$")


def local_tag(version):
    """'cu130' for '2.11.0+cu130', None without a local part."""
    if version and "+" in version:
        return version.split("+", 1)[1]
    return None


def _read_text(path, limit=MAX_SMALL_FILE_BYTES):
    return read_text(path, limit)


def parse_record(text):
    """RECORD rows as (path, hash, size or None), paths as written (not validated here:
    pkg_probe reports on what is installed; site_packages_transplant validates)."""
    return [(e.path, e.hash or "", e.size) for e in _parse_record(text, validate=False)]


def top_level_from_record(paths, rule=None, suffixes=None):
    """Import names inferred from RECORD paths when there is no top_level.txt.

    The rule of ``importlib.metadata.packages_distributions()`` on the interpreter that runs this
    (``rule`` 312 or 38 to choose):

    - Python 3.12 and newer (``_top_level_inferred`` with ``_get_toplevel_name``): for every file,
      its first directory, or, directly in site-packages, its module name when its suffix is one
      this interpreter imports (``inspect.getmodulename``: source, bytecode, extension module),
      else its file name;
    - before 3.12: for every ``.py`` file, its first directory, or its module name when it lies
      directly in site-packages.

    A name with a dot is no import name (``..`` of a script in the venv's ``bin/``, a file name
    with its suffix): left out, as both do. The two agree on trees of ``.py`` files; 3.12 also
    names a top-level extension module (a mypyc runtime ``<hash>__mypyc.cpython-312-*.so``) and a
    directory holding no ``.py`` file.
    """
    if rule is None:
        rule = 312 if sys.version_info >= (3, 12) else 38
    if suffixes is None:
        suffixes = importlib.machinery.all_suffixes()
    names = set()
    for p in paths:
        parts = [part for part in p.split("/") if part not in ("", ".")]
        if not parts:
            continue
        if rule < 312 and not p.endswith(".py"):
            continue
        if len(parts) > 1:
            names.add(parts[0])
        elif rule < 312:
            names.add(parts[0][:-3])
        else:
            names.add(_module_name(parts[0], suffixes) or parts[0])
    return sorted(name for name in names if name and "." not in name)


def _module_name(filename, suffixes):
    """``inspect.getmodulename``: the file name without the longest import suffix it ends with."""
    for suffix in sorted(suffixes, key=len, reverse=True):
        if filename.endswith(suffix):
            return filename[:-len(suffix)]
    return None


# What an installer writes about itself, not what the wheel brought (pip and uv differ here).
_INSTALLER_FILES = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json", "uv_build.json")


def record_digest(record):
    """sha256 over the RECORD entries (path, hash, size) of the files a distribution put in site-packages:
    the wheel's contents as installed, comparable between hosts and installers. Left out: files outside
    site-packages (scripts carry the venv's path), byte code, and the installer's own dist-info files.
    A file the wheel brought that its RECORD did not list is added by the installer (uv: with no hash),
    so it changes the digest too. None for a distribution without RECORD entries."""
    lines = []
    for path, digest, size in record:
        base = path.rsplit("/", 1)[-1]
        if path.startswith("../") or "/__pycache__/" in "/" + path or path.endswith(".pyc"):
            continue
        if ".dist-info/" in path and path.count("/") == 1 and base in _INSTALLER_FILES:
            continue
        lines.append("%s,%s,%s" % (path, digest or "", "" if size is None else size))
    if not lines:
        return None
    return hashlib.sha256("\n".join(sorted(lines)).encode("utf-8", "surrogateescape")).hexdigest()


def read_distribution(installed):
    """One distribution's facts from its InstalledDist (list_dists); never raises for unreadable or
    missing files (see ``errors``)."""
    d = installed.path
    info = {"dist_info": d, "errors": []}
    if installed.metadata_error is not None:
        exc = installed.metadata_error
        info["errors"].append("METADATA: %s" % (exc.strerror or exc))
    fields = installed.fields
    info["name"] = installed.name
    info["version"] = installed.version or None
    requires = field_all(fields, "Requires-Dist")
    if len(requires) > MAX_REQUIREMENTS:
        info["errors"].append("METADATA: %d Requires-Dist lines, more than the %d read; requirements not checked"
                              % (len(requires), MAX_REQUIREMENTS))
        requires = []
    info["requires"] = requires
    info["requires_python"] = field(fields, "Requires-Python")
    try:
        info["installer"] = _read_text(os.path.join(d, "INSTALLER")).strip() or None
    except OSError:
        info["installer"] = None
    record = []
    try:
        record = parse_record(_read_text(os.path.join(d, "RECORD"), MAX_RECORD_BYTES))
    except OSError as exc:
        info["errors"].append("RECORD: %s" % (exc.strerror or exc))
    except (csv.Error, RecordError) as exc:
        info["errors"].append("RECORD: malformed (%s)" % exc)
    info["record"] = record
    info["record_sha256"] = record_digest(record)
    try:
        declared = _read_text(os.path.join(d, "top_level.txt")).split()
    except OSError:
        declared = []
    info["top_level"] = sorted(set(declared or top_level_from_record(p for p, _h, _s in record)))
    return info


def scan(site_packages):
    """{normalized name: distribution dict} for every ``*.dist-info`` directory (list_dists).

    When two dist-info directories have the same normalized name (a broken
    install), both are kept: the second under ``name#2``.  Raises VenvError
    (a ValueError) when site_packages cannot be listed.
    """
    out = {}
    for installed in list_dists(site_packages):
        key = normalize_name(installed.name)
        n = 2
        base = key
        while key in out:
            key = "%s#%d" % (base, n)
            n += 1
        out[key] = read_distribution(installed)
    return out


def check_files(site_packages, dist, limit=5):
    """Files a distribution's RECORD lists that are not on disk: dict(missing, broken_symlinks, counts)."""
    missing = []
    broken = []
    n_missing = 0
    n_broken = 0
    for path, _h, _s in dist.get("record", ()):
        full = os.path.normpath(os.path.join(site_packages, path))
        if os.path.exists(full):
            continue
        if os.path.islink(full):
            n_broken += 1
            if len(broken) < limit:
                broken.append(path)
        else:
            n_missing += 1
            if len(missing) < limit:
                missing.append(path)
    return {"missing_files": missing, "missing_count": n_missing,
            "broken_symlinks": broken, "broken_symlink_count": n_broken}


def _record_digest_matches(full, digest):
    """Whether the file's content has the RECORD hash (None: no usable hash, or the file cannot be read)."""
    algo, _unused, expected = digest.partition("=")
    if not expected or algo not in hashlib.algorithms_guaranteed:
        return None
    try:
        got, _size = hash_file(full, algo, nofollow=False)
    except OSError:
        return None
    return got == "%s=%s" % (algo, expected)


def import_owners(site_packages, dists, max_files=20, max_size=1 << 20):
    """Import names that more than one distribution really shares.

    Returns {import name: {"distributions": [normalized names], "shared_files":
    n, "on_disk": [owners whose RECORD hashes match the files on disk]}}.
    Namespace packages (``nvidia``) whose owners only share empty
    ``__init__.py`` files are not reported.
    """
    claims = {}
    for key, dist in dists.items():
        for name in dist.get("top_level", ()):
            claims.setdefault(name, []).append(key)
    out = {}
    for name, owners in sorted(claims.items()):
        if len(owners) < 2:
            continue
        files = {}
        for key in owners:
            for path, digest, size in dists[key].get("record", ()):
                if path == name + ".py" or path.startswith(name + "/") or (
                        "/" not in path and path.startswith(name + ".") and _SO_SUFFIX.search(path)):
                    if "/__pycache__/" in path:
                        continue
                    files.setdefault(path, []).append((key, digest, size))
        shared = []
        for path, rows in files.items():
            if len(set(r[0] for r in rows)) < 2:
                continue
            sizes = [r[2] for r in rows if r[2] is not None]
            if not sizes:
                try:
                    sizes = [os.path.getsize(os.path.join(site_packages, path))]
                except OSError:
                    sizes = [1]
            if max(sizes) == 0:
                continue
            shared.append(path)
        if not shared:
            continue
        on_disk = []
        checkable = sorted(shared, key=lambda p: min((r[2] or max_size) for r in files[p]))[:max_files]
        for key in owners:
            verdicts = []
            for path in checkable:
                for owner, digest, size in files[path]:
                    if owner == key and (size or 0) <= max_size:
                        verdicts.append(_record_digest_matches(os.path.join(site_packages, path), digest))
            if verdicts and all(v is True for v in verdicts):
                on_disk.append(key)
        out[name] = {"distributions": sorted(owners), "shared_files": len(shared), "on_disk": on_disk}
    return out


def file_owners(dists):
    """{RECORD path: sorted distribution keys listing it} and {top-level import name: sorted keys claiming it}:
    who owns a file, by RECORD first (abi_check's python_api), by top-level name for a file no RECORD lists."""
    by_path = {}
    by_top = {}
    for key, dist in sorted(dists.items()):
        for path, _h, _s in dist.get("record", ()):
            by_path.setdefault(path, []).append(key)
        for name in dist.get("top_level", ()):
            by_top.setdefault(name, []).append(key)
    return by_path, by_top


def public_view(dist, detailed=True):
    """The fields pkg_probe returns for one distribution."""
    out = {"name": dist["name"], "version": dist["version"]}
    if detailed:
        out.update({
            "installer": dist.get("installer"),
            "requires": list(dist.get("requires", ())),
            "top_level": list(dist.get("top_level", ())),
            "files": len(dist.get("record", ())),
            "record_sha256": dist.get("record_sha256"),
        })
        for k in ("missing_files", "missing_count", "broken_symlinks", "broken_symlink_count"):
            if k in dist:
                out[k] = dist[k]
        if dist.get("errors"):
            out["errors"] = list(dist["errors"])
    return out
