# Copyright: (c) 2026, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""layout_changes: what putting the host layout back changed, in an operator's words.

    {{ file_results | dflash.deploy.layout_changes }}  ->  ["host layout: /opt/dflash mode 0777 -> 0755 put back"]
    {{ paths | dflash.deploy.root_dirs('root', '0755') }}  ->  [{"path": p, "group": "root", "mode": "0755"}, ...]

From the registered results of ``ansible.builtin.file`` tasks (their ``diff``): only directories that
existed and were corrected (owner, group or mode); a directory made on a fresh host is not a correction.
"""
from __future__ import annotations

ATTRIBUTES = ("owner", "group", "mode")


def layout_changes(results) -> list:
    out = []
    for result in results or []:
        if not isinstance(result, dict) or not result.get("changed"):
            continue
        diff = result.get("diff") or {}
        if isinstance(diff, list):
            diff = diff[0] if diff else {}
        before, after = diff.get("before") or {}, diff.get("after") or {}
        if before.get("state") == "absent":
            continue
        item = result.get("item")
        path = result.get("path") or after.get("path") or (item.get("path") if isinstance(item, dict) else item)
        parts = [f"{key} {before[key]} -> {after[key]}" for key in ATTRIBUTES
                 if key in before and key in after and before[key] != after[key]]
        out.append(f"host layout: {path} {', '.join(parts) or 'attributes'} put back")
    return out


def root_dirs(paths, group: str, mode: str) -> list:
    """The directories root keeps at one group and mode, as layout.yml's list of them wants them."""
    return [{"path": path, "group": group, "mode": mode} for path in paths or []]


class FilterModule:
    def filters(self):
        return {"layout_changes": layout_changes, "root_dirs": root_dirs}
