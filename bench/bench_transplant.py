"""Benchmark site_packages_transplant against cp -a, cp -al, rsync -a and ansible.builtin.copy, side by side.

Not a test: run it by hand (or `make bench`).  Quick run on a synthetic tree:

    .venv/bin/python bench/bench_transplant.py --synthetic-mb 600

and on a real torch 2.11.0+cu130 venv from PyPI (4.5 GB, ~12k files in torch/, triton/, nvidia/):

    uv venv /tmp/realtorch && uv pip install --python /tmp/realtorch/bin/python torch==2.11.0
    .venv/bin/python bench/bench_transplant.py --real /tmp/realtorch --json build/bench/transplant.json

The no-op re-run alone, against the module of another git revision (medians of alternating rounds):

    .venv/bin/python bench/bench_transplant.py --noop-files 32000 --baseline main --repeat 7

Every measurement runs in a fresh process (what an Ansible task pays) into a fresh destination venv, with the
page cache warm and `sync` before each timed run (not counted), `--repeat` times; the table shows the median.
The module's own `elapsed` (its work, without interpreter start-up) is shown beside the process wall time.
What is compared is the same data: the baselines copy exactly the top-level entries that the selected
distributions' RECORDs name (their packages and dist-info directories).
"""
from __future__ import annotations

import argparse
import csv
import io
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
UV = REPO / ".tools" / "uv" / "bin" / "uv"
if not UV.exists() and shutil.which("uv"):
    UV = Path(shutil.which("uv"))
