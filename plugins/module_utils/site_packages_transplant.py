# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""site_packages_transplant without Ansible: transplant() and pack_bundle().

Both return the module's result dict and raise TransplantError with a
message a person can act on.  Standard library only.
"""

from __future__ import annotations

import errno
import gc
import os
import stat
from dataclasses import dataclass, replace

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import kind_of
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import list_dists, normalize_name
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import resolve
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError, open_venv
from ansible_collections.dflash.deploy.plugins.module_utils.transplant import converged
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.bundle import Bundle, BundleError, pack
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.fastcopy import (
    CopyError,
    Placer,
    default_workers,
)
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import (
    STATE_DIRNAME,
    Journal,
    JournalError,
    validate_plan,
)
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.plan import (
    PlanError,
    build_plan,
    untagged_warning,
)
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.run import RunError, Runner, new_run_id
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.source import (
    BundleSource,
    SourceError,
    VenvSource,
)


@dataclass(frozen=True)
class Settings:
    """What one transplant run is asked to do: the module's options, as transplant() takes them."""

    dest: str
    src: str | None = None
    bundle: str | None = None
    distributions: list | None = None
    remove: tuple = ()
    link: str = "auto"
    keep_backups: int = 0
    do_fsync: bool = False
    workers: int | None = None
    verify_source: bool = False
    check_mode: bool = False
    diff: bool = False


class TransplantError(Exception):
    def __init__(self, msg, **details):
        Exception.__init__(self, msg)
        self.details = details


_KNOWN = (BundleError, VenvError, CopyError, JournalError, PlanError, RunError, SourceError)


def _os_message(exc, dest_root):
    where = " (%s)" % exc.filename if exc.filename else ""
    if exc.errno == errno.EROFS:
        return "destination %s is on a read-only filesystem%s; nothing was changed" % (dest_root, where)
    if exc.errno == errno.ENOSPC:
        return ("no space left on the destination filesystem of %s%s; the run was rolled back and nothing "
                "was changed" % (dest_root, where))
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied writing into %s%s; nothing was changed" % (dest_root, where)
    return "%s: %s" % (exc.filename or dest_root, exc.strerror or exc)


def _same_venv(a, b):
    try:
        return os.path.samefile(a.root, b.root) or os.path.samefile(a.site_packages, b.site_packages)
    except OSError:
        return False


def _diff(dest_dists, plan):
    before_lines = []
    after_lines = []
    current = dict((d.key, d) for d in dest_dists)
    names = sorted(set([normalize_name(m["name"]) for m in plan.moved] + [normalize_name(r["name"]) for r in
                                                                          plan.removed]))
    moved = dict((normalize_name(m["name"]), m) for m in plan.moved)
    for key in names:
        dist = current.get(key)
        if dist is not None:
            before_lines.append("%s==%s" % (dist.name, dist.version))
        if key in moved:
            after_lines.append("%s==%s" % (moved[key]["name"], moved[key]["to"]))
    return {"before": "\n".join(before_lines) + ("\n" if before_lines else ""),
            "after": "\n".join(after_lines) + ("\n" if after_lines else ""),
            "before_header": "distributions", "after_header": "distributions"}


def transplant(dest, src=None, bundle=None, distributions=None, remove=(), link="auto", keep_backups=0,
               do_fsync=False, workers=None, verify_source=False, check_mode=False, diff=False):
    # Tens of thousands of small objects per run (one RECORD entry, source file and write per
    # file) and no reference cycles among them: the cyclic collector would only rescan them.
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        return _transplant(Settings(dest, src, bundle, distributions, remove, link, keep_backups, do_fsync, workers,
                                    verify_source, check_mode, diff))
    finally:
        if gc_enabled:
            gc.enable()


def _transplant(settings):
    settings = replace(settings, workers=settings.workers or default_workers())
    try:
        dest_venv = open_venv(settings.dest)
    except VenvError as exc:
        raise TransplantError("destination: %s" % exc) from exc
    journal = Journal(os.path.join(dest_venv.root, STATE_DIRNAME))
    try:
        # The lock comes first: what the source holds, the pending journal, the plan and the bundle
        # check are all read under it, so a second run into this venv cannot act on a stale plan.
        if not settings.check_mode:
            journal.lock()
    except _KNOWN as exc:
        raise TransplantError(str(exc)) from exc
    except OSError as exc:
        raise TransplantError(_os_message(exc, dest_venv.root), errno=exc.errno) from exc
    try:
        return _locked(journal, dest_venv, settings)
    finally:
        journal.unlock()


def _load_source(dest_venv, settings):
    src, bundle, link = settings.src, settings.bundle, settings.link
    source = None
    selected = []
    try:
        if src:
            src_venv = open_venv(src)
            if _same_venv(src_venv, dest_venv):
                raise TransplantError("src and dest are the same venv (%s)" % dest_venv.root)
            source = VenvSource(src_venv)
        elif bundle:
            if link in ("hardlink", "reflink"):
                raise TransplantError("link=%s needs a source venv; bundle members can only be copied" % link)
            source = BundleSource(bundle)
        if source is not None:
            selected = source.load(settings.distributions or [], verify_hashes=settings.verify_source)
    except _KNOWN as exc:
        raise TransplantError(str(exc)) from exc
    return source, selected


