"""The controller's SSH to the hosts: the lab's key, the hosts' keys in known_hosts (the lab's file
and a marked block in ~/.ssh/known_hosts), a reachability check, and closing Ansible's masters."""
from __future__ import annotations

import os
import re
from pathlib import Path

from common import STATE, podman, run
from hosts import Host

SSH_DIR = STATE / "ssh"


def ensure_key() -> Path:
    key = SSH_DIR / "id_ed25519"
    if not key.exists():
        SSH_DIR.mkdir(parents=True, exist_ok=True)
        os.chmod(SSH_DIR, 0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dflash-lab", "-f", str(key)])
    return key


USER_KNOWN_HOSTS = Path.home() / ".ssh" / "known_hosts"
KH_BEGIN, KH_END = "# dflash-lab begin (tools/lab/lab.py; removed by lab-down)", "# dflash-lab end"


def write_known_hosts(hosts: list[Host]) -> None:
    """The lab's host keys, read from the hosts themselves (not trusted on first use).

    OpenSSH reads build/lab/ssh/known_hosts (the inventory's UserKnownHostsFile). The paramiko
    connection reads only ~/.ssh/known_hosts, so the same lines go there too, in a marked block
    that every lab-up rewrites (recreated hosts get new keys) and lab-down removes. A host whose key
    cannot be read now (stopped, or killed by a scenario of the other stream) keeps its line: a
    stopped container keeps its key."""
    path = SSH_DIR / "known_hosts"
    old = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                old[line.split()[0]] = line
    lines = []
    for h in hosts:
        proc = podman("exec", h.container, "cat", "/etc/ssh/ssh_host_ed25519_key.pub", check=False)
        pub = proc.stdout.split() if proc.returncode == 0 else []
        if len(pub) >= 2:
            lines.append(f"{h.address} {pub[0]} {pub[1]}")
        elif h.address in old:
            lines.append(old[h.address])
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    tmp = SSH_DIR / ".known_hosts.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)  # a reader sees the old file or the new, never half
    _user_known_hosts_block(lines)


def _user_known_hosts_block(lines: list[str]) -> None:
    old = USER_KNOWN_HOSTS.read_text().splitlines() if USER_KNOWN_HOSTS.exists() else []
    kept, inside = [], False
    for line in old:
        if line == KH_BEGIN:
            inside = True
        elif line == KH_END:
            inside = False
        elif not inside:
            kept.append(line)
    if lines:
        kept += [KH_BEGIN, *lines, KH_END]
    if kept == old:
        return
    USER_KNOWN_HOSTS.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = USER_KNOWN_HOSTS.with_name(".known_hosts.dflash-lab")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.chmod(tmp, 0o600)
    os.replace(tmp, USER_KNOWN_HOSTS)


def ssh_ok(host: Host) -> bool:
    key, kh = SSH_DIR / "id_ed25519", SSH_DIR / "known_hosts"
    proc = run(["ssh", "-i", str(key), "-o", f"UserKnownHostsFile={kh}", "-o", "StrictHostKeyChecking=yes",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", f"root@{host.address}", "true"],
               check=False, timeout=30)
    return proc.returncode == 0


def close_ssh_masters(address: str | None = None) -> None:
    """Close Ansible's OpenSSH ControlPersist masters: one to a host that was killed or recreated
    would hang the next connection (and keep the old session's environment). With ``address``, only
    the masters to that host (the master's command line names it): make molecule's other stream may
    be using its own at that moment."""
    cp_dir = Path.home() / ".ansible" / "cp"
    for sock in cp_dir.glob("*") if cp_dir.is_dir() else []:
        if address is not None and address not in _master_args(sock):
            continue
        run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "lab"], check=False, timeout=10)


def _master_args(sock: Path) -> list[str]:
    """The command line of the master process behind a ControlPath socket ([] when none answers)."""
    proc = run(["ssh", "-o", f"ControlPath={sock}", "-O", "check", "lab"], check=False, timeout=10)
    match = re.search(r"pid=(\d+)", proc.stderr + proc.stdout)
    if not match:
        return []
    try:
        return Path(f"/proc/{match.group(1)}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
