# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do the Python names a package imports from other distributions exist there (``python_api``)?

Where the walk starts (the modules each process of a package's server imports at start) and what
a missing name means to a person; the walk itself is pyapi/closure.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.closure import missing_names
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.modpath import find_module
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import file_owners

# The modules each process of a package's server imports at start (python_api); a package not named here
# starts from itself.  SGLang's start-up imports much of its code inside functions (launch_server's
# run_server() imports the HTTP server; the scheduler process's TP worker imports the model runner in its
# __init__), so the modules its processes start from are named; the imports that the rest of the code makes
# only inside functions are checked too, as warnings.
ENTRY_MODULES = {"sglang": (
    "sglang.launch_server",                          # python -m sglang.launch_server
    "sglang.srt.entrypoints.http_server",            # its run_server(), the default HTTP mode
    "sglang.srt.managers.scheduler",                 # the scheduler process (run_scheduler_process)
    "sglang.srt.model_executor.model_runner",        # the scheduler's TP worker, when it starts
    "sglang.srt.managers.detokenizer_manager",       # the detokenizer process
)}


@dataclass(frozen=True)
class PythonApi:
    """``findings`` of one import package's walk and its ``summary`` (what ``python_api`` reports)."""

    findings: list
    summary: dict


def _dist_label(dists, keys):
    """'sglang-kernel 0.4.2' (or two joined by 'or') for distribution keys."""
    return " or ".join("%s %s" % (dists[k]["name"], dists[k]["version"]) for k in keys if k in dists) or "?"


def _dist_names(dists, keys):
    return " or ".join(dists[k]["name"] for k in keys if k in dists) or "?"


def entry_modules(site, pkg):
    """The modules the walk starts from: the package's server entry points that exist, else the package."""
    return [e for e in ENTRY_MODULES.get(pkg, ()) if find_module(site, e) is not None] or [pkg]


def missing_name_finding(dists, miss, order=0):
    """The missing_python_name finding of one pyapi MissingName (a warning when the import is protected)."""
    where = "%s:%d" % (miss.importer, miss.line)
    importer = _dist_label(dists, miss.importer_owners)
    exporter = _dist_label(dists, miss.exporter_owners)
    if miss.submodule:
        detail = "%s imports %s.%s (%s), which %s does not have" % (importer, miss.module, miss.name, where, exporter)
    else:
        detail = "%s imports %s from %s (%s), which %s does not define" % (
            importer, miss.name, miss.module, where, exporter)
    if miss.protected:
        detail += " (under try/except ImportError: the server goes on without it)"
    elif miss.fallback:
        detail += " (in an except ImportError handler: it runs only when an import before it fails)"
    elif miss.lazy:
        detail += " (imported only when a function runs, not at server start)"
    fix = "install the %s version %s pins, or %s built for %s" % (
        _dist_names(dists, miss.exporter_owners), _dist_names(dists, miss.importer_owners),
        _dist_names(dists, miss.importer_owners), exporter)
    severity = F.WARNING if miss.protected or miss.fallback or miss.lazy else F.ERROR
    return F.make("missing_python_name", where, detail, severity, fix=fix, module=miss.module, name=miss.name,
                  distributions=list(miss.exporter_owners), load="lazy" if miss.lazy else "import", order=order)


def incomplete_finding(pkg, walked):
    """The info finding when files of the closure did not parse or the walk was cut short, else None."""
    if not (walked.unparsed or walked.truncated):
        return None
    what = []
    if walked.unparsed:
        first = walked.unparsed[0]
        what.append("%d file%s not parsed (e.g. %s: %s)" % (
            len(walked.unparsed), "" if len(walked.unparsed) == 1 else "s", first.rel, first.reason))
    if walked.truncated:
        what.append("the walk stopped at %d modules" % walked.modules)
    return F.make("python_api_incomplete", pkg, "python_api: the imports of %s were not all checked: %s"
                  % (pkg, "; ".join(what)), severity=F.INFO,
                  fix="run the module with a Python that parses the package's sources")


def check_python_api(site, dists, pkg, owners):
    """python_api's findings and summary for the import package ``pkg`` (its claimants ``owners``)."""
    by_path, by_top = file_owners(dists)

    def owners_of(rel, top):
        return by_path.get(rel) or by_top.get(top) or ()

    entries = entry_modules(site, pkg)
    walked = missing_names(site, entries, owners, owners_of)
    found = [missing_name_finding(dists, m, i) for i, m in enumerate(walked.missing)]
    found.extend(f for f in [incomplete_finding(pkg, walked)] if f)
    summary = {"entries": entries, "modules": walked.modules, "start_modules": walked.start,
               "missing": len(walked.missing),
               "unparsed": [u.rel for u in walked.unparsed[:5]], "truncated": walked.truncated}
    return PythonApi(found, summary)
