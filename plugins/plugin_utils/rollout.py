# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's decisions, one pure function each, on the controller (issue 43: the rollout's decisions in one
Python home, behind thin filters in plugins/filter/rollout.py). They read the results the role's tasks
registered, as Ansible hands them over, and decide; they run nothing and change nothing.

- ``restart_set``: which instances restart in this run, in the order the instance list names them.
"""

from __future__ import annotations


def _names(results, keep):
    """The ``item.name`` of each loop result that ``keep`` accepts, in order, once each."""
    out = []
    for result in results or []:
        if not isinstance(result, dict):
            continue
        name = (result.get("item") or {}).get("name") if isinstance(result.get("item"), dict) else None
        if name is not None and keep(result) and name not in out:
            out.append(name)
    return out


def restart_set(present, changed=None, current=None, active=None, release_dir="", reverified=False,
                whole_unit=False, started_before=None):
    """The names of the instances this run restarts, in the order of ``present``.

    ``present``: the present instances (dicts with ``name``) or their names. ``changed``: the loop results of the
    writes that concern one instance (its env file, its drop-in, its ``current`` flip): each that changed restarts
    its instance. ``current``: the stat of each instance's ``current`` link before the flip; with ``reverified``
    (the release was verified again in this run, on files that changed), each instance whose link already named
    ``release_dir`` restarts onto the re-verified files. ``active``: each instance's unit state (``status``); one
    that is not active starts. ``whole_unit``: the unit template or the launcher changed: every instance restarts.
    ``started_before``: config_files.started_before_config's entries, instances that run a configuration older
    than their files (an interrupted run's writes, a unit systemd has not read again)."""
    names = [p.get("name") if isinstance(p, dict) else p for p in present or []]
    if whole_unit:
        wanted = set(names)
    else:
        wanted = set(_names(changed, lambda r: bool(r.get("changed"))))
        if reverified:
            wanted |= set(_names(current, lambda r: (r.get("stat") or {}).get("islnk")
                                 and (r.get("stat") or {}).get("lnk_source") == release_dir))
        wanted |= set(_names(active, lambda r: (r.get("status") or {}).get("ActiveState") != "active"))
        wanted |= {e.get("name") for e in started_before or [] if isinstance(e, dict)}
    return [n for n in names if n in wanted]
