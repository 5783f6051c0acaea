"""Benchmark pkg_probe and abi_check against the real tools, side by side, on one venv.

Not a test: run it by hand on a real torch venv, e.g.

    uv venv /tmp/realtorch && uv pip install --python /tmp/realtorch/bin/python torch==2.11.0
    uv pip install --python /tmp/realtorch/bin/python --no-deps sglang-kernel==0.4.2
    uv venv /tmp/piptool && uv pip install --python /tmp/piptool/bin/python pip
    .venv/bin/python bench/bench_probe.py --venv /tmp/realtorch --pip /tmp/piptool/bin/python

Every measurement runs in a fresh process (what an Ansible task pays), ``--repeat`` times; the table shows the
median and the first (coldest) run.  pkg_probe and abi_check report their own ``elapsed`` (the module's work
without interpreter start-up); the wall time of the process is shown too.  One core: pass ``--cpu 0`` to pin.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTIONS = REPO / ".collections"

PROBE = r"""
import json, sys, time
sys.path.insert(0, %(collections)r)
t0 = time.monotonic()
from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe
r = probe(%(venv)r, uv=%(uv)r)
print(json.dumps({"elapsed": r["elapsed"], "with_import": round(time.monotonic() - t0, 3),
                  "distributions": len(r["distributions"]), "unsatisfied": len(r["unsatisfied"])}))
"""

ABI = r"""
import json, sys, time
sys.path.insert(0, %(collections)r)
t0 = time.monotonic()
from ansible_collections.dflash.deploy.plugins.module_utils.abi_check import check
r = check(%(venv)r, packages=%(packages)r, gpu_ccs=%(ccs)r, environment=%(env)r)
print(json.dumps({"elapsed": r["elapsed"], "with_import": round(time.monotonic() - t0, 3),
                  "compatible": r["compatible"], "msg": r["msg"], "files": len(r["files"])}))
"""


def timed(cmd, env=None, cpu=None):
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu)] + cmd
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - t0
    return wall, proc


def series(name, cmd, repeat, env=None, cpu=None, parse=False):
    walls, own, last = [], [], None
    for _i in range(repeat):
        wall, proc = timed(cmd, env, cpu)
        walls.append(wall)
        last = proc
        if parse:
            try:
                data = json.loads(proc.stdout.strip().splitlines()[-1])
                own.append(data["elapsed"])
                last = data
            except (ValueError, IndexError, KeyError):
                print("%s failed: %s" % (name, proc.stderr[-2000:]), file=sys.stderr)
                raise
    return {"name": name, "wall_median": statistics.median(walls), "wall_first": walls[0],
            "own_median": statistics.median(own) if own else None, "own_first": own[0] if own else None,
            "last": last if parse else {"rc": last.returncode, "stderr_tail": last.stderr[-300:]}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", required=True)
    ap.add_argument("--pip", help="a Python that has pip (for pip inspect --path)")
    ap.add_argument("--uv", default=str(REPO / ".tools" / "uv" / "bin" / "uv"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu", type=int, help="pin every process to this CPU (taskset)")
    ap.add_argument("--packages", nargs="*", default=["sgl_kernel"])
    ap.add_argument("--gpu-cc", default="12.0")
    ap.add_argument("--driver-lib", help="directory with a libcuda.so.1 for the real import (e.g. the fixture driver)")
    ap.add_argument("--gpu-config", help="DFLASH_FIXTURE_GPU_CONFIG for the fixture driver")
    ap.add_argument("--json-out")
    args = ap.parse_args()

    venv = os.path.abspath(args.venv)
    py = os.path.join(venv, "bin", "python")
    site = sorted(Path(venv).glob("lib/python3*/site-packages"))[-1]
    me = sys.executable
    env = dict(os.environ)
    svc = {}
    if args.driver_lib:
        svc["LD_LIBRARY_PATH"] = args.driver_lib
        env["LD_LIBRARY_PATH"] = args.driver_lib
    if args.gpu_config:
        env["DFLASH_FIXTURE_GPU_CONFIG"] = args.gpu_config
    major, minor = args.gpu_cc.split(".")
    rows = []
    subst = {"collections": str(COLLECTIONS), "venv": venv, "uv": args.uv, "packages": args.packages,
             "ccs": [(int(major), int(minor))], "env": svc}

    rows.append(series("pkg_probe (module_utils, fresh process)", [me, "-c", PROBE % subst], args.repeat,
                       cpu=args.cpu, parse=True))
    if args.pip:
        pip_cmd = [args.pip, "-m", "pip", "inspect", "--path", str(site)]
        rows.append(series("pip inspect --path site-packages", pip_cmd, args.repeat, cpu=args.cpu))
    rows.append(series("uv pip list --format json", [args.uv, "pip", "list", "--format", "json", "--python", py],
                       args.repeat, cpu=args.cpu))
    rows.append(series("uv pip check", [args.uv, "pip", "check", "--python", py], args.repeat, cpu=args.cpu))
    rows.append(series("python -m torch.utils.collect_env", [py, "-m", "torch.utils.collect_env"],
                       max(1, min(args.repeat, 3)), env=env, cpu=args.cpu))
    rows.append(series("abi_check static (module_utils, fresh process)", [me, "-c", ABI % subst], args.repeat,
                       cpu=args.cpu, parse=True))
    for pkg in args.packages:
        rows.append(series("import %s (venv python, fresh process)" % pkg, [py, "-c", "import %s" % pkg],
                           max(1, min(args.repeat, 3)), env=env, cpu=args.cpu))

    uv_pair = sum(r["wall_median"] for r in rows if r["name"].startswith("uv pip"))
    probe_row = rows[0]
    abi_row = [r for r in rows if r["name"].startswith("abi_check")][0]
    print("| measurement | own elapsed (median) | wall (median) | wall (first) |")
    print("|---|---|---|---|")
    for r in rows:
        own = "%.3f s" % r["own_median"] if r["own_median"] is not None else ""
        print("| %s | %s | %.3f s | %.3f s |" % (r["name"], own, r["wall_median"], r["wall_first"]))
    print()
    print("ratios (wall, median): ")
    for r in rows[1:]:
        if r is abi_row:
            continue
        base = abi_row if r["name"].startswith("import") else probe_row
        print("  %s / %s = %.1fx" % (r["name"], base["name"].split(" (")[0], r["wall_median"] / base["wall_median"]))
    print("  (uv pip list + uv pip check) / pkg_probe = %.1fx" % (uv_pair / probe_row["wall_median"]))
    print("abi_check verdict: compatible=%s msg=%s" % (abi_row["last"]["compatible"], abi_row["last"]["msg"]))
    for r in rows:
        if r["name"].startswith("import"):
            print("%s: rc=%s %s" % (r["name"], r["last"]["rc"], r["last"]["stderr_tail"].strip().splitlines()[-1:]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
