# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""List the GPU architectures in an ELF's ``.nv_fatbin`` section, without cuobjdump.

The section holds one or more fatbin blobs, 8-byte aligned with zero padding
between them.  Blob header (little endian): u32 magic 0xBA55ED50, u16
version, u16 header size, u64 size of the entries that follow.  Entry header:
u16 kind (1 PTX, 2 cubin), u16 version, u32 header size, u64 padded payload
size, u32 SM number at offset 28, u64 flags at offset 40.  Flag 0x100000
marks an arch-specific (``sm_90a``) build, 0x200000 a family-specific one
(``sm_100f``).  Only headers are read: payloads (possibly compressed) are
skipped by their sizes, so a 1 GB section costs a handful of reads.
"""

from __future__ import annotations

import struct

FATBIN_MAGIC = 0xBA55ED50
FATBIN_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
KIND_PTX = 1
KIND_CUBIN = 2
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000

_BLOB = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQ")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class FatbinError(ValueError):
    pass


def _suffix(flags):
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    if flags & FLAG_FAMILY_SPECIFIC:
        return "f"
    return ""


def scan(buf, start=0, end=None):
    """Entries of every fatbin blob in ``buf[start:end]``.

    ``buf`` is anything with ``find`` and the buffer protocol (an mmap, bytes).
    Returns a list of dicts: kind ('cubin'|'ptx'), sm (int, e.g. 90),
    variant ('', 'a', 'f'), arch (e.g. 'sm_90a' or 'compute_90'), flags.
    Raises FatbinError when a header points outside the section.
    """
    if end is None:
        end = len(buf)
    entries = []
    pos = start
    find = buf.find
    while pos + _BLOB.size <= end:
        hit = find(FATBIN_MAGIC_BYTES, pos, end)
        if hit < 0:
            break
        magic, _ver, hsize, size = _BLOB.unpack_from(buf, hit)
        if hsize < _BLOB.size:
            # a stray match inside padding or a payload we did not skip: keep looking
            pos = hit + 4
            continue
        blob_end = hit + hsize + size
        if blob_end > end:
            raise FatbinError("fatbin blob at section offset %d claims %d bytes, past the section end"
                              % (hit - start, size))
        epos = hit + hsize
        while epos + 48 <= blob_end:
            kind, _ev, ehsize, padded = _ENTRY.unpack_from(buf, epos)
            if ehsize < 48 or epos + ehsize > blob_end:
                raise FatbinError("fatbin entry at section offset %d has a bad header size %d"
                                  % (epos - start, ehsize))
            sm = _U32.unpack_from(buf, epos + 28)[0]
            flags = _U64.unpack_from(buf, epos + 40)[0]
            variant = _suffix(flags)
            if kind == KIND_CUBIN:
                kname, arch = "cubin", "sm_%d%s" % (sm, variant)
            elif kind == KIND_PTX:
                kname, arch = "ptx", "compute_%d%s" % (sm, variant)
            else:
                kname, arch = "kind%d" % kind, "unknown_%d" % sm
            entries.append({"kind": kname, "sm": sm, "variant": variant, "arch": arch, "flags": flags})
            epos += ehsize + padded
        pos = blob_end
    return entries


def architectures(entries):
    """Sorted unique arch names (``sm_80``, ``sm_90a``, ``compute_90``) of scanned entries."""
    def key(a):
        kind, _unused, rest = a.partition("_")
        digits = "".join(ch for ch in rest if ch.isdigit())
        return (int(digits or 0), rest, kind)
    return sorted(set(e["arch"] for e in entries), key=key)


def sm_list(entries):
    """Sorted unique SM numbers with cubin or PTX code, as strings with their variant ('90', '90a')."""
    seen = set()
    for e in entries:
        if e["kind"] in ("cubin", "ptx"):
            seen.add((e["sm"], e["variant"]))
    return ["%d%s" % t for t in sorted(seen)]
