# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's controller-side plugins imported once, in the controller's own process.

Ansible runs every task in a worker forked from the controller process. Ansible's collection loader
compiles a collection's Python files from their source on every import (it keeps no bytecode), and
resolving one of the collection's filters imports every filter file of the collection, so each worker
that renders one compiled all of them, with the module_utils they import, again: about 70 ms a worker,
a few seconds of controller CPU a deploy. Imported before the first task, they are in the worker's
``sys.modules`` from the fork on, which is where Ansible's plugin loader looks first.
"""
from __future__ import annotations

import importlib
import os

# The plugin types Ansible loads in the worker by their module's name (filters; the action plugin).
PLUGIN_TYPES = ("filter", "action")


def plugin_modules(plugins_dir, types=PLUGIN_TYPES) -> list:
    """The module names (``filter.changes``) of the Python files of each plugin type under ``plugins_dir``,
    sorted; a type without a directory has none."""
    names = []
    for kind in types:
        try:
            files = os.listdir(os.path.join(plugins_dir, kind))
        except OSError:
            continue
        names += [f"{kind}.{f[:-3]}" for f in sorted(files) if f.endswith(".py") and not f.startswith("_")]
    return names


def preload(package="ansible_collections.dflash.deploy.plugins", types=PLUGIN_TYPES, importer=None) -> dict:
    """Import each plugin module of ``package``; returns {"loaded": [names], "failed": {name: error}}. A file
    that fails to import is left for its task to report in its own words, not raised here."""
    importer = importer or importlib.import_module
    root = importer(package)
    loaded, failed = [], {}
    for name in plugin_modules(list(root.__path__)[0], types):
        try:
            importer(f"{package}.{name}")
            loaded.append(name)
        except Exception as exc:  # noqa: BLE001  # the task that uses it reports it
            failed[name] = f"{type(exc).__name__}: {exc}"
    return {"loaded": loaded, "failed": failed}
