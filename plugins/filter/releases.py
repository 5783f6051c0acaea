# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which releases may be used, and which may go.

    {{ link_stat | dflash.deploy.release_trust_errors(target_stat, fingerprint, base_dir, 'previous') }}
      ->  []  when it may, else one line per reason, naming the path
    {{ found.files | dflash.deploy.releases_to_prune(in_use, keep, building) }}
      ->  the release directories to remove, oldest last
    {{ release_dir | dflash.deploy.release_file('verified') }}
      ->  <release_dir>/.dflash-release/verified.json   (the release contract: module_utils/release/contract.py)
    {{ release_dir | dflash.deploy.release_file('perf', instance_name) }}
      ->  <release_dir>/.dflash-release/perf-<instance>.json   (a file kept per instance)

A link and the marker inside the release it names earn no trust by existing: the host may
hold what a careless operator or a compromised service user left (a world-writable layout,
a copied release, a link to a directory elsewhere). A release is used (kept as previous,
rolled back to, restarted) only when:

- the link is a symbolic link whose resolved target (Ansible's stat `lnk_source`, the
  realpath) is a direct child of <base_dir>/releases;
- that target is a real directory (not a link), owned by root, not writable by group or
  others (nobody but root could have changed what it holds);
- its .dflash-release/verified.json vouches for it as it is now (release_fingerprint): it
  names that same directory (a marker copied from another release names the other one) and
  records the fingerprint its files still have (anything written since was never verified).

Inputs are `stat` (follow: false) of the link and of its target, and the result of
`dflash.deploy.release_fingerprint` on the target (skipped, or {}, when it was not read).
"""
from __future__ import annotations

import posixpath

from ansible.errors import AnsibleFilterError
from ansible_collections.dflash.deploy.plugins.module_utils.release import contract


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


def _marker_errors(where: str, target: str, fingerprint: dict) -> list:
    errors = (fingerprint or {}).get("marker_errors")
    if fingerprint is None or (fingerprint or {}).get("skipped") or not isinstance(errors, list):
        return [f"{where} names {target}, whose verified.json was not read: it was never verified"]
    return [f"{where} names {target}: {e}" for e in errors]


def release_trust_errors(link_stat: dict, target_stat: dict, fingerprint: dict, base_dir: str,
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
    return _target_errors(where, target, target_stat or {}) or _marker_errors(where, target, fingerprint)


def releases_to_prune(found: list, in_use: list, keep, building: str = "") -> list:
    """The releases beyond the newest ``keep`` (by mtime) that nothing uses.

    ``found`` is Ansible's find result (dicts with path and mtime); ``in_use`` the resolved targets
    of every instance's current and previous (``readlink -f``: a relative link protects the release it
    names as surely as an absolute one); ``building`` the release this run made or switched to.
    ``keep`` may come as a string (``-e sglang_venv_keep_releases=1``); 0 keeps only what is in use.
    """
    keep = max(int(keep), 0)
    protected = {posixpath.normpath(p) for p in [*(in_use or []), building] if p}
    newest_first = sorted(found or [], key=lambda f: f.get("mtime") or 0, reverse=True)
    return [f["path"] for f in newest_first[keep:] if posixpath.normpath(f["path"]) not in protected]


def release_file(release_dir: str, name: str = "", instance: str = "") -> str:
    """A release's recorded file by its contract name (lock, built, overlay_manifest, verified; perf and
    perf_candidate with the instance they are kept for), or with no name the ``.dflash-release``
    directory itself."""
    if not name:
        return contract.meta_dir(release_dir)
    try:
        return contract.release_file(release_dir, name, instance)
    except ValueError as exc:
        raise AnsibleFilterError(f"release_file: {exc}") from None


class FilterModule:
    def filters(self):
        return {"release_trust_errors": release_trust_errors, "releases_to_prune": releases_to_prune,
                "release_file": release_file}
