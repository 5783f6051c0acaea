# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does a real import agree with the static verdict (``import_test``)?

Each checked package is imported by the venv's interpreter in its own subprocess, with the
service's environment (host/imports.py); a failed import is an error finding, and the verdict is
taken again over all the findings.
"""

from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.verdict import judge
from ansible_collections.dflash.deploy.plugins.module_utils.host.imports import import_many, service_env


def venv_python(venv):
    """The venv's interpreter, as the service runs it."""
    return venv.rstrip("/") + "/bin/python"


def import_names(result, packages):
    """The import names of the entries of ``packages`` the static check found, in the order given."""
    return [result["packages"][n]["import_name"] for n in packages if n in result["packages"]]


def import_failed(name, error, statically_compatible):
    """The finding of a failed import; its fix points at the static findings when they found a cause."""
    return F.make("import_failed", name, "import %s failed: %s" % (name, error),
                  fix="see the static findings for the cause" if not statically_compatible else
                      "the static check found no cause: read the import error")


def with_import_test(result, venv, packages, environment=None, timeout=120):
    """Add the real import of each package to the static ``result`` of abi_check.check (nothing when the venv
    could not be read): ``import_test`` per import name, ``import_failed`` findings, the verdict taken again,
    and the import seconds added to ``elapsed``.  Returns ``result``."""
    if not result.get("site_packages"):
        return result
    tested = import_many(venv_python(venv), import_names(result, packages), timeout=timeout,
                         env=service_env(environment))
    result["import_test"] = tested
    for name, res in tested.items():
        if not res["ok"]:
            result["findings"].append(import_failed(name, res["error"], result["compatible"]))
    judge(result)
    result["elapsed"] = round(result["elapsed"] + sum(r["seconds"] or 0 for r in tested.values()), 3)
    return result
