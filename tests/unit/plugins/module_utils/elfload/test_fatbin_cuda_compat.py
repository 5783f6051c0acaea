"""elfload/fatbin.py on real nvcc output in .nv_fatbin, and the SM compatibility rules of elfload/cuda_compat.py."""
from __future__ import annotations

import struct

import abi_native as N
import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.elfload import cuda_compat as C
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfFile
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.fatbin import (
    FatbinError,
    architectures,
    scan,
    sm_list,
)

needs_nvcc = pytest.mark.skipif(not N.have_nvcc(), reason="nvcc not installed")


@pytest.fixture(scope="module")
def fat_lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("fat")
    names = ["sm_80", "sm_90a", "compute_90", "sm_100f", "sm_120a"]
    obj = N.fatbin_object("fat_many", [N.ARCHS[n] for n in names], pad=24)
    return N.build_lib(d / "libfat.so", "int f(void){return 0;}\n", extra_objects=[obj]), names


@needs_nvcc
def test_scan_lists_every_blob_with_variants(fat_lib):
    path, names = fat_lib
    with ElfFile(str(path)) as e:
        off, size = e.section_range(".nv_fatbin")
        entries = scan(e.mm, off, off + size)
    assert architectures(entries) == ["sm_80", "compute_90", "sm_90a", "sm_100f", "sm_120a"]
    assert sm_list(entries) == ["80", "90", "90a", "100f", "120a"]
    kinds = dict((e["arch"], e["kind"]) for e in entries)
    assert kinds["compute_90"] == "ptx" and kinds["sm_80"] == "cubin"


@needs_nvcc
def test_scan_flags_match_reference(fat_lib):
    """REFERENCE.md: sm_80 -> 0x11, sm_90a -> 0x100011 (arch-specific bit 0x100000)."""
    blob = N.fatbin(N.ARCHS["sm_90a"]).read_bytes()
    (entry,) = scan(blob)
    assert entry["flags"] & 0x100000 and entry["variant"] == "a" and entry["sm"] == 90
    (entry80,) = scan(N.fatbin(N.ARCHS["sm_80"]).read_bytes())
    assert entry80["flags"] == 0x11 and entry80["variant"] == ""


def test_scan_synthetic_and_corrupt():
    def entry(kind, sm, flags, payload=16):
        hdr = struct.pack("<HHIQ", kind, 0x101, 64, payload) + b"\0" * 12 + struct.pack("<I", sm)
        hdr += b"\0" * 8 + struct.pack("<Q", flags) + b"\0" * 16
        return hdr + b"\xee" * payload

    body = entry(2, 100, 0x11) + entry(1, 120, 0x11)
    blob = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    data = b"\0" * 8 + blob + b"\0" * 8 + blob
    got = scan(data)
    assert [e["arch"] for e in got] == ["sm_100", "compute_120", "sm_100", "compute_120"]
    bad = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 1 << 40) + body
    with pytest.raises(FatbinError):
        scan(bad)
    bad_entry = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 64) + struct.pack("<HHIQ", 2, 1, 4, 0) + b"\0" * 48
    with pytest.raises(FatbinError):
        scan(bad_entry)
    assert scan(b"\0" * 100) == []


@pytest.mark.parametrize("arch,cc,ok", [
    ("sm_80", (8, 0), True), ("sm_80", (8, 6), True), ("sm_86", (8, 0), False), ("sm_80", (9, 0), False),
    ("sm_90a", (9, 0), True), ("sm_90a", (10, 0), False), ("sm_100a", (10, 3), False),
    ("sm_100", (12, 0), False), ("sm_100f", (10, 3), True), ("sm_120a", (12, 0), True),
    ("sm_120a", (12, 1), False), ("compute_90", (12, 0), True), ("compute_90", (8, 9), False),
    ("compute_90a", (10, 0), False), ("sm_120", (12, 0), True),
])
def test_sm_rules(arch, cc, ok):
    kind, _unused, rest = arch.partition("_")
    variant = rest[-1] if rest[-1] in "af" else ""
    entry = {"kind": "ptx" if kind == "compute" else "cubin", "sm": int(rest.rstrip("af")), "variant": variant,
             "arch": arch}
    assert C.entry_runs_on(entry, cc) is ok


def test_reference_table_on_rtx_pro_6000():
    """REFERENCE.md's real SM sets: common_ops and spatial_ops run on 12.0, flash_ops and flashmla_ops do not."""
    def entries(archs):
        out = []
        for a in archs:
            v = a[-1] if a[-1] in "af" else ""
            out.append({"kind": "cubin", "sm": int(a.rstrip("af")), "variant": v, "arch": "sm_" + a})
        return out
    common = entries(["80", "89", "90", "90a", "100a", "103a", "120a"])
    assert C.usable_code(common, (12, 0)) == ["sm_120a"]
    assert C.usable_code(entries(["80", "86", "90a"]), (12, 0)) == []
    assert C.usable_code(entries(["90a", "100a", "103a"]), (12, 0)) == []
    assert C.usable_code(entries(["80", "86", "90a"]), (8, 6)) == ["sm_80", "sm_86"]


def test_cuda_majors_and_parsing():
    assert C.cuda_majors(["libtorch.so", "libcudart.so.13", "libcublasLt.so.13", "libcufft.so.12"]) == {
        13: ["libcudart.so.13", "libcublasLt.so.13"]}
    assert C.cuda_majors(["libcusparse.so.12", "libcurand.so.10"]) == {}
    assert C.cuda_majors(["libnvrtc.so.12", "libcudart.so.13"]) == {12: ["libnvrtc.so.12"], 13: ["libcudart.so.13"]}
    assert C.parse_cc("12.0") == (12, 0) and C.parse_cc("sm_90a") == (9, 0) and C.parse_cc("86") == (8, 6)
    with pytest.raises(ValueError):
        C.parse_cc("twelve")
    assert C.cuda_from_local_tag("cu130") == "13.0" and C.cuda_from_local_tag("cu128") == "12.8"
    assert C.cuda_from_local_tag("cpu") is None
