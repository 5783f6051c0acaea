# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Installed distributions (``*.dist-info``) of a site-packages, read from files.

The one scanner of a site-packages: ``list_dists`` finds every
``*.dist-info`` directory and reads its METADATA once (name, version, the
headers); distributions.py builds pkg_probe's and abi_check's facts on it,
transplant/ its selection.  No interpreter is started and nothing is
imported (pydist/venv.py says where site-packages is).
METADATA and WHEEL are RFC 822 headers, read with the standard library's
``email.parser.HeaderParser`` (compat32 policy), as ``importlib.metadata``
reads them.  Standard library only.
"""


import fnmatch
import os
import re
from email.parser import HeaderParser
from email.policy import compat32

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_text
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError

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

    def __init__(self, site_packages, dist_info, name, version, fields=None, metadata_error=None):
        self.site_packages = site_packages
        self.dist_info = dist_info  # directory name, e.g. torch-2.11.0+cu130.dist-info
        self.name = name
        self.version = version  # "" when neither METADATA nor the directory name has one
        self.fields = fields or {}  # METADATA headers, as parse_metadata_headers returns them
        self.metadata_error = metadata_error  # the OSError that kept METADATA from being read, or None

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


# Largest METADATA/PKG-INFO read (the long description is part of the file);
# real ones are a few hundred KiB at most.  A larger file is refused by name,
# never read in part.
MAX_METADATA_BYTES = 32 << 20
# WHEEL, INSTALLER, top_level.txt: a few lines each.
MAX_SMALL_FILE_BYTES = 1 << 20
# Requires-Dist lines evaluated per distribution (real sglang 0.5.9 has 97).
MAX_REQUIREMENTS = 10000


def parse_metadata(text):
    """A METADATA/PKG-INFO/WHEEL text as an ``email.message.Message`` (headers only).

    The RFC 822 reading of the standard library, with the compat32 policy
    that ``importlib.metadata`` uses: continuation lines (also lines holding
    only spaces) belong to their field; the first empty line ends the headers.
    """
    return HeaderParser(policy=compat32).parsestr(text)


def parse_metadata_headers(text):
    """Header fields of a METADATA/PKG-INFO file: {field: [values]}, values as importlib.metadata returns them."""
    fields = {}
    for key, value in parse_metadata(text).items():
        fields.setdefault(key, []).append(value)
    return fields


def field(fields, name):
    """First value of header ``name`` (case-insensitive), or None."""
    lowered = name.lower()
    for key, values in fields.items():
        if key.lower() == lowered and values:
            return values[0]
    return None


def field_all(fields, name):
    """Every value of header ``name`` (case-insensitive), in file order."""
    lowered = name.lower()
    out = []
    for key, values in fields.items():
        if key.lower() == lowered:
            out.extend(values)
    return out


def name_and_version(fields):
    """(Name, Version) from parse_metadata_headers' result; None where missing."""
    return field(fields, "Name"), field(fields, "Version")


def read_metadata(path):
    """parse_metadata_headers of the METADATA file ``path`` (OSError when unreadable, not regular or too large)."""
    return parse_metadata_headers(read_text(path, MAX_METADATA_BYTES))


def read_dist(site_packages, dist_info):
    """The InstalledDist of the directory ``dist_info`` in site_packages; never raises.

    Name and Version come from METADATA; where it has none (or cannot be
    read), from the directory name (``name-version.dist-info``).
    """
    fields = {}
    error = None
    try:
        fields = read_metadata(os.path.join(site_packages, dist_info, "METADATA"))
    except OSError as exc:
        error = exc
    name, version = name_and_version(fields)
    if not name or not version:
        fallback_name, _unused, fallback_version = dist_info[: -len(".dist-info")].partition("-")
        name = name or fallback_name
        version = version or fallback_version
    return InstalledDist(site_packages, dist_info, name, version, fields, error)


def list_dists(site_packages):
    """Every ``*.dist-info`` directory under site_packages, sorted by dir name (InstalledDist each).

    Raises VenvError (kind unreadable) when site_packages cannot be listed.
    """
    try:
        names = sorted(os.listdir(site_packages))
    except OSError as exc:
        raise VenvError("unreadable", site_packages,
                        "cannot list %s: %s" % (site_packages, exc.strerror or exc)) from exc
    return [read_dist(site_packages, entry) for entry in names
            if entry.endswith(".dist-info") and os.path.isdir(os.path.join(site_packages, entry))]


def parse_wheel_tags(text):
    """``Tag:`` values of a WHEEL file (RFC 822 headers, read like METADATA)."""
    return [value.strip() for value in parse_metadata(text).get_all("Tag", [])]


def read_wheel_tags(path):
    """parse_wheel_tags of the WHEEL file ``path`` (OSError when unreadable, not regular or too large)."""
    return parse_wheel_tags(read_text(path, MAX_SMALL_FILE_BYTES))
