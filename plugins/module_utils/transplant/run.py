# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Carry out a transplant plan under the journal; finish or roll back an interrupted one.

Order of a run (each phase recorded in the journal before it starts):

1. planned            the plan is on disk; nothing changed
2. backing_up         hardlink every file about to be replaced or removed into backup-<run>/
3. writing_files      each new file: temp name in its directory, then rename over the target
4. writing_dist_info  old dist-info dirs move into the backup; new ones are built in a temp
                      dir and renamed into place (metadata appears last)
5. committing         the commit point: delete files that leave, stale .pyc, empty dirs
6. cleaning_up        drop (or keep, per keep_backups) the backup, forget the journal

An interrupted run found at phases 1-4 is rolled back from the backup (and its
temp files removed); at 5-6 it is finished.  Both are idempotent, so a crash
during recovery is recovered by the next run too.  Standard library only.
"""


import errno
import os
import shutil
import stat
import threading
import time

from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import resolve
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.bundle import member_name
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.fastcopy import CopyError, Job, run_parallel
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import (
    PHASES,
    is_committed,
    validate_plan,
)


class RunError(Exception):
    pass


def new_run_id():
    """Sortable by start time to the microsecond (backup rotation keeps the last names), then a salt."""
    now = time.time()
    salt = (os.getpid() ^ int(now * 1e6)) & 0xFFFFFF
    return "%s%06d-%06x" % (time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)), int(now * 1e6) % 1000000, salt)


def backup_root(state_dir, run_id):
    return os.path.join(state_dir, "backup-%s" % run_id)


def _tmp_name(parent, run_id, index):
    """The temp name of write number index, in its target's directory parent (forward and rollback)."""
    return "%s/.dflash-tmp-%s-%d" % (parent, run_id, index)


def _di_tmp_dir(site_packages, run_id, index):
    return os.path.join(site_packages, ".dflash-tmp-%s-di%d" % (run_id, index))


def _backup_path(backup, record_path):
    return os.path.join(backup, member_name(record_path))


def _unlink(path):
    try:
        os.unlink(path)
        return True
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
        return False


def _link_or_copy(src, dst):
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            os.unlink(dst)
            os.link(src, dst, follow_symlinks=False)
        elif exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            shutil.copy2(src, dst, follow_symlinks=False)
        else:
            raise


class Guard:
    """Containment of every path a run deletes, renames or lists: its directory, symlinks resolved,
    must lie inside the venv and outside the state directory.  Answers are cached per directory.
    """

    def __init__(self, venv_root, state_dir):
        self.root = os.path.realpath(venv_root)
        self.state = os.path.realpath(state_dir)
        self.dirs = {}
        self.refused = []

    def dir_ok(self, directory):
        ok = self.dirs.get(directory)
        if ok is None:
            real = os.path.realpath(directory)
            ok = (real == self.root or real.startswith(self.root + "/")) and \
                real != self.state and not real.startswith(self.state + "/")
            self.dirs[directory] = ok
        return ok

    def ok(self, full):
        """True when full's directory resolves inside the venv; else remember it and say False."""
        if self.dir_ok(os.path.dirname(full)):
            return True
        self.refused.append(full)
        return False


def _prune_dirs(paths, stops, guard=None):
    """rmdir empty parents of paths, deepest first, never above the stop dirs."""
    dirs = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent and parent not in stops and len(parent) > 1:
            if parent in dirs:
                break
            dirs.add(parent)
            parent = os.path.dirname(parent)
    for directory in sorted(dirs, key=lambda d: -d.count(os.sep)):
        if guard is not None and not guard.ok(directory):
            continue
        try:
            os.rmdir(directory)
        except OSError:
            pass


def _prune_stops(sp):
    """Where pruning emptied directories stops: site-packages, bin/ and the venv root (data-scheme
    files such as share/... lie under the root, outside site-packages)."""
    root = os.path.normpath(os.path.join(sp, "../../.."))
    return set([sp, os.path.join(root, "bin"), root])


