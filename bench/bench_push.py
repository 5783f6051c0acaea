"""The bundle push against the bytes' own transfer time, in the lab.

Three ways of putting one file of random bytes (incompressible, like a bundle of
ELF files mostly is to zlib) on a lab target, alternating, medians:

- ``ssh cat``: ``ssh <target> 'cat > f'`` over the lab's SSH settings, no
  compression (ssh's own default): the baseline, what rsync sends for a new file.
- ``push``: what cuda_overlay's "Push the bundle" runs: ``ansible.builtin.copy`` with
  ``ansible_ssh_args`` set to the role's ``cuda_overlay_transfer_ssh_args`` (read from
  roles/cuda_overlay/defaults/main.yml), after the outdated bundle was removed.
- ``copy, play's ssh_args``: the same copy through Ansible's default ``ssh_args``
  (``-C`` and the play's shared ControlMaster connection): the push before the variable.

The copies are timed inside one playbook (the controller's clock before and after the
task), so Ansible's own start-up is not counted; a warm-up task opens the play's
connection first, as a deploy has by then. Not a test: run with the lab up
(tools/lab/session.sh):

    .venv/bin/python bench/bench_push.py --mib 1024 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SSH_DIR = REPO / "build" / "lab" / "ssh"
DEST = "/root/push-bench"

PLAY = """
- hosts: {host}
  gather_facts: false
  tasks:
    - name: Open the play's connection
      ansible.builtin.command: "true"
      changed_when: false
    - name: Start
      ansible.builtin.set_fact:
        _t0: "{{{{ now().timestamp() }}}}"
    - name: Remove the outdated file
      ansible.builtin.file:
        path: {dest}
        state: absent
    - name: Copy
      vars: {vars}
      ansible.builtin.copy:
        src: {src}
        dest: {dest}
        mode: "0644"
    - name: Stop
      ansible.builtin.debug:
        msg: "PUSH-SECONDS {{{{ now().timestamp() - (_t0 | float) }}}}"
"""


def role_transfer_args() -> str:
    defaults = yaml.safe_load((REPO / "roles" / "cuda_overlay" / "defaults" / "main.yml").read_text())
    return defaults["cuda_overlay_transfer_ssh_args"]


def timed_copy(host: str, src: Path, variables: dict, env: dict, tmp: Path) -> float:
    book = tmp / "push.yml"
    book.write_text(PLAY.format(host=host, dest=DEST, src=src, vars=json.dumps(variables)))
    out = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), str(book)], cwd=REPO, env=env,
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"PUSH-SECONDS ([0-9.]+)", out).group(1))


def timed(argv, **kw) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.monotonic() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="ct200")
    ap.add_argument("--address", default="10.89.64.200")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_SSH_ARGS", None)
    ssh = ["ssh", "-i", str(SSH_DIR / "id_ed25519"), "-o", f"UserKnownHostsFile={SSH_DIR / 'known_hosts'}",
           "-o", "StrictHostKeyChecking=yes", f"root@{args.address}"]
    transfer = role_transfer_args()
    runs: dict[str, list[float]] = {"ssh cat": [], "push": [], "copy, play's ssh_args": []}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bundle.bin"
        with open(src, "wb") as handle:
            for _ in range(args.mib):
                handle.write(os.urandom(1 << 20))
        for _ in range(args.repeat):
            subprocess.run(ssh + [f"rm -f {DEST}"], check=True)
            with open(src, "rb") as handle:
                runs["ssh cat"].append(round(timed(ssh + [f"cat > {DEST}"], stdin=handle), 2))
            runs["push"].append(round(timed_copy(args.host, src, {"ansible_ssh_args": transfer}, env, Path(tmp)), 2))
            runs["copy, play's ssh_args"].append(round(timed_copy(args.host, src, {}, env, Path(tmp)), 2))
        subprocess.run(ssh + [f"rm -f {DEST}"], check=True)
    base = statistics.median(runs["ssh cat"])
    print(f"{args.mib} MiB to {args.host}, median of {args.repeat} alternating rounds "
          f"(cuda_overlay_transfer_ssh_args: {transfer!r}):")
    for name, values in runs.items():
        m = statistics.median(values)
        print(f"  {name:24} {m:6.2f} s  {m / base:5.2f}x ssh cat  {values}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
