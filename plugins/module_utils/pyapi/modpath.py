# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a module of a site-packages lives, found from the files as the
import system's path finder would (``importlib.machinery.FileFinder``):

for the last part of ``a.b.c`` in the directory of ``a.b``, a package
directory with ``__init__.py`` first, then an extension module
(``c.<tag>.so``, ``c.abi3.so``, ``c.so``), then ``c.py``, and last a directory
without ``__init__.py`` (a namespace package, PEP 420).  Nothing is imported.

Standard library only; Python 3.8 syntax.
"""

import os
import re
from dataclasses import dataclass

SOURCE = "source"        # a .py file (a package's __init__.py included)
EXTENSION = "extension"  # compiled: its names are not readable from text
NAMESPACE = "namespace"  # a directory without __init__.py

_EXTENSION = re.compile(r"^[^.]+(\.[A-Za-z0-9_-]+)?\.(so|pyd)$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModuleFile:
    """A found module: its dotted ``name``, ``kind``, ``path`` (the file, or the directory of a namespace
    package), ``rel`` (path relative to site-packages, '/'-separated) and whether it is a package."""

    name: str
    kind: str
    path: str
    rel: str
    is_package: bool


def _extension_in(directory, last):
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return None
    for entry in entries:
        if entry.startswith(last + ".") and _EXTENSION.match(entry) and entry.split(".", 1)[0] == last:
            return entry
    return None


def find_module(site, name):
    """The ModuleFile of the dotted module ``name`` under ``site``, or None when there is none."""
    parts = name.split(".")
    if not all(_IDENTIFIER.match(p) for p in parts):
        return None
    directory = os.path.join(site, *parts[:-1])
    last = parts[-1]
    rel_dir = "/".join(parts[:-1])

    def rel(entry):
        return rel_dir + "/" + entry if rel_dir else entry

    package = os.path.join(directory, last)
    init = os.path.join(package, "__init__.py")
    if os.path.isfile(init):
        return ModuleFile(name, SOURCE, init, rel(last + "/__init__.py"), True)
    ext = _extension_in(directory, last)
    if ext:
        return ModuleFile(name, EXTENSION, os.path.join(directory, ext), rel(ext), False)
    source = os.path.join(directory, last + ".py")
    if os.path.isfile(source):
        return ModuleFile(name, SOURCE, source, rel(last + ".py"), False)
    if os.path.isdir(package):
        return ModuleFile(name, NAMESPACE, package, rel(last), True)
    return None
