# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the file needs (DT_NEEDED) and how each name resolves the way ld.so would once torch is
imported; the libraries it would not find.

The search itself is elfload/ldresolve.py (ld.so(8)'s order: objects already loaded, DT_RPATH,
LD_LIBRARY_PATH, DT_RUNPATH, the ld.so cache and default directories).  Here: the closure of one
file in the process ``import torch`` left behind, and what its missing names mean to a person.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import Problem, short_path

TORCH_LIB = re.compile(r"^lib(torch|c10|shm|caffe2)")
DRIVER = "libcuda.so.1"


@dataclass(frozen=True)
class Needed:
    """One DT_NEEDED entry of the file: its ``name``, the ``path`` it resolves to (None: not found) and
    ``via`` (loaded, loaded by torch, rpath, LD_LIBRARY_PATH, runpath, system, path)."""

    name: str
    path: str | None
    via: str | None


@dataclass(frozen=True)
class Dependencies:
    """The file's load closure (Resolver.closure: objects in load order, missing names, unreadable
    dependencies) and its own DT_NEEDED entries as they resolved."""

    closure: dict
    direct: tuple[Needed, ...]

    @property
    def objects(self):
        return self.closure["objects"]

    @property
    def missing(self):
        return self.closure["missing"]

    @property
    def errors(self):
        return self.closure["errors"]

    @property
    def incomplete(self):
        """A dependency is missing or unreadable somewhere in the closure (the loader stops there)."""
        return bool(self.missing) or bool(self.errors)

    def resolved(self):
        """{DT_NEEDED name: path} of the file's own entries that were found."""
        return dict((d.name, d.path) for d in self.direct if d.path)

    def report(self):
        """The ``needed`` list a playbook registers."""
        return [{"name": d.name, "path": d.path, "via": d.via} for d in self.direct]


def resolve_dependencies(resolver, path):
    """Load ``path`` and its dependencies breadth first, as ld.so does, in the resolver's process
    (after ``import torch``); nothing is committed to the process."""
    closure = resolver.closure(path)
    direct = tuple(Needed(d["name"], d["path"], d["via"]) for d in closure["needed"].get(path, []))
    return Dependencies(closure, direct)


def missing_library(miss, path, short, site, torch):
    """The problem of one name the loader cannot find (``cannot open shared object file``): the driver's
    libcuda.so.1, torch's libraries without torch, or any other; ``needed by`` names a requester further
    down the closure."""
    name = miss["name"]
    via = "" if miss["requester"] == path else " (needed by %s)" % short_path(miss["requester"], site)
    if name == DRIVER:
        return Problem("driver_missing", "%s needs libcuda.so.1, the NVIDIA driver's library, which is not found%s"
                       % (short, via), fix="install the NVIDIA driver (in a container: expose the driver "
                                           "libraries), or set system_library_dirs/system_root to the target "
                                           "host's libraries")
    if TORCH_LIB.match(name) and not torch:
        return Problem("torch_missing", "%s needs %s but torch is not installed in the venv" % (short, name),
                       fix="install torch (the version the kernel was built for)")
    return Problem("library_not_found", "%s needs %s, which the loader cannot find%s" % (short, name, via),
                   fix="install the distribution that provides %s or add its directory to LD_LIBRARY_PATH "
                       "in environment" % name, extra=(("searched", miss["searched"][:12]),))


def unreadable_dependency(err, short, site):
    """A dependency found but not readable as ELF: the loader fails on it too."""
    return Problem("dependency_unreadable", "%s: dependency %s: %s" % (short, short_path(err.path, site), err.detail),
                   fix="reinstall the distribution that owns it")


def missing_libraries(deps, path, short, site, torch, explained=frozenset()):
    """Libraries the loader cannot find, direct and transitive, then dependencies it cannot read.
    ``explained``: the file's own DT_NEEDED names another problem already accounts for (the CUDA major)."""
    problems = []
    for miss in deps.missing:
        if miss["name"] in explained and miss["requester"] == path:
            continue
        problems.append(missing_library(miss, path, short, site, torch))
    for err in deps.errors:
        if err.path != path:
            problems.append(unreadable_dependency(err, short, site))
    return tuple(problems)
