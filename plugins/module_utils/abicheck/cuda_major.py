# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Was the file built for the CUDA major torch was built for?

The CUDA major of a file is the SONAME major of the cudart/cublas/cublasLt/nvrtc it names in
DT_NEEDED (elfload/cuda_compat.py).  A CUDA 13 extension beside a CUDA 12 torch names
libcudart.so.13, which torch's process does not have: the loader reports the library missing,
but the cause is the mismatch, so those names are explained here and not reported again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import Problem
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.cuda_compat import cuda_majors


@dataclass(frozen=True)
class CudaMajor:
    """``built_for``: the file's CUDA major (an int, a sorted list when it names several, None when
    none); ``explained``: the DT_NEEDED names the mismatch accounts for; ``problems``."""

    built_for: Any
    explained: frozenset[str] = frozenset()
    problems: tuple[Problem, ...] = ()


def built_for(majors):
    """The reported CUDA major of ``{major: [sonames]}``: the one major, the sorted majors, or None."""
    return sorted(majors)[0] if len(majors) == 1 else (sorted(majors) or None)


def mismatch(short, package, major, names, unresolved, torch):
    """The problem of a file needing CUDA ``major`` libraries ``names`` beside torch built for another major."""
    # Name torch first: the kernel distributions pin a torch version, so
    # "the other kernel build" is only a fix if it was made for this torch.
    base = str(torch.get("version") or "").split("+", 1)[0]
    fix = ("install torch %s built for CUDA %d (local tag +cu%d*), or a %s build for CUDA %d made for "
           "torch %s" % (base, major, major, package, torch.get("cuda_major"), base))
    return Problem("cuda_major_mismatch",
                   "%s needs %s (CUDA %d) but torch is %s (CUDA %s)%s" % (
                       short, names[0], major, torch.get("version"), torch.get("cuda"),
                       "; %s not found" % ", ".join(unresolved) if unresolved else ""),
                   fix=fix, extra=(("needed", names), ("torch_cuda", torch.get("cuda"))))


def cuda_major(needed, resolved, torch, package, short):
    """Compare the CUDA major of the DT_NEEDED names ``needed`` with torch's (``resolved``: the names that
    were found); nothing to compare with when torch is absent or built without CUDA."""
    majors = cuda_majors(needed)
    tmajor = torch.get("cuda_major") if torch else None
    if not majors or tmajor is None:
        return CudaMajor(built_for(majors))
    explained = set()
    problems = []
    for major, names in sorted(majors.items()):
        if major == tmajor:
            continue
        explained.update(names)
        unresolved = [n for n in names if not resolved.get(n)]
        problems.append(mismatch(short, package, major, names, unresolved, torch))
    return CudaMajor(built_for(majors), frozenset(explained), tuple(problems))
