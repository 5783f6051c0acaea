"""Which hosts the lab has: each host's name, address, GPUs, group and network, the hosts wanted for
a number of targets, the containers present now, and a script run inside one (hexec)."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass

from common import LABEL, LabError, podman
from network import NETWORK, OFFLINE_NETWORK

PREFIX = "dflash-lab-"
TWIN = "ct240"


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    gpu_config: str            # file under tools/lab/gpus/
    gpus: int
    group: str                 # dflash_reference, dflash_targets or lab_twin
    stopgap: bool = False      # the incident's stop-gap server on GPU 0, port 30000
    reference: bool = False    # seeded with the known-good venv
    network: str = NETWORK     # OFFLINE_NETWORK: no route even to the lab index

    @property
    def container(self) -> str:
        return PREFIX + self.name

    @property
    def mac(self) -> str:
        """Fixed per address, so a recreated or restarted host is reachable at once (no stale ARP entry
        on the controller pointing at the old container's address)."""
        return "02:dc:" + ":".join(f"{int(o):02x}" for o in self.address.split("."))


def hosts(targets: int = 0, offline: int = 0) -> list[Host]:
    """ct129 (reference), ct200 (target) and its twin ct240, `targets` more fresh targets ct201…, and
    `offline` fresh targets ct250… on the offline network."""
    out = [
        Host("ct129", "10.89.64.129", "ct129.conf", 2, "dflash_reference", reference=True),
        Host("ct200", "10.89.64.200", "ct200.conf", 8, "dflash_targets", stopgap=True),
        # ct200's twin (its GPUs, its stop-gap): make molecule's second stream of scenarios runs on it
        # beside the first on ct200. Not a deploy target of inventory/lab.yml; inventory/twin.yml,
        # given with it, makes it one (docs/lab.md).
        Host(TWIN, "10.89.64.240", "ct200.conf", 8, "lab_twin", stopgap=True),
    ]
    for i in range(targets):
        n = 201 + i
        out.append(Host(f"ct{n}", f"10.89.64.{n}", "target.conf", 4, "dflash_targets"))
    for i in range(offline):
        n = 250 + i
        out.append(Host(f"ct{n}", f"10.89.65.{n}", "target.conf", 4, "dflash_targets", network=OFFLINE_NETWORK))
    return out


def hexec(host: Host, script: str, check=True, timeout=600) -> subprocess.CompletedProcess:
    """Run a shell script inside a lab host (as root, through podman, not SSH)."""
    return podman("exec", "-i", host.container, "bash", "-euo", "pipefail", "-s",
                  input=script, check=check, timeout=timeout)


def lab_hosts_present() -> list[str]:
    out = podman("ps", "-a", "--filter", f"label={LABEL}=host", "--format", "{{.Names}}", check=False).stdout
    return [n for n in out.split() if n.startswith(PREFIX)]


def current_targets() -> int:
    """How many extra targets the running lab has (so a plain `up` keeps them)."""
    names = [n[len(PREFIX):] for n in lab_hosts_present()]
    return len([n for n in names if n not in ("ct129", "ct200", TWIN) and int(n[2:]) < 250])


def current_offline() -> int:
    names = [n[len(PREFIX):] for n in lab_hosts_present()]
    return len([n for n in names if int(n[2:]) >= 250])


def current_hosts() -> list[Host]:
    return hosts(current_targets(), current_offline())


def find_host(name: str) -> Host:
    for h in current_hosts():
        if h.name == name:
            return h
    raise LabError(f"no lab host named {name!r}")
