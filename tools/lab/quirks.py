"""Host quirks: what this machine needs before podman can run the lab's systemd containers
(missing tools installed, crun's rlimits and hybrid-cgroup hugetlb), each applied only where detected."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from common import log, run


def ensure_tools() -> None:
    missing = [t for t in ("podman", "debootstrap") if shutil.which(t) is None]
    if not missing:
        return
    log(f"installing {' '.join(missing)} from Debian's packages")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env, timeout=900)
    run(["apt-get", "install", "-y", "-qq", *missing], env=env, timeout=900)


def _cap_effective() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


CAP_SYS_RESOURCE = 24
CONTAINERS_CONF = Path("/etc/containers/containers.conf")


def needs_ulimit_quirk() -> bool:
    """crun sets default rlimits; without CAP_SYS_RESOURCE setrlimit fails (EPERM)."""
    return not (_cap_effective() >> CAP_SYS_RESOURCE) & 1


def ulimit_quirk_applied() -> bool:
    if not CONTAINERS_CONF.exists():
        return False
    return any(line.strip().replace(" ", "") == "default_ulimits=[]"
               for line in CONTAINERS_CONF.read_text().splitlines())


def needs_hugetlb_quirk() -> bool:
    """hugetlb on the cgroup2 mount while the rest is v1: crun refuses hybrid mode."""
    unified = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    if not unified.exists():
        return False
    if "hugetlb" not in unified.read_text().split():
        return False
    return not Path("/sys/fs/cgroup/hugetlb/tasks").exists()


def apply_quirks() -> list[str]:
    applied = []
    if needs_ulimit_quirk() and not ulimit_quirk_applied():
        CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
        text = CONTAINERS_CONF.read_text() if CONTAINERS_CONF.exists() else ""
        if "[containers]" in text:
            text = text.replace("[containers]", "[containers]\ndefault_ulimits = []", 1)
        else:
            text += "\n[containers]\ndefault_ulimits = []\n"
        CONTAINERS_CONF.write_text(text)
        applied.append("default_ulimits = [] (no CAP_SYS_RESOURCE)")
    if needs_hugetlb_quirk():
        Path("/sys/fs/cgroup/hugetlb").mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "cgroup", "-o", "hugetlb", "cgroup", "/sys/fs/cgroup/hugetlb"])
        applied.append("hugetlb bound to a v1 hierarchy (hybrid cgroups)")
    for a in applied:
        log(f"host quirk applied: {a}")
    return applied
