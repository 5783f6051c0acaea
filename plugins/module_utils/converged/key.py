# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The key of a deploy's inputs, computed on the controller: what the next run compares with the
key the last completed deploy recorded on the host (``dflash.deploy.deploy_state``).

Three digests, so that a reason can say which part changed:

- ``collection``: the collection's own code and defaults (every file under roles/, plugins/ and
  playbooks/), so an upgraded or edited collection never takes the fast path;
- ``vars``: the deploy's variables as this host sees them, templated (every variable named with a
  prefix in ``PREFIXES``; a value that refers to another variable carries that one's value);
- ``artifacts``: what lies on the controller under the paths the deploy reads there (the artifact
  store, the DFlash tree, the CUDA bundle, uv, model directories to stage), by each entry's path,
  type, size, modification time and mode, as the DFlash tree's pack key already is.

Pure functions over values and paths; nothing here talks to a host.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat

# The variables a deploy reads (the roles' prefixes and the collection-wide dflash_*).
PREFIXES = ("dflash_", "sglang_", "cuda_overlay_", "kernel_pin_", "host_layout_", "host_preflight_",
            "host_lock_", "instances_", "stage_artifacts_")
# Read by the play, not by what it deploys: a fleet's batch size never makes a host stale. And the facts the
# instances role publishes once it completed the list: computed by the run from sglang_service_instances (which
# the key covers), not inputs.
IGNORED = frozenset(("dflash_deploy_report", "deploy_dflash_serial", "deploy_dflash_max_fail_percentage",
                     "instances_present", "instances_absent", "instances_all", "instances_api_keys"))
# Variables naming a controller path the deploy reads (a file or a directory).
CONTROLLER_PATH_VARS = ("dflash_overlay_source_dir", "cuda_overlay_bundle_controller_path", "stage_artifacts_dir",
                        "sglang_venv_wheelhouse_controller_dir")
# Keys of an instance naming a controller directory staged to the host.
INSTANCE_PATH_KEYS = ("model_controller_dir", "draft_model_controller_dir")
CODE_DIRS = ("roles", "plugins", "playbooks")
SKIPPED = re.compile(r"(^|/)__pycache__(/|$)|\.py[co]$")

_COLLECTION_CACHE = {}


def product_var_names(names):
    """The variable names the key covers, sorted: a product prefix, not internal (``_``), not ignored."""
    return sorted(n for n in names if isinstance(n, str) and n.startswith(PREFIXES) and n not in IGNORED)


def normalized(value):
    """``value`` with every absolute path written one way (``os.path.normpath``): the same directory
    reached through another inventory's ``inventory_dir`` (``…/extensions/../inventory/../build``)
    is the same input."""
    if isinstance(value, str):
        return os.path.normpath(value) if value.startswith("/") else value
    if isinstance(value, dict):
        return dict((k, normalized(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [normalized(v) for v in value]
    return value


def canonical(value):
    """A value as stable JSON: keys sorted, absolute paths normalized, anything else (a vaulted or
    tagged string) as its text."""
    return json.dumps(normalized(value), sort_keys=True, separators=(",", ":"), default=str)


def vars_sha256(values):
    """sha256 of {name: value} as canonical JSON."""
    return hashlib.sha256(canonical(values).encode("utf-8", "surrogateescape")).hexdigest()


def _listing_line(root, rel, st):
    kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f" if \
        stat.S_ISREG(st.st_mode) else "o"
    size = st.st_size if kind == "f" else 0
    mtime = st.st_mtime_ns if kind != "d" else 0
    link = os.readlink(os.path.join(root, rel)) if kind == "l" else ""
    return "%s\0%s %o %d %d\0%s\n" % (rel, kind, stat.S_IMODE(st.st_mode), size, mtime, link)


def listing_lines(path):
    """Lines describing ``path`` and, for a directory, everything below it (links not followed,
    __pycache__ and compiled Python left out), sorted by path; ``absent`` when there is nothing."""
    path = os.path.abspath(os.path.expanduser(path))
    try:
        top = os.lstat(path)
    except OSError:
        return ["%s\0absent\n" % path]
    lines = ["%s\0" % path + _listing_line(os.path.dirname(path), os.path.basename(path), top)]
    if not stat.S_ISDIR(top.st_mode):
        return lines
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(dirnames + filenames):
            rel = os.path.relpath(os.path.join(dirpath, name), path)
            if SKIPPED.search(rel):
                continue
            try:
                lines.append(_listing_line(path, rel, os.lstat(os.path.join(dirpath, name))))
            except OSError:
                lines.append("%s\0vanished\n" % rel)
    return lines


def artifacts_sha256(paths):
    """sha256 over the listings of every path (empty ones skipped, each path once, in order)."""
    digest = hashlib.sha256()
    for path in sorted(set(p for p in paths if p)):
        for line in listing_lines(path):
            digest.update(line.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def collection_sha256(root):
    """sha256 over the relative path and bytes of every file under ``root``'s CODE_DIRS. Once per
    process and root (a run's worker computes it once, whatever its host count)."""
    root = os.path.abspath(root)
    if root in _COLLECTION_CACHE:
        return _COLLECTION_CACHE[root]
    digest = hashlib.sha256()
    for top in CODE_DIRS:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                if SKIPPED.search(rel) or not os.path.isfile(full):
                    continue
                digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
                with open(full, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    _COLLECTION_CACHE[root] = digest.hexdigest()
    return _COLLECTION_CACHE[root]


def controller_paths(values, artifact_store="", uv=""):
    """The controller paths a deploy with these variables reads: the artifact store, uv, every
    CONTROLLER_PATH_VARS value and every instance's INSTANCE_PATH_KEYS value."""
    paths = [artifact_store, uv]
    paths += [values.get(name) for name in CONTROLLER_PATH_VARS if isinstance(values.get(name), str)]
    for listed in ("dflash_instances", "sglang_service_instances"):
        for inst in values.get(listed) or []:
            if isinstance(inst, dict):
                paths += [inst.get(k) for k in INSTANCE_PATH_KEYS if isinstance(inst.get(k), str)]
    return [p for p in paths if p]
