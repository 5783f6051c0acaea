# -*- coding: utf-8 -*-
# Copyright: (c) 2025, dflash.deploy maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ownership-aware transplant plan: what arrives, what leaves, what stays.

Inputs are the selected source distributions, the destination venv and the
``remove`` patterns.  The plan says, per file:

- writes: every file of an incoming distribution outside its dist-info;
- dist-info writes: the incoming dist-info directories (placed last);
- old dist-infos: dist-info directories of leaving distributions (moved to
  the backup as a whole);
- deletes: files of leaving distributions that nothing incoming provides and
  no distribution staying in the destination also claims;
- kept_shared: files of leaving distributions kept because a staying
  distribution claims them too (sgl-kernel and sglang-kernel both own
  ``sgl_kernel/*``).

Nothing works on directories: shared namespace directories such as
``nvidia/`` are only ever created or, once empty, removed.  A distribution
whose destination copy already matches (same dist-info, same RECORD, every
file present with the source's size and mtime) is ``unchanged`` and costs
only stats.  Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat

from ansible_collections.dflash.deploy.plugins.module_utils.dist_info import list_dists, name_matches
from ansible_collections.dflash.deploy.plugins.module_utils.record import (
    RecordEntry,
    RecordError,
    format_record,
    hash_bytes,
    read_record,
    resolve,
)
from ansible_collections.dflash.deploy.plugins.module_utils.transplant_source import rewrite_script
from ansible_collections.dflash.deploy.plugins.module_utils.wheel_tags import check_tags


class PlanError(Exception):
    pass


class WriteOp:
    """One file to place: from a SourceFile, or from data (rewritten scripts, RECORD)."""

    __slots__ = ("path", "source", "data", "size", "mode", "mtime_ns", "existed")

    def __init__(self, path, source=None, data=None, size=None, mode=None, mtime_ns=None, existed=False):
        self.path = path
        self.source = source
        self.data = data
        self.size = size if size is not None else (len(data) if data is not None else source.size)
        self.mode = mode if mode is not None else (source.mode if source is not None else 0o644)
        self.mtime_ns = mtime_ns if mtime_ns is not None else (source.mtime_ns if source is not None else None)
        self.existed = existed


class DistInfoOp:
    __slots__ = ("dist_info", "existed", "files")

    def __init__(self, dist_info, existed, files):
        self.dist_info = dist_info
        self.existed = existed
        self.files = files  # WriteOps with paths inside dist_info


class Plan:
    def __init__(self, run_id, dest):
        self.run_id = run_id
        self.dest = dest
        self.moved = []
        self.removed = []
        self.unchanged = []
        self.writes = []
        self.dist_info_writes = []
        self.old_dist_infos = []
        self.deletes = []
        self.kept_shared = []
        self.final_claims = set()
        self.warnings = []

    @property
    def has_work(self):
        return bool(self.writes or self.dist_info_writes or self.old_dist_infos or self.deletes)

    @property
    def bytes_total(self):
        return sum(w.size for w in self.writes) + sum(f.size for d in self.dist_info_writes for f in d.files)

    def to_journal(self):
        """What recovery needs: paths, whether they existed, and nothing else."""
        return {
            "run_id": self.run_id,
            "dest": self.dest.root,
            "site_packages": self.dest.site_packages,
            "writes": [[w.path, w.existed] for w in self.writes],
            "dist_info_writes": [[d.dist_info, d.existed] for d in self.dist_info_writes],
            "old_dist_infos": list(self.old_dist_infos),
            "deletes": list(self.deletes),
            "final_claims": sorted(self.final_claims),
            "moved": self.moved,
            "removed": self.removed,
        }


def _dest_entries(dist):
    record = dist.file("RECORD")
    if not os.path.isfile(record):
        return None
    try:
        return read_record(record)
    except RecordError as exc:
        raise PlanError("destination %s %s: RECORD refused: %s" % (dist.name, dist.version, exc)) from exc


def _unchanged(src, dist, dest):
    """Stat-only: does the destination copy of this distribution already match?"""
    if dist.dist_info != src.dist_info:
        return False
    try:
        have = _dest_entries(dist)
    except PlanError:
        return False
    if have is None:
        return False
    have_by_path = dict((e.path, e) for e in have)
    if set(have_by_path) != set(e.path for e in src.entries):
        return False
    record_path = src.dist_info + "/RECORD"
    for entry in src.entries:
        mine = have_by_path[entry.path]
        if not entry.is_script and (mine.hash, mine.size) != (entry.hash, entry.size):
            return False
        if entry.path == record_path:
            continue
        try:
            st = os.lstat(resolve(dest.site_packages, entry.path))
        except OSError:
            return False
        sfile = src.files[entry.path]
        want_size = mine.size if entry.is_script else sfile.size
        if (not stat.S_ISREG(st.st_mode) or (want_size is not None and st.st_size != want_size)
                or st.st_mtime_ns // 1000000000 != sfile.mtime_ns // 1000000000):
            return False
    return True


class _ParentCheck:
    """Refuse destination paths whose existing parents resolve outside the venv."""

    def __init__(self, dest):
        # site-packages and bin/ lie in the venv root, and so do the wheel
        # data-scheme files (share/, include/) that RECORD may place there.
        self.roots = (os.path.realpath(dest.root), os.path.realpath(dest.site_packages), os.path.realpath(dest.bin))
        self.cache = {}

    def check(self, full):
        parent = os.path.dirname(full)
        if parent in self.cache:
            return
        real = os.path.realpath(parent)
        if not any(real == root or real.startswith(root + os.sep) for root in self.roots):
            raise PlanError("destination path %s resolves outside the venv (%s)" % (full, real))
        self.cache[parent] = True


def _lexists_kind(path):
    try:
        return os.lstat(path).st_mode
    except OSError:
        return None


def build_plan(run_id, source, selected, dest, remove=(), check_abi=True):
    """Compute the plan; raise PlanError (with the reason) before anything changes."""
    plan = Plan(run_id, dest)
    if check_abi:
        for src in selected:
            reason = check_tags(src.wheel_tags, dest.version, dest.freethreaded)
            if reason:
                raise PlanError("%s %s cannot go into %s: %s" % (src.name, src.version, dest.root, reason))
            if not src.wheel_tags:
                plan.warnings.append("%s %s has no WHEEL tags; its Python ABI was not checked"
                                     % (src.name, src.version))
    dest_dists = list_dists(dest.site_packages)
    by_key = {}
    for dist in dest_dists:
        by_key.setdefault(dist.key, []).append(dist)
    incoming_keys = set(s.key for s in selected)
    removed = [d for d in dest_dists if remove and name_matches(d.name, remove)]
    both = sorted(set(d.name for d in removed if d.key in incoming_keys))
    if both:
        raise PlanError("%s both moved and removed: drop it from one of distributions/remove" % ", ".join(both))

    moving = []
    for src in selected:
        olds = by_key.get(src.key, [])
        if len(olds) == 1 and _unchanged(src, olds[0], dest):
            plan.unchanged.append({"name": src.name, "version": src.version})
        else:
            moving.append((src, olds))
    if not moving and not removed:
        return plan

    leaving = [d for dummy, olds in moving for d in olds] + removed
    leaving_ids = set(d.dist_info for d in leaving)
    staying = [d for d in dest_dists if d.dist_info not in leaving_ids]

    staying_claims = {}
    for dist in staying:
        entries = _dest_entries(dist)
        if entries is None:
            plan.warnings.append("destination %s %s has no RECORD; it claims no files" % (dist.name, dist.version))
            continue
        for entry in entries:
            staying_claims.setdefault(entry.path, []).append((dist.name, entry.hash))

    parents = _ParentCheck(dest)
    incoming = {}  # path -> (dist name, hash)
    for src, olds in moving:
        plan.moved.append({
            "name": src.name, "from": olds[0].version if olds else None, "to": src.version,
            "dist_info": src.dist_info, "old_dist_infos": [d.dist_info for d in olds],
        })
        record_path = src.dist_info + "/RECORD"
        new_entries = []
        info_files = []
        for entry in src.entries:
            sfile = src.files[entry.path]
            full = resolve(dest.site_packages, entry.path)
            parents.check(full)
            op = WriteOp(entry.path, source=sfile)
            if entry.is_script:
                data = rewrite_script(_read(source, sfile), source.prefixes, dest.root)
                op = WriteOp(entry.path, source=sfile, data=data, size=len(data))
                entry = RecordEntry(entry.path, hash_bytes(data), len(data))
            new_entries.append(entry)
            for other, other_hash in staying_claims.get(entry.path, ()):
                if entry.is_script or not entry.hash or other_hash != entry.hash:
                    raise PlanError("%s of incoming %s is also claimed by %s, which stays, with other content: "
                                    "add %s to remove (or move it too)" % (entry.path, src.name, other, other))
            prior = incoming.get(entry.path)
            if prior is not None:
                if prior[1] != entry.hash or not entry.hash:
                    raise PlanError("%s is claimed by both incoming %s and %s with different content"
                                    % (entry.path, prior[0], src.name))
                continue
            incoming[entry.path] = (src.name, entry.hash)
            if entry.path.startswith(src.dist_info + "/"):
                if entry.path != record_path:
                    info_files.append(op)
                continue
            mode = _lexists_kind(full)
            if mode is not None and stat.S_ISDIR(mode):
                raise PlanError("%s of %s would replace a directory in the destination" % (entry.path, src.name))
            op.existed = mode is not None
            plan.writes.append(op)
        record_data = format_record(new_entries).encode("utf-8")
        rec_source = src.files.get(record_path)
        info_files.append(WriteOp(record_path, data=record_data, mode=0o644,
                                  mtime_ns=rec_source.mtime_ns if rec_source else None))
        existed = _lexists_kind(os.path.join(dest.site_packages, src.dist_info)) is not None
        plan.dist_info_writes.append(DistInfoOp(src.dist_info, existed, info_files))

    for dist in leaving:
        plan.old_dist_infos.append(dist.dist_info)
        entries = _dest_entries(dist)
        if entries is None:
            raise PlanError("destination %s %s has no RECORD: cannot tell which files are its own; "
                            "reinstall it or remove it by hand" % (dist.name, dist.version))
        for entry in entries:
            if entry.path.split("/", 1)[0] == dist.dist_info or entry.path in incoming:
                continue
            if entry.path in staying_claims:
                plan.kept_shared.append(entry.path)
                continue
            full = resolve(dest.site_packages, entry.path)
            if _lexists_kind(full) is None:
                continue
            parents.check(full)
            if entry.path not in plan.deletes:
                plan.deletes.append(entry.path)
    for dist in removed:
        plan.removed.append({"name": dist.name, "version": dist.version, "dist_info": dist.dist_info})

    plan.final_claims = set(staying_claims) | set(incoming)
    plan.kept_shared = sorted(set(plan.kept_shared))
    plan.writes.sort(key=lambda w: -w.size)
    return plan


def _read(source, sfile):
    return source.read(sfile)
