# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the fast path's record lives and how it is written and read (``dflash.deploy.deploy_state``).

The record decides whether a run skips every check of the full path, so only root may have written it:

- it lives only in the collection's own directory (``RECORD_DIR``), never in a shared one
  (``path_error``: a record in ``/var/lib`` would have the module chmod ``/var/lib``);
- that directory is root's, a real directory, writable by no group or other user, and so is every
  directory above it (``dir_problem``); the module makes it 0700 when it is missing and never changes
  an existing one: one that fails is refused on writing and makes a check answer "not converged";
- the record itself is a regular file of root's that no group or other user may write
  (``read_record``), written through a new temporary file (``O_EXCL``, ``O_NOFOLLOW``:
  ``tempfile.mkstemp``), so no file someone else prepared becomes the record.

Standard library only.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import tempfile

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import open_regular

RECORD_DIR = "/var/lib/dflash-deploy"
MAX_RECORD_BYTES = 16 << 20


class RecordError(Exception):
    """The record or its directory cannot be trusted (one line, naming the path and what to do)."""


def _who(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def path_error(path, record_dir=RECORD_DIR):
    """Why ``path`` may not be the record (None when it may): a file directly in ``record_dir``."""
    norm = os.path.normpath(path or "")
    name = os.path.basename(norm)
    if not norm.startswith("/") or os.path.dirname(norm) != record_dir or name.startswith(".") or not name:
        return ("deploy_state_file %s: the record must be a file directly in %s, the directory the collection owns "
                "(a shared directory would be made root's alone); nothing was changed" % (path, record_dir))
    return None


def _dir_line(path, st, what_dir):
    """The problem with one directory's stat (None when it is root's and not writable by others)."""
    if stat.S_ISLNK(st.st_mode):
        return "%s %s is a symlink (-> %s): the record is trusted only in root's own directory; remove the link" % (
            what_dir, path, os.readlink(path))
    if not stat.S_ISDIR(st.st_mode):
        return "%s %s is not a directory: move it away" % (what_dir, path)
    if st.st_uid != 0:
        return "%s %s is owned by %s, not root: whoever owns it can forge the record; check it, then " \
               "chown root:root it" % (what_dir, path, _who(st.st_uid))
    sticky = st.st_mode & stat.S_ISVTX and what_dir != "the record's directory"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
        return "%s %s is writable by group or others (mode %04o): whoever can write it can forge the record; " \
               "chmod go-w it" % (what_dir, path, stat.S_IMODE(st.st_mode))
    return None


def dir_problem(directory):
    """One line naming the first directory that makes a record in ``directory`` untrustworthy (itself, then
    every directory above it; a missing one is no problem: the module makes it), else None."""
    norm = os.path.normpath(directory)
    chain = [norm]
    while chain[-1] != "/":
        chain.append(os.path.dirname(chain[-1]))
    for i, path in enumerate(chain):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        line = _dir_line(path, st, "the record's directory" if i == 0 else "the directory")
        if line:
            return line
    return None


def make_dir(directory):
    """Make the record's directory (0700, root's) when it is missing, then check it: RecordError when the
    directory (or one above it) is not root's alone. An existing directory is never changed."""
    problem = dir_problem(directory)
    if problem:
        raise RecordError(problem)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(directory, 0o700, follow_symlinks=False)
    problem = dir_problem(directory)
    if problem:
        raise RecordError(problem)


def write_record(path, record):
    """Write ``record`` as JSON to ``path`` (0600) through a new temporary file in the same directory."""
    directory = os.path.dirname(path)
    make_dir(directory)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, sort_keys=True, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def read_record(path):
    """The record at ``path``: None when there is none, {} when it is not JSON; RecordError when it, or
    its directory, is not root's alone (a record someone else could write is never compared)."""
    problem = dir_problem(os.path.dirname(path))
    if problem:
        raise RecordError(problem)
    try:
        fd = open_regular(path, nofollow=True)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError("the record %s cannot be read (%s): remove it" % (path, exc.strerror or exc)) from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise RecordError("the record %s is owned by %s with mode %04o, not root's alone: it is not trusted; "
                              "remove it" % (path, _who(st.st_uid), stat.S_IMODE(st.st_mode)))
        data = handle.read(MAX_RECORD_BYTES + 1)
    try:
        return json.loads(data.decode("utf-8")) if len(data) <= MAX_RECORD_BYTES else {}
    except ValueError:
        return {}
