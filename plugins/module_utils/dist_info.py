# -*- coding: utf-8 -*-
# Copyright: (c) 2025, dflash.deploy maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read venv layout and installed distributions (``*.dist-info``) from files.

No interpreter is started and nothing is imported: the venv's
``pyvenv.cfg`` and ``lib/pythonX.Y/site-packages`` say where things are.
Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

_NORMALIZE = re.compile(r"[-_.]+")
_LIBDIR = re.compile(r"^python(\d+)\.(\d+)(t?)$")


class VenvError(Exception):
    """The path is not a usable virtual environment."""


def normalize_name(name):
    """PEP 503 normalized distribution name."""
    return _NORMALIZE.sub("-", name).lower()


def name_matches(name, patterns):
    """True when the normalized ``name`` matches one of the glob ``patterns``."""
    norm = normalize_name(name)
    return any(fnmatch.fnmatchcase(norm, normalize_pattern(p)) for p in patterns)


def normalize_pattern(pattern):
    """Normalize a name glob like a name, keeping ``*?[]``."""
    return _NORMALIZE.sub("-", pattern).lower()


class Venv:
    """Paths of a venv: root, bin/, site-packages, and the Python version."""

    def __init__(self, root, site_packages, version, freethreaded=False):
        self.root = root
        self.site_packages = site_packages
        self.bin = os.path.join(root, "bin")
        self.version = version  # (major, minor)
        self.freethreaded = freethreaded

    @property
    def python(self):
        return os.path.join(self.bin, "python")


def read_pyvenv_cfg(root):
    values = {}
    with open(os.path.join(root, "pyvenv.cfg"), "r", encoding="utf-8") as handle:
        for line in handle:
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip().lower()] = value.strip()
    return values


def open_venv(root):
    """Describe the venv at ``root`` or raise VenvError saying why it is not one."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise VenvError("%s does not exist or is not a directory" % root)
    try:
        cfg = read_pyvenv_cfg(root)
    except (IOError, OSError):
        raise VenvError("%s is not a virtual environment (no readable pyvenv.cfg)" % root) from None
    libdir = os.path.join(root, "lib")
    candidates = []
    try:
        names = sorted(os.listdir(libdir))
    except OSError:
        names = []
    for name in names:
        match = _LIBDIR.match(name)
        sp = os.path.join(libdir, name, "site-packages")
        if match and os.path.isdir(sp) and not os.path.islink(os.path.join(libdir, name)):
            candidates.append(((int(match.group(1)), int(match.group(2))), bool(match.group(3)), sp))
    if not candidates:
        raise VenvError("%s is not a virtual environment (no lib/pythonX.Y/site-packages)" % root)
    wanted = cfg.get("version_info") or cfg.get("version") or ""
    chosen = candidates[-1]
    if len(candidates) > 1:
        for cand in candidates:
            if wanted.startswith("%d.%d." % cand[0]):
                chosen = cand
    return Venv(root, chosen[2], chosen[0], chosen[1])


class InstalledDist:
    """One ``*.dist-info`` directory in a site-packages."""

    def __init__(self, site_packages, dist_info, name, version):
        self.site_packages = site_packages
        self.dist_info = dist_info  # directory name, e.g. torch-2.11.0+cu130.dist-info
        self.name = name
        self.version = version

    @property
    def key(self):
        return normalize_name(self.name)

    @property
    def path(self):
        return os.path.join(self.site_packages, self.dist_info)

    def file(self, name):
        return os.path.join(self.path, name)

    def __repr__(self):
        return "InstalledDist(%s %s)" % (self.name, self.version)


def parse_metadata_headers(text):
    """Name and Version from core metadata headers (stops at the body)."""
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "name" and name is None:
            name = value.strip()
        elif key == "version" and version is None:
            version = value.strip()
    return name, version


def _read_head(path, limit=65536):
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        return handle.read(limit)


def list_dists(site_packages):
    """Every ``*.dist-info`` directory under site_packages, sorted by dir name."""
    dists = []
    try:
        names = sorted(os.listdir(site_packages))
    except OSError as exc:
        raise VenvError("cannot list %s: %s" % (site_packages, exc)) from exc
    for entry in names:
        if not entry.endswith(".dist-info"):
            continue
        full = os.path.join(site_packages, entry)
        if not os.path.isdir(full):
            continue
        name = version = None
        try:
            name, version = parse_metadata_headers(_read_head(os.path.join(full, "METADATA")))
        except (IOError, OSError):
            pass
        if not name or not version:
            stem = entry[: -len(".dist-info")]
            fallback_name, dummy, fallback_version = stem.partition("-")
            name = name or fallback_name
            version = version or fallback_version
        dists.append(InstalledDist(site_packages, entry, name, version))
    return dists


def parse_wheel_tags(text):
    """``Tag:`` values of a WHEEL file."""
    tags = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "tag":
            tags.append(value.strip())
    return tags
