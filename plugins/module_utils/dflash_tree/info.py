# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a DFlash-capable sglang tree declares, read from the tree itself (on the controller).

The version is the tree's own (tree.tree_version: ``sglang/_version.py``, else
``sglang/version.py``), else the declared one. The requirements come from the tree's own
declaration beside the package (the package directory's parent): ``pyproject.toml``'s
``[project]`` dependencies (a checkout, or what dflash_tree_capture writes), else a
``METADATA`` file's Requires-Dist. A tree that declares nothing is refused: no list is kept
by hand. Standard library only (``tomllib``: Python 3.11 or newer, as the controller's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree.tree import requires_dist, tree_version
from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import field, read_metadata

# A pyproject.toml is a few KiB; a larger one is refused by name, never read in part.
MAX_PYPROJECT_BYTES = 16 << 20


class TreeInfoError(Exception):
    """The tree cannot say what it is; the message is the one line to show."""


@dataclass(frozen=True)
class TreeInfo:
    version: str | None  # the tree's own version, else the declared one
    declared_version: str | None  # what the declaration says
    requires: tuple
    declared_in: str  # the file the requirements were read from


def from_pyproject(path):
    """(version, dependencies) of a pyproject.toml's [project] table."""
    try:
        import tomllib  # Python 3.11+, as ansible-core 2.19's controller
    except ImportError:
        raise TreeInfoError("reading %s needs Python 3.11 or newer (tomllib): run this on the controller's Python"
                            % path) from None
    try:
        project = tomllib.loads(read_regular(path, MAX_PYPROJECT_BYTES).decode("utf-8")).get("project", {})
    except OSError as exc:
        raise TreeInfoError("cannot read %s: %s" % (path, exc.strerror or exc)) from exc
    except ValueError as exc:  # tomllib.TOMLDecodeError, UnicodeDecodeError
        raise TreeInfoError("%s is not TOML: %s" % (path, exc)) from None
    dependencies = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise TreeInfoError("%s: [project] dependencies is not a list of strings" % path)
    return project.get("version"), list(dependencies)


def from_metadata(path):
    """(Version, Requires-Dist) of a METADATA file, read as the email headers it is (core metadata spec):
    a field may continue over indented lines, some whitespace only (real sglang 0.5.11's License); only a
    truly empty line ends the headers."""
    try:
        fields = read_metadata(path)
    except OSError as exc:
        raise TreeInfoError("cannot read %s: %s" % (path, exc.strerror or exc)) from exc
    return field(fields, "Version"), requires_dist(fields)


def tree_info(source, subdir):
    """The TreeInfo of the package tree at source/subdir; TreeInfoError when it declares nothing."""
    pkg_dir = os.path.join(source, subdir)
    base = os.path.dirname(pkg_dir.rstrip("/"))
    for name, reader in (("pyproject.toml", from_pyproject), ("METADATA", from_metadata)):
        path = os.path.join(base, name)
        if os.path.isfile(path):
            declared, requires = reader(path)
            return TreeInfo(tree_version(pkg_dir) or declared, declared, tuple(requires), path)
    raise TreeInfoError("the DFlash tree %s declares no requirements (%s/pyproject.toml or %s/METADATA): capture "
                        "it with playbooks/stage_artifacts.yml, or use a checkout" % (pkg_dir, base, base))