def _new_result():
    return {"changed": False, "recovered": None, "moved": [], "removed": [], "unchanged": [], "kept_shared": [],
            "files_copied": 0, "files_linked": 0, "bytes_copied": 0, "bytes_linked": 0, "files_removed": 0,
            "link_methods": [], "backup": None, "backup_kept": False, "warnings_list": [], "fast_path": False}


def _converged(journal, dest_venv, settings):
    """The answer of a bundle re-run with nothing to do, from the last run's record; None: take the full path.

    Only lstats (see transplant/converged.py): no bundle, RECORD or file content is read. Whatever
    the full path would refuse or repair (an interrupted run, another bundle or option, a changed
    file or distribution) is a miss, and the full path decides.
    """
    if not settings.bundle or settings.src or settings.link not in ("auto", "copy"):
        return None
    try:
        if journal.pending() is not None:
            return None
    except (JournalError, OSError):
        return None
    answer, dummy = converged.check(dest_venv, settings.bundle, settings.distributions, settings.remove)
    if answer is None:
        return None
    result = _new_result()
    result.update(unchanged=answer.unchanged, warnings_list=answer.warnings, fast_path=True,
                  plan={"files_to_write": 0, "bytes_to_write": 0, "files_to_delete": 0, "dist_info_to_remove": 0,
                        "files_kept_shared": 0})
    if settings.diff:
        result["diff"] = {"before": "", "after": "", "before_header": "distributions",
                          "after_header": "distributions"}
    return result


def _remember(dest_venv, source, selected, settings):
    """After a bundle run that succeeded: record what is in place, for the next run's shortcut."""
    if settings.check_mode or not isinstance(source, BundleSource):
        return
    try:
        data = converged.build(dest_venv, source.bundle, settings.distributions, settings.remove, selected,
                               [untagged_warning(src) for src in selected if not src.wheel_tags])
    except (OSError, ValueError, converged.NotInPlace):
        return
    converged.write(dest_venv, data)


def _locked(journal, dest_venv, settings):
    fast = _converged(journal, dest_venv, settings)
    if fast is not None:
        return fast
    check_mode, diff, workers = settings.check_mode, settings.diff, settings.workers
    source, selected = _load_source(dest_venv, settings)
    placer = Placer(settings.link, settings.do_fsync, workers)
    runner = Runner(journal, placer, settings.keep_backups, workers)
    result = _new_result()
    try:
        pending = journal.pending()
        if pending is not None:
            validate_plan(pending[1], pending[0]["run_id"], dest_venv.site_packages, dest_venv.root,
                          journal.state_dir)
            if check_mode:
                result["recovered"] = {"run_id": pending[0]["run_id"], "phase": pending[0]["phase"],
                                       "action": "pending"}
                result["changed"] = True
            else:
                converged.forget(dest_venv.root)
                result["recovered"] = runner.recover(dest_venv.site_packages)
                result["changed"] = True
        plan = build_plan(new_run_id(), source, selected, dest_venv, settings.remove or ())
        if plan.has_work and isinstance(source, BundleSource):
            source.verify(selected, workers)  # before anything changes
        dest_dists = list_dists(dest_venv.site_packages) if diff else []
        result.update(_summary(plan))
        if diff:
            result["diff"] = _diff(dest_dists, plan)
        if not plan.has_work:
            _remember(dest_venv, source, selected, settings)
            return _finish(result, placer, runner, plan, runner.guard)
        result["changed"] = True
        if check_mode:
            return result
        check_writable(plan, journal.state_dir)
        converged.forget(dest_venv.root)
        runner.execute(plan)
    except _KNOWN as exc:
        raise TransplantError(str(exc)) from exc
    except OSError as exc:
        raise TransplantError(_os_message(exc, dest_venv.root), errno=exc.errno) from exc
    _remember(dest_venv, source, selected, settings)
    return _finish(result, placer, runner, plan, runner.guard)


def _finish(result, placer, runner, plan, guard):
    result.update({
        "files_copied": placer.files_copied, "files_linked": placer.files_linked,
        "bytes_copied": placer.bytes_copied, "bytes_linked": placer.bytes_linked,
        "files_removed": len(plan.deletes) if plan.has_work else 0, "link_methods": sorted(placer.methods),
        "backup": runner.backup, "backup_kept": runner.backup_kept,
    })
    if guard.refused:
        result["warnings_list"] = list(result["warnings_list"]) + [
            "%d path(s) resolved outside the venv when the run came to them and were left alone, e.g. %s"
            % (len(guard.refused), guard.refused[0])]
    return result


