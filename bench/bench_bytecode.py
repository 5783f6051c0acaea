#!/usr/bin/env python3
"""Import times of a release as the service user, without and with bytecode compiled into it (issue 45 item 3).

The release is root's, and verification and the server run as the service user, who cannot write
``__pycache__``: without bytecode built into the release, every interpreter compiles the sources it
imports again. This measures it on a venv (a real release, or any venv of real sglang):

    bench/bench_bytecode.py --venv /path/to/venv --user nobody [--repeat 2] [--json out.json]

1. each import of verification's list (``--imports``), each in its own interpreter as ``--user`` (through
   setpriv, as pkg_probe runs them), ``--repeat`` times, on the venv as it is (the baseline: no ``.pyc``
   the user can use, unless the venv already holds them);
2. the same with ``PYTHONPYCACHEPREFIX`` naming a directory the user writes (filled by one untimed pass);
3. ``python -m compileall`` over the venv's site-packages as root (its time is the build's cost, and
   the bytes it adds are counted);
4. the same imports again (without the prefix).

The page cache is warmed by one untimed import of each before each pass, so the figures compare
compilation, not the disk. It prints one line per import and pass, and the ratio of the totals.
Run as root. The venv is changed (``.pyc`` files added): run it on a copy or a scratch venv, or pass
``--remove`` to take them out again at the end.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import time

SCRATCH = "/tmp/dflash-bench-bytecode"  # the user's HOME and caches (and the pycache prefix), made afresh
IMPORTS = ["torch", "sgl_kernel", "flashinfer", "sglang.launch_server", "sglang.srt.entrypoints.http_server",
           "sglang.srt.managers.scheduler", "sglang.srt.models.registry", "sglang.srt.speculative.dflash_worker"]


def site_packages(venv: str) -> str:
    (site,) = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    return site


def pyc_files(site: str) -> list:
    return [os.path.join(d, f) for d, _dirs, files in os.walk(site) for f in files if f.endswith(".pyc")]


def as_user(user: str, argv: list) -> list:
    if user in ("", "root"):
        return argv
    pw = pwd.getpwnam(user)
    return ["/usr/bin/setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "--no-new-privs",
            *argv]


def import_once(python: str, module: str, user: str, timeout: int, extra_env=None) -> tuple:
    """(seconds, ok, last line of stderr) for one import in a fresh interpreter as ``user``, from ``/``."""
    env = {"PATH": "/usr/bin:/bin", "HOME": SCRATCH, "XDG_CACHE_HOME": SCRATCH, "LANG": "C.UTF-8",
           "CUDA_VISIBLE_DEVICES": "", **(extra_env or {})}
    start = time.monotonic()
    proc = subprocess.run(as_user(user, [python, "-c", f"import {module}"]), cwd="/", env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    took = time.monotonic() - start
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:160]
    return took, proc.returncode == 0, tail


def one_pass(label: str, python: str, imports: list, user: str, repeat: int, timeout: int, extra_env=None) -> dict:
    for module in imports:  # warm the page cache (and a pycache prefix): the figures compare compilation
        import_once(python, module, user, timeout, extra_env)
    out = {}
    for module in imports:
        runs = [import_once(python, module, user, timeout, extra_env) for _ in range(repeat)]
        best = min(r[0] for r in runs)
        ok = all(r[1] for r in runs)
        out[module] = {"seconds": [round(r[0], 2) for r in runs], "best": round(best, 2), "ok": ok,
                       "error": "" if ok else runs[-1][2]}
        print(f"{label:>9}  {module:<40} best {best:6.2f} s  of {[round(r[0], 2) for r in runs]}"
              + ("" if ok else f"  FAILED: {runs[-1][2]}"), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--venv", required=True)
    ap.add_argument("--user", default="nobody", help="the unprivileged user the imports run as")
    ap.add_argument("--imports", nargs="+", default=IMPORTS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--jobs", type=int, default=0, help="compileall's workers (0: one per CPU)")
    ap.add_argument("--json")
    ap.add_argument("--remove", action="store_true", help="remove the .pyc files compileall added, at the end")
    a = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("run as root: the release is root's and the imports run as --user")
    python = os.path.join(a.venv, "bin", "python")
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    pw = pwd.getpwnam(a.user)
    os.chown(SCRATCH, pw.pw_uid, pw.pw_gid)
    site = site_packages(a.venv)
    before = set(pyc_files(site))
    print(f"venv {a.venv}: {len(before)} .pyc files before; imports as {a.user}, best of {a.repeat}", flush=True)
    result = {"venv": a.venv, "user": a.user, "python": sys.version.split()[0], "pyc_before": len(before)}
    result["without"] = one_pass("without", python, a.imports, a.user, a.repeat, a.timeout)
    prefix = os.path.join(SCRATCH, "pycache")
    result["prefix"] = one_pass("prefix", python, a.imports, a.user, a.repeat, a.timeout,
                                {"PYTHONPYCACHEPREFIX": prefix})
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(prefix) for f in fs)
    print(f"PYTHONPYCACHEPREFIX (written by {a.user} at the first import): {size / 2**20:.1f} MiB", flush=True)
    result["prefix_mib"] = round(size / 2**20, 1)

    start = time.monotonic()
    subprocess.run([python, "-m", "compileall", "-q", "-j", str(a.jobs), site], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    compile_s = time.monotonic() - start
    added = sorted(set(pyc_files(site)) - before)
    size = sum(os.path.getsize(p) for p in added)
    print(f"compileall (root, -j {a.jobs}): {compile_s:.1f} s, {len(added)} .pyc files, {size / 2**20:.1f} MiB",
          flush=True)
    result["compileall"] = {"seconds": round(compile_s, 1), "files": len(added), "mib": round(size / 2**20, 1)}
    result["with"] = one_pass("with", python, a.imports, a.user, a.repeat, a.timeout)

    ok = [m for m in a.imports if all(result[p][m]["ok"] for p in ("without", "prefix", "with"))]
    totals = {p: sum(result[p][m]["best"] for m in ok) for p in ("without", "prefix", "with")}
    result["total"] = {"imports": ok, **{p: round(v, 2) for p, v in totals.items()},
                       "ratio_prefix": round(totals["prefix"] / totals["without"], 3) if totals["without"] else None,
                       "ratio_with": round(totals["with"] / totals["without"], 3) if totals["without"] else None}
    print(f"total over {len(ok)} imports that ran: without {totals['without']:.1f} s, with a pycache prefix "
          f"{totals['prefix']:.1f} s (ratio {result['total']['ratio_prefix']}), compiled into the release "
          f"{totals['with']:.1f} s (ratio {result['total']['ratio_with']})", flush=True)
    if a.remove:
        for p in added:
            os.unlink(p)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
