#!/usr/bin/env python3
"""The lab: real systemd + sshd test hosts in podman, with fixture GPUs.

    python tools/lab/lab.py up [--targets N]   # everything, idempotent
    python tools/lab/lab.py down               # nothing left but the cached image
    python tools/lab/lab.py status             # exit 0 only when every host answers
    python tools/lab/lab.py reset HOST         # recreate one host from the image, provisioned anew
    python tools/lab/lab.py stop|start|kill HOST
    python tools/lab/lab.py index-delay SECONDS  # each wheel download waits (fault injection)

`make lab-up`, `make lab-down`, `make lab-status` and molecule's create and
destroy all call this file: there is one way to make a lab host.

This file is the CLI: it wires the parts beside it, each decided in one place (a part
imports only those listed above it):
  common.py          paths, label, log() / LabError / run() / podman()
  quirks.py          ensure_tools() / apply_quirks()     (podman on this kind of machine)
  image.py           image_tag() / ensure_image()        (debootstrap, cached by recipe hash)
  network.py         ensure_network()                    (own subnet, no route out)
  index.py           ensure_index() / stop_index()       (fixture index on the gateway address)
  hosts.py           Host / hosts() / current_hosts()    (which hosts, which are present; hexec())
  reference.py       seed_reference()                    (the reference host's known-good venv)
  containers.py      start_host() / provision()          (systemd, sshd, fixture driver, seeding)
  ssh.py             ensure_key() / write_known_hosts()  (build/lab/ssh, ~/.ssh/known_hosts block)
  inventory_file.py  write_inventory()                   (inventory/lab.yml)
  faults.py          cmd_power() / cmd_index_delay()     (stop|start|kill HOST, index-delay)
tests/lab imports this file as `lab`: the names it uses from the parts are re-exported here.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from common import HERE, REPO, STATE, LabError, log, mutation_lock, podman, run
from containers import container_state, provision, provisioned, start_host
from faults import cmd_index_delay, cmd_power
from hosts import current_hosts, current_offline, current_targets, find_host, hexec, hosts, lab_hosts_present
from image import ensure_image, image_tag
from index import INDEX_PORT, ensure_index, index_running, stop_index
from inventory_file import INVENTORY, write_inventory
from network import GATEWAY, NETWORK, NETWORKS, OFFLINE_NETWORK, SUBNET, ensure_blackhole_routes, ensure_network
from quirks import apply_quirks, ensure_tools
from reference import REFERENCE_VENV, push_uv, seed_reference, seeded
from ssh import SSH_DIR, _user_known_hosts_block, close_ssh_masters, ensure_key, ssh_ok, write_known_hosts

# What tests/lab reads from `lab` beyond what this file uses itself.
__all__ = ["HERE", "INVENTORY", "OFFLINE_NETWORK", "SSH_DIR", "hexec", "push_uv", "run"]


def cmd_up(args) -> int:
    t0 = time.monotonic()
    ensure_blackhole_routes()
    ensure_tools()
    apply_quirks()
    image = ensure_image()
    targets = args.targets if args.targets is not None else current_targets()
    offline = args.offline if args.offline is not None else current_offline()
    all_hosts = hosts(targets, offline)
    for net in sorted({h.network for h in all_hosts}):
        ensure_network(net)
    key = ensure_key()
    wanted = {h.container for h in all_hosts}
    for name in lab_hosts_present():
        if name not in wanted:
            log(f"removing {name} (not in LAB_TARGETS={targets} LAB_OFFLINE={offline})")
            podman("rm", "-f", "-t", "0", name)
    for h in all_hosts:
        if start_host(h, image):
            log(f"{h.name}: container started ({h.address})")
    # The gateway address exists once the network's bridge does, i.e. after the first container.
    index_url = ensure_index()
    for h in all_hosts:
        if not provisioned(h):
            provision(h, key, index_url)
        elif h.reference and not seeded(h):
            log(f"{h.name}: the fixture DFlash tree changed, seeding {REFERENCE_VENV} again")
            seed_reference(h, index_url)
    write_known_hosts(all_hosts)
    write_inventory(all_hosts)
    log(f"lab up: {', '.join(h.name for h in all_hosts)} in {time.monotonic() - t0:.1f}s")
    return 0


def cmd_down(args) -> int:
    ensure_blackhole_routes()  # kept after down: stray connections to lab addresses stay on this machine
    for name in lab_hosts_present():
        podman("rm", "-f", "-t", "0", name)
        log(f"removed {name}")
    for net in NETWORKS:
        if podman("network", "exists", net, check=False).returncode == 0:
            podman("network", "rm", net)
            log(f"removed network {net}")
    stop_index()
    _user_known_hosts_block([])
    shutil.rmtree(STATE, ignore_errors=True)
    # The fleet's recorded hashes (sglang_venv) go with the fleet's hosts, as each host's releases do.
    (REPO / "build" / "fleet-hashes.json").unlink(missing_ok=True)
    write_inventory(hosts(0))
    return 0


def cmd_status(args) -> int:
    present = lab_hosts_present()
    if not present:
        print("lab: down")
        return 1
    ok = True
    print(f"network {NETWORK} {SUBNET}; index "
          f"{'up' if index_running() else 'DOWN'} http://{GATEWAY}:{INDEX_PORT}/simple; image {image_tag()}")
    ok &= index_running()
    for h in current_hosts():
        state = container_state(h)
        sysd = ssh = "-"
        if state == "running":
            sysd = podman("exec", h.container, "systemctl", "is-system-running", check=False).stdout.strip()
            ssh = "ok" if ssh_ok(h) else "FAILED"
        good = state == "running" and sysd in ("running", "degraded") and ssh == "ok"
        ok &= good
        print(f"{h.name:6} {h.address:14} container={state:8} systemd={sysd:9} ssh={ssh}")
    return 0 if ok else 1


def cmd_reset(args) -> int:
    """Recreate one host from the image: an empty machine, provisioned as lab-up does."""
    h = find_host(args.host)
    podman("rm", "-f", "-t", "0", h.container, check=False)
    close_ssh_masters(h.address)
    image = ensure_image()
    start_host(h, image)
    provision(h, ensure_key(), ensure_index())
    write_known_hosts(current_hosts())  # a host not running keeps its line (ssh.py)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--targets", type=int, default=None,
                    help="extra fresh targets ct201… (default: LAB_TARGETS, else what is running)")
    up.add_argument("--offline", type=int, default=None,
                    help="fresh targets ct250… on the offline network (default: LAB_OFFLINE, else what is running)")
    sub.add_parser("down")
    sub.add_parser("status")
    for name in ("reset", "stop", "start", "kill"):
        sp = sub.add_parser(name)
        sp.add_argument("host")
    sp = sub.add_parser("index-delay")
    sp.add_argument("seconds", type=float)
    args = p.parse_args(argv)
    if args.cmd == "up" and args.targets is None and os.environ.get("LAB_TARGETS"):
        args.targets = int(os.environ["LAB_TARGETS"])
    if args.cmd == "up" and args.offline is None and os.environ.get("LAB_OFFLINE"):
        args.offline = int(os.environ["LAB_OFFLINE"])
    if os.geteuid() != 0:
        print("lab: needs root (podman with systemd containers, debootstrap)", file=sys.stderr)
        return 2
    try:
        command = {"up": cmd_up, "down": cmd_down, "status": cmd_status, "reset": cmd_reset,
                   "stop": cmd_power, "start": cmd_power, "kill": cmd_power,
                   "index-delay": cmd_index_delay}[args.cmd]
        if args.cmd not in ("up", "down", "reset", "status"):
            return command(args)  # one container's power, or the index: nothing shared is rewritten
        # containers made or removed, known_hosts and the inventory written; status waits for them, or it
        # would report a host that the other stream's reset is recreating as absent
        with mutation_lock():
            return command(args)
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
