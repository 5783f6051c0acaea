# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The transplant journal: which phase an interrupted run reached.

Layout under the state directory (``<venv>/.dflash-transplant``)::

    plan-<run>.json         the full plan, written once before anything changes
    journal.json            {"run_id", "phase", "plan"}, replaced atomically per phase
    backup-<run>/           files the run replaced or removed (hardlinks)

The run lock is a flock(2) on the destination venv's own directory, taken
before anything is read or planned; it creates nothing.  The state directory
is made by the run (never followed through a symlink), and what it holds is
input like any other: ``pending`` checks the plan's shape and every path in
it as strictly as a freshly built plan (``validate_plan``) before recovery
acts on it.

Phases, in order.  Before ``committing`` an interrupted run is rolled back;
from ``committing`` on it is finished (every step after the commit point is
an idempotent deletion).  Journal and plan writes are fsynced (file and
directory), so the phase on disk is never ahead of or behind what happened
before it; file data is only fsynced when asked (see the module docs).
Standard library only.
"""


import errno
import fcntl
import json
import os
import re
import signal
import stat
import time

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import (  # noqa: F401 (STATE_DIRNAME re-exported)
    STATE_DIRNAME,
    RecordError,
    normalize_record_path,
)

PHASES = ("planned", "backing_up", "writing_files", "writing_dist_info", "committing", "cleaning_up")
COMMIT_PHASE = "committing"
JOURNAL_NAME = "journal.json"
CRASH_ENV = "_DFLASH_TRANSPLANT_CRASH_AT"
PAUSE_ENV = "_DFLASH_TRANSPLANT_PAUSE_AT"
PAUSE_FILE_ENV = "_DFLASH_TRANSPLANT_PAUSE_FILE"
_RUN_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{0,63}$")
_DIST_INFO = re.compile(r"^[^/\x00]+\.dist-info$")
MAX_STATE_FILE_BYTES = 256 << 20  # a plan lists every file of the run: torch's is about 1 MB


class JournalError(Exception):
    pass


def is_committed(phase):
    return PHASES.index(phase) >= PHASES.index(COMMIT_PHASE)


def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path, data, do_fsync=True):
    """Write bytes to path via a new temp file (never through a link planted at its name) + rename."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        os.unlink(tmp)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if do_fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    if do_fsync:
        fsync_dir(os.path.dirname(path))


class CrashHook:
    """Test hooks, unset (always, outside tests) they do nothing:

    - ``_DFLASH_TRANSPLANT_CRASH_AT=<phase>[:<n>]`` kills the process with SIGKILL when
      ``phase`` has completed ``n`` steps (0 = as it starts);
    - ``_DFLASH_TRANSPLANT_PAUSE_AT=<phase>[:<n>]`` instead creates the file named by
      ``_DFLASH_TRANSPLANT_PAUSE_FILE`` (default /run/dflash-transplant-paused) and waits there,
      so that a test can stop the whole host in the middle of that phase."""

    def __init__(self, spec=None, pause=None):
        spec = os.environ.get(CRASH_ENV, "") if spec is None else spec
        pause = os.environ.get(PAUSE_ENV, "") if pause is None else pause
        self.phase, self.count = self._parse(CRASH_ENV, spec)
        self.pause_phase, self.pause_count = self._parse(PAUSE_ENV, pause)

    @staticmethod
    def _parse(env, spec):
        if not spec:
            return None, 0
        phase, dummy, count = spec.partition(":")
        if phase not in PHASES:
            raise JournalError("%s names unknown phase %r" % (env, phase))
        return phase, int(count or 0)

    def __call__(self, phase, done):
        if self.phase == phase and done >= self.count:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.pause_phase == phase and done >= self.pause_count:
            marker = os.environ.get(PAUSE_FILE_ENV) or "/run/dflash-transplant-paused"
            with open(marker, "w") as fh:
                fh.write("%s:%d %d\n" % (phase, done, os.getpid()))
            deadline = time.monotonic() + 3600
            while time.monotonic() < deadline:
                time.sleep(1)


