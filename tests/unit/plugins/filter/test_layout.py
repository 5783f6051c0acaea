"""layout_changes: a directory of the host layout put back is named with what was wrong."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "dflash_layout_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "layout.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)


def test_corrections_are_named_and_new_or_unchanged_directories_are_not():
    results = [
        {"changed": True, "path": "/opt/dflash", "item": {"path": "/opt/dflash"},
         "diff": {"before": {"path": "/opt/dflash", "mode": "0777"}, "after": {"path": "/opt/dflash", "mode": "0755"}}},
        {"changed": True, "item": "/opt/dflash/cache",
         "diff": {"before": {"owner": 999, "mode": "0777"}, "after": {"owner": 0, "mode": "0755"}}},
        {"changed": True, "path": "/var/lib/dflash",
         "diff": {"before": {"path": "/var/lib/dflash", "state": "absent"}, "after": {"state": "directory"}}},
        {"changed": False, "path": "/etc/dflash", "diff": {"before": {}, "after": {}}},
        {"skipped": True},
    ]
    assert mod.layout_changes(results) == ["host layout: /opt/dflash mode 0777 -> 0755 put back",
                                           "host layout: /opt/dflash/cache owner 999 -> 0, mode 0777 -> 0755 put back"]
    assert mod.layout_changes(None) == []


def test_root_dirs_gives_each_path_the_group_and_mode():
    assert mod.root_dirs(["/opt/dflash/instances/a", "/opt/dflash/instances/b"], "root", "0755") == [
        {"path": "/opt/dflash/instances/a", "group": "root", "mode": "0755"},
        {"path": "/opt/dflash/instances/b", "group": "root", "mode": "0755"}]
    assert mod.root_dirs([], "root", "0755") == [] and mod.root_dirs(None, "root", "0755") == []
