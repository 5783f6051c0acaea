# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The programs root runs, found by absolute path in the system's own directories, never on ``PATH``.

Root's ``PATH`` may start with a directory someone else can write (``/usr/local/sbin`` comes first on
Debian); a program found there by name would run as root. The modules look their programs up here
instead: the first of ``SYSTEM_DIRS`` that holds an executable regular file of that name, owned by root
and writable by nobody else (a link is followed only to such a file). Standard library only.
"""

from __future__ import annotations

import os
import stat

SYSTEM_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
SYSTEM_PATH = ":".join(SYSTEM_DIRS)


def _roots_alone(st):
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def find_program(name, dirs=None):
    """Absolute path of ``name`` in the first of ``dirs`` (default SYSTEM_DIRS) where it is an executable
    regular file that only root can change (the file and its directory), or None."""
    if not name or "/" in name:
        return None
    for directory in SYSTEM_DIRS if dirs is None else dirs:
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
            dst = os.stat(directory)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 and _roots_alone(st) and _roots_alone(dst):
            return path
    return None
