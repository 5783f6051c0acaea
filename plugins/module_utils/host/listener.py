# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who listens on a local TCP port, and whether it is the instance: checked before a probe sends
the API key to ``http://127.0.0.1:<port>`` and before its answer is believed.

Any local user may bind 127.0.0.1:<port> while the instance is not listening (during a restart,
or when the instance binds another address). So before each probe the LISTEN sockets whose local
address covers the probe's address (``0.0.0.0``, ``::``, the address itself, ``::ffff:`` of it) are
read from ``/proc/net/tcp`` and ``/proc/net/tcp6``, each socket's inode is found among the open
files of ``/proc/<pid>/fd``, and every process holding one must be the instance's: in the unit's
control group (``systemctl show -p ControlGroup``, the path systemd made for the unit, which no
user can name for a cgroup of their own: a path ending in the unit's name is not enough, a user's
``user@.service`` subtree is theirs to name), or, where the caller names one, running as the
expected user (the module run alone, outside systemd). A socket no process can be found for counts
as someone else's.

``parse_proc_net``, ``covers``, ``in_control_group`` and ``foreign`` are pure; ``listeners``,
``holders`` and ``holder_of`` read ``/proc`` (its root replaceable for tests). The check narrows,
but cannot close, the window between it and the connection (a port nobody holds may be taken in
between): a port held by the instance cannot be taken by another user (Linux refuses a second
listener on a covered address, and ``SO_REUSEPORT`` only to the same uid). Standard library only.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import sys
import urllib.parse
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import find_program
from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import run_with_timeout

TCP_LISTEN = "0A"
SYSTEMCTL_TIMEOUT = 30


class ForeignListener(Exception):
    """Someone other than the instance holds its port; the message names who (one line)."""


@dataclass(frozen=True)
class Socket:
    """One LISTEN socket of /proc/net/tcp{,6}: its local address and port, owner uid and inode."""

    address: str
    port: int
    uid: int
    inode: int


@dataclass(frozen=True)
class Holder:
    """A process holding a listening socket (pid None: none found; then uid is the socket's)."""

    pid: int | None
    uid: int
    command: str = ""
    cgroups: tuple = ()


# -- pure ----------------------------------------------------------------------------------------

def _address(hexed, byteorder=sys.byteorder):
    """/proc/net/tcp's address: 32-bit words printed as the host reads them (%08X each)."""
    raw = b"".join(int(hexed[i:i + 8], 16).to_bytes(4, byteorder) for i in range(0, len(hexed), 8))
    return str(ipaddress.ip_address(raw))


def parse_proc_net(text, byteorder=sys.byteorder):
    """The LISTEN sockets of a /proc/net/tcp or /proc/net/tcp6 text (the header line skipped)."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        addr, _sep, port = fields[1].partition(":")
        try:
            found.append(Socket(_address(addr, byteorder), int(port, 16), int(fields[7]), int(fields[9])))
        except ValueError:
            continue
    return found


def _plain(address):
    ip = ipaddress.ip_address(address)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def covers(local, target):
    """Whether a socket listening on ``local`` accepts a connection to ``target`` (both addresses):
    the same address (``::ffff:a.b.c.d`` is a.b.c.d), ``0.0.0.0`` for an IPv4 target, ``::`` for any
    (a dual-stack socket; counted even where it is IPv6-only, which only makes the check stricter)."""
    local, target = _plain(local), _plain(target)
    if local.is_unspecified:
        return local.version == 6 or target.version == 4
    return local == target


def target_of(base):
    """(address, port) of a probe's base URL; ``localhost`` is 127.0.0.1. Raises ValueError for a
    host name, which has no single address to check."""
    parts = urllib.parse.urlsplit(base)
    host = parts.hostname or ""
    host = "127.0.0.1" if host == "localhost" else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError("%s: give the probe an address (127.0.0.1), not a host name, so that who listens "
                         "there can be checked" % base) from None
    return host, parts.port or (443 if parts.scheme == "https" else 80)


def in_control_group(cgroup_text, control_group):
    """Whether a /proc/<pid>/cgroup text puts the process in ``control_group`` (systemd's path for
    the unit) or below it, in the unified hierarchy (``0::``) or systemd's own (``name=systemd``)."""
    if not control_group:
        return False
    for line in cgroup_text.splitlines():
        _hier, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        if controllers in ("", "name=systemd") and (path == control_group
                                                    or path.startswith(control_group.rstrip("/") + "/")):
            return True
    return False


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "?"


def describe(holder):
    """``pid 1234 (uid 1001 mallory, python3)``, or the socket's uid when no process was found."""
    if holder.pid is None:
        return "a socket of uid %d %s that no process could be found for" % (holder.uid, user_name(holder.uid))
    return "pid %d (uid %d %s, %s)" % (holder.pid, holder.uid, user_name(holder.uid), holder.command or "?")


def is_ours(holder, control_group=None, uid=None):
    if holder.pid is not None and in_control_group("\n".join(holder.cgroups), control_group):
        return True
    return uid is not None and holder.uid == uid


def foreign(holders, control_group=None, uid=None):
    """The holders that are not the instance's (in its control group, or running as ``uid``)."""
    return [h for h in holders if not is_ours(h, control_group, uid)]


def _uid(user):
    """The uid of ``user`` (None for none, or an unknown name: then only the unit's processes count)."""
    try:
        return pwd.getpwnam(user).pw_uid if user else None
    except KeyError:
        return None


def expected_text(unit=None, user=None):
    return " or ".join(([unit] if unit else []) + (["user %s" % user] if user else [])) or "the instance"