class Runner:
    """Executes a Plan (see transplant_plan) with a Journal and a fastcopy.Placer."""

    def __init__(self, journal, placer, keep_backups, workers):
        self.journal = journal
        self.placer = placer
        self.keep_backups = keep_backups
        self.workers = workers
        self.crash = journal.crash
        self.backup = None
        self.backup_kept = False
        self.guard = Guard(os.path.dirname(journal.state_dir), journal.state_dir)

    # -- forward ---------------------------------------------------------
    def execute(self, plan):
        jplan = plan.to_journal()
        self.journal.begin(plan.run_id, jplan)
        try:
            self._backing_up(jplan)
            self._writing_files(plan)
            self._writing_dist_info(plan)
        except BaseException as exc:
            try:
                self.rollback(jplan)
                self._drop_backup(jplan["run_id"])
                self.journal.finish()
            except Exception as rb_exc:
                raise RunError("run failed (%s) and rolling back failed too (%s); the journal in %s "
                               "will finish the rollback on the next run"
                               % (exc, rb_exc, self.journal.state_dir)) from rb_exc
            raise
        self.journal.set_phase("committing")
        self.commit(jplan)
        self.journal.set_phase("cleaning_up")
        self.cleanup(jplan)

    def _backing_up(self, jplan):
        self.journal.set_phase("backing_up")
        sp = jplan["site_packages"]
        backup = backup_root(self.journal.state_dir, jplan["run_id"])
        self.backup = backup
        os.mkdir(backup, 0o700)  # a fresh directory: nothing planted beneath it is followed
        paths = [p for p, existed in jplan["writes"] if existed] + list(jplan["deletes"])
        made = set([backup])
        for count, path in enumerate(paths, 1):
            target = _backup_path(backup, path)
            parent = os.path.dirname(target)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            try:
                _link_or_copy(resolve(sp, path), target)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
            self.crash("backing_up", count)
        os.makedirs(os.path.join(backup, "site-packages"), exist_ok=True)

    def _writing_files(self, plan):
        self.journal.set_phase("writing_files")
        maker = _DirMaker(plan.new_dirs)
        try:
            self._place_files(plan, maker)
        finally:
            maker.close(raise_error=False)

    def _place_files(self, plan, maker):
        sp = plan.dest.site_packages
        run_id = plan.run_id
        crash = self.crash
        placer = self.placer
        writes = plan.writes
        fulls = [op.full or resolve(sp, op.path) for op in writes]
        # files in the order their directories appear, so placing follows the directory maker
        order = maker.order([full.rpartition("/")[0] for full in fulls])
        jobs = []
        count = 0
        fast = placer.links_in_place()
        for index in order:
            op = writes[index]
            full = fulls[index]
            maker.wait(full)
            # hardlink: link(2) is a few microseconds, cheaper in this thread than handed to a pool
            if fast and not op.existed and op.data is None and op.source.offset is None \
                    and placer.link_now(op.source.src, full, op.size):
                count += 1
                crash("writing_files", count)
                continue
            parent = full.rpartition("/")[0]
            job = _job(op, full, _tmp_name(parent, run_id, index), direct=not op.existed)
            if placer.needs_probe(job):
                _place_making_parent(placer, job, parent)  # auto mode picks its method on this one
                fast = placer.links_in_place()
            elif fast:
                _place_making_parent(placer, job, parent)
            else:
                jobs.append((index, job))
                continue
            count += 1
            crash("writing_files", count)
        maker.close()
        if not jobs:
            return
        # back to the plan's order: large first, so the long copies start early, and files of one
        # directory spread out, so the workers seldom wait on one directory's lock
        jobs.sort(key=lambda pair: pair[0])
        done = [count]

        def progress():
            done[0] += 1
            crash("writing_files", done[0])

        def place(job):
            _place_making_parent(placer, job, job.dest.rpartition("/")[0])

        run_parallel([job for dummy, job in jobs], place, self.workers, progress)

    def _writing_dist_info(self, plan):
        self.journal.set_phase("writing_dist_info")
        sp = plan.dest.site_packages
        backup_sp = os.path.join(backup_root(self.journal.state_dir, plan.run_id), "site-packages")
        for name in plan.old_dist_infos:
            src = os.path.join(sp, name)
            if os.path.lexists(src):
                os.rename(src, os.path.join(backup_sp, name))
        self.crash("writing_dist_info", 1)
        for index, dop in enumerate(plan.dist_info_writes):
            tmpdir = _di_tmp_dir(sp, plan.run_id, index)
            if os.path.isdir(tmpdir):
                shutil.rmtree(tmpdir)
            os.mkdir(tmpdir)
            jobs = []
            for op in dop.files:
                rel = op.path[len(dop.dist_info) + 1:]
                full = os.path.join(tmpdir, rel)
                if os.path.dirname(rel):
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                jobs.append(_job(op, full, full + ".dflash-tmp", direct=True))  # a fresh temp dir: all names new
            run_parallel(jobs, self.placer.place, 1)
            final = os.path.join(sp, dop.dist_info)
            if os.path.lexists(final):
                # a leftover no listing saw (not a directory, or no METADATA): keep it in the backup
                saved = os.path.join(backup_sp, dop.dist_info)
                if os.path.lexists(saved):
                    saved = saved + ".leftover"
                os.rename(final, saved)
            os.rename(tmpdir, final)
            self.crash("writing_dist_info", index + 2)

    # -- after the commit point: idempotent ------------------------------
    def commit(self, jplan):
        sp = jplan["site_packages"]
        deleted = []
        guard = self.guard
        for count, path in enumerate(jplan["deletes"], 1):
            full = resolve(sp, path)
            if guard.ok(full) and _unlink(full):
                deleted.append(full)
            self.crash("committing", count)
        deleted.extend(self._purge_pyc(jplan))
        _prune_dirs([resolve(sp, p) for p in jplan["deletes"]] + deleted, _prune_stops(sp), guard)

    def _purge_pyc(self, jplan):
        """Remove cached bytecode of replaced or deleted .py files that no RECORD claims."""
        sp = jplan["site_packages"]
        claims = set(jplan["final_claims"])
        created = set(jplan.get("new_dirs", ()))  # made by this run: no stale bytecode in them
        removed = []
        stems = {}  # directory (RECORD form) -> stems of its .py files
        for path in [p for p, dummy in jplan["writes"]] + list(jplan["deletes"]):
            if path.endswith(".py") and not path.startswith("../"):
                directory, dummy, base = path.rpartition("/")
                stems.setdefault(directory, set()).add(base[:-3])
        for directory, names in stems.items():
            if directory and sp + "/" + directory in created:
                continue
            cache_rel = directory + "/__pycache__" if directory else "__pycache__"
            cache = os.path.join(sp, cache_rel)
            try:
                if not stat.S_ISDIR(os.lstat(cache).st_mode):
                    continue  # a symlinked __pycache__ is not followed
                if not self.guard.ok(cache + "/x"):
                    continue
                listing = os.listdir(cache)
            except OSError:
                continue
            for name in listing:
                parts = name.rsplit(".", 2)  # <stem>.<tag>.pyc
                if len(parts) == 3 and parts[2] == "pyc" and parts[0] in names:
                    rel = cache_rel + "/" + name
                    if rel not in claims and _unlink(os.path.join(sp, rel)):
                        removed.append(os.path.join(sp, rel))
        return removed

    def cleanup(self, jplan):
        self._keep_or_drop_backup(jplan["run_id"])
        self.crash("cleaning_up", 1)
        self.journal.finish()

    def _drop_backup(self, run_id):
        backup = backup_root(self.journal.state_dir, run_id)
        if os.path.islink(backup):
            os.unlink(backup)  # never ours: a link is removed, not followed
        elif os.path.isdir(backup):
            shutil.rmtree(backup)
        self.backup_kept = False

    def _keep_or_drop_backup(self, run_id):
        backup = backup_root(self.journal.state_dir, run_id)
        self.backup = backup
        if self.keep_backups <= 0:
            self._drop_backup(run_id)
            return
        keep_dir = os.path.join(self.journal.state_dir, "backups")
        if os.path.islink(keep_dir):
            raise RunError("%s is a symbolic link; refusing to keep backups through it" % keep_dir)
        os.makedirs(keep_dir, exist_ok=True)
        kept = os.path.join(keep_dir, run_id)
        if os.path.isdir(backup):
            os.rename(backup, kept)
        self.backup = kept
        self.backup_kept = True
        old = sorted(os.listdir(keep_dir))
        for name in old[:-self.keep_backups]:
            shutil.rmtree(os.path.join(keep_dir, name), ignore_errors=True)

    # -- recovery ----------------------------------------------------------
    def rollback(self, jplan):
        """Undo phases 1-4 of a run: restore from its backup, remove what it added."""
        sp = jplan["site_packages"]
        run_id = jplan["run_id"]
        backup = backup_root(self.journal.state_dir, run_id)
        backup_sp = os.path.join(backup, "site-packages")
        # dist-info dirs first: new ones out, old ones back
        for index, (name, existed) in enumerate(jplan["dist_info_writes"]):
            tmpdir = _di_tmp_dir(sp, run_id, index)
            if os.path.isdir(tmpdir):
                shutil.rmtree(tmpdir)
            final = os.path.join(sp, name)
            saved = os.path.join(backup_sp, name)
            if existed:
                if os.path.lexists(saved):  # a directory, or a leftover file or link the run moved aside
                    if os.path.lexists(final):
                        shutil.rmtree(final)
                    os.rename(saved, final)
            elif os.path.lexists(final):
                shutil.rmtree(final)
        for name in jplan["old_dist_infos"]:
            saved = os.path.join(backup_sp, name)
            final = os.path.join(sp, name)
            if os.path.isdir(saved) and not os.path.lexists(final):
                os.rename(saved, final)
        added = []
        guard = self.guard
        for index, (path, existed) in enumerate(jplan["writes"]):
            full = resolve(sp, path)
            if not guard.ok(full):
                continue
            tmp = _tmp_name(os.path.dirname(full), run_id, index)
            _unlink(tmp)
            if existed:
                saved = _backup_path(backup, path)
                try:
                    saved_st = os.lstat(saved)
                except OSError:
                    continue  # never backed up, so never replaced
                try:
                    if os.path.samestat(saved_st, os.lstat(full)):
                        continue
                except OSError:
                    pass
                _link_or_copy(saved, tmp)
                os.rename(tmp, full)
            elif _unlink(full):
                added.append(full)
        if "new_dirs" not in jplan:  # a journal from before new_dirs was recorded: prune what emptied
            _prune_dirs(added, _prune_stops(sp), guard)
        # only the directories made for this run go, and only if left empty: one that was there
        # before, even empty, stays
        for directory in reversed(jplan.get("new_dirs", ())):
            if not guard.ok(directory):
                continue
            try:
                os.rmdir(directory)
            except OSError:
                pass

    def recover(self, site_packages):
        """Finish or roll back an interrupted run; returns a description or None.

        The plan read back is checked like a fresh one first (``journal.validate_plan``), and
        the run works in ``site_packages`` (this venv's), whatever the plan says.
        """
        pending = self.journal.pending()
        if pending is None:
            return None
        state, jplan = pending
        validate_plan(jplan, state["run_id"], site_packages, os.path.dirname(self.journal.state_dir),
                      self.journal.state_dir)
        jplan["site_packages"] = site_packages
        phase = state["phase"]
        if is_committed(phase):
            self.commit(jplan)
            self.journal.set_phase("cleaning_up")
            self.cleanup(jplan)
            action = "finished"
        else:
            self.rollback(jplan)
            self._drop_backup(jplan["run_id"])
            self.journal.finish()
            action = "rolled_back"
        return {"run_id": jplan["run_id"], "phase": phase, "action": action,
                "phase_index": PHASES.index(phase)}


