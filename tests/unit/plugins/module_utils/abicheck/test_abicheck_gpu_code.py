"""abicheck/gpu_code.py: the SM code in .nv_fatbin against the GPUs that load the file (fatbins made in memory)."""
from __future__ import annotations

import struct

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck import gpu_code as G
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.fatbin import FATBIN_MAGIC, scan


def _fatbin(entries, claimed=None):
    """One blob of (kind, sm, flags) entries: 1 PTX, 2 cubin; flags 0x100000 'a'."""
    body = b""
    for kind, sm, flags in entries:
        head = bytearray(48)
        struct.pack_into("<HHIQ", head, 0, kind, 1, 48, 0)
        struct.pack_into("<I", head, 28, sm)
        struct.pack_into("<Q", head, 40, flags)
        body += bytes(head)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body) if claimed is None else claimed) + body


class _Elf:
    def __init__(self, data):
        self.mm = data

    def section_range(self, name):
        assert name == ".nv_fatbin"
        return None if self.mm is None else (0, len(self.mm))


def test_gpus_without_code_are_sorted_once_each():
    entries = scan(_fatbin([(2, 90, 0), (2, 120, 0x100000)]))
    assert G.gpus_without_code(entries, [(12, 1), (9, 0), (10, 0), (12, 1), (12, 0)]) == [(10, 0), (12, 1)]


def test_no_gpu_code_fix_offers_the_unused_feature_only_when_optional():
    found = G.no_gpu_code("sgl_kernel/flash_ops.abi3.so", (12, 0), ["sm_80", "sm_90a"], optional=True)
    assert found.detail == "sgl_kernel/flash_ops.abi3.so has no code for compute capability 12.0 (has sm_80, sm_90a)"
    assert found.fix == ("install a build with sm_120 code, or keep the feature that loads it unused (e.g. another "
                         "attention backend)")
    assert dict(found.extra) == {"compute_capability": "12.0"}
    plain = G.no_gpu_code("x.so", (9, 0), [], optional=False)
    assert (plain.fix, plain.detail) == ("install a build with sm_90 code",
                                         "x.so has no code for compute capability 9.0 (has nothing)")


def test_a_file_without_a_fatbin_has_no_archs_and_no_problem():
    assert G.gpu_code(_Elf(None), "x.so", [(9, 0)]) == G.GpuCode([])


def test_the_fatbin_against_the_gpus():
    elf = _Elf(_fatbin([(2, 90, 0), (1, 90, 0)]))
    assert G.gpu_code(elf, "x.so", [(9, 0), (10, 0)]).archs == ["compute_90", "sm_90"]
    # PTX for 9.0 is JIT-compiled on 10.0 and 12.0: every GPU has code
    assert G.gpu_code(elf, "x.so", [(9, 0), (10, 0), (12, 0)]).problems == ()
    cubin_only = G.gpu_code(_Elf(_fatbin([(2, 90, 0x100000)])), "x.so", [(9, 0), (12, 0)])
    assert [(dict(p.extra)["compute_capability"], p.fix) for p in cubin_only.problems] == [
        ("12.0", "install a build with sm_120 code")]  # not optional unless the caller says so
    assert G.gpu_code(_Elf(_fatbin([(2, 90, 0)])), "x.so", []).problems == ()  # no GPU known: nothing to match
    assert G.gpu_code(_Elf(_fatbin([(2, 90, 0)])), "x.so", None) == G.GpuCode(["sm_90"])


def test_an_unreadable_fatbin_is_corrupt_and_reports_no_archs():
    result = G.gpu_code(_Elf(_fatbin([(2, 90, 0)], claimed=4096)), "x.so", [(9, 0)])
    assert result.archs is None
    assert [(p.kind, p.detail) for p in result.problems] == [
        ("corrupt_elf", "x.so: .nv_fatbin unreadable (fatbin blob at section offset 0 claims 4096 bytes, past the "
                        "section end)")]
