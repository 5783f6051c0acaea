# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""abi_check's logic: will the compiled extensions of a package load and run
in this venv, on these GPUs, decided statically from their ELF files.

The composition: the venv read, ``import torch`` simulated in a resolver,
then per name in ``packages`` its files (abicheck/package_files.py), its
distributions' state (abicheck/install_state.py), every ELF file checked in
the order the loader meets the problems (abicheck/file_check.py: openable,
dependencies, CUDA major, symbols, symbol versions, GPU code) and, with
``python_api``, the Python names it imports (abicheck/python_api.py).
The import test (abicheck/import_test.py) goes on top of this result.
"""

from __future__ import annotations

import os
import time

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.file_check import analyze_file
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.install_state import (
    owner_conflict,
    record_missing_files,
)
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.package_files import (
    find_package_files,
    is_package_name,
)
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import short_path
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.process import Process
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.python_api import check_python_api
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.verdict import judge
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldresolve import (
    Resolver,
    simulate_torch_import,
    split_path_list,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import import_owners, scan
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.torch_facts import torch_facts
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError, locate


class _Package:
    """One entry of ``packages``: its files found, its distributions' state, then every file analysed."""

    def __init__(self, process, dists, venv, result, max_files, python_api=False):
        self.process = process
        self.dists = dists
        self.venv = venv
        self.result = result
        self.max_files = max_files
        self.python_api = python_api
        self._owners_map = None

    def owners_map(self):
        if self._owners_map is None:
            self._owners_map = import_owners(self.process.site, self.dists)
        return self._owners_map

    def check(self, name):
        findings, site, process = self.result["findings"], self.process.site, self.process
        if not is_package_name(name):
            findings.append(F.make("package_not_found", name, "%r is not an import or distribution name (packages "
                                   "are names inside the venv, not paths)" % name,
                                   fix="name the package, e.g. sgl_kernel"))
            return
        found = find_package_files(site, self.dists, name)
        if found is None:
            findings.append(F.make("package_not_found", name, "%s is not installed in %s" % (name, self.venv),
                                   fix="install the distribution that provides %s" % name))
            return
        pkg, files, owners = found.import_name, found.files, found.owners
        self.result["packages"][name] = {"import_name": pkg, "distributions": owners, "files": len(files)}
        if len(owners) > 1:
            findings.extend(f for f in [owner_conflict(pkg, self.owners_map())] if f)
        for key in owners:
            findings.extend(f for f in [record_missing_files(site, self.dists[key], pkg, process.gpu_ccs,
                                                             process.features)] if f)
        if not files:
            findings.append(F.make("package_not_found", name, "%s has no compiled extension files" % name,
                                   severity=F.INFO))
        for path in files[:self.max_files] if self.max_files else files:
            if not os.path.lexists(path):
                continue
            info = analyze_file(process, path, pkg, findings)
            info["package"] = name
            self.result["files"].append(info)
        if self.python_api:
            api = check_python_api(site, self.dists, pkg, owners)
            findings.extend(api.findings)
            self.result.setdefault("python_api", {})[name] = api.summary


def _torch_import(resolver, torch, site):
    """Load torch's libraries into the resolver as ``import torch`` does; what it loaded and missed."""
    report = simulate_torch_import(resolver, torch["path"], site, torch.get("cuda_major"))
    return {
        "loaded": len(resolver.loaded_paths),
        "preloaded": [short_path(p, site) for p in report["preloaded"]],
        "missing": ["%s needs %s" % (short_path(m["requester"], site), m["name"]) for m in report["missing"]],
    }


def check(venv, packages=("sgl_kernel",), gpu_ccs=None, environment=None, system_root="/",
          system_library_dirs=None, features=(), max_files=None, python_api=False):
    """The static verdict. Returns dict: compatible, msg, torch, files, findings, elapsed, ..."""
    t0 = time.monotonic()
    findings = []
    result = {"compatible": False, "torch": None, "files": [], "findings": findings, "packages": {}}
    try:
        v = locate(venv)
    except VenvError as exc:
        findings.append(F.make("venv_invalid", venv, exc.detail, fix="create the venv first or fix the path"))
        result["msg"] = F.message(findings)
        result["elapsed"] = round(time.monotonic() - t0, 3)
        return result
    site = v["site_packages"]
    result["site_packages"] = site
    dists = scan(site)
    torch = torch_facts(site, dists)
    result["torch"] = torch
    system = SystemLibraries(system_root or "/", system_library_dirs)
    resolver = Resolver(system, split_path_list((environment or {}).get("LD_LIBRARY_PATH")))
    result["system"] = {"source": system.source, "library_dirs": system.dirs if system.explicit else None,
                        "cache_error": system.cache_error}
    if torch:
        result["torch_import"] = _torch_import(resolver, torch, site)
    if gpu_ccs is None:
        findings.append(F.make("arch_check_skipped", None,
                               "no GPU compute capability known: the SM architecture check was skipped",
                               severity=F.INFO))
    process = Process(site, resolver, torch, gpu_ccs, features, v["python"])
    try:
        package = _Package(process, dists, venv, result, max_files, python_api)
        for name in packages:
            package.check(name)
    finally:
        process.close()
    judge(result)
    result["elapsed"] = round(time.monotonic() - t0, 3)
    return result