class _DirMaker:
    """Makes the plan's missing directories (parents first) in a thread while files are placed.

    mkdir(2) on a journalling filesystem costs as much as tens of link(2)s; with the
    directories made beside the placing instead of before it, the two overlap.  wait(path)
    returns once path's directory exists (or raises what making it raised).
    """

    def __init__(self, dirs):
        self.dirs = dirs
        self.index = dict((d, i) for i, d in enumerate(dirs))
        self.made = 0  # dirs[:made] exist
        self.waiter = None  # the index the placing thread waits for
        self.error = None
        self.stop = False
        self.cond = threading.Condition()
        self.thread = None
        if dirs:
            self.thread = threading.Thread(target=self._run, name="transplant-mkdir")
            self.thread.daemon = True
            self.thread.start()

    def _run(self):
        cond = self.cond
        try:
            for done, directory in enumerate(self.dirs, 1):
                if self.stop:
                    break
                try:
                    os.mkdir(directory)
                except FileExistsError:
                    if not os.path.isdir(directory):
                        raise
                with cond:  # made and waiter change under the lock: no wake-up is lost
                    self.made = done
                    if self.waiter is not None and done > self.waiter:
                        cond.notify_all()
        except BaseException as exc:  # handed to the placing thread
            self.error = exc
        with cond:
            self.stop = True
            cond.notify_all()

    def order(self, parents):
        """Indices of files sorted by when their parent directory is made (existing ones first)."""
        index = self.index
        if not index:
            return range(len(parents))
        return sorted(range(len(parents)), key=lambda i: index.get(parents[i], -1))

    def wait(self, full):
        need = self.index.get(full.rpartition("/")[0])
        if need is None or self.made > need:
            return
        with self.cond:
            self.waiter = need
            while self.made <= need and not self.stop:
                self.cond.wait(1.0)
            self.waiter = None
        if self.made <= need:
            raise self.error or RunError("directory %s was not made" % self.dirs[need])

    def close(self, raise_error=True):
        """Stop and join the thread (before rollback, so it makes nothing afterwards)."""
        if self.thread is not None:
            self.stop = True
            self.thread.join()
            self.thread = None
        if raise_error and self.error is not None:
            raise self.error


def _place_making_parent(placer, job, parent):
    """placer.place(job); a parent directory that went missing since planning is made again."""
    try:
        placer.place(job)
    except (OSError, CopyError) as exc:
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if getattr(cause, "errno", None) != errno.ENOENT or os.path.isdir(parent):
            raise
        os.makedirs(parent, exist_ok=True)
        placer.place(job)


def _job(op, full, tmp, direct):
    src = op.source
    if op.data is not None:
        return Job(full, tmp, op.size, op.mode, op.mtime_ns, data=op.data, direct=direct)
    return Job(full, tmp, op.size, op.mode, op.mtime_ns, src=src.src, offset=src.offset, direct=direct)