class Journal:
    """The state directory of one destination venv."""

    def __init__(self, state_dir):
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, JOURNAL_NAME)
        self._lock_fd = None
        self.run_id = None
        self.plan_path = None
        self.crash = CrashHook()

    # -- locking -------------------------------------------------------
    def lock(self):
        """Take the run lock: flock(2) on the venv directory itself (fails fast if held; creates nothing)."""
        venv = os.path.dirname(self.state_dir)
        fd = os.open(venv, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise JournalError("another transplant into this venv is running (%s is locked)" % venv) from exc
            raise
        self._lock_fd = fd

    def unlock(self):
        """Release the lock; remove the state dir when nothing is left in it."""
        if self._lock_fd is None:
            return
        try:
            if not os.path.islink(self.state_dir):
                names = os.listdir(self.state_dir)
                if names == ["lock"]:  # left by an earlier version of this module
                    os.unlink(os.path.join(self.state_dir, "lock"))
                    names = []
                if not names:
                    os.rmdir(self.state_dir)
        except OSError:
            pass
        os.close(self._lock_fd)
        self._lock_fd = None

    def check_state_dir(self):
        """Refuse a state directory that is not a plain directory (a symlink would send journal and backups away)."""
        try:
            st = os.lstat(self.state_dir)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return False
            raise
        if not stat.S_ISDIR(st.st_mode):
            raise JournalError("%s is not a plain directory (%s); refusing to use it: remove it by hand"
                               % (self.state_dir, "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"))
        return True

    def make_state_dir(self):
        if not self.check_state_dir():
            os.mkdir(self.state_dir, 0o700)
            self.check_state_dir()

    # -- reading -------------------------------------------------------
    def pending(self):
        """(journal dict, plan dict) of an interrupted run, or None.  Both are checked, never trusted."""
        if not self.check_state_dir():
            return None
        try:
            state = json.loads(read_regular(self.path, MAX_STATE_FILE_BYTES, nofollow=True).decode("utf-8"))
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise JournalError("journal %s is unreadable: %s" % (self.path, exc.strerror or exc)) from exc
        except ValueError as exc:
            raise JournalError("journal %s is unreadable: %s" % (self.path, exc)) from exc
        if not isinstance(state, dict):
            raise JournalError("journal %s is unreadable: not an object" % self.path)
        if state.get("phase") not in PHASES:
            raise JournalError("journal %s names unknown phase %r" % (self.path, state.get("phase")))
        run_id = state.get("run_id")
        if not isinstance(run_id, str) or not _RUN_ID.match(run_id) or state.get("plan") != "plan-%s.json" % run_id:
            raise JournalError("journal %s names no run this module wrote (run %r, plan %r); refusing to recover "
                               "from it" % (self.path, run_id, state.get("plan")))
        plan_path = os.path.join(self.state_dir, state["plan"])
        try:
            plan = json.loads(read_regular(plan_path, MAX_STATE_FILE_BYTES, nofollow=True).decode("utf-8"))
        except OSError as exc:
            raise JournalError("plan %s of the interrupted run is unreadable: %s"
                               % (plan_path, exc.strerror or exc)) from exc
        except ValueError as exc:
            raise JournalError("plan %s of the interrupted run is unreadable: %s" % (plan_path, exc)) from exc
        self.run_id = state["run_id"]
        self.plan_path = plan_path
        return state, plan

    # -- writing -------------------------------------------------------
    def begin(self, run_id, plan):
        """Write the plan, then the journal at phase ``planned``."""
        self.make_state_dir()
        self.run_id = run_id
        name = "plan-%s.json" % run_id
        self.plan_path = os.path.join(self.state_dir, name)
        write_atomic(self.plan_path, json.dumps(plan, separators=(",", ":")).encode("utf-8"))
        self._write("planned")

    def set_phase(self, phase):
        self._write(phase)

    def _write(self, phase):
        state = {"run_id": self.run_id, "phase": phase, "plan": os.path.basename(self.plan_path)}
        write_atomic(self.path, json.dumps(state).encode("utf-8"))
        self.crash(phase, 0)

    def finish(self):
        """Forget the run: journal first (the commit of the cleanup), then the plan."""
        for path in (self.path, self.plan_path):
            if path:
                try:
                    os.unlink(path)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        raise
        # a kill during write_atomic() or before the journal existed leaves temp or plan files
        for name in os.listdir(self.state_dir):
            if name.startswith(JOURNAL_NAME + ".tmp-") or name.startswith("plan-"):
                try:
                    os.unlink(os.path.join(self.state_dir, name))
                except OSError:
                    pass
        fsync_dir(self.state_dir)
        self.run_id = None
        self.plan_path = None


def validate_plan(plan, run_id, site_packages, venv_root, state_dir):
    """Check a plan read back from the state directory exactly as a fresh one is built.

    Every path must be a RECORD path ``normalize_record_path`` accepts (inside
    the venv, not in the state directory), every dist-info a plain
    ``*.dist-info`` name, every directory to remove inside the venv, and the
    plan must be for this venv's site-packages.  Raises JournalError naming
    what is wrong; recovery then does nothing.
    """
    def bad(why):
        return JournalError("the plan of interrupted run %s in %s is not one this module wrote (%s); refusing to "
                            "recover from it: look at it, then remove %s by hand" % (run_id, state_dir, why, state_dir))

    if not isinstance(plan, dict):
        raise bad("not an object")
    if plan.get("run_id") != run_id:
        raise bad("run id %r" % (plan.get("run_id"),))
    try:
        same = os.path.realpath(plan.get("site_packages")) == os.path.realpath(site_packages)
    except (TypeError, ValueError):
        same = False
    if not same:
        raise bad("it is for %r, not %s" % (plan.get("site_packages"), site_packages))

    def record_path(value):
        if not isinstance(value, str):
            raise bad("path %r is not a string" % (value,))
        try:
            if normalize_record_path(value) != value:
                raise bad("path %r is not normalized" % (value,))
        except RecordError as exc:
            raise bad(str(exc)) from None
        return value

    def pairs(key):
        value = plan.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, list) and len(v) == 2 and isinstance(v[1], bool)
                                                  for v in value):
            raise bad("%s is not a list of [path, existed]" % key)
        return value

    def strings(key):
        value = plan.get(key, [])
        if not isinstance(value, list):
            raise bad("%s is not a list" % key)
        return value

    for pair in pairs("writes"):
        record_path(pair[0])
    for path in strings("deletes") + strings("final_claims"):
        record_path(path)
    for pair in pairs("dist_info_writes"):
        name = pair[0]
        if not isinstance(name, str) or not _DIST_INFO.match(name):
            raise bad("dist-info %r" % (name,))
    for name in strings("old_dist_infos"):
        if not isinstance(name, str) or not _DIST_INFO.match(name):
            raise bad("dist-info %r" % (name,))
    roots = [os.path.abspath(venv_root), os.path.realpath(venv_root)]
    for directory in strings("new_dirs"):
        if not isinstance(directory, str) or directory != os.path.normpath(directory) or \
                not any(directory.startswith(root + "/") for root in roots) or \
                any(directory == os.path.join(root, STATE_DIRNAME) or directory.startswith(
                    os.path.join(root, STATE_DIRNAME) + "/") for root in roots):
            raise bad("directory %r is not inside the venv" % (directory,))
    for key in ("moved", "removed"):
        strings(key)
    return plan
