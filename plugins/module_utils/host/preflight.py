# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight facts that no other module reports, read-only: who holds a TCP port, which systemd
unit a process belongs to, free disk space, and whether model directories hold a config.json.

``answer`` is ``preflight_info``'s whole result: per instance the owners of its port and of the
GPU processes nvidia-smi listed, the model directories without a ``config.json``, and the free
space where the layout lives. Where another user's ``/proc/<pid>/fd`` cannot be read (no
CAP_SYS_PTRACE, as in containers), a listener is attributed to an instance's unit only when the
socket's uid is the service user's and that unit is active. Standard library only.
"""

from __future__ import annotations

import os
import pwd
import re

from ansible_collections.dflash.deploy.plugins.module_utils.host.listener import holders
from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import run_with_timeout

UNIT_RE = re.compile(r"/([^/]+\.service)(?:/|$)")

# By absolute path: root must not look a command up on a PATH that others might write.
SYSTEMCTL = next((p for p in ("/usr/bin/systemctl", "/bin/systemctl") if os.path.exists(p)), "/usr/bin/systemctl")
SYSTEMCTL_TIMEOUT = 30  # seconds `systemctl is-active` may take (a hung systemd never answers)


class PreflightRequestError(ValueError):
    """An option of the request is not what preflight asks about (one line)."""


def unit_of(pid):
    """The systemd unit a process runs in, from its cgroup, or None."""
    try:
        with open("/proc/%d/cgroup" % int(pid)) as fh:
            text = fh.read()
    except (OSError, ValueError):
        return None
    for line in text.splitlines():
        m = UNIT_RE.search(line.split(":", 2)[-1])
        if m:
            return m.group(1)
    return None


def comm_of(pid):
    """The process's command name, or None when it is gone."""
    try:
        with open("/proc/%d/comm" % int(pid)) as fh:
            return fh.read().strip()
    except (OSError, ValueError):
        return None


def listeners(port):
    """{inode: uid} of the TCP sockets listening on port."""
    found = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                next(fh, None)
                for line in fh:
                    cols = line.split()
                    if len(cols) < 10 or cols[3] != "0A":  # 0A = LISTEN
                        continue
                    if int(cols[1].rsplit(":", 1)[1], 16) == int(port):
                        found[cols[9]] = int(cols[7])
        except OSError:
            continue
    return found


def unit_active(unit):
    """Whether systemd says the unit is active (not when systemctl cannot start or gives no answer in
    SYSTEMCTL_TIMEOUT seconds)."""
    return run_with_timeout([SYSTEMCTL, "is-active", "--quiet", unit], SYSTEMCTL_TIMEOUT)[0] == 0


def port_owners(port, unit=None, service_uid=None):
    """The processes holding a listening socket on port: pid, comm, unit; a socket whose process
    cannot be read is named by its uid (and is the unit's only by uid and an active unit)."""
    socks = listeners(port)
    if not socks:
        return []
    owners = {}
    seen = set()
    for inode, pids in holders([int(i) for i in socks]).items():  # every process's /proc/<pid>/fd (listener.py)
        if pids:
            seen.add(str(inode))
        for pid in pids:
            owners[pid] = {"pid": pid, "comm": comm_of(str(pid)), "unit": unit_of(str(pid))}
    out = sorted(owners.values(), key=lambda o: o["pid"])
    for inode, uid in sorted(socks.items()):
        if inode in seen:
            continue
        entry = {"pid": None, "comm": "a process of uid %d (not readable here)" % uid, "unit": None, "uid": uid}
        if unit and service_uid is not None and uid == service_uid and unit_active(unit):
            entry["unit"] = unit
            entry["inferred"] = "uid"
        out.append(entry)
    return out


def free_space(path):
    """Free space for the unprivileged, in GB, of path or its nearest existing parent."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return {"path": probe, "free_gb": round(st.f_bavail * st.f_frsize / 1024.0 ** 3, 2)}


def service_uid_of(user, getpwnam=pwd.getpwnam):
    """The service user's uid, or None when there is no such user (yet)."""
    try:
        return getpwnam(user or "").pw_uid
    except KeyError:
        return None


def _port(inst, value):
    if isinstance(value, bool):
        raise PreflightRequestError("ports: instance %s: %r is not a TCP port" % (inst, value))
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise PreflightRequestError("ports: instance %s: %r is not a TCP port" % (inst, value)) from None
    if not 0 < port < 65536:
        raise PreflightRequestError("ports: instance %s: %r is not a TCP port" % (inst, value))
    return port


def _pids(inst, values):
    if not isinstance(values, (list, tuple)):
        raise PreflightRequestError("pids: instance %s: %r is not a list of pids" % (inst, values))
    out = []
    for value in values:
        if isinstance(value, bool) or not str(value).isdigit():
            raise PreflightRequestError("pids: instance %s: %r is not a pid" % (inst, value))
        out.append(int(value))
    return out


def _dirs(inst, values):
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise PreflightRequestError("models: instance %s: %r is not a list of directories" % (inst, values))
    return list(values)


def answer(base_dir="/", ports=None, pids=None, models=None, units=None, service_user=None):
    """Everything preflight reads from the host, for the request's instances:
    {"ports": {inst: [owner]}, "pids": {inst: [{pid, comm, unit}]}, "models": {inst: [dir without
    config.json]}, "disk": {"path", "free_gb"}}. Raises PreflightRequestError before reading anything
    when a port, pid or directory list is malformed."""
    ports = {str(k): _port(k, v) for k, v in (ports or {}).items()}
    pids = {str(k): _pids(k, v) for k, v in (pids or {}).items()}
    models = {str(k): _dirs(k, v) for k, v in (models or {}).items()}
    units = units or {}
    out = {"ports": {}, "pids": {}, "models": {}, "disk": free_space(base_dir or "/")}
    service_uid = service_uid_of(service_user)
    for inst, port in ports.items():
        out["ports"][inst] = port_owners(port, units.get(inst), service_uid)
    for inst, inst_pids in pids.items():
        out["pids"][inst] = [{"pid": p, "comm": comm_of(p), "unit": unit_of(p)} for p in inst_pids]
    for inst, dirs in models.items():
        out["models"][inst] = [d for d in dirs if not os.path.isfile(os.path.join(d, "config.json"))]
    return out
