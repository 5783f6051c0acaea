# -*- coding: utf-8 -*-
# Copyright: (c) 2025, dflash.deploy maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Installed distributions (``*.dist-info``) of a site-packages, read from files.

No interpreter is started and nothing is imported: the venv's
``pyvenv.cfg`` and ``lib/pythonX.Y/site-packages`` say where things are.
Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

from ansible_collections.dflash.deploy.plugins.module_utils.venv import VenvError

_NORMALIZE = re.compile(r"[-_.]+")


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
    """Header fields of a METADATA/PKG-INFO file: {field: [values]} (the body is ignored)."""
    fields = {}
    last = None
    for line in text.splitlines():
        if not line.strip():
            break
        if line[0] in " \t" and last is not None:
            fields[last][-1] += "\n" + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip()
        fields.setdefault(last, []).append(value.strip())
    return fields


def name_and_version(fields):
    """(Name, Version) from parse_metadata_headers' result; None where missing."""
    return (fields.get("Name") or [None])[0], (fields.get("Version") or [None])[0]


def _read_head(path, limit=65536):
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        return handle.read(limit)


def list_dists(site_packages):
    """Every ``*.dist-info`` directory under site_packages, sorted by dir name."""
    dists = []
    try:
        names = sorted(os.listdir(site_packages))
    except OSError as exc:
        raise VenvError("unreadable", site_packages, "cannot list %s: %s" % (site_packages, exc)) from exc
    for entry in names:
        if not entry.endswith(".dist-info"):
            continue
        full = os.path.join(site_packages, entry)
        if not os.path.isdir(full):
            continue
        name = version = None
        try:
            name, version = name_and_version(parse_metadata_headers(_read_head(os.path.join(full, "METADATA"))))
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
