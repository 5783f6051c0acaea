"""The fast path's cost on the host (roles/deploy_state), on a real tree: the deploy_state module's check,
run as Ansible runs it (its own Python process, arguments on stdin), against a record of the same tree; and
each of its reads alone: the tree's fingerprint (lstat of every entry), nvidia-smi's GPU listing, the package
lock command (`uv pip compile`, offline against a wheelhouse). The named baseline, in the same run: reading
every byte of the tree (sha256 of each file), what a check that re-read the release would cost.

Not a test. On a GPU host (the device's torch venv is a release-sized tree of torch, triton and nvidia-*):

    PYTHONPATH=<dir holding ansible_collections/dflash/deploy and ansible> \\
      python3 bench/bench_fast_path_host.py --tree /opt/torch/.venv --wheelhouse build/fixtures/wheelhouse \\
      --requirements "dflash-demo-pure" --repeat 5 --json out.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from ansible_collections.dflash.deploy.plugins.module_utils.converged import observe as O


def module(args: dict) -> tuple[float, dict]:
    """(seconds, result) of dflash.deploy.deploy_state run as Ansible runs it."""
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": args})
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.dflash.deploy.plugins.modules.deploy_state"],
                          input=payload, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    return seconds, json.loads(proc.stdout.strip().splitlines()[-1])


def timed(fn, repeat):
    times, value = [], None
    for _ in range(repeat):
        start = time.monotonic()
        value = fn()
        times.append(time.monotonic() - start)
    return round(statistics.median(times), 3), value


def read_every_byte(tree):
    total = 0
    for dirpath, _dirs, files in os.walk(tree):
        for name in files:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            total += os.path.getsize(path)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", required=True)
    ap.add_argument("--wheelhouse", default="")
    ap.add_argument("--requirements", default="")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    out = {"tree": args.tree}
    uv = shutil.which("uv")
    command = None
    if uv and args.wheelhouse and args.requirements:
        command = {"argv": [uv, "pip", "compile", "--quiet", "--no-header", "--generate-hashes", "--offline",
                            "--no-index", "--find-links", os.path.abspath(args.wheelhouse),
                            "--python", sys.executable, "-"],
                   "stdin": "\n".join(args.requirements.split()), "env": {"UV_NO_CONFIG": "1"}}
    with tempfile.TemporaryDirectory() as tmp:
        record = {"path": os.path.join(tmp, "state", "converged.json"), "key": {"collection": "c", "vars": "v",
                                                                               "artifacts": "a"}}
        files = sorted(os.path.join(args.tree, f) for f in os.listdir(args.tree)
                       if os.path.isfile(os.path.join(args.tree, f)))[:20]
        seconds, rec = module(dict(record, state="recorded", release="bench", trees=[args.tree], files=files,
                                   gpus=True, command=command))
        out["record_s"] = round(seconds, 3)
        checks = [module(dict(record)) for _ in range(args.repeat)]
        if not all(c[1].get("converged") for c in checks):
            raise SystemExit(f"bench: the unchanged tree was not converged: {checks[-1][1]}")
        out["check_s"] = round(statistics.median(c[0] for c in checks), 3)
    fp_s, fp = timed(lambda: O.FP.fingerprint(args.tree), args.repeat)
    out["fingerprint_s"], out["files"], out["bytes"] = fp_s, fp.files, fp.bytes
    smi = shutil.which("nvidia-smi") or ""
    out["nvidia_smi_s"], rows = timed(lambda: O.gpu_rows(smi), args.repeat)
    out["gpus"] = len(rows or [])
    if command:
        out["lock_s"], digest = timed(lambda: O.command_sha256(command["argv"], command["stdin"], command["env"]),
                                      args.repeat)
        out["lock_ok"] = digest is not None
    out["baseline_read_every_byte_s"], _ = timed(lambda: read_every_byte(args.tree), min(args.repeat, 3))
    out["ratio_check_to_baseline"] = round(out["check_s"] / out["baseline_read_every_byte_s"], 4)
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
