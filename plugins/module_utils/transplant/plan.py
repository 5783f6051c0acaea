# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
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


import os
import stat
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import list_dists, name_matches
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import (
    BIN_PREFIX,
    RecordEntry,
    RecordError,
    format_record,
    hash_bytes,
    read_record,
    resolve,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.wheel_tags import check_tags
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.source import rewrite_script

SAFE_MODE = 0o755


class PlanError(Exception):
    pass


class WriteOp:
    """One file to place: from a SourceFile, or from data (rewritten scripts, RECORD).

    ``full`` is its absolute destination path when the plan resolved it.
    """

    __slots__ = ("path", "source", "data", "size", "mode", "mtime_ns", "existed", "full")

    def __init__(self, path, source=None, data=None, size=None, mode=None, mtime_ns=None, existed=False,
                 full=None):
        self.path = path
        self.source = source
        self.data = data
        self.size = size if size is not None else (len(data) if data is not None else source.size)
        # never more than rwxr-xr-x: no setuid/setgid/sticky bit and no group or world write, whatever
        # the source's mode or a bundle's manifest says
        self.mode = (mode if mode is not None else (source.mode if source is not None else 0o644)) & SAFE_MODE
        self.mtime_ns = mtime_ns if mtime_ns is not None else (source.mtime_ns if source is not None else None)
        self.existed = existed
        self.full = full


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
        self.new_dirs = []  # destination directories the writes need that did not exist, parents first

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
            # recovery's bytecode purge asks only whether a .pyc is claimed: the rest stays out
            "final_claims": sorted(p for p in self.final_claims if p.endswith(".pyc")),
            "new_dirs": list(self.new_dirs),
            "moved": self.moved,
            "removed": self.removed,
        }


def _dest_entries(dist):
    record = dist.file("RECORD")
    if not os.path.isfile(record):
        return None
    try:
        # not strict: a destination RECORD with non-UTF-8 bytes still names its files (as Python names them)
        return read_record(record, strict=False)
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


_DIR, _LINK, _OTHER = 1, 2, 3


def _scan(directory):
    """{name: kind} of a directory's entries from one listing (no stat per entry); None if it is missing."""
    try:
        with os.scandir(directory) as entries:
            return dict((e.name, _LINK if e.is_symlink() else _DIR if e.is_dir(follow_symlinks=False) else _OTHER)
                        for e in entries)
    except OSError:
        return None


class _DestTree:
    """The destination's directories as the plan sees them, one listing per directory.

    Refuses destination paths whose parents resolve outside the venv: each
    directory's real path is its parent's real path plus its name, and any
    symlinked component is resolved with ``os.path.realpath`` (the same answer
    as realpath of the whole path, without an lstat per component per file).
    Whether a file exists (and is not a directory) comes from its directory's
    listing instead of an lstat per file.
    """

    def __init__(self, dest):
        # site-packages and bin/ lie in the venv root, and so do the wheel
        # data-scheme files (share/, include/) that RECORD may place there.
        self.roots = (os.path.realpath(dest.root), os.path.realpath(dest.site_packages), os.path.realpath(dest.bin))
        self.known_roots = {dest.root: self.roots[0], dest.site_packages: self.roots[1], dest.bin: self.roots[2]}
        self.dirs = {}  # directory -> (real path, listing or None when it does not exist)
        self.checked = set()
        self.missing = []  # directories that do not exist, parents first

    def _dir(self, directory):
        info = self.dirs.get(directory)
        if info is not None:
            return info
        parent, dummy, name = directory.rpartition("/")
        if directory in self.known_roots or not parent or not name:
            real = self.known_roots.get(directory) or os.path.realpath(directory)
            info = (real, _scan(directory))
        else:
            parent_real, parent_listing = self._dir(parent)
            kind = parent_listing.get(name) if parent_listing is not None else None
            if kind == _LINK:
                info = (os.path.realpath(directory), _scan(directory))
            else:
                real = (parent_real if parent_real != "/" else "") + "/" + name
                info = (real, _scan(directory) if kind == _DIR else None)
                if kind is None:
                    self.missing.append(directory)
        self.dirs[directory] = info
        return info

    def listing(self, parent, full, check=True):
        """{name: kind} in directory parent of full (None: missing); refused if it resolves outside the venv."""
        real, listing = self._dir(parent)
        if check and parent not in self.checked:
            if not any(real == root or real.startswith(root + os.sep) for root in self.roots):
                raise PlanError("destination path %s resolves outside the venv (%s)" % (full, real))
            self.checked.add(parent)
        return listing

    def kind(self, full, check=True):
        """Check full's parent (once per directory); return what is at full: None, _DIR, _LINK or _OTHER."""
        parent, dummy, name = full.rpartition("/")
        listing = self.listing(parent, full, check)
        return listing.get(name) if listing is not None else None

    def needed_dirs(self, writes):
        """The missing directories that writes need, parents first."""
        missing = set(self.missing)
        needed = set()
        for parent in set(w.full.rpartition("/")[0] for w in writes):
            while parent in missing and parent not in needed:
                needed.add(parent)
                parent = parent.rpartition("/")[0]
        return [d for d in self.missing if d in needed]


def _check_abi(plan, selected, dest):
    """Refuse a distribution built for another Python ABI; warn about one without WHEEL tags."""
    for src in selected:
        reason = check_tags(src.wheel_tags, dest.version, dest.freethreaded)
        if reason:
            raise PlanError("%s %s cannot go into %s: %s" % (src.name, src.version, dest.root, reason))
        if not src.wheel_tags:
            plan.warnings.append(untagged_warning(src))


def untagged_warning(src):
    """The warning of a distribution without WHEEL tags, which every run that selects it repeats."""
    return "%s %s has no WHEEL tags; its Python ABI was not checked" % (src.name, src.version)


