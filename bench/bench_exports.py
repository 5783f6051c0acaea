#!/usr/bin/env python3
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""abi_check's python_api: the checkout's export tables against another revision's, on the same files.

export_table (module_utils/pyapi/exports.py) reads the names each module defines from its syntax tree; the
python_api check builds one per module of the closure it follows (863 modules for sglang 0.5.11). This runs
the checkout's and the baseline revision's (`git archive`, the named baseline) on every .py file under the
given trees, each in its own interpreter, in turn for --rounds rounds, and compares what they return file
by file (a difference is printed and fails the run: a faster table must be the same table):

    python3 bench/bench_exports.py --baseline 6df1fe4 build/real-wheels/sglang-0.5.11+sglang-kernel-0.4.2

Prints each side's seconds (export_table alone, parsing excluded), the medians and their ratio. A
measurement, not a test.
"""
from __future__ import annotations

import argparse
import ast
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tables(collections: str, roots: list[str], out: str) -> None:
    """Run in a child: every file's export table, one line each, into ``out``; prints the seconds spent."""
    sys.path.insert(0, collections)
    from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.exports import export_table
    spent, lines = 0.0, []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            try:
                tree = ast.parse(path.read_bytes())
            except (SyntaxError, ValueError):
                continue
            t0 = time.perf_counter()
            table = export_table(tree, path.stem, path.name == "__init__.py")
            spent += time.perf_counter() - t0
            lines.append("%s %r %r %r %r" % (path, sorted(table.names), table.all_names and sorted(table.all_names),
                                             table.stars, table.dynamic))
    Path(out).write_text("\n".join(lines) + "\n")
    print(spent)


def collection_of(tmp: Path, name: str, rev: str | None) -> Path:
    """A collections directory holding the checkout (rev None) or ``rev``'s tree as dflash.deploy."""
    root = tmp / name
    dest = root / "ansible_collections" / "dflash" / "deploy"
    dest.parent.mkdir(parents=True)
    if rev is None:
        dest.symlink_to(REPO)
    else:
        data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "plugins"], check=True,
                              capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
    return root


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        tables(sys.argv[2], sys.argv[4:], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the git revision to compare with")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("trees", nargs="+", help="directories whose .py files are read")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-exports.") as tmp:
        sides = {"baseline " + args.baseline: collection_of(Path(tmp), "base", args.baseline),
                 "checkout": collection_of(Path(tmp), "head", None)}
        seconds = {name: [] for name in sides}
        outputs = {}
        for _ in range(args.rounds):
            for name, coll in sides.items():
                out = Path(tmp) / ("%s.txt" % name.split()[0])
                proc = subprocess.run([sys.executable, __file__, "--child", str(coll), str(out), *args.trees],
                                      check=True, capture_output=True, text=True)
                seconds[name].append(round(float(proc.stdout.split()[-1]), 2))
                outputs[name] = out.read_text()
        base, head = outputs.values()
        if base != head:
            diff = [(a, b) for a, b in zip(base.splitlines(), head.splitlines(), strict=False) if a != b]
            print("the export tables differ in %d files; the first:\n  %s\n  %s" % ((len(diff),) + diff[0]))
            return 1
        medians = {name: statistics.median(s) for name, s in seconds.items()}
        for name, s in seconds.items():
            print("%-20s %s  median %.2f s" % (name, s, medians[name]))
        b, h = medians.values()
        print("the same export tables for %d files; checkout / baseline: %.2fx" % (len(head.splitlines()), h / b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