def check_writable(plan, state_dir):
    """Refuse before anything changes when a directory the run writes in is on a read-only mount.

    A read-only bind mount over site-packages or bin/ (or the whole venv) shows in statvfs(2)
    of each directory; one call per distinct directory.
    """
    dirs = set([os.path.dirname(state_dir)])
    sp = plan.dest.site_packages
    for op in plan.writes:
        dirs.add((op.full or resolve(sp, op.path)).rpartition("/")[0])
    for path in plan.deletes:
        dirs.add(resolve(sp, path).rpartition("/")[0])
    if plan.dist_info_writes or plan.old_dist_infos:
        dirs.add(sp)
    checked = set()
    for directory in sorted(dirs):
        while not os.path.isdir(directory):  # to be made: its nearest existing parent is written
            directory = os.path.dirname(directory)
        if directory in checked:
            continue
        checked.add(directory)
        try:
            flags = os.statvfs(directory).f_flag
        except OSError:
            continue
        if flags & getattr(os, "ST_RDONLY", 1):
            raise OSError(errno.EROFS, "read-only file system", directory)


def _summary(plan):
    return {
        "moved": [{"name": m["name"], "from": m["from"], "to": m["to"]} for m in plan.moved],
        "removed": [{"name": r["name"], "version": r["version"]} for r in plan.removed],
        "unchanged": plan.unchanged,
        "kept_shared": plan.kept_shared,
        "warnings_list": plan.warnings,
        "plan": {
            "files_to_write": len(plan.writes) + sum(len(d.files) for d in plan.dist_info_writes),
            "bytes_to_write": plan.bytes_total,
            "files_to_delete": len(plan.deletes),
            "dist_info_to_remove": len(plan.old_dist_infos),
            "files_kept_shared": len(plan.kept_shared),
        },
    }


def _pack_items(source, dists):
    items = []
    for dist in dists:
        items.append({
            "name": dist.name, "version": dist.version, "dist_info": dist.dist_info, "wheel_tags": dist.wheel_tags,
            "files": [{"path": e.path, "src": dist.files[e.path].src, "size": dist.files[e.path].size,
                       "mode": dist.files[e.path].mode, "mtime": dist.files[e.path].mtime_ns // 1000000000}
                      for e in dist.entries],
        })
    return items


def _bundle_matches(path, items):
    """Stat-only: does the bundle at path already hold exactly these files (size, mode, mtime)?"""
    try:
        existing = Bundle(path)
    except BundleError:
        return False
    have = existing.distributions
    if len(have) != len(items):
        return False
    for old, new in zip(have, items):  # noqa: B905 (lengths compared above; py3.8 hosts lack strict=)
        if (old["name"], old["version"], old["dist_info"]) != (new["name"], new["version"], new["dist_info"]):
            return False
        if [(f["path"], f["size"], f["mode"], f["mtime"]) for f in old["files"]] != \
                [(f["path"], f["size"], f["mode"] & 0o7777, f["mtime"]) for f in new["files"]]:
            return False
    return True


def _check_bundle_target(bundle, src_venv):
    """The bundle path may name a new file or an existing bundle; never the source venv or another file."""
    real = os.path.realpath(bundle)
    root = os.path.realpath(src_venv.root)
    if real == root or real.startswith(root + "/"):
        raise TransplantError("bundle %s lies inside the source venv %s; write it elsewhere" % (bundle, src_venv.root))
    try:
        st = os.lstat(bundle)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise TransplantError("bundle %s is a symbolic link; name the file itself" % bundle)
    if not stat.S_ISREG(st.st_mode):
        raise TransplantError("bundle %s exists and is %s; refusing to replace it" % (bundle, kind_of(st.st_mode)))
    try:
        Bundle(bundle)
    except BundleError:
        raise TransplantError("%s exists and is not a bundle; refusing to replace it (remove it first)"
                              % bundle) from None


def pack_bundle(src, bundle, distributions, check_mode=False, workers=None):
    try:
        src_venv = open_venv(src)
        source = VenvSource(src_venv)
        dists = source.load(distributions)
    except _KNOWN as exc:
        raise TransplantError(str(exc)) from exc
    items = _pack_items(source, dists)
    result = {"changed": False, "bundle": bundle, "files_copied": sum(len(i["files"]) for i in items),
              "bytes_copied": sum(f["size"] for i in items for f in i["files"]),
              "distributions": [{"name": d.name, "version": d.version} for d in dists], "warnings_list": []}
    _check_bundle_target(bundle, src_venv)
    if os.path.exists(bundle) and _bundle_matches(bundle, items):
        result.update(files_copied=0, bytes_copied=0, size=os.path.getsize(bundle))
        return result
    result["changed"] = True
    if check_mode:
        return result
    parent = os.path.dirname(os.path.abspath(bundle))
    if not os.path.isdir(parent):
        raise TransplantError("directory %s for the bundle does not exist" % parent)
    try:
        pack(bundle, src_venv.root, src_venv.version, items)
    except (BundleError, OSError) as exc:
        raise TransplantError("writing bundle %s failed: %s" % (bundle, exc)) from exc
    result["size"] = os.path.getsize(bundle)
    return result