def _moving_and_removed(plan, selected, dest, dest_dists, remove):
    """([(incoming dist, [destination dists it replaces])], [destination dists to remove]); unchanged ones noted."""
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
    return moving, removed


def _staying_claims(plan, staying):
    """{RECORD path: [(distribution name, hash)]} of the distributions that stay in the destination."""
    claims = {}
    for dist in staying:
        entries = _dest_entries(dist)
        if entries is None:
            plan.warnings.append("destination %s %s has no RECORD; it claims no files" % (dist.name, dist.version))
            continue
        for entry in entries:
            claims.setdefault(entry.path, []).append((dist.name, entry.hash))
    return claims


@dataclass(frozen=True)
class _Incoming:
    """What every incoming distribution is planned against: one per build_plan.

    ``incoming`` ({RECORD path: (distribution name, hash)}) fills as distributions are planned,
    so a file two of them claim is caught.
    """

    plan: Plan
    source: object
    dest: object
    tree: _DestTree
    staying_claims: dict
    incoming: dict


def _plan_incoming(ctx, src, olds):
    """The writes of one incoming distribution (its files, then its dist-info with a new RECORD)."""
    plan, source, dest, tree = ctx.plan, ctx.source, ctx.dest, ctx.tree
    staying_claims, incoming = ctx.staying_claims, ctx.incoming
    plan.moved.append({
        "name": src.name, "from": olds[0].version if olds else None, "to": src.version,
        "dist_info": src.dist_info, "old_dist_infos": [d.dist_info for d in olds],
    })
    site_packages = dest.site_packages
    record_path = src.dist_info + "/RECORD"
    info_prefix = src.dist_info + "/"
    new_entries = []
    info_files = []
    files = src.files
    last_parent = listing = None
    for entry in src.entries:
        path = entry.path
        sfile = files[path]
        full = site_packages + "/" + path if path[:3] != "../" else resolve(site_packages, path)
        parent, dummy, name = full.rpartition("/")
        if parent != last_parent:  # RECORD lists a directory's files together
            listing = tree.listing(parent, full)
            last_parent = parent
        kind = listing.get(name) if listing is not None else None
        if path[:len(BIN_PREFIX)] == BIN_PREFIX:
            data = rewrite_script(_read(source, sfile), source.prefixes, dest.root)
            op = WriteOp(path, source=sfile, data=data, size=len(data), full=full)
            entry = RecordEntry(path, hash_bytes(data), len(data))
            script = True
        else:
            op = WriteOp(path, sfile, None, sfile.size, sfile.mode, sfile.mtime_ns, False, full)
            script = False
        new_entries.append(entry)
        if path in staying_claims:
            for other, other_hash in staying_claims[path]:
                if script or not entry.hash or other_hash != entry.hash:
                    raise PlanError("%s of incoming %s is also claimed by %s, which stays, with other content: "
                                    "add %s to remove (or move it too)" % (path, src.name, other, other))
        prior = incoming.get(path)
        if prior is not None:
            if prior[1] != entry.hash or not entry.hash:
                raise PlanError("%s is claimed by both incoming %s and %s with different content"
                                % (path, prior[0], src.name))
            continue
        incoming[path] = (src.name, entry.hash)
        if path.startswith(info_prefix):
            if path != record_path:
                info_files.append(op)
            continue
        if kind == _DIR:
            raise PlanError("%s of %s would replace a directory in the destination" % (path, src.name))
        op.existed = kind is not None
        plan.writes.append(op)
    record_data = format_record(new_entries).encode("utf-8")
    rec_source = files.get(record_path)
    info_files.append(WriteOp(record_path, data=record_data, mode=0o644,
                              mtime_ns=rec_source.mtime_ns if rec_source else None))
    existed = tree.kind(os.path.join(site_packages, src.dist_info), check=False) is not None
    plan.dist_info_writes.append(DistInfoOp(src.dist_info, existed, info_files))


def _plan_deletes(plan, leaving, dest, tree, staying_claims, incoming):
    """The files of leaving distributions that nothing incoming or staying claims, and are on disk."""
    deletes = set()
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
            if tree.kind(full, check=False) is None:
                continue
            tree.kind(full)
            if entry.path not in deletes:
                deletes.add(entry.path)
                plan.deletes.append(entry.path)


def build_plan(run_id, source, selected, dest, remove=(), check_abi=True):
    """Compute the plan; raise PlanError (with the reason) before anything changes."""
    plan = Plan(run_id, dest)
    if check_abi:
        _check_abi(plan, selected, dest)
    dest_dists = list_dists(dest.site_packages)
    moving, removed = _moving_and_removed(plan, selected, dest, dest_dists, remove)
    if not moving and not removed:
        return plan

    leaving = [d for dummy, olds in moving for d in olds] + removed
    leaving_ids = set(d.dist_info for d in leaving)
    staying_claims = _staying_claims(plan, [d for d in dest_dists if d.dist_info not in leaving_ids])
    tree = _DestTree(dest)
    incoming = {}  # path -> (dist name, hash)
    ctx = _Incoming(plan, source, dest, tree, staying_claims, incoming)
    for src, olds in moving:
        _plan_incoming(ctx, src, olds)
    plan.new_dirs = tree.needed_dirs(plan.writes)
    _plan_deletes(plan, leaving, dest, tree, staying_claims, incoming)
    for dist in removed:
        plan.removed.append({"name": dist.name, "version": dist.version, "dist_info": dist.dist_info})

    plan.final_claims = set(staying_claims) | set(incoming)
    plan.kept_shared = sorted(set(plan.kept_shared))
    plan.writes.sort(key=lambda w: -w.size)
    return plan


def _read(source, sfile):
    return source.read(sfile)