MODULE = "ansible_collections.dflash.deploy.plugins.modules.site_packages_transplant"
PATTERNS = ["torch", "triton", "nvidia-*"]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def make_venv(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    sh([str(UV), "venv", "--quiet", "--python", sys.executable, str(path)])
    return path


def site_packages(venv: Path) -> Path:
    return next(Path(venv, "lib").glob("python3.*/site-packages"))


def write_dist(sp: Path, name: str, version: str, files: dict) -> None:
    """One distribution in site-packages sp: files (path -> bytes, or an int: that many MiB of random data),
    METADATA, WHEEL, INSTALLER and a RECORD with every file's sha256."""
    import base64
    import hashlib

    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    meta = {f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode(),
            f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n",
            f"{dist_info}/INSTALLER": b"uv\n"}
    rows = []
    for rel, data in list(files.items()) + list(meta.items()):
        target = sp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, int):
            with open(target, "wb") as handle:
                chunk = os.urandom(1 << 20)
                for _i in range(data):
                    handle.write(chunk)
            digest = hashlib.sha256(target.read_bytes()).digest()
            size = data << 20
        else:
            target.write_bytes(data)
            digest = hashlib.sha256(data).digest()
            size = len(data)
        rows.append((rel, "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode(), size))
    rows.append((f"{dist_info}/RECORD", "", ""))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    (sp / dist_info / "RECORD").write_text(out.getvalue())


def synthetic_source(root: Path, total_mb: int) -> Path:
    """A torch-like venv: many small .py files, a few big .so files, an nvidia/ namespace."""
    venv = root / "synthetic-src"
    marker = venv / f".complete-{total_mb}"
    if marker.exists():
        return venv
    make_venv(venv)
    sp = site_packages(venv)
    big = max(1, total_mb * 55 // 100)  # MB in torch/lib, like the real split
    nvidia = max(1, total_mb * 40 // 100)
    torch_files = {f"torch/pkg{i % 200}/mod{i}.py": os.urandom(6000) for i in range(6000)}
    torch_files.update({f"torch/lib/lib{i}.so": big // 10 for i in range(10)})
    write_dist(sp, "torch", "2.11.0+cu130", torch_files)
    write_dist(sp, "triton", "3.6.0", {f"triton/m{i}.py": os.urandom(4000) for i in range(300)})
    for i in range(8):
        write_dist(sp, f"nvidia-comp{i}", "13.0", {f"nvidia/cu13/lib/libcomp{i}.so.13": nvidia // 8,
                                                   "nvidia/__init__.py": b""})
    sh(["sync"])  # its writeback must not land inside the measurements
    marker.touch()
    return venv


def selected_entries(src_sp: Path) -> list[str]:
    """Top-level names (packages, dist-info dirs) the selected distributions' RECORDs touch."""
    sys.path.insert(0, str(COLLECTIONS))
    from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import list_dists, name_matches

    tops = set()
    for dist in list_dists(str(src_sp)):
        if not name_matches(dist.name, PATTERNS):
            continue
        for row in csv.reader(open(os.path.join(dist.path, "RECORD"), encoding="utf-8")):
            if row and not row[0].startswith("../"):
                tops.add(os.path.normpath(row[0]).split("/")[0])
    return sorted(tops)


def timed(cmd, **kw) -> float:
    sh(["sync"])
    start = time.monotonic()
    sh(cmd, **kw)
    return time.monotonic() - start


def run_module(args: dict, pythonpath: Path = COLLECTIONS) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(pythonpath), os.environ.get("PYTHONPATH")) if p))
    sh(["sync"])
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", MODULE], input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
                          capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    result = json.loads(proc.stdout)
    if result.get("failed"):
        raise SystemExit("module failed: %s" % result.get("msg"))
    return wall, result


def ansible_wall(args: str) -> float:
    start = time.monotonic()
    out = subprocess.run([str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-m",
                          "dflash.deploy.site_packages_transplant", "-a", args], cwd=REPO, capture_output=True,
                         text=True, check=False, env=dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false",
                                                          ANSIBLE_INVENTORY_UNPARSED_WARNING="false"))
    wall = time.monotonic() - start
    if out.returncode != 0 or '"changed": false' not in out.stdout:
        raise SystemExit("ansible no-op run failed or changed: " + out.stdout[-2000:])
    return wall


def tree_size(paths) -> tuple[int, int]:
    files = size = 0
    for top in paths:
        if os.path.isfile(top):
            files, size = files + 1, size + os.path.getsize(top)
            continue
        for dirpath, _dirs, names in os.walk(top):
            for name in names:
                files += 1
                size += os.lstat(os.path.join(dirpath, name)).st_size
    return files, size


def bench_tree(label: str, src: Path, work: Path, repeat: int, copy_module_small: int) -> dict:
    src_sp = site_packages(src)
    tops = selected_entries(src_sp)
    sources = [str(src_sp / t) for t in tops]
    files, size = tree_size(sources)
    dest = work / "dest"
    out = {"label": label, "files": files, "bytes": size, "rows": {}}

    def series(name, fn):
        values = []
        for _i in range(repeat):
            values.append(fn())
        out["rows"][name] = values
        print("  %-34s %s" % (name, " ".join("%.3f" % v for v in values)), flush=True)
        return values

    def fresh():
        make_venv(dest)
        return site_packages(dest)

    def cp(flags):
        sp = fresh()
        return timed(["cp", flags] + sources + [str(sp) + "/"])

    args = {"src": str(src), "dest": str(dest), "distributions": PATTERNS}

    def module(link, key="wall"):
        fresh()
        wall, result = run_module(dict(args, link=link))
        assert result["changed"]
        out["rows"].setdefault("module %s own elapsed" % link, []).append(result["elapsed"])
        return wall

    print(f"{label}: {files} files, {size / 1e9:.2f} GB", flush=True)
    series("cp -a", lambda: cp("-a"))
    series("module copy (wall)", lambda: module("copy"))
    print("  module copy own elapsed           ", out["rows"]["module copy own elapsed"], flush=True)
    series("cp -al", lambda: cp("-al"))
    series("module hardlink (wall)", lambda: module("hardlink"))
    print("  module hardlink own elapsed       ", out["rows"]["module hardlink own elapsed"], flush=True)

    # no-op: the destination already holds the distributions
    fresh()
    run_module(dict(args, link="copy"))
    noop_own = []

    def noop():
        wall, result = run_module(dict(args, link="copy"))
        assert not result["changed"]
        noop_own.append(result["elapsed"])
        return wall
    series("module no-op (wall)", noop)
    out["rows"]["module no-op own elapsed"] = noop_own
    print("  module no-op own elapsed          ", noop_own, flush=True)
    a_args = f"src={src} dest={dest} distributions={','.join(PATTERNS)} link=copy"
    series("module no-op via ansible (wall)", lambda: ansible_wall(a_args))
    if shutil.which("rsync"):
        rsync_dest = work / "rsync-dest"
        shutil.rmtree(rsync_dest, ignore_errors=True)
        rsync_dest.mkdir(parents=True)
        sh(["rsync", "-a"] + sources + [str(rsync_dest) + "/"])
        series("rsync -a no-op", lambda: timed(["rsync", "-a"] + sources + [str(rsync_dest) + "/"]))
        shutil.rmtree(rsync_dest, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    return out


def bench_ansible_copy(src: Path, work: Path, nfiles: int) -> dict:
    """ansible.builtin.copy of a directory (per-file), on a small slice of the tree, against cp -a of it."""
    src_sp = site_packages(src)
    small = work / "small-tree"
    shutil.rmtree(small, ignore_errors=True)
    picked = 0
    for dirpath, _dirs, names in sorted(os.walk(src_sp / "torch")):
        for name in sorted(names):
            if picked >= nfiles or os.path.getsize(os.path.join(dirpath, name)) > 1 << 20:
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src_sp)
            (small / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src_sp / rel, small / rel)
            picked += 1
    files, size = tree_size([str(small)])
    target = work / "copy-dest"
    shutil.rmtree(target, ignore_errors=True)
    start = time.monotonic()
    out = subprocess.run([str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-m", "ansible.builtin.copy",
                          "-a", f"src={small}/ dest={target}/"], cwd=REPO, capture_output=True, text=True,
                         check=False, env=dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false"))
    ansible_copy = time.monotonic() - start
    if out.returncode != 0:
        raise SystemExit("ansible.builtin.copy failed: " + out.stdout[-2000:])
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    cp_small = timed(["cp", "-a", str(small) + "/.", str(target) + "/"])
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(small, ignore_errors=True)
    print(f"ansible.builtin.copy of {files} files ({size / 1e6:.1f} MB): {ansible_copy:.2f} s; cp -a {cp_small:.3f} s")
    return {"files": files, "bytes": size, "ansible_copy": ansible_copy, "cp_a": cp_small}


def noop_source(root: Path, nfiles: int) -> Path:
    """A torch-like venv of nfiles small files for the no-op re-run, where the count matters, not the bytes:
    torch with nested packages (3/4 of the files), triton, eight nvidia-* runtimes sharing nvidia/."""
    venv = root / "noop-src"
    marker = venv / f".complete-{nfiles}"
    if marker.exists():
        return venv
    make_venv(venv)
    sp = site_packages(venv)
    n_torch = nfiles * 3 // 4
    n_triton = nfiles // 8
    n_nvidia = max(1, (nfiles - n_torch - n_triton) // 8)
    torch_files = {f"torch/pkg{i % 40}/sub{i % 400}/mod{i}.py": os.urandom(1000 + i % 3000) for i in range(n_torch)}
    torch_files["torch/lib/libtorch_cuda.so"] = 8
    write_dist(sp, "torch", "2.11.0+cu130", torch_files)
    write_dist(sp, "triton", "3.6.0", {f"triton/p{i % 30}/m{i}.py": os.urandom(2000) for i in range(n_triton)})
    for k in range(8):
        files = {f"nvidia/comp{k}/include/h{i}.h": os.urandom(500) for i in range(n_nvidia)}
        files[f"nvidia/comp{k}/lib/libcomp{k}.so.13"] = 1  # nvidia/ is a namespace: no __init__.py
        write_dist(sp, f"nvidia-comp{k}", "13.0", files)
    sh(["sync"])
    marker.touch()
    return venv


def baseline_collection(work: Path, rev: str) -> Path:
    """The collection's plugins/ as of git revision rev, importable as ansible_collections.dflash.deploy.

    rev may also name a directory that already holds ansible_collections/dflash/deploy/plugins (made by
    `git archive` elsewhere, for a machine without the repository's history); it is used as it is."""
    if Path(rev, "ansible_collections", "dflash", "deploy", "plugins").is_dir():
        return Path(rev)
    top = work / f"baseline-{rev.replace('/', '_')}"
    target = top / "ansible_collections" / "dflash" / "deploy"
    shutil.rmtree(top, ignore_errors=True)
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "plugins"], check=True, capture_output=True)
    sh(["tar", "-x", "-C", str(target)], input=archive.stdout)
    return top


def bench_noop(work: Path, nfiles: int, repeat: int, baseline_rev: str) -> dict:
    """The no-op re-run from a bundle, this tree's module against baseline_rev's, alternating, in fresh processes.

    Series per round, in this order: the baseline's no-op; this tree's no-op (answered from the record);
    this tree's no-op with its record removed first (its full path, which records again); and `find -printf`
    of every entry's lstat facts under the destination, the floor of anything that looks at each file.
    """
    src = noop_source(work, nfiles)
    bundle = work / f"noop-{nfiles}.tar"
    if not bundle.exists():
        run_module({"state": "packed", "src": str(src), "bundle": str(bundle), "distributions": PATTERNS})
    dest = work / "noop-dest"
    make_venv(dest)
    args = {"bundle": str(bundle), "dest": str(dest), "remove": ["nvidia-*-cu12"]}
    wall, result = run_module(args)
    assert result["changed"], result
    files = sum(1 for _p in Path(dest).rglob("*"))
    old_path = baseline_collection(work, baseline_rev)
    record = dest / ".dflash-release" / "transplant.json"
    rows = {k: [] for k in ("baseline no-op", "no-op from the record", "no-op, record removed (full path)",
                            "find -printf (floor)")}
    own = {k: [] for k in rows}

    def module(key, pythonpath, drop_record=False, fast=None):
        if drop_record:
            record.unlink(missing_ok=True)
        wall, result = run_module(args, pythonpath=pythonpath)
        assert not result["changed"], result
        if fast is not None:
            assert result.get("fast_path") is fast, (key, result.get("fast_path"))
        rows[key].append(wall)
        own[key].append(result["elapsed"])

    for _round in range(repeat):
        module("baseline no-op", old_path)
        module("no-op from the record", COLLECTIONS, fast=True)
        module("no-op, record removed (full path)", COLLECTIONS, drop_record=True, fast=False)
        sh(["sync"])
        start = time.monotonic()
        sh(["find", str(dest), "-printf", "%p %y %m %U %G %s %T@\\n"], stdout=subprocess.DEVNULL)
        rows["find -printf (floor)"].append(time.monotonic() - start)
    for key in rows:
        print("  %-36s wall %s  own %s" % (key, " ".join("%.3f" % v for v in rows[key]),
                                            " ".join("%.3f" % v for v in own[key]) if own[key] else "-"), flush=True)
    if old_path.parent == work:
        shutil.rmtree(old_path, ignore_errors=True)
    return {"files_in_dest": files, "moved_files": result["plan"]["files_to_write"], "baseline": baseline_rev,
            "wall": rows, "own": {k: v for k, v in own.items() if v}}


def noop_markdown(noop: dict) -> str:
    wall = {k: statistics.median(v) for k, v in noop["wall"].items()}
    own = {k: statistics.median(v) for k, v in noop["own"].items()}
    base_wall, base_own = wall["baseline no-op"], own["baseline no-op"]
    lines = [f"no-op re-run from a bundle: {noop['moved_files']} files moved, {noop['files_in_dest']} entries in the "
             f"destination; baseline {noop['baseline']}; medians of {len(noop['wall']['baseline no-op'])} "
             "alternating rounds",
             "", "| run | wall s | module own s | own vs baseline |", "|---|---|---|---|"]
    for key in noop["wall"]:
        if key in own:
            lines.append(f"| {key} | {wall[key]:.3f} | {own[key]:.3f} | {own[key] / base_own:.2f}x |")
        else:
            lines.append(f"| {key} | {wall[key]:.3f} | | |")
    lines.append(f"| wall, from the record vs baseline | | | {wall['no-op from the record'] / base_wall:.2f}x |")
    return "\n".join(lines)


def summarize(tree: dict) -> dict:
    rows = {k: statistics.median(v) for k, v in tree["rows"].items()}
    return {
        "label": tree["label"], "files": tree["files"], "gb": tree["bytes"] / 1e9, "median": rows,
        "copy_ratio": rows["module copy (wall)"] / rows["cp -a"],
        "copy_ratio_own": rows["module copy own elapsed"] / rows["cp -a"],
        "link_ratio": rows["module hardlink (wall)"] / rows["cp -al"],
        "link_ratio_own": rows["module hardlink own elapsed"] / rows["cp -al"],
    }


def markdown(summaries, ansible_copy) -> str:
    lines = ["| tree | measurement | median s | ratio |", "|---|---|---|---|"]
    for s in summaries:
        m = s["median"]
        head = f"{s['label']} ({s['files']} files, {s['gb']:.2f} GB)"
        lines += [
            f"| {head} | `cp -a` | {m['cp -a']:.3f} | 1 |",
            f"| | module, link=copy (wall / own) | {m['module copy (wall)']:.3f} / {m['module copy own elapsed']:.3f}"
            f" | **{s['copy_ratio']:.2f}x** / {s['copy_ratio_own']:.2f}x (target ≤ 1.15x) |",
            f"| | `cp -al` | {m['cp -al']:.3f} | 1 |",
            f"| | module, link=hardlink (wall / own) | {m['module hardlink (wall)']:.3f} / "
            f"{m['module hardlink own elapsed']:.3f} | **{s['link_ratio']:.2f}x** / {s['link_ratio_own']:.2f}x "
            "(target ≤ 2x) |",
            f"| | module no-op re-run (own / wall / via `ansible`) | {m['module no-op own elapsed']:.3f} / "
            f"{m['module no-op (wall)']:.3f} / {m['module no-op via ansible (wall)']:.3f} | own < 0.3 s target |",
        ]
        if "rsync -a no-op" in m:
            lines.append(f"| | `rsync -a` no-op on the same tree | {m['rsync -a no-op']:.3f} | |")
    if ansible_copy:
        a = ansible_copy
        lines.append(f"| slice of torch/ ({a['files']} files, {a['bytes'] / 1e6:.1f} MB) | `ansible.builtin.copy` "
                     f"| {a['ansible_copy']:.2f} | {a['ansible_copy'] / a['cp_a']:.0f}x `cp -a` ({a['cp_a']:.3f} s) |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", type=Path, help="a real torch venv (torch, triton, nvidia-* are moved)")
    parser.add_argument("--synthetic-mb", type=int, default=600, help="size of the synthetic tree (0: skip)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-transplant"))
    parser.add_argument("--ansible-copy-files", type=int, default=300)
    parser.add_argument("--json", type=Path, help="write raw results here")
    parser.add_argument("--noop-files", type=int, default=0,
                        help="only the no-op re-run from a bundle of a synthetic tree of this many files, against "
                             "--baseline")
    parser.add_argument("--baseline", default="main", help="git revision whose module is the no-op's baseline")
    opts = parser.parse_args()
    opts.work.mkdir(parents=True, exist_ok=True)
    if opts.noop_files:
        noop = bench_noop(opts.work, opts.noop_files, opts.repeat, opts.baseline)
        print()
        print(noop_markdown(noop))
        if opts.json:
            opts.json.parent.mkdir(parents=True, exist_ok=True)
            opts.json.write_text(json.dumps({"noop": noop, "cpus": os.cpu_count()}, indent=1))
        return
    trees = []
    src = None
    if opts.synthetic_mb:
        src = synthetic_source(opts.work, opts.synthetic_mb)
        trees.append(bench_tree("synthetic", src, opts.work, opts.repeat, opts.ansible_copy_files))
    if opts.real:
        trees.append(bench_tree("real torch 2.11.0+cu130", opts.real, opts.work, opts.repeat,
                                opts.ansible_copy_files))
    ansible_copy = bench_ansible_copy(opts.real or src, opts.work, opts.ansible_copy_files) \
        if opts.ansible_copy_files else None
    summaries = [summarize(t) for t in trees]
    print()
    print(markdown(summaries, ansible_copy))
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps({"trees": trees, "summaries": summaries, "ansible_copy": ansible_copy,
                                         "cpus": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
