# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a host still is what the last completed deploy left: the pure half of
``dflash.deploy.deploy_state``.

A completed deploy records what it converged to (``observe.py`` reads it, ``record`` keeps it).
A later run compares, one kind of thing at a time, what the host shows now with that record, and
with what the service must be doing now (running, answering). Each function here takes the two
readings and returns the reasons they differ, one line each; an empty list means "the same".
Nothing here reads the host.
"""

from __future__ import annotations

import hashlib
import json

# 2: the record keeps the lock command's digest, never the command itself (round 3, N2)
RECORD_VERSION = 2

# What the controller digests for the key (key.py), named as a reason names them.
KEY_PARTS = (
    ("collection", "the collection's roles, plugins or playbooks"),
    ("vars", "the deploy's variables"),
    ("artifacts", "the controller's artifacts (the CUDA bundle, the DFlash tree, uv, model directories)"),
)

# How one path is described when it differs: the fields of observe.path_entry, in the order a
# reason names them.
ENTRY_FIELDS = ("kind", "mode", "uid", "gid", "size", "mtime_ns", "link", "sha256")


def key_reasons(recorded, given):
    """Why the inputs of this run are not those of the recorded deploy (one reason per part)."""
    recorded = recorded if isinstance(recorded, dict) else {}
    given = given if isinstance(given, dict) else {}
    out = []
    for part, words in KEY_PARTS:
        if recorded.get(part) != given.get(part) or not given.get(part):
            out.append("%s changed since the last completed deploy" % words)
    return out


def record_reasons(record):
    """Why a record cannot be compared at all (none, another version, not a record)."""
    if record is None:
        return ["no record of a completed deploy on this host"]
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        return ["the record of the last deploy is of another collection version"]
    return []


def entry_reasons(path, recorded, now):
    """How the path ``path`` differs from its recorded entry (``observe.path_entry`` dicts)."""
    if recorded == now:
        return []
    if now.get("kind") == "absent":
        return ["%s is gone" % path]
    if recorded.get("kind") == "absent":
        return ["%s appeared" % path]
    fields = [f for f in ENTRY_FIELDS if recorded.get(f) != now.get(f)]
    words = {"kind": "type", "mode": "mode", "uid": "owner", "gid": "group", "size": "size",
             "mtime_ns": "modification time", "link": "link target", "sha256": "contents"}
    return ["%s changed (%s)" % (path, ", ".join(words[f] for f in fields))]


def entries_reasons(recorded, now):
    """``entry_reasons`` over every recorded path ({path: entry} each)."""
    out = []
    for path in sorted(recorded):
        out += entry_reasons(path, recorded[path], now.get(path, {"kind": "absent"}))
    return out


def tree_reasons(recorded, now):
    """Release trees whose fingerprint ({path: sha256 or None}) differs from the record."""
    out = []
    for path in sorted(recorded):
        if now.get(path) is None:
            out.append("release %s cannot be read" % path)
        elif now[path] != recorded[path]:
            out.append("files of release %s changed since it was verified" % path)
    return out


# The unit properties a record keeps: any change in them is a change in what systemd runs.
UNIT_KEPT = ("LoadState", "UnitFileState", "FragmentPath", "DropInPaths")


def unit_reasons(recorded, now):
    """Units that are not running, need a daemon-reload, or whose files or enablement changed.
    ``recorded`` and ``now`` are {unit: {property: value}} from ``systemctl show``."""
    out = []
    for unit in sorted(recorded):
        state = now.get(unit) or {}
        if not state:
            out.append("%s: systemd gave no answer" % unit)
            continue
        if state.get("ActiveState") != "active" or state.get("SubState") != "running":
            active, sub = state.get("ActiveState") or "unknown", state.get("SubState") or "unknown"
            out.append("%s is %s (%s), not running" % (unit, active, sub))
        if state.get("NeedDaemonReload") == "yes":
            out.append("%s: its unit files changed on disk (systemd needs a daemon-reload)" % unit)
        changed = [p for p in UNIT_KEPT if (recorded[unit] or {}).get(p) != state.get(p)]
        if changed:
            out.append("%s: %s changed" % (unit, ", ".join(changed)))
    return out


def gpu_reasons(recorded, now):
    """GPUs listed otherwise than when the deploy completed (rows of index, uuid, bus id, driver)."""
    if now is None:
        return ["nvidia-smi gave no answer"]
    if recorded == now:
        return []
    before = dict((r[1], r) for r in recorded if len(r) > 1)
    after = dict((r[1], r) for r in now if len(r) > 1)
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    moved = sorted(u for u in set(before) & set(after) if before[u] != after[u])
    out = []
    if gone:
        out.append("GPU %s is no longer listed" % ", ".join(gone))
    if new:
        out.append("GPU %s is new" % ", ".join(new))
    if moved:
        out.append("GPU %s moved or the driver changed (%s)" % (
            ", ".join(moved), "; ".join("%s -> %s" % (" ".join(before[u]), " ".join(after[u])) for u in moved)))
    return out or ["the GPU listing changed"]


def account_reasons(recorded, now):
    """Accounts ({'user:<name>' or 'group:<name>': entry or None}) that changed."""
    out = []
    for name in sorted(recorded):
        if now.get(name) != recorded[name]:
            out.append("%s changed (%s)" % (name.replace(":", " ", 1),
                                            "gone" if now.get(name) is None else "its entry or groups"))
    return out


def command_digest(command):
    """sha256 of a command (its ``argv``, ``stdin`` and ``env``) as canonical JSON; None without an argv.
    The record keeps this digest: the command a check runs is the run's own, never one read from the record."""
    command = command if isinstance(command, dict) else {}
    if not command.get("argv"):
        return None
    canon = {"argv": list(command.get("argv") or []), "stdin": command.get("stdin") or "",
             "env": dict(command.get("env") or {})}
    return hashlib.sha256(json.dumps(canon, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def command_mismatch(recorded_digest, command, what):
    """Why this run's command cannot be compared with the recorded one (None when it can): the run named
    none, or another one than the command whose output the record keeps."""
    if not recorded_digest:
        return None
    digest = command_digest(command)
    if digest is None:
        return "%s could not be named before the deploy (a variable it uses did not template)" % what
    if digest != recorded_digest:
        return "%s itself changed since the last completed deploy" % what
    return None


def command_reason(recorded_sha256, now_sha256, what):
    """Why the recorded command's output differs (None when it does not)."""
    if now_sha256 is None:
        return "%s could not be run again" % what
    if now_sha256 != recorded_sha256:
        return "%s resolves otherwise than at the last completed deploy" % what
    return None


def health_reasons(answers):
    """Instances that do not answer now ({name: reason or None})."""
    return ["instance %s: %s" % (name, answers[name]) for name in sorted(answers) if answers[name]]