# -- /proc ---------------------------------------------------------------------------------------

def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def listeners(address, port, proc="/proc"):
    """The LISTEN sockets on ``port`` whose local address covers ``address``."""
    found = parse_proc_net(_read(os.path.join(proc, "net", "tcp"))) + \
        parse_proc_net(_read(os.path.join(proc, "net", "tcp6")))
    return [s for s in found if s.port == port and covers(s.address, address)]


def holders(inodes, proc="/proc"):
    """{inode: [pid, ...]} of the processes that have one of the sockets ``inodes`` open."""
    wanted = {"socket:[%d]" % i: i for i in inodes}
    found = {i: [] for i in inodes}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link in wanted and int(entry) not in found[wanted[link]]:
                found[wanted[link]].append(int(entry))
    return found


def holder_of(pid, proc="/proc"):
    """A ``Holder`` from /proc/<pid>: its effective uid, command and cgroup lines."""
    uid = -1
    for line in _read(os.path.join(proc, str(pid), "status")).splitlines():
        if line.startswith("Uid:") and len(line.split()) > 2:
            uid = int(line.split()[2])
    return Holder(pid, uid, _read(os.path.join(proc, str(pid), "comm")).strip(),
                  tuple(_read(os.path.join(proc, str(pid), "cgroup")).splitlines()))


def unit_control_group(unit):
    """systemd's control group of ``unit`` ('' when it has none: not running, or no systemctl)."""
    systemctl = find_program("systemctl")  # by absolute path, never PATH (programs.py)
    if not unit or not systemctl:
        return ""
    rc, out, _err, timed_out = run_with_timeout([systemctl, "show", "-p", "ControlGroup", "--value", "--", unit],
                                                SYSTEMCTL_TIMEOUT)
    return out.strip() if rc == 0 and not timed_out else ""


def who_holds(address, port, proc="/proc"):
    """(listening, [Holder]) for the sockets on ``port`` that cover ``address``."""
    sockets = listeners(address, port, proc)
    if not sockets:
        return False, []
    pids = holders([s.inode for s in sockets], proc)
    found = []
    for sock in sockets:
        found += [holder_of(pid, proc) for pid in pids[sock.inode]] or [Holder(None, sock.uid)]
    return True, found


def unit_uids(control_group, proc="/proc"):
    """The uids of the processes in ``control_group`` (from /proc/<pid>/status and cgroup, which every user may
    read, unlike another user's /proc/<pid>/fd)."""
    uids = set()
    if not control_group:
        return uids
    for entry in os.listdir(proc):
        if entry.isdigit():
            holder = holder_of(entry, proc)
            if holder.uid >= 0 and in_control_group("\n".join(holder.cgroups), control_group):
                uids.add(holder.uid)
    return uids


def held(address, port, unit=None, user=None, proc="/proc", control_group=None):
    """(listening, 'port P on A is held by ..., not by <unit>' or None when only the instance holds it).

    Where root cannot read another user's /proc/<pid>/fd (no CAP_SYS_PTRACE, as in containers), a socket has
    no process: it is the instance's only when its uid is that of a process in the unit's control group (the
    service user, who may read the key anyway); any other uid is someone else's."""
    listening, found = who_holds(address, port, proc)
    if not listening:
        return False, None
    if control_group is None:
        control_group = unit_control_group(unit)
    others = foreign(found, control_group, _uid(user))
    if any(h.pid is None for h in others):
        uids = unit_uids(control_group, proc)
        others = [h for h in others if not (h.pid is None and h.uid in uids)]
    if not others:
        return True, None
    return True, "port %d on %s is held by %s, not by %s" % (
        port, address, ", ".join(describe(h) for h in others), expected_text(unit, user))


def check(address, port, unit=None, user=None, proc="/proc", control_group=None, sending="the key"):
    """(listening, why not ours or None). ``unit``: the listener's processes must be in its control
    group (read from systemd unless ``control_group`` is given); ``user``: or run as that user."""
    listening, error = held(address, port, unit, user, proc, control_group)
    return listening, ("%s: %s was not sent" % (error, sending) if error else None)


def require(address, port, unit=None, user=None, key="", proc="/proc", control_group=None):
    """True when the instance listens on ``address:port``, False when nothing does; raises
    ForeignListener (naming the holder) when anyone else holds it. Called before each request."""
    listening, error = check(address, port, unit, user, proc, control_group, "the key" if key else "the request")
    if error:
        raise ForeignListener(error)
    return listening


def guard(probe, base, unit=None, user=None, proc="/proc"):
    """``probe`` (readiness.get's signature: url, key, timeout) run only when the listener on ``base``'s
    port is the instance's: (None, 'nothing listens ...') when nothing does, ForeignListener raised
    when someone else does. The request, and the key, go nowhere else. Raises ValueError for a
    ``base`` whose host is a name."""
    address, port = target_of(base)
    cache = {}

    def guarded(url, key, *args, **kwargs):
        if not cache.get("cgroup"):
            cache["cgroup"] = unit_control_group(unit)
        if not require(address, port, unit, user, key, proc, cache["cgroup"]):
            return None, "nothing listens on %s:%d" % (address, port)
        return probe(url, key, *args, **kwargs)
    return guarded


def holder_text(base, unit=None, user=None, proc="/proc"):
    """Who else holds ``base``'s port ('' when nobody, or only the instance): for a diagnosis."""
    try:
        address, port = target_of(base)
        return held(address, port, unit, user, proc)[1] or ""
    except (ValueError, OSError):
        return ""
