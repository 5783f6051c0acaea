"""The fault switches tests flip: a host stopped, killed or started again, and a delay on every
wheel the index serves."""
from __future__ import annotations

from common import STATE, log, podman
from containers import wait_ssh, wait_systemd
from hosts import find_host
from index import INDEX_DELAY
from ssh import close_ssh_masters


def cmd_power(args) -> int:
    h = find_host(args.host)
    close_ssh_masters(h.address)
    if args.cmd == "stop":
        podman("stop", "-t", "10", h.container)
    elif args.cmd == "kill":
        podman("kill", h.container)
    else:
        podman("start", h.container)
        wait_systemd(h)
        wait_ssh(h)
    log(f"{h.name}: {args.cmd}")
    return 0


def cmd_index_delay(args) -> int:
    """Every wheel download waits this long (0 removes the delay): a build becomes a window."""
    if args.seconds > 0:
        STATE.mkdir(parents=True, exist_ok=True)
        INDEX_DELAY.write_text(f"{args.seconds}\n")
    else:
        INDEX_DELAY.unlink(missing_ok=True)
    log(f"index delay per wheel: {args.seconds}s")
    return 0
