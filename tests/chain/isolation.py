"""Run processes where "the system" provides no CUDA libraries.

These machines register the CUDA 13 toolkit in the ld.so cache, so
`libcudart.so.13` resolves system-wide and the incident's "cannot open shared
object file" could never happen in a plain process here. A GPU host with only
a driver has no toolkit in its cache: that is what these helpers recreate.

How: an ld.so cache is built (`ldconfig -C`) from the host's own
/etc/ld.so.conf minus every CUDA toolkit directory, plus the fixture driver's
lib directory (the driver's libcuda.so.1 is a system library on real hosts).
Each command then runs in a private mount namespace (`unshare -m`, root only)
with that cache bind-mounted over /etc/ld.so.cache. Nothing outside the
namespace changes: other processes on the machine still see the real cache.
"""
from __future__ import annotations

import glob
import os
import shlex
import subprocess
from pathlib import Path

CUDA_DIR_MARKERS = ("/cuda", "cuda-")


def ld_conf_dirs(conf: str = "/etc/ld.so.conf") -> list[str]:
    """Directories named by an ld.so.conf and its `include` globs, in order."""
    dirs: list[str] = []

    def read(path: str) -> None:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include"):
                pattern = line.split(None, 1)[1]
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for inc in sorted(glob.glob(pattern)):
                    read(inc)
            else:
                dirs.append(line)

    read(conf)
    return dirs


def is_cuda_toolkit_dir(path: str) -> bool:
    return any(marker in path for marker in CUDA_DIR_MARKERS)


def build_cache(workdir: Path, extra_dirs: list[str]) -> Path:
    """Write an ld.so cache without CUDA toolkit dirs, plus `extra_dirs`."""
    workdir.mkdir(parents=True, exist_ok=True)
    keep = [d for d in ld_conf_dirs() if not is_cuda_toolkit_dir(d)]
    conf = workdir / "ld.so.conf"
    conf.write_text("\n".join(keep + [str(d) for d in extra_dirs]) + "\n")
    cache = workdir / "ld.so.cache"
    subprocess.run(["ldconfig", "-X", "-C", str(cache), "-f", str(conf)], check=True)
    return cache


def isolated(argv: list[str], cache: Path) -> list[str]:
    """argv wrapped to run in a mount namespace that sees `cache` as the system cache."""
    inner = f"mount --bind {shlex.quote(str(cache))} /etc/ld.so.cache && exec {shlex.join(argv)}"
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]
