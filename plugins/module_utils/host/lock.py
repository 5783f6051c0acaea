# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host lock: one dflash.deploy run at a time on a host.

``take`` writes this run's token file (``/run/dflash-deploy.token-<token>``, holding the token
and who runs it) and starts a detached holder:

    /usr/bin/timeout <max_age> /usr/bin/flock -w <wait> -E 75 /run/dflash-deploy.lock
        /bin/sh -c <HOLDER_SCRIPT> <token file> <host> /run/dflash-deploy.owner

under a fixed ``PATH``, from ``/``, in a session of its own, with stdin, stdout and stderr on
``/dev/null`` and no other descriptor open (so it never keeps the caller's SSH session open).
flock(1) takes the lock within ``wait`` seconds or exits 75; holding it, the script writes
"<token> from <who>, holding it as pid <flock's pid> on <host>" to the owner file and lives as
long as the token file exists. timeout(1) ends the holder after ``max_age`` seconds, for a run
that died without dropping its token. ``take`` waits on the monotonic clock (a wall-clock step
neither stretches nor cuts the wait) until the owner file names its token; when the holder gives
up first, or the wait runs out, it drops the token, ends its holder and says who holds the lock.
``drop`` removes the token file; the holder then exits within a second and the lock is free.
Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular

LOCK = "/run/dflash-deploy.lock"
OWNER = "/run/dflash-deploy.owner"
TOKEN_PREFIX = "/run/dflash-deploy.token-"

# Absolute paths and a fixed PATH: root never looks a command up in a directory that someone
# else might write (/usr/local/sbin comes first on root's PATH).
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TIMEOUT = "/usr/bin/timeout"
FLOCK = "/usr/bin/flock"
SH = "/bin/sh"
HELD_ELSEWHERE = 75   # flock -E: the lock stayed someone else's for the whole wait
GRACE = 5.0           # beyond flock's own -w, before the wait gives up on a holder that did not answer
INTERVAL = 0.5
MAX_HOLDER_BYTES = 4096

# $0 the token file, $1 the host's name, $2 the owner file; $PPID is flock, which holds the lock.
HOLDER_SCRIPT = ("printf '%s, holding it as pid %s on %s\\n' \"$(cat \"$0\")\" \"$PPID\" \"$1\" > \"$2\"; "
                 "while [ -e \"$0\" ]; do sleep 1; done")

TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
HELD_BY_RE = re.compile(r", holding it as pid (\d+) on (\S+)\Z")


class LockError(ValueError):
    """An option the lock cannot work with (one line), found before anything is written."""


@dataclass(frozen=True)
class Holder:
    """The owner file's text and what it says: the token (its first word), flock's pid, the host."""

    text: str
    token: str
    pid: int | None
    host: str


@dataclass(frozen=True)
class Waited:
    """How a wait ended: held, after how many seconds, the owner file's text then, and the
    holder's exit status when it ended first (None while it runs)."""

    held: bool
    seconds: float
    holder: str
    status: int | None


@dataclass(frozen=True)
class Taken:
    """What ``take`` did: whether this token holds the lock, whether that is new, who holds it,
    the seconds waited, the pid holding the flock, and why not (one line) when it is not held."""

    held: bool
    changed: bool
    holder: str
    seconds: float
    pid: int | None
    msg: str


def one_line(text):
    """``text`` with every run of whitespace, newlines included, as one space."""
    return " ".join(str(text or "").split())


def parse_holder(text):
    """The owner file's text as a Holder; an empty text is no one's."""
    text = one_line(text)
    match = HELD_BY_RE.search(text)
    return Holder(text=text, token=text.split(" ", 1)[0] if text else "",
                  pid=int(match.group(1)) if match else None, host=match.group(2) if match else "")


def holds(text, token):
    """Does the holder text name this token (its first word)?"""
    return bool(token) and parse_holder(text).token == token


def check_token(token):
    """None, or LockError: a token is one word that can end a file name."""
    if not TOKEN_RE.match(str(token or "")):
        raise LockError("token %r: one word of letters, digits, '.', '_' and '-' (at most 128), "
                        "the first word of the holder text and the end of the token file's name" % (token,))


def check_times(wait, max_age):
    """None, or LockError: seconds to wait (0 or more) below the holder's lifetime."""
    if wait < 0:
        raise LockError("wait %d: the seconds to wait for the lock cannot be negative" % wait)
    if max_age <= wait:
        raise LockError("max_age %d: the holder's lifetime must be longer than the wait (%d s), or it "
                        "would end before it could take the lock" % (max_age, wait))


def token_path(prefix, token):
    check_token(token)
    return prefix + token


def token_text(token, holder):
    """The token file's text: the token, then who runs it, on one line."""
    who = one_line(holder)
    return "%s %s" % (token, who) if who else token


def holder_argv(lock, owner, token_file, host, wait, max_age):
    """The detached holder's command line (absolute paths only)."""
    return [TIMEOUT, str(int(max_age)),
            FLOCK, "-w", str(int(wait)), "-E", str(HELD_ELSEWHERE), lock,
            SH, "-c", HOLDER_SCRIPT, token_file, one_line(host), owner]


def held_message(host, holder, prefix=TOKEN_PREFIX):
    """The one line a run that cannot get the lock fails with, naming the holder."""
    return ("another dflash.deploy run holds the host lock on %s (%s); wait for it to finish, or, if that "
            "run died, remove its token %s* on the host" % (host, one_line(holder) or "unknown holder", prefix))


STATUS_HINTS = {
    124: "it outlived max_age",
    126: "%s or %s cannot be run" % (TIMEOUT, FLOCK),
    127: "%s or %s is missing" % (TIMEOUT, FLOCK),
}


def broken_message(host, lock, status):
    """The one line when the holder ended for another reason than the lock being held elsewhere."""
    return ("the host lock on %s could not be taken: its holder (%s on %s) exited with status %s before it "
            "held the lock (%s)" % (host, FLOCK, lock, status,
                                    STATUS_HINTS.get(status, "the lock file could not be opened or locked")))


def read_holder(path):
    """The owner file's text ('' while there is none)."""
    try:
        data = read_regular(path, MAX_HOLDER_BYTES, nofollow=True)
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


def write_token(path, text):
    """The token file, made or replaced; a symlink at its path is refused (ELOOP)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")


def drop(path):
    """Remove the token file; whether it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def start_holder(argv):
    """The holder, detached: a new session, stdio on /dev/null, no other descriptor, from /."""
    # Not AnsibleModule.run_command: that waits for its child, and the holder must outlive the module.
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL,  # pylint: disable=ansible-bad-function
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            close_fds=True, start_new_session=True, cwd="/", env={"PATH": PATH})


