#!/usr/bin/env python3
"""site_packages_transplant against cp -a / cp -al, like for like, on a real torch venv.

Run on a GPU host such as an H200 (or any host with a real torch/triton/nvidia venv):

    python3 tests/gpu/transplant_speed.py --venv /opt/torch/.venv --out $OUT \
        --site /tmp/site [--collection DIR] [--rounds 3] [--budget-s 420]

What "like for like" means here:

* One file set. The distributions are torch, triton and every distribution
  with files under ``nvidia/`` in the venv. They are first hardlinked by the
  module into a clean source venv (same inodes as the real venv), so the
  source holds exactly their RECORD files and nothing else (no ``__pycache__``
  left by imports, no other distribution's files under ``nvidia/``). Every
  timed run copies that source into a fresh ``uv venv``: the module with
  ``link: copy`` / ``link: hardlink``, and ``cp -a`` / ``cp -al`` of exactly the
  top-level entries the module added (checked: same file count and bytes).
* Same cache state. Before each timed run the previous destination is
  removed and ``sync`` flushes its dirty pages (outside the timing). "warm":
  every source file is read once (``cat``) just before the run. "cold" (only
  where ``/proc/sys/vm/drop_caches`` can be written): ``sync`` and drop
  caches just before the run (that also drops Python's and ansible's own
  files: the module's start-up is part of what it pays).
* Alternating order: round 0 module first, round 1 cp first, and so on.
* The module runs as Ansible runs it on a host
  (``python3 plugins/modules/site_packages_transplant.py ARGS.json`` with
  ansible-core and the collection on PYTHONPATH); wall time is the process's
  (interpreter and ansible imports included), ``elapsed`` the module's own.

Then, warm, the module's copy and hardlink modes run once each under a
wall-clock stack sampler and once under cProfile (all threads;
tests/gpu/profile_module.py), and copy mode once with 1 and with 16 workers.

Output: OUT/transplant_speed.json (every figure), OUT/profile_*.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[speed {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def sh(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def site_packages(venv: Path) -> Path:
    return Path(sh([str(venv / "bin" / "python"), "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True).stdout.strip())


def meminfo() -> dict:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, val = line.split(":", 1)
            if key in ("MemTotal", "MemFree", "Cached", "Dirty", "Writeback"):
                out[key] = int(val.split()[0]) // 1024  # MiB
    except OSError:
        pass
    return out


def fs_of(path: Path) -> str:
    best = ("", "?", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            if str(path).startswith(mnt.rstrip("/") + "/") or str(path) == mnt or mnt == "/":
                if len(mnt) >= len(best[0]):
                    best = (mnt, fstype, dev)
    except OSError:
        pass
    return "%s on %s (%s)" % (best[1], best[0], best[2])


def select_distributions(sp: Path, only: list[str] | None = None) -> tuple[list[str], int, int]:
    from importlib import metadata as md

    from packaging.utils import canonicalize_name

    names, files, size = set(), 0, 0
    for dist in md.distributions(path=[str(sp)]):
        name = canonicalize_name(dist.metadata["Name"])
        paths = [str(p) for p in (dist.files or [])]
        if (name in only) if only else (name in ("torch", "triton") or any(p.startswith("nvidia/") for p in paths)):
            names.add(name)
            for f in dist.files or []:
                files += 1
                size += f.size or 0
    return sorted(names), files, size


def tree_files(roots: list[Path]) -> tuple[int, int]:
    n = b = 0
    for root in roots:
        if root.is_file() or root.is_symlink():
            n += 1
            b += root.lstat().st_size
            continue
        for dirpath, _dirs, fnames in os.walk(root):
            for f in fnames:
                n += 1
                b += os.lstat(os.path.join(dirpath, f)).st_size
    return n, b


def added_roots(venv: Path, pristine: Path) -> list[str]:
    """Relative paths in venv that a pristine venv of the same making lacks (minimal roots)."""
    roots = []
    for dirpath, dirs, fnames in os.walk(venv):
        rel = os.path.relpath(dirpath, venv)
        keep = []
        for d in dirs:
            r = os.path.normpath(os.path.join(rel, d))
            if d == ".dflash-transplant":
                continue
            if os.path.islink(venv / r):
                if not os.path.lexists(pristine / r):
                    roots.append(r)
            elif os.path.lexists(pristine / r):
                keep.append(d)
            else:
                roots.append(r)
        dirs[:] = keep
        for f in fnames:
            r = os.path.normpath(os.path.join(rel, f))
            if not os.path.lexists(pristine / r):
                roots.append(r)
    return sorted(roots)


class Bench:
    def __init__(self, opts):
        self.opts = opts
        self.work = Path(tempfile.mkdtemp(prefix="tspeed-", dir=opts.workdir))
        ac = self.work / "ac" / "ansible_collections" / "dflash"
        ac.mkdir(parents=True)
        (ac / "deploy").symlink_to(Path(opts.collection).resolve())
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join([str(self.work / "ac"), opts.site])
        self.module_path = str(Path(opts.collection).resolve() / "plugins" / "modules" / "site_packages_transplant.py")
        self.uv = shutil.which("uv")
        self.py = str(Path(opts.venv) / "bin" / "python3")
        self.n = 0
        self.can_drop = None

    def new_venv(self, name: str) -> Path:
        dest = self.work / name
        if dest.exists():
            shutil.rmtree(dest)
        sh([self.uv, "venv", "--quiet", "--python", self.py, str(dest)], check=True)
        return dest

    def module(self, args: dict, wrapper: list[str] | None = None) -> dict:
        self.n += 1
        argfile = self.work / f"args-{self.n}.json"
        argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        cmd = [sys.executable] + (wrapper or []) + [self.module_path, str(argfile)]
        start = time.monotonic()
        proc = sh(cmd, env=self.env, timeout=600)
        wall = time.monotonic() - start
        try:
            res = json.loads(proc.stdout)
        except json.JSONDecodeError:
            res = {"failed": True, "msg": "no JSON", "stdout": proc.stdout[-2000:]}
        res["_wall_s"] = round(wall, 4)
        if proc.returncode or res.get("failed"):
            res["_stderr"] = proc.stderr[-2000:]
        return res

    def drop_caches(self) -> bool:
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as fh:
                fh.write("3\n")
            return True
        except OSError as exc:
            self.drop_error = repr(exc)
            return False

    def warm(self, roots: list[Path]) -> float:
        start = time.monotonic()
        sh(["bash", "-c", 'find "$@" -type f -print0 | xargs -0 -P8 -n256 cat > /dev/null', "warm",
            *map(str, roots)])
        os.sync()  # the read pass can dirty inodes (atime); flush them before the timed run
        return time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", default="/opt/torch/.venv")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/tspeed-out"))
    ap.add_argument("--site", default="/tmp/site")
    ap.add_argument("--collection", default=str(REPO))
    ap.add_argument("--workdir", default=None, help="where to build the venvs (same filesystem as --venv)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--only-profiles", action="store_true", help="skip the timed rounds and worker counts")
    ap.add_argument("--dists", nargs="*", help="distributions to move instead of torch/triton/nvidia-* (tests)")
    opts = ap.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    venv = Path(opts.venv)
    if opts.workdir is None:  # hardlinks need the venv's filesystem
        opts.workdir = tempfile.gettempdir()
        if os.stat(opts.workdir).st_dev != os.stat(venv).st_dev:
            opts.workdir = str(venv.resolve().parent)
    b = Bench(opts)
    sp = site_packages(venv)
    rep: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "venv": str(venv), "venv_fs": fs_of(sp), "work_fs": fs_of(b.work),
                 "same_device": os.stat(sp).st_dev == os.stat(b.work).st_dev,
                 "cp": sh(["cp", "--version"]).stdout.splitlines()[0],
                 "mem_start_mib": meminfo()},
        "collection": opts.collection,
    }
    if shutil.which("nvidia-smi"):
        gpu = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
        rep["host"]["gpu"] = gpu.stdout.strip()
    dists, rec_files, rec_bytes = select_distributions(sp, opts.dists)
    rep["distributions"] = dists
    rep["record_files"], rep["record_bytes"] = rec_files, rec_bytes
    log(f"{len(dists)} distributions, RECORD {rec_files} files {rec_bytes / 1e9:.2f} GB; {rep['host']}")

    # the floor: interpreter + ansible's module_utils import
    t = time.monotonic()
    sh([sys.executable, "-c", "import ansible.module_utils.basic"], env=b.env)
    rep["python_ansible_import_s"] = round(time.monotonic() - t, 3)

    # a clean source venv: exactly the RECORD files, hardlinked from the real venv
    src = b.new_venv("src")
    res = b.module({"src": str(venv), "dest": str(src), "distributions": dists, "link": "hardlink"})
    if res.get("failed"):
        rep["src_build"] = res
        (out / "transplant_speed.json").write_text(json.dumps(rep, indent=1, default=str))
        log(f"building the source venv failed: {res.get('msg')} {res.get('_stderr', '')[-500:]}")
        return 1
    rep["src_build"] = {k: res.get(k) for k in ("elapsed", "_wall_s", "files_linked", "files_copied",
                                                 "bytes_linked", "bytes_copied")}
    pristine = b.new_venv("pristine")
    roots_rel = added_roots(src, pristine)
    roots = [src / r for r in roots_rel]
    nfiles, nbytes = tree_files(roots)
    rep["set"] = {"roots": roots_rel, "files": nfiles, "bytes": nbytes,
                  "module_files": (res.get("files_linked") or 0) + (res.get("files_copied") or 0)}
    log(f"source venv: {len(roots_rel)} top-level entries, {nfiles} files, {nbytes / 1e9:.2f} GB "
        f"(module placed {rep['set']['module_files']}); build {res.get('_wall_s')}s")
    by_parent: dict[str, list[str]] = {}
    for r in roots_rel:
        by_parent.setdefault(os.path.dirname(r), []).append(r)

    def run_cp(flag: str, dest: Path) -> dict:
        start = time.monotonic()
        rcs = []
        for parent, items in by_parent.items():
            target = dest / parent
            target.mkdir(parents=True, exist_ok=True)
            rcs.append(sh(["cp", flag, *[str(src / i) for i in items], str(target)]).returncode)
        return {"_wall_s": round(time.monotonic() - start, 4), "rc": max(rcs)}

    def one(kind: str, mode: str, state: str, extra: dict | None = None) -> dict:
        dest = b.new_venv("dest")
        os.sync()
        prep = {}
        if state == "cold":
            prep["dropped"] = b.drop_caches()
        else:
            prep["warm_read_s"] = round(b.warm(roots), 3)
        mem = meminfo()
        if kind == "module":
            args = {"src": str(src), "dest": str(dest), "distributions": dists, "link": mode}
            args.update(extra or {})
            r = b.module(args)
            row = {k: r.get(k) for k in ("_wall_s", "elapsed", "files_copied", "files_linked", "bytes_copied",
                                          "bytes_linked", "failed", "msg", "_stderr")}
        else:
            row = run_cp("-a" if mode == "copy" else "-al", dest)
        row.update(prep)
        row["mem_before_mib"] = mem
        if not getattr(b, "_counted_" + kind + mode, False):
            setattr(b, "_counted_" + kind + mode, True)
            row["dest_files"], row["dest_bytes"] = tree_files([dest / r for r in roots_rel])
        shutil.rmtree(dest)
        return row

    results: dict = {}
    states = ["warm"]
    b.can_drop = b.drop_caches()
    rep["drop_caches_permitted"] = b.can_drop
    if not b.can_drop:
        rep["drop_caches_error"] = getattr(b, "drop_error", None)
    else:
        states.append("cold")
    for state in ([] if opts.only_profiles else states):
        for mode in ("copy", "hardlink"):
            key = f"{mode}_{state}"
            results[key] = {"module": [], "cp": [], "order": []}
            for rnd in range(opts.rounds):
                if time.monotonic() - T0 > opts.budget_s * (0.55 if state == "cold" else 0.4):
                    results[key]["stopped"] = f"time budget, after {rnd} rounds"
                    break
                order = ("module", "cp") if rnd % 2 == 0 else ("cp", "module")
                results[key]["order"].append(order)
                for kind in order:
                    row = one(kind, mode, state)
                    results[key][kind].append(row)
                    log(f"{key} round {rnd} {kind}: wall {row['_wall_s']}s elapsed {row.get('elapsed')} "
                        f"{row.get('msg') or ''} {'' if 'dest_files' not in row else row['dest_files']}")
            for kind in ("module", "cp"):
                walls = [r["_wall_s"] for r in results[key][kind] if not r.get("failed")]
                if walls:
                    results[key][kind + "_median_s"] = round(statistics.median(walls), 4)
                    results[key][kind + "_min_s"] = round(min(walls), 4)
                els = [r["elapsed"] for r in results[key][kind] if r.get("elapsed") is not None]
                if els:
                    results[key][kind + "_elapsed_median_s"] = round(statistics.median(els), 4)
            if results[key].get("cp_median_s") and results[key].get("module_median_s"):
                results[key]["ratio_wall"] = round(results[key]["module_median_s"] / results[key]["cp_median_s"], 2)
                if results[key].get("module_elapsed_median_s"):
                    results[key]["ratio_elapsed"] = round(
                        results[key]["module_elapsed_median_s"] / results[key]["cp_median_s"], 2)
            log(f"{key}: module {results[key].get('module_median_s')} s (elapsed "
                f"{results[key].get('module_elapsed_median_s')}), cp {results[key].get('cp_median_s')} s, "
                f"ratio {results[key].get('ratio_wall')}")
    rep["results"] = results
    (out / "transplant_speed.json").write_text(json.dumps(rep, indent=1, default=str))

    # worker count, copy mode, warm
    rep["workers"] = {}
    for w in (() if opts.only_profiles else (1, 16)):
        if time.monotonic() - T0 > opts.budget_s * 0.75:
            rep["workers"]["stopped"] = "time budget"
            break
        row = one("module", "copy", "warm", {"workers": w})
        rep["workers"][str(w)] = row
        log(f"copy workers={w}: wall {row['_wall_s']} elapsed {row.get('elapsed')}")

    # profiles, warm
    rep["profiles"] = {}
    for mode in ("copy", "hardlink"):
        for prof in ("sample", "cprofile"):
            if time.monotonic() - T0 > opts.budget_s * 0.9:
                rep["profiles"]["stopped"] = "time budget"
                break
            dest = b.new_venv("dest")
            os.sync()
            b.warm(roots)
            pout = out / f"profile_{mode}_{prof}.json"
            r = b.module({"src": str(src), "dest": str(dest), "distributions": dists, "link": mode},
                         wrapper=[str(HERE / "profile_module.py"), prof, str(pout)])
            rep["profiles"][f"{mode}_{prof}"] = {k: r.get(k) for k in ("_wall_s", "elapsed", "failed", "msg",
                                                                        "_stderr")}
            log(f"profile {mode} {prof}: wall {r['_wall_s']} elapsed {r.get('elapsed')} {r.get('msg') or ''}")
            shutil.rmtree(dest)
    rep["host"]["mem_end_mib"] = meminfo()
    rep["total_s"] = round(time.monotonic() - T0, 1)
    (out / "transplant_speed.json").write_text(json.dumps(rep, indent=1, default=str))
    log(f"wrote {out / 'transplant_speed.json'}")
    shutil.rmtree(b.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
