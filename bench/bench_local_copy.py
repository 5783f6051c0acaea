#!/usr/bin/env python3
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local-connection push's copy against `cp` (issue 45 item 4: push <= 1.2x `cp` on a local connection).

On a local connection bundle_push's module copies the controller's file beside its destination itself
(module_utils/bundle_push.place with keep_src: a temp file in dest's directory, written by _copy_bytes, then
a rename). This measures that copy alone, in rounds, against GNU `cp` of the same file into the same
directory (the baseline), and against a plain os.copy_file_range loop (what cp itself uses), each way once
per round in turn so that the page cache and the disk treat them alike:

    python3 bench/bench_local_copy.py --dir /opt/dflash/artifacts --mib 4833 --rounds 3

The source is written first (a 1 MiB random block repeated: no holes, so `cp` cannot skip any) and read
once before the first round. Prints each way's times, median and ratio to `cp`'s median, and --json writes
them. A measurement, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def collection_path() -> Path:
    """A directory from which ``ansible_collections.dflash.deploy`` imports this checkout."""
    root = Path(os.environ.get("TMPDIR", "/tmp")) / "bench-local-copy-coll"
    link = root / "ansible_collections" / "dflash" / "deploy"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(REPO)
    return root


def write_source(path: Path, mib: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as out:
        for _ in range(mib):
            out.write(block)


def copy_file_range_loop(src: Path, dest: Path) -> None:
    with open(src, "rb") as inp, open(dest, "wb") as out:
        size, offset = os.fstat(inp.fileno()).st_size, 0
        while offset < size:
            n = os.copy_file_range(inp.fileno(), out.fileno(), size - offset)
            if n == 0:
                raise OSError("copy_file_range copied nothing at offset %d" % offset)
            offset += n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="where the source and every copy are written")
    ap.add_argument("--mib", type=int, default=4833, help="source size in MiB (default: the real bundle's 4,833)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(collection_path()))
    from ansible_collections.dflash.deploy.plugins.module_utils import bundle_push as bp

    args.dir.mkdir(parents=True, exist_ok=True)
    src, dest = args.dir / "bench-src.bin", args.dir / "bench-dest.bin"
    write_source(src, args.mib)
    with open(src, "rb") as f:
        while f.read(1 << 24):
            pass
    ways = {
        "cp": lambda: subprocess.run(["cp", str(src), str(dest)], check=True),
        "module place (keep_src)": lambda: bp.place(str(src), str(dest), keep_src=True),
        "copy_file_range": lambda: copy_file_range_loop(src, dest),
    }
    times = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            dest.unlink(missing_ok=True)
            t0 = time.perf_counter()
            way()
            times[name].append(round(time.perf_counter() - t0, 3))
            if dest.stat().st_size != src.stat().st_size:
                sys.exit("%s: the copy has %d bytes, not %d" % (name, dest.stat().st_size, src.stat().st_size))
    dest.unlink(missing_ok=True)
    src.unlink()
    base = statistics.median(times["cp"])
    rows = {name: {"seconds": t, "median": statistics.median(t), "x_cp": round(statistics.median(t) / base, 2)}
            for name, t in times.items()}
    for name, row in rows.items():
        print("%-26s %s  median %.3f s  %.2fx cp" % (name, row["seconds"], row["median"], row["x_cp"]))
    if args.json:
        args.json.write_text(json.dumps({"mib": args.mib, "dir": str(args.dir), "ways": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
