"""The lab's podman networks: their names, subnets and gateways, how they are made (internal: no
route out), and the controller's blackhole routes for their subnets."""
from __future__ import annotations

import json

from common import LABEL, LabError, log, podman, run

NETWORK = "dflash-lab"
SUBNET = "10.89.64.0/24"
GATEWAY = "10.89.64.1"
# Offline targets (LAB_OFFLINE=N): a second internal network whose only other address is
# the controller's; the index listens on GATEWAY alone, so they cannot reach it.
OFFLINE_NETWORK = "dflash-lab-offline"
OFFLINE_SUBNET = "10.89.65.0/24"
OFFLINE_GATEWAY = "10.89.65.1"
NETWORKS = {NETWORK: (SUBNET, GATEWAY), OFFLINE_NETWORK: (OFFLINE_SUBNET, OFFLINE_GATEWAY)}


def ensure_network(name: str = NETWORK) -> None:
    subnet, gateway = NETWORKS[name]
    if podman("network", "exists", name, check=False).returncode == 0:
        info = json.loads(podman("network", "inspect", name).stdout)[0]
        subnets = [s.get("subnet") for s in info.get("subnets", [])]
        if subnet in subnets:
            return
        raise LabError(f"podman network {name} exists with subnets {subnets}, not {subnet}: "
                       f"remove it (podman network rm {name}) and run lab-up again")
    # --internal: no default route and no NAT, the containers reach the gateway address only.
    podman("network", "create", "--internal", "--subnet", subnet, "--gateway", gateway,
           "--label", f"{LABEL}=network", name)
    log(f"network {name} {subnet} (internal: no route out)")


def ensure_blackhole_routes() -> None:
    """A blackhole route (low priority) for each lab subnet: while the lab's bridge is down, a
    connection to a lab address fails here at once instead of leaving through the default route
    to a network the lab does not own. The bridge's own route, when it exists, wins."""
    for subnet, _ in NETWORKS.values():
        have = run(["ip", "route", "show", "type", "blackhole", subnet], check=False).stdout
        if subnet not in have:
            run(["ip", "route", "add", "blackhole", subnet, "metric", "4242"], check=False)
