"""The bundle push against the bytes' own transfer time, in the lab.

Three ways of putting one bundle-shaped tar (one member of random bytes, incompressible
like a bundle of ELF files mostly is to zlib, then MANIFEST.json) on a lab target,
alternating, medians:

- ``ssh cat``: ``ssh <target> 'cat > f'`` over the lab's SSH settings, no
  compression (ssh's own default): the baseline, what rsync sends for a new file.
- ``push``: what cuda_overlay's "Push the bundle" runs: ``dflash.deploy.bundle_push``
  with the tar's manifest digest and the task's connection variables (read from
  roles/cuda_overlay/tasks/stage.yml, ``cuda_overlay_transfer_ssh_args`` at its default
  from roles/cuda_overlay/defaults/main.yml: uncompressed, multiplexed on its own master),
  after the outdated bundle was removed.
- ``push, put_file``: the same task with ``transfer: put_file``, the connection's own
  ``sftp`` transfer in place of the ssh stream (the push before 2026-12-06, evening).
- ``copy, transfer args``: the push before bundle_push: ``ansible.builtin.copy`` on the
  same connection settings (two whole-file SHA-1 passes, the remote stat).

With ``--variants``, bundle_push with ``transfer: put_file`` is also timed on settings the
role does not use: ``-o Compression=no`` alone (unmultiplexed: every round trip its own SSH
handshake), and the role's settings with larger sftp requests (``-B 262144``) or legacy scp
(``scp -O``).

A transfer connection's master outlives its task (60 s); the bench closes it after each
copy, so every copy opens its own, as a deploy does once per host.

The copies are timed inside one playbook (the controller's clock before and after the
task), so Ansible's own start-up is not counted; a warm-up task opens the play's
connection first, as a deploy has by then. Not a test: run with the lab up
(tools/lab/session.sh):

    .venv/bin/python bench/bench_push.py --mib 1024 --repeat 3
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import statistics
import subprocess
import tarfile
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
      {module}:
        src: {src}
        dest: {dest}
        mode: "0644"{extra}
    - name: Stop
      ansible.builtin.debug:
        msg: "PUSH-SECONDS {{{{ now().timestamp() - (_t0 | float) }}}}"
"""


def role_transfer_args() -> str:
    defaults = yaml.safe_load((REPO / "roles" / "cuda_overlay" / "defaults" / "main.yml").read_text())
    return defaults["cuda_overlay_transfer_ssh_args"]


def role_push_vars(transfer: str) -> dict:
    """The connection variables of cuda_overlay's "Push the bundle" task, its ssh args at their default."""
    block = yaml.safe_load((REPO / "roles" / "cuda_overlay" / "tasks" / "stage.yml").read_text())[0]["block"]
    [task] = [t for t in block if t.get("name") == "Push the bundle"]
    return {k: transfer if v == "{{ cuda_overlay_transfer_ssh_args }}" else v for k, v in task["vars"].items()}


def timed_copy(host: str, src: Path, variables: dict, env: dict, tmp: Path, digest: str = "",
               transfer: str = "auto") -> float:
    """Seconds of the copy task: ``ansible.builtin.copy``, or with ``digest`` ``dflash.deploy.bundle_push``."""
    book = tmp / "push.yml"
    extra = f"\n        manifest_sha256: {digest}\n        transfer: {transfer}"
    module, extra = ("dflash.deploy.bundle_push", extra) if digest else ("ansible.builtin.copy", "")
    book.write_text(PLAY.format(host=host, dest=DEST, src=src, vars=json.dumps(variables), module=module, extra=extra))
    out = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), str(book)], cwd=REPO, env=env,
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"PUSH-SECONDS ([0-9.]+)", out).group(1))


def write_bundle(path: Path, mib: int) -> str:
    """A tar shaped like a bundle: ``mib`` MiB of random bytes in one member, then MANIFEST.json; its digest."""
    manifest = json.dumps({"format": "dflash-transplant-bundle", "version": 1, "source": {"venv": ""},
                           "distributions": [], "bench": os.urandom(8).hex()}).encode()

    class Random(io.RawIOBase):
        def __init__(self):
            self.left = mib << 20

        def readable(self):
            return True

        def readinto(self, buf):
            n = min(len(buf), self.left, 1 << 20)
            buf[:n] = os.urandom(n)
            self.left -= n
            return n

    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("site-packages/payload.bin")
        info.size = mib << 20
        tar.addfile(info, io.BufferedReader(Random(), 1 << 20))
        info = tarfile.TarInfo("MANIFEST.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return hashlib.sha256(manifest).hexdigest()


def close_master(ssh: list[str], variables: dict) -> None:
    """Close the multiplexed transfer connection a copy left (Ansible's control_path_dir, ~/.ansible/cp)."""
    if "ansible_control_path" not in variables:
        return
    path = variables["ansible_control_path"].replace("%(directory)s", os.path.expanduser("~/.ansible/cp"))
    subprocess.run(ssh[:-1] + ["-o", "ControlPath=" + path.replace("%%", "%"), "-O", "exit", ssh[-1]],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


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
    ap.add_argument("--variants", action="store_true", help="also time bundle_push on other connection settings")
    args = ap.parse_args(argv)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_SSH_ARGS", None)
    ssh = ["ssh", "-i", str(SSH_DIR / "id_ed25519"), "-o", f"UserKnownHostsFile={SSH_DIR / 'known_hosts'}",
           "-o", "StrictHostKeyChecking=yes", f"root@{args.address}"]
    transfer = role_transfer_args()
    role = role_push_vars(transfer)
    variants = {"push, -o Compression=no alone": {"ansible_ssh_args": "-o Compression=no"},
                "push, sftp -B 262144": dict(role, ansible_sftp_extra_args="-B 262144"),
                "push, scp -O": dict(role, ansible_ssh_transfer_method="scp", ansible_scp_extra_args="-O"),
                } if args.variants else {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bundle.tar"
        digest = write_bundle(src, args.mib)
        rows = [("push", role, digest, "auto"), ("push, put_file", role, digest, "put_file"),
                ("copy, transfer args", role, "", "auto")]
        rows += [(name, variables, digest, "put_file") for name, variables in variants.items()]
        runs: dict[str, list[float]] = {"ssh cat": []} | {row[0]: [] for row in rows}
        for _ in range(args.repeat):
            subprocess.run(ssh + [f"rm -f {DEST}"], check=True)
            with open(src, "rb") as handle:
                runs["ssh cat"].append(round(timed(ssh + [f"cat > {DEST}"], stdin=handle), 2))
            for name, variables, way, transfer in rows:
                runs[name].append(round(timed_copy(args.host, src, variables, env, Path(tmp), way, transfer), 2))
                close_master(ssh, variables)
        subprocess.run(ssh + [f"rm -f {DEST}"], check=True)
    base = statistics.median(runs["ssh cat"])
    print(f"{args.mib} MiB to {args.host}, median of {args.repeat} alternating rounds "
          f"(the role's push variables: {role!r}):")
    for name, values in runs.items():
        m = statistics.median(values)
        print(f"  {name:34} {m:6.2f} s  {m / base:5.2f}x ssh cat  {values}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
