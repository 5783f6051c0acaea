# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The programs root runs, found only where nobody but root could have put them.

Root's ``PATH`` may start with a directory someone else can write (``/usr/local/sbin`` comes first on
Debian); a program found there by name would run as root. The modules look their programs up here
instead, and run them by the absolute path this returns: the first directory of ``PATH``, then of
``SYSTEM_DIRS``, that root alone can change (it and every directory above it owned by root and writable
by no one else, a sticky one such as ``/tmp`` excepted), holding an executable regular file of that name
that root alone can change. Standard library only.
"""

from __future__ import annotations

import os
import stat

SYSTEM_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _roots_alone(st):
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def roots_alone_dir(directory):
    """Whether ``directory`` (links resolved) and every directory above it are root's and writable by no one
    else; a sticky directory (``/tmp``) counts, since others may add entries there but not replace root's."""
    path = os.path.realpath(directory)
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
            return False
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def find_program(name, path_env=None):
    """Absolute path of ``name`` in the first directory of ``path_env`` (default: this process's ``PATH``),
    then of SYSTEM_DIRS, that root alone can change, where it is an executable regular file root alone can
    change; None when there is none. A directory someone else controls is passed over, never searched."""
    if not name or "/" in name:
        return None
    path_env = os.environ.get("PATH", "") if path_env is None else path_env
    seen = set()
    for directory in [d for d in path_env.split(":") if d.startswith("/")] + list(SYSTEM_DIRS):
        if directory in seen:
            continue
        seen.add(directory)
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 and _roots_alone(st) and roots_alone_dir(directory):
            return path
    return None
