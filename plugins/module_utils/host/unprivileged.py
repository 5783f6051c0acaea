# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a release's code as an unprivileged user, never as root.

The import smoke test and uv's interpreter query execute the release's interpreter, and with
it every ``.pth`` file in its site-packages: code that came in a wheel. ``as_user`` turns a
child's argv into one that runs it as the service user (or ``nobody``): ``setpriv`` by
absolute path (no PATH lookup), the user's uid, primary group and supplementary groups, no
new privileges; ``user_env`` gives the environment HOME, USER and LOGNAME of that user (the
caller's own variables, such as the service's HOME, are laid over it). Refused in one line:
an unknown user, uid 0, a setpriv that is not a root-owned regular file.
"""

from __future__ import annotations

import os
import pwd
import stat

SETPRIV = "/usr/bin/setpriv"


class UnprivilegedError(ValueError):
    pass


def check_setpriv(path=SETPRIV, lstat=os.lstat):
    """None when ``path`` is a root-owned regular file nobody else can write, else the reason."""
    try:
        st = lstat(path)
    except OSError as exc:
        return "%s: %s (util-linux's setpriv runs the release's code unprivileged)" % (path, exc.strerror or exc)
    if not stat.S_ISREG(st.st_mode):
        return "%s is not a regular file" % path
    if st.st_uid != 0 or st.st_mode & 0o022:
        return "%s is owned by uid %d with mode %04o: only root may be able to change it" % (
            path, st.st_uid, stat.S_IMODE(st.st_mode))
    return None


def _user(user, getpwnam):
    try:
        pw = getpwnam(str(user))
    except KeyError:
        raise UnprivilegedError("run_as: no user %r on this host" % (user,)) from None
    if pw.pw_uid == 0:
        raise UnprivilegedError("run_as: %s has uid 0; a release's code runs as an unprivileged user" % user)
    return pw


def as_user(user, argv, setpriv=SETPRIV, getpwnam=pwd.getpwnam, lstat=os.lstat):
    """``argv`` run as ``user`` (a name) through setpriv: the user's uid, primary and supplementary
    groups, no new privileges. Raises UnprivilegedError (one line) before anything runs."""
    pw = _user(user, getpwnam)
    reason = check_setpriv(setpriv, lstat)
    if reason:
        raise UnprivilegedError("run_as: " + reason)
    return [setpriv, "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid, "--init-groups", "--no-new-privs",
            "--"] + list(argv)


def user_env(user, base=None, getpwnam=pwd.getpwnam):
    """``base`` (the module's environment by default) with HOME, USER and LOGNAME of ``user``."""
    pw = _user(user, getpwnam)
    env = dict(os.environ if base is None else base)
    env.update({"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name})
    return env
