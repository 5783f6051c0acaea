# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who controls the host layout, read before root writes anything (``layout_info``).

Every directory root is about to use must be one that no other user can swap or fill. The
request names them by role:

- ``root_dirs``: root's own, made and kept root-owned by sglang_service;
- ``shared_dirs``: root's own, made by other roles (releases, artifacts, tools);
- ``release_dirs``: directories whose entries are releases (each a real, root-owned directory, and
  everything inside it root's and not writable by others: root runs the release's interpreter);
- ``service_parents``: root's own, which versions before this one left to the service user
  (``/var/lib/dflash``, ``/var/cache/dflash``): the service user as owner is accepted, and the
  role puts root back;
- ``service_dirs``: the service user's instance directories (never a symlink);
- ``staged_dirs``: model directories root writes from the controller: root's, like
  ``root_dirs``, but wherever the operator put them;
- ``keep``: root's directories as the role keeps them (path, group, mode);
- ``parents_of``: paths whose every directory above must be root's and not writable by others
  (the unit directory, the layout's base: what a deploy writes below them).

The answer (``read_layout``): ``problems``, one line per path naming it and what to do;
``loose``, the existing shared directories and releases that others may write (the role removes
group/other write from them); ``unkept``, the ``keep`` paths that are not yet a directory owned
by root with that group and exactly that mode (followed as the file module follows them), the
only ones the role puts back.

A symlink is followed only when root made it (an operator's ``/opt/dflash -> /data/dflash``);
every directory above a layout path, and every directory on root's ``PATH`` and above it, must
be root's and not writable by others. Nothing is changed. Standard library only.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass

UV_LOCK = ".lock"  # the file uv leaves 0666 at the top of every venv it makes


@dataclass(frozen=True)
class Keep:
    """A directory as the role keeps it: root's, with ``group`` and exactly ``mode``."""

    path: str
    group: str
    mode: int


@dataclass(frozen=True)
class LayoutReading:
    """What the read found; each a tuple of paths or lines, in the order they were read."""

    problems: tuple
    loose: tuple
    unkept: tuple

    def as_dict(self):
        return {"problems": list(self.problems), "loose": list(self.loose), "unkept": list(self.unkept)}


def parse_mode(value):
    """A mode as the file module takes it in numbers: an int as it is, a string as octal ('0755').
    Raises ValueError for anything else (a symbolic mode such as 'u=rwx' is not a kept mode)."""
    if isinstance(value, bool):
        raise ValueError("mode %r is not an octal mode" % (value,))
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 8)
    except ValueError:
        raise ValueError("mode %r is not an octal mode such as '0755'" % (value,)) from None


def who(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def _lstat(path):
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _target(path):
    try:
        return os.readlink(path)
    except OSError:
        return "?"


class _Reader:
    """Collects the problems and loose paths of one read; ``seen`` keeps each ancestor checked once."""

    def __init__(self, service_user, service_group, layout_paths):
        self.problems = []
        self.loose = []
        self.seen = set()
        try:
            self.service_uid = pwd.getpwnam(service_user or "").pw_uid
        except KeyError:
            self.service_uid = None  # not created yet: nothing can be owned by it
        try:
            self.service_gid = grp.getgrnam(service_group or "").gr_gid
        except KeyError:
            self.service_gid = None
        self.layout = set(os.path.normpath(p) for p in layout_paths)

    def say(self, path, what):
        line = "host layout: %s %s" % (path, what)
        if line not in self.problems:
            self.problems.append(line)

    def writable_by_others(self, st):
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
            return False  # sticky (/tmp): others may add entries, not replace root's
        group_can = st.st_mode & stat.S_IWGRP and self.service_gid is not None and st.st_gid == self.service_gid
        return bool(st.st_mode & stat.S_IWOTH or group_can)

    def follow(self, path, st):
        """(stat of what path names, or None with a problem said) - a symlink only when root made it."""
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != 0:
                self.say(path, "is a symlink (-> %s) made by %s: root would follow it; remove it and check what "
                               "it points at" % (_target(path), who(st.st_uid)))
                return None
            try:
                st = os.stat(path)
            except OSError:
                self.say(path, "is a dangling symlink (-> %s): remove it or make its target" % _target(path))
                return None
            # What is above the target counts as what is above the link (round 3, M7: /opt/dflash -> /data/dflash
            # with /data another user's).
            self.ancestors(os.path.realpath(path))
        if not stat.S_ISDIR(st.st_mode):
            self.say(path, "is not a directory: move it away")
            return None
        return st

    def ancestors(self, path):
        """Every existing directory above path that is not itself a layout path: root's, not writable by others."""
        parts = os.path.normpath(path).split("/")[1:-1]
        for i in range(len(parts) + 1):
            above = "/" + "/".join(parts[:i])
            if above in self.layout or above in self.seen:
                continue
            self.seen.add(above)
            st = _lstat(above)
            if st is None:
                return
            st = self.follow(above, st)
            if st is None:
                return
            if st.st_uid != 0:
                self.say(above, "is owned by %s, not root: whoever owns it can replace what is below it; "
                                "chown root:root it" % who(st.st_uid))
            elif self.writable_by_others(st):
                self.say(above, "is writable by others (mode %04o): whoever can write it can replace what is below "
                                "it; chmod go-w it" % stat.S_IMODE(st.st_mode))

    def root_dir(self, path, shared=False, service_may_own=False):
        self.ancestors(path)
        st = _lstat(path)
        if st is None:
            return
        st = self.follow(path, st)
        if st is None:
            return
        if service_may_own and self.service_uid is not None and st.st_uid == self.service_uid:
            return  # what earlier versions made; its instance directories are checked, then root takes it back
        if st.st_uid != 0:
            self.say(path, "is owned by %s, not root: someone else may have changed what it holds; check it, "
                           "then chown root:root it" % who(st.st_uid))
        elif shared and self.writable_by_others(st):
            self.loose.append(path)

    def release(self, path):
        st = _lstat(path)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            self.say(path, "is a symlink (-> %s): a release is a directory that root built; remove the link"
                           % _target(path))
        elif not stat.S_ISDIR(st.st_mode):
            return  # a stray file: the release roles ignore it
        elif st.st_uid != 0:
            self.say(path, "is owned by %s, not root: its code may have been changed; remove the release"
                           % who(st.st_uid))
        elif not self.release_tree(path) and self.writable_by_others(st):
            self.loose.append(path)

    def release_tree(self, root):
        """Whether something inside the release is not root's alone: the first entry (a link included) that
        someone else owns, or a file or directory others may write, is said, and the release refused before
        root runs anything from it (its interpreter, uv's query of it)."""
        for parent, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(parent, name)
                st = _lstat(path)
                if st is None:
                    continue
                if st.st_uid != 0:
                    what = "owned by %s" % who(st.st_uid)
                elif path == os.path.join(root, UV_LOCK) and stat.S_ISREG(st.st_mode):
                    continue  # uv's venv lock, 0666 by uv: no code is read from it, and only root may replace it
                elif not stat.S_ISLNK(st.st_mode) and self.writable_by_others(st):
                    what = "writable by others (mode %04o)" % stat.S_IMODE(st.st_mode)
                else:
                    continue
                self.say(root, "holds %s, %s: root would run code someone else may have changed; remove the "
                               "release (a deploy builds it again)" % (path, what))
                return True
        return False

    def service_dir(self, path):
        self.ancestors(path)
        st = _lstat(path)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            self.say(path, "is a symlink (-> %s) made by %s: root would follow it and hand its target to the "
                           "service user; remove it and check what it points at" % (_target(path), who(st.st_uid)))
        elif not stat.S_ISDIR(st.st_mode):
            self.say(path, "is not a directory: move it away")
        elif st.st_uid not in (0, self.service_uid):
            self.say(path, "is owned by %s, not the service user or root: move it away" % who(st.st_uid))

    def path_dirs(self, path_env):
        for entry in (path_env or "").split(":"):
            if not entry.startswith("/") or _lstat(entry) is None:
                continue
            before = len(self.problems)
            self.ancestors(entry + "/x")  # the PATH directory itself and everything above it
            for i in range(before, len(self.problems)):
                self.problems[i] += " (on root's PATH: a command root runs by name could be replaced)"


def unkept(keep):
    """The paths of ``keep`` (Keep items) that are not a directory root:<group> with exactly <mode>, in order."""
    out = []
    for want in keep:
        try:
            st = os.stat(want.path)
            gid = grp.getgrnam(want.group).gr_gid
        except (OSError, KeyError):
            out.append(want.path)  # missing, unreadable, or its group not made yet
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_gid != gid \
                or stat.S_IMODE(st.st_mode) != want.mode:
            out.append(want.path)
    return out


def _release_entries(parent):
    try:
        names = sorted(os.listdir(parent))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return [os.path.join(parent, name) for name in names]


def read_layout(service_user="", service_group="", root_dirs=(), service_parents=(), shared_dirs=(),
                release_dirs=(), service_dirs=(), staged_dirs=(), keep=(), path_env="", parents_of=()):
    """Read who controls the layout (see the module's docstring); ``path_env`` is root's PATH.
    Returns a LayoutReading; changes nothing."""
    reader = _Reader(service_user, service_group,
                     list(root_dirs) + list(shared_dirs) + list(service_parents) + list(service_dirs))
    reader.path_dirs(path_env)
    for path in parents_of:
        reader.ancestors(os.path.normpath(path))
    for path in root_dirs:
        reader.root_dir(os.path.normpath(path))
    for path in service_parents:
        reader.root_dir(os.path.normpath(path), service_may_own=True)
    for path in shared_dirs:
        reader.root_dir(os.path.normpath(path), shared=True)
    for parent in release_dirs:
        for path in _release_entries(parent):
            reader.release(path)
    for path in service_dirs:
        reader.service_dir(os.path.normpath(path))
    for path in staged_dirs:
        path = os.path.normpath(path)
        inside = [d for d in service_dirs if path.startswith(os.path.normpath(d) + "/")]
        if inside:  # round 3, M7: root would write the weights where the service user may swap them
            reader.say(path, "is inside %s, which the service user owns: root would write the weights where it can "
                             "replace them; stage the model outside the instance's own directories" % inside[0])
            continue
        reader.root_dir(path)
    return LayoutReading(problems=tuple(reader.problems), loose=tuple(reader.loose), unkept=tuple(unkept(keep)))
