# Preflight facts that no module reports, read-only, standard library only:
# who holds a TCP port, which systemd unit a process belongs to, free disk
# space, and whether model directories hold a config.json.
# usage: python3 dflash_preflight.py '<json request>'  -> prints one JSON object
# request: {"base_dir": str, "ports": {instance: port}, "pids": {instance: [pid]},
#           "models": {instance: [dir]}, "units": {instance: unit}, "service_user": str}
# Where another user's /proc/<pid>/fd cannot be read (no CAP_SYS_PTRACE, as in
# containers), a listener is attributed to an instance's unit only when the
# socket's uid is the service user's and that unit is active.
import json
import os
import pwd
import re
import subprocess
import sys

UNIT_RE = re.compile(r"/([^/]+\.service)(?:/|$)")


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


# By absolute path: root must not look a command up on a PATH that others might write.
SYSTEMCTL = next((p for p in ("/usr/bin/systemctl", "/bin/systemctl") if os.path.exists(p)), "/usr/bin/systemctl")


def unit_active(unit):
    try:
        return subprocess.call([SYSTEMCTL, "is-active", "--quiet", unit]) == 0
    except OSError:
        return False


def port_owners(port, unit=None, service_uid=None):
    socks = listeners(port)
    if not socks:
        return []
    owners = {}
    seen = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = "/proc/%s/fd" % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in socks:
                seen.add(target[8:-1])
                owners[int(pid)] = {"pid": int(pid), "comm": comm_of(pid), "unit": unit_of(pid)}
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
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return {"path": probe, "free_gb": round(st.f_bavail * st.f_frsize / 1024.0 ** 3, 2)}


def main():
    req = json.loads(sys.argv[1])
    out = {"ports": {}, "pids": {}, "models": {}, "disk": free_space(req.get("base_dir", "/"))}
    try:
        service_uid = pwd.getpwnam(req.get("service_user", "")).pw_uid
    except KeyError:
        service_uid = None
    units = req.get("units", {})
    for inst, port in req.get("ports", {}).items():
        out["ports"][inst] = port_owners(port, units.get(inst), service_uid)
    for inst, pids in req.get("pids", {}).items():
        out["pids"][inst] = [{"pid": p, "comm": comm_of(p), "unit": unit_of(p)} for p in pids]
    for inst, dirs in req.get("models", {}).items():
        out["models"][inst] = [d for d in dirs if not os.path.isfile(os.path.join(d, "config.json"))]
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
