# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the parts of an ELF shared object that decide whether it loads.

One ``mmap`` per file and ``struct.unpack_from`` on it: section headers,
``.dynamic`` (NEEDED, RPATH, RUNPATH, SONAME), ``.dynsym``/``.dynstr``,
``.gnu.version_r`` (GLIBC_/GLIBCXX_ needs), ``.gnu.version_d`` (versions a
library provides), the GNU hash table (symbol lookups without reading every
symbol: real libtorch_cpu.so has about 100k) and the location of
``.nv_fatbin``.  Nothing here reads more of the file than it needs, so a
1 GB extension costs a few page faults.  Standard library only.
"""

from __future__ import annotations

import mmap
import os
import struct

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import open_regular

ELF_MAGIC = b"\x7fELF"

SHT_DYNSYM = 11
SHT_DYNAMIC = 6
SHT_NOBITS = 8
SHT_GNU_HASH = 0x6FFFFFF6
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE

PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_STRSZ = 10
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29

STB_LOCAL = 0
STB_GLOBAL = 1
STB_WEAK = 2
STB_GNU_UNIQUE = 10
SHN_UNDEF = 0
VER_FLG_BASE = 0x1

EM_NAMES = {3: "x86", 62: "x86_64", 40: "arm", 183: "aarch64", 21: "ppc64", 22: "s390"}


def _store_dynamic(out, tag, text):
    """One string-valued dynamic entry into the result: NEEDED accumulates, the others are single."""
    if tag == DT_NEEDED:
        out["needed"].append(text)
    elif tag == DT_SONAME:
        out["soname"] = text
    elif tag == DT_RPATH:
        out["rpath"] = text
    else:
        out["runpath"] = text


class ElfError(Exception):
    """A file that cannot be read as an ELF shared object.

    ``kind`` is one of ``unreadable``, ``not_elf``, ``corrupt_elf``.
    """

    def __init__(self, kind, path, detail):
        super(ElfError, self).__init__("%s: %s" % (path, detail))
        self.kind = kind
        self.path = path
        self.detail = detail


class Section:
    __slots__ = ("name", "type", "flags", "addr", "offset", "size", "link", "info", "entsize")

    def __init__(self, name, stype, flags, addr, offset, size, link, info, entsize):
        self.name = name
        self.type = stype
        self.flags = flags
        self.addr = addr
        self.offset = offset
        self.size = size
        self.link = link
        self.info = info
        self.entsize = entsize


def _guard(method):
    """Turn low-level decoding errors of a damaged file into ElfError('corrupt_elf')."""
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except ElfError:
            raise
        except (struct.error, IndexError, ValueError, OverflowError, TypeError) as exc:
            raise ElfError("corrupt_elf", self.path, "malformed %s data (%s)" % (method.__name__, exc)) from exc
    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


def gnu_hash(name):
    """The GNU hash (dl_new_hash) of a symbol name given as bytes."""
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


class ElfFile:
    """An ELF file mapped read-only; use as a context manager or call close()."""

    def __init__(self, path):
        self.path = path
        self._mm = None
        self._fd = None
        try:
            self._fd = open_regular(path)  # a FIFO or device is refused instead of blocking or mapping
            size = os.fstat(self._fd).st_size
        except OSError as exc:
            self.close()
            raise ElfError("unreadable", path, exc.strerror or str(exc)) from exc
        if size < 16:
            self.close()
            raise ElfError("not_elf", path, "file of %d bytes is not an ELF file" % size)
        try:
            self._mm = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            self.close()
            raise ElfError("unreadable", path, "cannot map: %s" % exc) from exc
        self.size = size
        try:
            self._parse_header()
        except ElfError:
            self.close()
            raise
        except (struct.error, IndexError, ValueError, OverflowError) as exc:
            self.close()
            raise ElfError("corrupt_elf", path, "malformed ELF header or section table (%s)" % exc) from exc
        self._dynamic = None
        self._dynsym = None

    # -- lifecycle -----------------------------------------------------
    def close(self):
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- header and sections -------------------------------------------
    def _corrupt(self, detail):
        return ElfError("corrupt_elf", self.path, detail)

    def _parse_header(self):
        mm = self._mm
        if mm[:4] != ELF_MAGIC:
            raise ElfError("not_elf", self.path, "no ELF magic (not a shared object)")
        ei_class = mm[4]
        ei_data = mm[5]
        if ei_class not in (1, 2) or ei_data not in (1, 2):
            raise self._corrupt("bad ELF class/data bytes %d/%d" % (ei_class, ei_data))
        self.is64 = ei_class == 2
        e = "<" if ei_data == 1 else ">"
        self.endian = e
        if self.is64:
            hdr = struct.unpack_from(e + "HHIQQQIHHHHHH", mm, 16)
        else:
            hdr = struct.unpack_from(e + "HHIIIIIHHHHHH", mm, 16)
        (self.e_type, self.e_machine, _ver, _entry, self.e_phoff, self.e_shoff, _flags, _ehsize,
         self.e_phentsize, self.e_phnum, self.e_shentsize, e_shnum, e_shstrndx) = hdr
        self.machine = EM_NAMES.get(self.e_machine, str(self.e_machine))
        if self.is64:
            self._shdr = struct.Struct(e + "IIQQQQIIQQ")
            self._sym = struct.Struct(e + "IBBHQQ")
            self._dyn = struct.Struct(e + "qQ")
        else:
            self._shdr = struct.Struct(e + "IIIIIIIIII")
            self._sym = struct.Struct(e + "IIIBBH")
            self._dyn = struct.Struct(e + "iI")
        self.sections = []
        self.by_name = {}
        self.elf_type = {1: "rel", 2: "exec", 3: "dyn", 4: "core"}.get(self.e_type, str(self.e_type))
        self.has_sections = self.e_shoff != 0
        if not self.has_sections:
            # the loader needs no section headers (sstrip removes them): read the program headers instead
            self._parse_segments()
            return
        if self.e_shentsize < self._shdr.size:
            raise self._corrupt("section header size %d too small" % self.e_shentsize)
        if e_shnum == 0 or e_shstrndx == 0xFFFF:
            # extended numbering: counts live in section 0
            first = self._read_shdr(0)
            if e_shnum == 0:
                e_shnum = first[5]
            if e_shstrndx == 0xFFFF:
                e_shstrndx = first[6]
        if self.e_shoff + e_shnum * self.e_shentsize > self.size:
            raise self._corrupt("truncated: section headers end at %d, file has %d bytes"
                                % (self.e_shoff + e_shnum * self.e_shentsize, self.size))
        raw = [self._read_shdr(i) for i in range(e_shnum)]
        if e_shstrndx >= e_shnum:
            raise self._corrupt("section name table index %d out of range" % e_shstrndx)
        strtab = raw[e_shstrndx]
        str_off, str_size = strtab[4], strtab[5]
        if str_off + str_size > self.size:
            raise self._corrupt("truncated: section name table lies past the end of the file")
        for r in raw:
            name_off, stype, flags, addr, offset, size, link, info, _align, entsize = r
            name = self._cstr(str_off + name_off, str_off + str_size) if name_off < str_size else ""
            sec = Section(name, stype, flags, addr, offset, size, link, info, entsize)
            self.sections.append(sec)
            if name and name not in self.by_name:
                self.by_name[name] = sec
            if stype != SHT_NOBITS and stype != 0 and offset + size > self.size:
                raise self._corrupt("truncated: section %s ends at %d, file has %d bytes"
                                    % (name or "#%d" % len(self.sections), offset + size, self.size))
        self.elf_type = {1: "rel", 2: "exec", 3: "dyn", 4: "core"}.get(self.e_type, str(self.e_type))

    def _parse_segments(self):
        """PT_LOAD and PT_DYNAMIC from the program headers (what the loader itself reads)."""
        if self.is64:
            phdr = struct.Struct(self.endian + "IIQQQQQQ")
        else:
            phdr = struct.Struct(self.endian + "IIIIIIII")
        if self.e_phoff == 0 or self.e_phnum == 0:
            raise self._corrupt("neither section nor program headers")
        if self.e_phentsize < phdr.size or self.e_phoff + self.e_phnum * self.e_phentsize > self.size:
            raise self._corrupt("truncated or malformed program headers")
        self.loads = []
        self.dynamic_segment = None
        for i in range(self.e_phnum):
            raw = phdr.unpack_from(self._mm, self.e_phoff + i * self.e_phentsize)
            if self.is64:
                ptype, _flags, offset, vaddr, _paddr, filesz, _memsz, _align = raw
            else:
                ptype, offset, vaddr, _paddr, filesz, _memsz, _flags, _align = raw
            if ptype == PT_LOAD:
                self.loads.append((vaddr, offset, filesz))
            elif ptype == PT_DYNAMIC:
                self.dynamic_segment = (offset, filesz)

    def _vaddr_to_offset(self, vaddr):
        for start, offset, filesz in self.loads:
            if start <= vaddr < start + filesz:
                return offset + (vaddr - start)
        raise self._corrupt("address 0x%x lies in no loaded segment" % vaddr)

    def _dynamic_from_segments(self, out):
        if self.dynamic_segment is None:
            return out
        offset, size = self.dynamic_segment
        if offset + size > self.size:
            raise self._corrupt("truncated: the dynamic segment lies past the end of the file")
        step = self._dyn.size
        entries = []
        strtab = strsz = None
        for pos in range(offset, offset + size - step + 1, step):
            tag, val = self._dyn.unpack_from(self._mm, pos)
            if tag == DT_NULL:
                break
            if tag == DT_STRTAB:
                strtab = val
            elif tag == DT_STRSZ:
                strsz = val
            elif tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH):
                entries.append((tag, val))
        if entries and (strtab is None or strsz is None):
            raise self._corrupt("dynamic segment without a string table")
        if entries:
            s_off = self._vaddr_to_offset(strtab)
            s_end = min(s_off + strsz, self.size)
            for tag, val in entries:
                if s_off + val >= s_end:
                    raise self._corrupt("dynamic entry points past the string table")
                _store_dynamic(out, tag, self._cstr(s_off + val, s_end))
        return out

    @property
    def identity(self):
        """(class bits, byte order, machine): what the loader compares before it maps a file."""
        return (64 if self.is64 else 32, "little" if self.endian == "<" else "big", self.machine)

    def _read_shdr(self, i):
        # same field order in both classes: name type flags addr offset size link info align entsize
        return self._shdr.unpack_from(self._mm, self.e_shoff + i * self.e_shentsize)

    def _cstr(self, start, limit=None):
        mm = self._mm
        end = mm.find(b"\0", start, limit if limit is not None else self.size)
        if end < 0:
            end = limit if limit is not None else self.size
        return mm[start:end].decode("utf-8", "surrogateescape")

    def section(self, name):
        return self.by_name.get(name)

    def first_of_type(self, stype):
        for s in self.sections:
            if s.type == stype:
                return s
        return None

    def section_range(self, name):
        """(offset, size) of a section's bytes in the file, or None."""
        s = self.by_name.get(name)
        if s is None or s.type == SHT_NOBITS:
            return None
        return s.offset, s.size

    def _linked_strings(self, sec, label):
        """(start, end) in the file of the string table that section ``sec`` names in sh_link."""
        if sec.link >= len(self.sections):
            raise self._corrupt("%s links to a missing string table" % label)
        strsec = self.sections[sec.link]
        return strsec.offset, strsec.offset + strsec.size

    def _chain(self, pos, end, count, label, entry_size, next_at):
        """File offsets of up to ``count`` entries that link to one another by the 32-bit
        offset at ``next_at`` in each (vn_next, vna_next, vd_next; 0 ends the chain), each
        checked to lie before ``end``."""
        for _i in range(count):
            if pos + entry_size > end:
                raise self._corrupt("%s past the section end" % label)
            yield pos
            nxt = struct.unpack_from(self.endian + "I", self._mm, pos + next_at)[0]
            if nxt == 0:
                break
            pos += nxt

    def _version_entries(self, stype, label, entry_size, next_at):
        """For the first section of type ``stype`` (.gnu.version_r, .gnu.version_d): (its string
        table's start and end, the section's end, the file offsets of its entries); no entries
        without one."""
        sec = self.first_of_type(stype)
        if sec is None:
            return 0, 0, 0, ()
        s_off, s_end = self._linked_strings(sec, label)
        end = sec.offset + sec.size
        return s_off, s_end, end, self._chain(sec.offset, end, sec.info or 1 << 16, label + " entry", entry_size,
                                              next_at)

    @property
    def mm(self):
        return self._mm

    # -- .dynamic --------------------------------------------------------
    @_guard
    def dynamic(self):
        """dict: needed (list), rpath, runpath, soname (str or None)."""
        if self._dynamic is not None:
            return self._dynamic
        out = {"needed": [], "rpath": None, "runpath": None, "soname": None}
        if not self.has_sections:
            self._dynamic = self._dynamic_from_segments(out)
            return self._dynamic
        dyn = self.first_of_type(SHT_DYNAMIC)
        if dyn is None:
            self._dynamic = out
            return out
        s_off, s_end = self._linked_strings(dyn, ".dynamic")
        entries = []
        step = self._dyn.size
        unpack = self._dyn.unpack_from
        mm = self._mm
        for pos in range(dyn.offset, dyn.offset + dyn.size - step + 1, step):
            tag, val = unpack(mm, pos)
            if tag == DT_NULL:
                break
            if tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH):
                if val >= s_end - s_off:
                    raise self._corrupt("dynamic entry points past the string table")
                entries.append((tag, self._cstr(s_off + val, s_end)))
        for tag, text in entries:
            _store_dynamic(out, tag, text)
        self._dynamic = out
        return out

    # -- .dynsym ---------------------------------------------------------
    def _dynsym_info(self):
        if self._dynsym is None:
            sym = self.first_of_type(SHT_DYNSYM)
            if sym is None:
                self._dynsym = (None, None)
            else:
                self._dynsym = (sym, self._linked_strings(sym, ".dynsym"))
        return self._dynsym

    def _sym_fields(self, raw):
        if self.is64:
            name, info, _other, shndx, _value, _size = raw
        else:
            name, _value, _size, info, _other, shndx = raw
        return name, info >> 4, info & 0xF, shndx

    def iter_dynsym(self):
        """Yield (name, binding, type, defined) for every dynamic symbol but the null one."""
        sym, strings = self._dynsym_info()
        if sym is None:
            return
        entsize = sym.entsize or self._sym.size
        if entsize < self._sym.size:
            raise self._corrupt(".dynsym entry size %d too small" % entsize)
        s_off, s_end = strings
        mm = self._mm
        find = mm.find
        count = sym.size // entsize
        if entsize == self._sym.size:
            it = self._sym.iter_unpack(mm[sym.offset + entsize:sym.offset + count * entsize])
        else:
            it = (self._sym.unpack_from(mm, sym.offset + i * entsize) for i in range(1, count))
        for raw in it:
            name_off, bind, stype, shndx = self._sym_fields(raw)
            start = s_off + name_off
            end = find(b"\0", start, s_end)
            if end < 0:
                end = s_end
            yield mm[start:end].decode("utf-8", "surrogateescape"), bind, stype, shndx != SHN_UNDEF

    @_guard
    def undefined_symbols(self, include_weak=False):
        """Names of symbols this object needs from others (weak ones only if asked)."""
        out = []
        for name, bind, _t, defined in self.iter_dynsym():
            if defined or not name:
                continue
            if bind == STB_WEAK and not include_weak:
                continue
            out.append(name)
        return out

    @_guard
    def defined_symbols(self):
        """Set of exported (global, weak or unique) defined dynamic symbol names."""
        return set(name for name, bind, _t, defined in self.iter_dynsym()
                   if defined and bind in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE))

    # -- GNU hash lookups ------------------------------------------------
    def _gnu_hash_table(self):
        cached = getattr(self, "_gh", None)
        if cached is not None:
            return cached
        sec = self.first_of_type(SHT_GNU_HASH)
        sym, strings = self._dynsym_info()
        if sec is None or sym is None:
            self._gh = False
            return False
        e = self.endian
        mm = self._mm
        nbuckets, symoffset, bloom_size, bloom_shift = struct.unpack_from(e + "4I", mm, sec.offset)
        wordsize = 8 if self.is64 else 4
        bloom_off = sec.offset + 16
        buckets_off = bloom_off + bloom_size * wordsize
        chain_off = buckets_off + nbuckets * 4
        if nbuckets == 0 or bloom_size == 0 or chain_off > sec.offset + sec.size:
            raise self._corrupt(".gnu.hash header out of range")
        self._gh = (nbuckets, symoffset, bloom_size, bloom_shift, wordsize * 8, bloom_off,
                    buckets_off, chain_off, sec.offset + sec.size, sym, strings)
        return self._gh

    def has_gnu_hash(self):
        return bool(self._gnu_hash_table())

    @_guard
    def lookup_defined(self, names):
        """Subset of ``names`` (str) that this object exports as defined symbols.

        Uses the GNU hash table like the dynamic loader does; falls back to
        reading every symbol when the object has none.
        """
        table = self._gnu_hash_table()
        if not table:
            exported = self.defined_symbols()
            return set(n for n in names if n in exported)
        (nbuckets, symoffset, bloom_size, bloom_shift, bits, bloom_off, buckets_off,
         chain_off, hash_end, sym, (s_off, s_end)) = table
        e = self.endian
        mm = self._mm
        word_fmt = e + ("Q" if bits == 64 else "I")
        u32 = struct.Struct(e + "I")
        entsize = sym.entsize or self._sym.size
        found = set()
        for name in names:
            bname = name.encode("utf-8", "surrogateescape")
            h = gnu_hash(bname)
            word = struct.unpack_from(word_fmt, mm, bloom_off + ((h // bits) % bloom_size) * (bits // 8))[0]
            mask = (1 << (h % bits)) | (1 << ((h >> bloom_shift) % bits))
            if word & mask != mask:
                continue
            idx = u32.unpack_from(mm, buckets_off + (h % nbuckets) * 4)[0]
            if idx < symoffset:
                continue
            hv = h | 1
            while True:
                cpos = chain_off + (idx - symoffset) * 4
                if cpos + 4 > hash_end:
                    break
                h2 = u32.unpack_from(mm, cpos)[0]
                if (h2 | 1) == hv:
                    raw = self._sym.unpack_from(mm, sym.offset + idx * entsize)
                    name_off, bind, _t, shndx = self._sym_fields(raw)
                    start = s_off + name_off
                    if (shndx != SHN_UNDEF and mm[start:start + len(bname)] == bname
                            and start + len(bname) < s_end and mm[start + len(bname)] == 0
                            and bind in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE)):
                        found.add(name)
                        break
                if h2 & 1:
                    break
                idx += 1
        return found

    # -- symbol versions -------------------------------------------------
    @_guard
    def version_needs(self):
        """{library file name: [version names]} from .gnu.version_r."""
        # Elf_Verneed: version, cnt, file, aux, next (16 bytes); Elf_Vernaux: hash, flags, other, name, next
        s_off, s_end, end, entries = self._version_entries(SHT_GNU_VERNEED, ".gnu.version_r", 16, 12)
        e = self.endian
        mm = self._mm
        out = {}
        for pos in entries:
            _ver, cnt, file_off, aux = struct.unpack_from(e + "HHII", mm, pos)
            versions = out.setdefault(self._cstr(s_off + file_off, s_end), [])
            for apos in self._chain(pos + aux, end, cnt, ".gnu.version_r aux entry", 16, 12):
                name_off = struct.unpack_from(e + "I", mm, apos + 8)[0]
                versions.append(self._cstr(s_off + name_off, s_end))
        return out

    @_guard
    def version_defs(self):
        """Set of version names this library defines (.gnu.version_d), without its base entry."""
        # Elf_Verdef: version, flags, ndx, cnt, hash, aux, next (20 bytes); Elf_Verdaux: name, next
        s_off, s_end, end, entries = self._version_entries(SHT_GNU_VERDEF, ".gnu.version_d", 20, 16)
        out = set()
        for pos in entries:
            _v, flags, _ndx, cnt, _h, aux = struct.unpack_from(self.endian + "HHHHII", self._mm, pos)
            if cnt and not flags & VER_FLG_BASE:
                if pos + aux + 8 > end:
                    raise self._corrupt(".gnu.version_d aux entry past the section end")
                name_off = struct.unpack_from(self.endian + "I", self._mm, pos + aux)[0]
                out.add(self._cstr(s_off + name_off, s_end))
        return out


def read_summary(path):
    """Everything abi_check needs from one file, as a plain dict.

    Raises ElfError for unreadable, non-ELF, truncated or corrupt files.
    """
    with ElfFile(path) as elf:
        try:
            dyn = elf.dynamic()
            return {
                "path": path,
                "machine": elf.machine,
                "class": 64 if elf.is64 else 32,
                "identity": elf.identity,
                "has_sections": elf.has_sections,
                "soname": dyn["soname"],
                "needed": list(dyn["needed"]),
                "rpath": dyn["rpath"],
                "runpath": dyn["runpath"],
                "version_needs": elf.version_needs(),
            }
        except (struct.error, IndexError, ValueError) as exc:
            raise ElfError("corrupt_elf", path, "malformed dynamic section (%s)" % exc) from exc
