# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Will one ELF file load and run: the steps in the order the loader meets the problems.

0. openable.py: a readable ELF object of the interpreter's class, byte order and machine;
1. dependencies.py: DT_NEEDED resolved as ld.so does after ``import torch``;
2. cuda_major.py: the CUDA major it was built for versus torch's;
3. dependencies.py: the libraries the loader cannot find (those the CUDA major explains aside);
4. symbols.py: undefined symbols the load scope does not export (RTLD_NOW);
5. symbol_versions.py: GLIBC_/GLIBCXX_ versions versus the libraries that provide them;
6. gpu_code.py: the SM code in ``.nv_fatbin`` versus the GPUs that load the file.

When the file loads (elfload/loadplan.py) gives every problem its severity: an error for a library
loaded at import or needed by a configured feature, a warning for one loaded lazily, info for one
these GPUs never load.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.cuda_major import cuda_major
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.dependencies import (
    missing_libraries,
    resolve_dependencies,
)
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.gpu_code import gpu_code
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.openable import dynamic_facts, open_elf
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import short_path
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.symbol_versions import symbol_versions
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.symbols import undefined_symbols
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.loadplan import classify


@dataclass(frozen=True)
class Placement:
    """Where a file is and when it loads: ``short`` (its name in findings), ``load`` (import, lazy, unused),
    ``required`` (a configured feature needs it), ``users`` (the GPUs that load it; None: unknown) and the
    ``severity`` of its problems."""

    short: str
    load: str
    required: bool
    users: Any
    severity: str

    @property
    def optional(self):
        """Loaded lazily for a feature the server is not configured to use."""
        return self.load == "lazy" and not self.required


def place(process, path, package):
    """The Placement of ``path`` inside the import package ``package`` (a single-file module: '')."""
    site = process.site
    rel_pkg = os.path.relpath(path, os.path.join(site, package)) if package else os.path.basename(path)
    load, required, users = classify(package, rel_pkg, process.gpu_ccs, process.features)
    return Placement(short_path(path, site), load, required, users, F.severity_for_load(load, required))


def analyze_file(process, path, package, findings):
    """Per-file details (what a playbook registers under ``files``); appends the file's findings."""
    where = place(process, path, package)
    info = {"path": path, "load": where.load, "required": where.required}

    def report(problems):
        findings.extend(p.finding(where.short, where.severity, where.load) for p in problems)

    opened = open_elf(process, path, where.short)
    report(opened.problems)
    if opened.summary is not None:
        info.update(dynamic_facts(opened.summary))
    if not opened.loadable:
        return info
    deps = resolve_dependencies(process.resolver, path)
    info["needed"] = deps.report()
    resolved = deps.resolved()
    cuda = cuda_major(opened.summary["needed"], resolved, process.torch, package, where.short)
    info["cuda_major"] = cuda.built_for
    report(cuda.problems)
    report(missing_libraries(deps, path, where.short, process.site, process.torch, cuda.explained))
    symbols = undefined_symbols(process, opened.elf, path, where.short, deps, package)
    info.update(symbols.report())
    report(symbols.problems)
    versions = symbol_versions(process, opened.elf, where.short, resolved)
    info["version_needs"] = versions.newest_needed
    report(versions.problems)
    code = gpu_code(opened.elf, where.short, where.users if where.users is not None else process.gpu_ccs,
                    where.optional)
    if code.archs is not None:
        info["archs"] = code.archs
    report(code.problems)
    return info
