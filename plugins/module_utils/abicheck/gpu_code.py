# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does the file's ``.nv_fatbin`` hold code that runs on each GPU that loads it?

The CUDA runtime picks, per GPU, a cubin of the GPU's major with a minor not above its own (or
exactly its own for sm_XYa), else PTX it JIT-compiles (elfload/cuda_compat.py); with neither, the
first kernel launch fails (``no kernel image is available for execution on the device``).  The GPUs
that load a file come from its load plan (elfload/loadplan.py): sgl_kernel's sm90/common_ops is
loaded on 9.0 only, sm100/common_ops on the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import Problem
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.cuda_compat import format_cc, usable_code
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.fatbin import FatbinError, architectures
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.fatbin import scan as scan_fatbin


@dataclass(frozen=True)
class GpuCode:
    """``archs``: the SM architectures the fatbin holds ([] without one; None when it could not be read),
    ``problems``."""

    archs: list[str] | None
    problems: tuple[Problem, ...] = ()


def gpus_without_code(entries, targets):
    """The compute capabilities among ``targets`` that no fatbin entry runs on, in order, once each."""
    return [cc for cc in sorted(set(targets)) if not usable_code(entries, cc)]


def no_gpu_code(short, cc, archs, optional):
    """The problem of a GPU of compute capability ``cc`` without code; ``optional``: the file loads lazily for
    a feature the server is not configured to use, so leaving that feature unused is a fix too."""
    fix = "install a build with sm_%d%d code" % cc
    if optional:
        fix += ", or keep the feature that loads it unused (e.g. another attention backend)"
    return Problem("no_gpu_code", "%s has no code for compute capability %s (has %s)" % (
        short, format_cc(cc), ", ".join(archs) or "nothing"), fix=fix,
        extra=(("compute_capability", format_cc(cc)),))


def gpu_code(elf, short, targets, optional=False):
    """Read ``elf``'s ``.nv_fatbin`` and match it against ``targets`` (the compute capabilities of the GPUs
    that load the file; none known: nothing to match)."""
    rng = elf.section_range(".nv_fatbin")
    if rng is None:
        return GpuCode([])
    try:
        entries = scan_fatbin(elf.mm, rng[0], rng[0] + rng[1])
    except FatbinError as exc:
        return GpuCode(None, (Problem("corrupt_elf", "%s: .nv_fatbin unreadable (%s)" % (short, exc)),))
    archs = architectures(entries)
    if not targets:
        return GpuCode(archs)
    return GpuCode(archs, tuple(no_gpu_code(short, cc, archs, optional) for cc in gpus_without_code(entries, targets)))
