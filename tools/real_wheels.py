#!/usr/bin/env python3
"""The real sglang and sglang-kernel wheels, reduced to what abi_check's python_api reads.

    python tools/real_wheels.py            # download (once) and extract into build/real-wheels
    python tools/real_wheels.py --print    # the case directories, one a line

Downloads sglang 0.5.9, sglang 0.5.11 and sglang-kernel 0.4.2 with pip's own
client (``pip download --no-deps --only-binary=:all:``, cp312 manylinux
x86_64, the index pip is configured with) into build/real-wheels/wheels, then
makes one venv-shaped tree per case under build/real-wheels/<case>/:
``pyvenv.cfg`` and ``lib/python3.12/site-packages`` holding the wheels' ``.py``
files and their dist-info RECORD, METADATA and top_level.txt (no compiled
files: the static Python check needs none).

Idempotent: a wheel already in build/real-wheels/wheels is not downloaded
again, a case already extracted (its ``.complete`` stamp) is not extracted
again.  The pip that runs is ``$PIP`` (a command line) when set, else
``python3 -m pip``.  Nothing is committed: build/ is ignored.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "build" / "real-wheels"
WHEELS = ROOT / "wheels"

# file-name prefix -> distribution name as pip is asked for it
DISTRIBUTIONS = {"sglang": "sglang", "sglang_kernel": "sglang-kernel"}
# case name -> the wheels it holds, as (distribution file-name prefix, version)
CASES = {
    "sglang-0.5.9+sglang-kernel-0.4.2": (("sglang", "0.5.9"), ("sglang_kernel", "0.4.2")),
    "sglang-0.5.11+sglang-kernel-0.4.2": (("sglang", "0.5.11"), ("sglang_kernel", "0.4.2")),
}
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
DIST_INFO_FILES = ("RECORD", "METADATA", "top_level.txt")
SITE = Path("lib") / "python3.12" / "site-packages"


def wheel_for(prefix, version):
    """The downloaded wheel of ``prefix`` (file-name form, e.g. sglang_kernel) at ``version``, or None."""
    for path in sorted(WHEELS.glob("%s-%s-*.whl" % (prefix, version))):
        return path
    return None


def missing_wheels():
    wanted = {(p, v) for case in CASES.values() for p, v in case}
    return sorted(req for req in wanted if wheel_for(*req) is None)


def pip_command():
    if os.environ.get("PIP"):
        return shlex.split(os.environ["PIP"])
    return ["python3", "-m", "pip"]


def download():
    """pip download the wheels that are not in WHEELS yet, one requirement a call (two sglang versions
    in one call are a conflict to pip); seconds it took (0.0 when none were missing)."""
    if not missing_wheels():
        return 0.0
    WHEELS.mkdir(parents=True, exist_ok=True)
    base = pip_command() + ["download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
                            "--python-version", "3.12", "--implementation", "cp", "-d", str(WHEELS)]
    for plat in PLATFORMS:
        base += ["--platform", plat]
    t0 = time.monotonic()
    for prefix, version in missing_wheels():
        subprocess.run(base + ["%s==%s" % (DISTRIBUTIONS[prefix], version)], check=True)
    still = missing_wheels()
    if still:
        raise SystemExit("real_wheels: pip download ran but %s is missing" % ", ".join("%s-%s" % r for r in still))
    return time.monotonic() - t0


def _wanted(member):
    """Whether a wheel member is kept: .py files and the dist-info files the engine reads."""
    name = member.filename
    if name.endswith("/") or name.startswith("/") or ".." in name.split("/"):
        return False
    parts = name.split("/")
    if len(parts) == 2 and parts[0].endswith(".dist-info"):
        return parts[1] in DIST_INFO_FILES
    return name.endswith(".py") and not parts[0].endswith(".data")


def extract(case, wheels):
    """The venv-shaped tree of one case (made once; a partial one is made again)."""
    root = ROOT / case
    if (root / ".complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    site = root / SITE
    site.mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.12.0\n")
    for prefix, version in wheels:
        with zipfile.ZipFile(wheel_for(prefix, version)) as zf:
            for member in zf.infolist():
                if _wanted(member):
                    zf.extract(member, site)
    (root / ".complete").write_text("")
    return root


def prepare():
    """Download (once) and extract (once); {case: tree} and the download's seconds."""
    seconds = download()
    return {case: extract(case, wheels) for case, wheels in CASES.items()}, seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--print", action="store_true", help="print the case directories only")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    trees, seconds = prepare()
    if args.print:
        for tree in trees.values():
            print(tree)
        return 0
    for case, tree in trees.items():
        print("%s: %s" % (case, tree.relative_to(REPO)))
    print("real_wheels: download %.1f s, total %.1f s" % (seconds, time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
