# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""release_trust_errors: may an instance link (current, previous) be used as a release?

    {{ link_stat | dflash.deploy.release_trust_errors(target_stat, marker_b64, base_dir, 'previous') }}
      ->  []  when it may, else one line per reason, naming the path

A link and the marker inside the release it names earn no trust by existing: the host may
hold what a careless operator or a compromised service user left (a world-writable layout,
a copied release, a link to a directory elsewhere). A release is used (kept as previous,
rolled back to, restarted) only when:

- the link is a symbolic link whose resolved target (Ansible's stat `lnk_source`, the
  realpath) is a direct child of <base_dir>/releases;
- that target is a real directory (not a link), owned by root, not writable by group or
  others (nobody but root could have changed what it holds);
- its .dflash-release/verified.json is a JSON object whose release_id names that same
  directory (a marker copied from another release names the other one).

Inputs are Ansible's own results: `stat` (follow: false) of the link and of its target, and
the `content` of `slurp` of the marker (base64; '' when it could not be read).
"""
from __future__ import annotations

import base64
import binascii
import json
import posixpath


def _target_errors(where: str, target: str, target_stat: dict) -> list:
    if not target_stat.get("exists"):
        return [f"{where} names {target}, which does not exist"]
    if target_stat.get("islnk"):
        return [f"{where} names {target}, which is a symbolic link, not a release directory"]
    if not target_stat.get("isdir"):
        return [f"{where} names {target}, which is not a directory"]
    errors = []
    if target_stat.get("uid") != 0:
        errors.append(f"{where} names {target}, owned by {target_stat.get('pw_name') or target_stat.get('uid')}, "
                      "not root")
    mode = target_stat.get("mode") or "0"
    if int(str(mode), 8) & 0o022:
        errors.append(f"{where} names {target}, which is writable by group or others (mode {mode})")
    return errors


def _marker_errors(where: str, target: str, marker_b64: str) -> list:
    try:
        marker = json.loads(base64.b64decode(marker_b64 or "", validate=True).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        marker = None
    if not isinstance(marker, dict):
        return [f"{where} names {target}, which has no readable verified.json: it was never verified"]
    named = marker.get("release_id")
    if named != posixpath.basename(target):
        return [f"{where} names {target}, whose verified.json names release {named}: "
                "a marker copied from another release verifies nothing"]
    return []


def release_trust_errors(link_stat: dict, target_stat: dict, marker_b64: str, base_dir: str,
                         what: str = "the link") -> list:
    """[] when the link may be used as a release, else why not (one line each)."""
    link_stat = link_stat or {}
    path = link_stat.get("path") or what
    where = f"{what} ({path})"
    if not link_stat.get("exists"):
        return [f"{where} does not exist"]
    if not link_stat.get("islnk"):
        return [f"{where} is not a symbolic link"]
    target = link_stat.get("lnk_source") or ""
    releases = posixpath.normpath(posixpath.join(base_dir, "releases"))
    if posixpath.dirname(posixpath.normpath(target)) != releases:
        return [f"{where} resolves to {target or '?'}, outside {releases}/"]
    return _target_errors(where, target, target_stat or {}) or _marker_errors(where, target, marker_b64)


class FilterModule:
    def filters(self):
        return {"release_trust_errors": release_trust_errors}
