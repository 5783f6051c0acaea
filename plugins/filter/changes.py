# -*- coding: utf-8 -*-
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a deploy changes (or, in check mode, would change), in an operator's words.

The roles set the fact ``dflash_deploy_changes`` from these filters; the deploy_summary
callback prints those lines per host at the end of the run, so ``--check --diff`` on a
deployed host reads as "packages: torch 2.9.1+cu128 -> 2.11.0+cu130" rather than as
the names of the tasks that would run.

    lines = old_specs | dflash.deploy.release_changes(new_spec, new_id)
    lines = dflash.deploy.service_changes(env=..., dropin=..., unit=..., launcher=..., flip=...)
"""
from __future__ import annotations

import re

from ansible_collections.dflash.deploy.plugins.filter.lock_hashes import lock_hashes
from ansible_collections.dflash.deploy.plugins.filter.verdict import normalize

# What each release input is, for the operator (the playbook's sglang_venv_release_inputs keys).
INPUT_NAMES = {
    "dflash_overlay": "DFlash sources",
    "cuda_overlay": "CUDA 13 bundle",
    "kernel_pin": "kernel pins",
}
MAX_PACKAGES = 8
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*(?:==\s*(\S+)|@\s*(\S+))")


def parse_lock(text: str) -> dict:
    """``{name: version}`` from ``uv pip compile`` output: ``name==version`` (or ``name @ url``) lines;
    comments, ``# via`` lines and options are skipped."""
    pins = {}
    for line in str(text or "").splitlines():
        match = _PIN.match(line.strip())
        if match:
            version = match.group(2) or match.group(3).rsplit("/", 1)[-1]
            pins[normalize(match.group(1))] = version
    return pins


def lock_changes(old_lock: str, new_lock: str) -> list:
    """One entry per package that differs: ``name old -> new``, ``+ name version``, ``- name version``."""
    old, new = parse_lock(old_lock), parse_lock(new_lock)
    out = []
    for name in sorted(old.keys() | new.keys()):
        if name not in old:
            out.append(f"+ {name} {new[name]}")
        elif name not in new:
            out.append(f"- {name} {old[name]}")
        elif old[name] != new[name]:
            out.append(f"{name} {old[name]} -> {new[name]}")
    return out


def hash_changes(old_lock: str, new_lock: str) -> str:
    """What differs in the locks' sha256 for the same name and version ('' when nothing does)."""
    old, new = lock_hashes(old_lock), lock_hashes(new_lock)
    if new and not any(old.values()) and any(new.values()):
        return f"sha256 now pinned ({len(new)} packages)"
    other = [key.replace("==", " ") for key in sorted(old.keys() & new.keys()) if old[key] and old[key] != new[key]]
    return f"other sha256 for {_listed(other)}" if other else ""


def release_changes(old_specs, new_spec, new_id) -> list:
    """Lines describing release ``new_id`` (its spec: ``lock``, ``python``, ``inputs``) against each
    distinct release the instances run now, given as their ``built.json`` contents
    (``{"release_id": ..., "spec": {...}}``). No running release: one "new" line."""
    new_spec = new_spec or {}
    olds = []  # (id, spec) of each distinct running release
    for entry in old_specs or []:
        if isinstance(entry, dict) and isinstance(entry.get("spec"), dict):
            pair = (str(entry.get("release_id") or "the running release"), entry["spec"])
            if pair not in olds:
                olds.append(pair)
    if not olds:
        count = len(parse_lock(new_spec.get("lock", "")))
        return [f"release {new_id}: new ({count} locked packages)"]
    out = []
    for old_id, old in olds:
        if old == new_spec:
            continue
        head = f"release {new_id} replaces {old_id}"
        parts = []
        packages = lock_changes(old.get("lock", ""), new_spec.get("lock", ""))
        if packages:
            parts.append("packages: " + _listed(packages))
        hashes = hash_changes(old.get("lock", ""), new_spec.get("lock", ""))
        if hashes:
            parts.append(hashes)
        if old.get("python") != new_spec.get("python"):
            parts.append(f"python {old.get('python') or '?'} -> {new_spec.get('python') or '?'}")
        old_inputs, new_inputs = old.get("inputs") or {}, new_spec.get("inputs") or {}
        for key in sorted(old_inputs.keys() | new_inputs.keys()):
            if old_inputs.get(key) != new_inputs.get(key):
                parts.append(f"{INPUT_NAMES.get(key, key)} changed")
        out.append(head + (": " + "; ".join(parts) if parts else ""))
    return out


def _changed_labels(registered, label) -> list:
    """The labels of the loop items (or the single task) that a registered result says changed."""
    if not isinstance(registered, dict):
        return []
    if "results" in registered:
        return [label(r.get("item")) for r in registered["results"] if isinstance(r, dict) and r.get("changed")]
    return [label(None)] if registered.get("changed") else []


