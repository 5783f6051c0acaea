"""The bundle push against the bytes' own transfer time, in the lab: `ansible.builtin.copy` (what
cuda_overlay's "Push the bundle" runs) of one file to a lab target, against `ssh <target> 'cat > f'` of
the same file over the same SSH settings (a new file: what rsync would send), alternating, medians.

Not a test: run with the lab up (tools/lab/session.sh):

    .venv/bin/python bench/bench_push.py --mib 1024 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SSH_DIR = REPO / "build" / "lab" / "ssh"


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
    ssh = ["ssh", "-i", str(SSH_DIR / "id_ed25519"), "-o", f"UserKnownHostsFile={SSH_DIR / 'known_hosts'}",
           "-o", "StrictHostKeyChecking=yes", f"root@{args.address}"]
    copy, stream = [], []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bundle.bin"
        with open(src, "wb") as handle:
            for _ in range(args.mib):
                handle.write(os.urandom(1 << 20))
        for _ in range(args.repeat):
            subprocess.run(ssh + ["rm -f /root/push-copy /root/push-stream"], check=True)
            copy.append(timed([str(REPO / ".venv" / "bin" / "ansible"), args.host, "-b", "-m", "ansible.builtin.copy",
                               "-a", f"src={src} dest=/root/push-copy mode=0644"], cwd=REPO, env=env))
            with open(src, "rb") as handle:
                stream.append(timed(ssh + ["cat > /root/push-stream"], stdin=handle))
        subprocess.run(ssh + ["rm -f /root/push-copy /root/push-stream"], check=True)
    c, s = statistics.median(copy), statistics.median(stream)
    print(f"{args.mib} MiB to {args.host}: ansible.builtin.copy {c:.2f} s (median of {copy}), "
          f"ssh cat {s:.2f} s (median of {stream}); ratio {c / s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
