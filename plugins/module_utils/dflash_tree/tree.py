# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the three DFlash-tree modules share: the package, its files and the version it declares.

A DFlash-capable sglang is a whole ``sglang/`` tree. Its files are the regular files (and
links) under it, without ``__pycache__`` directories and ``.pyc`` files. Its version is a
top-level literal in ``sglang/_version.py`` (what a built sglang writes, 0.5.11 on: its
``version.py`` imports ``_version.py`` and only holds an indented fallback, ``0.0.0.dev0``),
else in ``sglang/version.py``. Standard library only.
"""

from __future__ import annotations

import os
import re

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_text
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import field_all

PKG = "sglang"
# version.py and _version.py are a few lines; a larger file is not read at all.
MAX_VERSION_FILE_BYTES = 1 << 20
VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)


def tree_version(pkg_dir):
    """The tree's version: a top-level literal in _version.py, else in version.py; None when neither has one."""
    for name in ("_version.py", "version.py"):
        try:
            text = read_text(os.path.join(pkg_dir, name), MAX_VERSION_FILE_BYTES)
        except OSError:
            continue
        match = VERSION_RE.search(text)
        if match:
            return match.group(1)
    return None


def skipped(rel):
    """True for bytecode: a ``.pyc`` file, or anything in a ``__pycache__`` directory."""
    return rel.endswith(".pyc") or "__pycache__" in rel.split("/")[:-1]


def tree_files(root, sub=PKG):
    """Regular files and links under root/sub, relative to root ('/'-separated, sorted), without bytecode."""
    out = []
    for dirpath, dirs, names in os.walk(os.path.join(root, sub)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".pyc"):
                continue
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) or os.path.islink(path):
                out.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return sorted(out)


def requires_dist(fields):
    """Requires-Dist of METADATA headers (pydist.dist_info.parse_metadata_headers), each stripped."""
    return [str(value).strip() for value in field_all(fields, "Requires-Dist")]
