# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which configuration files a run has to write: the rest are already what it would write.

    {{ wanted | dflash.deploy.stale_files(found.files) }}   the paths to write

``wanted``: one entry per file the role manages, rendered on the controller:
``{"path", "sha1", "owner", "group", "mode"}`` (sha1 of the exact bytes, mode as "0644").
``found``: the ``files`` of one ``ansible.builtin.find`` over their directories with
``get_checksum: true`` (its default ``file_type: file`` lists no symlink, so a link where a file
belongs counts as missing). A file is stale when it is missing, or its content, owner, group or mode
differs: exactly what the template and copy modules would change. A stale file is written by its
own task, which still compares and reports by itself, so a wrong answer here can cost a write, never
skip one that differs: the skip needs the same sha1 as the file on the host.
"""
from __future__ import annotations

KEYS = (("sha1", "checksum"), ("owner", "pw_name"), ("group", "gr_name"), ("mode", "mode"))


def stale_files(wanted, found) -> list:
    """The paths of ``wanted`` whose file on the host differs from it (see the module docstring)."""
    on_host = {}
    for entry in found or []:
        if isinstance(entry, dict) and entry.get("path"):
            on_host[entry["path"]] = entry
    out = []
    for want in wanted or []:
        have = on_host.get(want["path"])
        if have is None or any(have.get(theirs) != want.get(ours) for ours, theirs in KEYS):
            out.append(want["path"])
    return out


class FilterModule:
    def filters(self):
        return {"stale_files": stale_files}
