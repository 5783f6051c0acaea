# -*- coding: utf-8 -*-
# Copyright: (c) 2025, dflash.deploy maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The transplant journal: which phase an interrupted run reached.

Layout under the state directory (``<venv>/.dflash-transplant``)::

    lock                    flock(2) held for the whole run
    plan-<run>.json         the full plan, written once before anything changes
    journal.json            {"run_id", "phase", "plan"}, replaced atomically per phase
    backup-<run>/           files the run replaced or removed (hardlinks)

Phases, in order.  Before ``committing`` an interrupted run is rolled back;
from ``committing`` on it is finished (every step after the commit point is
an idempotent deletion).  Journal and plan writes are fsynced (file and
directory), so the phase on disk is never ahead of or behind what happened
before it; file data is only fsynced when asked (see the module docs).
Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import signal

PHASES = ("planned", "backing_up", "writing_files", "writing_dist_info", "committing", "cleaning_up")
COMMIT_PHASE = "committing"
STATE_DIRNAME = ".dflash-transplant"
JOURNAL_NAME = "journal.json"
CRASH_ENV = "_DFLASH_TRANSPLANT_CRASH_AT"


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
    """Write bytes to path via a temp file + rename (fsynced when asked)."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
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
    """Test hook: ``_DFLASH_TRANSPLANT_CRASH_AT=<phase>[:<n>]`` kills the process
    with SIGKILL when ``phase`` has completed ``n`` steps (0 = as it starts).
    Unset (always, outside tests) it does nothing."""

    def __init__(self, spec=None):
        spec = os.environ.get(CRASH_ENV, "") if spec is None else spec
        self.phase = None
        self.count = 0
        if spec:
            phase, dummy, count = spec.partition(":")
            if phase not in PHASES:
                raise JournalError("%s names unknown phase %r" % (CRASH_ENV, phase))
            self.phase = phase
            self.count = int(count or 0)

    def __call__(self, phase, done):
        if self.phase == phase and done >= self.count:
            os.kill(os.getpid(), signal.SIGKILL)


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
        """Create the state dir and take the run lock (fails fast if held)."""
        lock_path = os.path.join(self.state_dir, "lock")
        while True:
            os.makedirs(self.state_dir, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise JournalError("another transplant into this venv is running (lock in %s held)"
                                       % self.state_dir) from exc
                raise
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock_path))
            except OSError:
                same = False
            if same:
                self._lock_fd = fd
                return
            os.close(fd)  # the holder before us removed the lock file: take the new one

    def unlock(self):
        """Release the lock; remove the state dir when nothing but the lock is in it."""
        if self._lock_fd is None:
            return
        try:
            if os.listdir(self.state_dir) == ["lock"]:
                os.unlink(os.path.join(self.state_dir, "lock"))
                os.rmdir(self.state_dir)
        except OSError:
            pass
        os.close(self._lock_fd)
        self._lock_fd = None

    # -- reading -------------------------------------------------------
    def pending(self):
        """(journal dict, plan dict) of an interrupted run, or None."""
        try:
            with open(self.path, "rb") as handle:
                state = json.loads(handle.read().decode("utf-8"))
        except (IOError, OSError) as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        except ValueError as exc:
            raise JournalError("journal %s is unreadable: %s" % (self.path, exc)) from exc
        if state.get("phase") not in PHASES:
            raise JournalError("journal %s names unknown phase %r" % (self.path, state.get("phase")))
        plan_path = os.path.join(self.state_dir, state["plan"])
        try:
            with open(plan_path, "rb") as handle:
                plan = json.loads(handle.read().decode("utf-8"))
        except (IOError, OSError, ValueError) as exc:
            raise JournalError("plan %s of the interrupted run is unreadable: %s" % (plan_path, exc)) from exc
        self.run_id = state["run_id"]
        self.plan_path = plan_path
        return state, plan

    # -- writing -------------------------------------------------------
    def begin(self, run_id, plan):
        """Write the plan, then the journal at phase ``planned``."""
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