def stop_holder(proc, timeout=5.0):
    """End a holder that is still waiting (timeout(1) passes the signal on to flock)."""
    if proc.poll() is None:
        try:
            proc.terminate()
            proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            pass


def alive(pid):
    """Whether a process with this pid exists."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for(owner, token, timeout, exited, clock=time.monotonic, sleep=time.sleep, interval=INTERVAL):
    """Wait until the owner file names ``token``, the holder ends (``exited()`` returns its exit
    status instead of None) or ``timeout`` seconds pass on ``clock``."""
    start = clock()
    while True:
        text = read_holder(owner)
        if holds(text, token):
            return Waited(True, round(clock() - start, 1), text, None)
        status = exited()
        if status is not None:
            return Waited(False, round(clock() - start, 1), read_holder(owner), status)
        if clock() - start >= timeout:
            return Waited(False, round(clock() - start, 1), text, None)
        sleep(interval)


def take(token, holder, host, wait, max_age, lock=LOCK, owner=OWNER, prefix=TOKEN_PREFIX, check_mode=False,
         spawn=start_holder, clock=time.monotonic, sleep=time.sleep, interval=INTERVAL):
    """Take the lock for ``token``: see the module's docstring. Already held by this token: nothing
    is started. In check mode nothing is written or started; ``changed`` says whether a run would."""
    check_times(wait, max_age)
    path = token_path(prefix, token)
    current = parse_holder(read_holder(owner))
    if current.token == token and os.path.lexists(path) and alive(current.pid):
        return Taken(True, False, current.text, 0.0, current.pid, "")
    if check_mode:
        return Taken(False, True, current.text, 0.0, None, "")
    write_token(path, token_text(token, holder))
    try:
        proc = spawn(holder_argv(lock, owner, path, host, wait, max_age))
    except OSError as exc:
        drop(path)
        return Taken(False, False, current.text, 0.0, None, "the host lock on %s could not be taken: %s: %s" % (
            one_line(host), exc.filename or TIMEOUT, exc.strerror or exc))
    waited = wait_for(owner, token, wait + GRACE, proc.poll, clock, sleep, interval)
    if waited.held:
        return Taken(True, True, waited.holder, waited.seconds, parse_holder(waited.holder).pid, "")
    drop(path)
    stop_holder(proc)
    if waited.status in (None, HELD_ELSEWHERE):
        msg = held_message(one_line(host), waited.holder, prefix)
    else:
        msg = broken_message(one_line(host), lock, waited.status)
    return Taken(False, False, waited.holder, waited.seconds, None, msg)