def _instance_name(item) -> str:
    return str(item.get("name")) if isinstance(item, dict) else str(item)


def service_changes(env=None, dropin=None, unit=None, launcher=None, flip=None, config_dir="/etc/dflash",
                    release_id="", unbuilt=None, started_before=None) -> list:
    """Lines naming what the sglang_service role changed, from its registered results. ``unbuilt``: in
    check mode the new release is not built, so the flip is skipped; these instances would switch.
    ``started_before``: config_files.started_before_config's entries, the instances that restart onto
    files an interrupted run wrote."""
    out = []
    out += ["sglang-dflash@%s.service runs what came before %s: restart (an interrupted run wrote them)"
            % (entry.get("name"), ", ".join(str(path) for path in entry.get("paths") or []))
            for entry in started_before or [] if isinstance(entry, dict)]
    out += [f"env file {config_dir}/{n}.env (contents not shown: it holds the API key)"
            for n in _changed_labels(env, _instance_name)]
    out += [f"GPU drop-in of sglang-dflash@{n}.service" for n in _changed_labels(dropin, _instance_name)]
    out += ["unit template sglang-dflash@.service" for _label in _changed_labels(unit, lambda _i: "")]
    out += ["launcher sglang-dflash-launch" for _label in _changed_labels(launcher, lambda _i: "")]
    switched = [str(name) for name in unbuilt or []] or _changed_labels(flip, _instance_name)
    if switched:
        out.append(f"current -> release {release_id} for {', '.join(switched)} (restart)")
    return out


def _listed(items, limit=MAX_PACKAGES) -> str:
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f", +{more} more" if more > 0 else "")


def transplant_changes(result, label) -> list:
    """One line from a site_packages_transplant result: the distributions it moved in (with the
    version they replace) and the ones it removed. Nothing moved or removed: no line."""
    if not isinstance(result, dict):
        return []
    items = []
    for dist in result.get("moved") or []:
        if dist.get("from"):
            items.append(f"{dist.get('name')} {dist.get('from')} -> {dist.get('to')}")
        else:
            items.append(f"+ {dist.get('name')} {dist.get('to')}")
    items += [f"- {dist.get('name')} {dist.get('version')}" for dist in result.get("removed") or []]
    return [f"{label}: {_listed(items)}"] if items else []


_UV_LINE = re.compile(r"^ ([+-]) (\S+?)==(\S+)\s*$")


def uv_changes(stderr, label) -> list:
    """One line from what ``uv pip install``/``sync`` (or its ``--dry-run``) printed: its `` + name==ver``
    and `` - name==ver`` lines, a removal and an addition of one name read as an upgrade."""
    added, removed = {}, {}
    for line in str(stderr or "").splitlines():
        match = _UV_LINE.match(line)
        if match:
            (added if match.group(1) == "+" else removed)[normalize(match.group(2))] = match.group(3)
    items = []
    for name in sorted(added.keys() | removed.keys()):
        if name in added and name in removed:
            items.append(f"{name} {removed[name]} -> {added[name]}")
        elif name in added:
            items.append(f"+ {name} {added[name]}")
        else:
            items.append(f"- {name} {removed[name]}")
    return [f"{label}: {_listed(items)}"] if items else []


def overlay_changes(lines, label) -> list:
    """One line from dflash_tree_overlay's ``changes`` (``add|replace|remove|drift|stale <path>`` lines): how many
    files it adds, replaces and removes (the base's files the tree lacks), which hand-edited files it
    restores and which files the tree lacks it removes again."""
    kinds = {"add": [], "replace": [], "remove": [], "drift": [], "stale": []}
    for line in lines or []:
        kind, _sep, path = str(line).partition(" ")
        if kind in kinds and path:
            kinds[kind].append(path)
    parts = [f"{len(kinds['add'])} files added"] if kinds["add"] else []
    parts += [f"{len(kinds['replace'])} replaced"] if kinds["replace"] else []
    parts += [f"{len(kinds['remove'])} removed (not in the tree)"] if kinds["remove"] else []
    parts += [f"restored after hand edits: {_listed(kinds['drift'], 4)}"] if kinds["drift"] else []
    parts += [f"removed again (not in the tree): {_listed(kinds['stale'], 4)}"] if kinds["stale"] else []
    return [f"{label}: {', '.join(parts)}"] if parts else []


class FilterModule:
    def filters(self):
        return {
            "release_changes": release_changes,
            "service_changes": service_changes,
            "transplant_changes": transplant_changes,
            "uv_changes": uv_changes,
            "overlay_changes": overlay_changes,
        }
