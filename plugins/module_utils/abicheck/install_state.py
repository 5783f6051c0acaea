# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is the package installed whole, by one distribution?

RECORD lists every file a distribution installed; a library it lists that is gone cannot load.
Two distributions claiming one import name (sgl-kernel beside sglang-kernel) overwrite each
other's files: which one's files are on disk decides what loads.
"""

from __future__ import annotations

import os

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.package_files import is_library_name
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.loadplan import classify
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import check_files


def missing_files_severity(site, pkg, missing, gpu_ccs, features):
    """An error when one of the ``missing`` RECORD paths is a library the GPUs load at import or a configured
    feature needs, else a warning."""
    sev = F.WARNING
    for p in [p for p in missing if is_library_name(p)]:
        rel = os.path.relpath(os.path.join(site, p), os.path.join(site, pkg))
        load, req, _u = classify(pkg, rel, gpu_ccs, features)
        if F.severity_for_load(load, req) == F.ERROR:
            sev = F.ERROR
    return sev


def record_missing_files(site, dist, pkg, gpu_ccs, features):
    """A finding when the distribution's RECORD lists files that are not on disk, else None."""
    state = check_files(site, dist)
    count = state["missing_count"] + state["broken_symlink_count"]
    if not count:
        return None
    sev = missing_files_severity(site, pkg, state["missing_files"], gpu_ccs, features)
    return F.make("record_missing_file", dist["dist_info"],
                  "RECORD of %s %s lists %d missing file%s (e.g. %s)" % (
                      dist["name"], dist["version"], count, "" if count == 1 else "s",
                      (state["missing_files"] + state["broken_symlinks"])[0]),
                  severity=sev, fix="reinstall %s" % dist["name"])


def owner_conflict(pkg, owners_map):
    """A finding when the import name ``pkg`` is claimed by more than one distribution (pydist's import
    owners: who claims it, whose files are on disk), else None."""
    entry = owners_map.get(pkg)
    if not entry:
        return None
    return F.make("owner_conflict", pkg, "%s is claimed by %s; the files on disk match %s" % (
        pkg, " and ".join(entry["distributions"]), " and ".join(entry["on_disk"]) or "neither RECORD"),
        severity=F.WARNING, fix="uninstall the look-alike distribution",
        distributions=entry["distributions"], on_disk=entry["on_disk"])
