# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What "the system" provides to the dynamic loader: the ld.so cache
(``/etc/ld.so.cache``, glibc's new format, possibly behind the old one), the
directories of ``ld.so.conf`` and the default trusted directories.  A root
other than ``/`` reads another host's tree (paths are prefixed with it).
"""

from __future__ import annotations

import glob
import os
import struct

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular, read_text

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"

# e_machine name -> the cache entry flags the loader accepts for it
CACHE_FLAGS = {
    "x86_64": 0x0303,
    "aarch64": 0x0A03,
    "ppc64": 0x0503,
    "s390": 0x0403,
    "x86": 0x0003,
}

DEFAULT_DIRS = (
    "/lib64", "/usr/lib64",
    "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/lib", "/usr/lib",
)


class LdCacheError(ValueError):
    pass


def _rooted(root, path):
    if not root or root == "/":
        return path
    return os.path.join(root, path.lstrip("/"))


def parse_ld_cache(data):
    """Entries of an ld.so.cache image: list of (soname, flags, path)."""
    base = 0
    if data.startswith(OLD_MAGIC):
        if len(data) < 16:
            raise LdCacheError("truncated old-format ld.so.cache header")
        nold = struct.unpack_from("<I", data, 12)[0]
        base = 16 + nold * 12
        base = (base + 7) & ~7
        if not data.startswith(NEW_MAGIC, base):
            # old format only: entries are int32 flags, u32 key, u32 value, offsets relative to the strings
            strings = 16 + nold * 12
            out = []
            for i in range(nold):
                flags, key, value = struct.unpack_from("<iII", data, 16 + i * 12)
                out.append((_cstr(data, strings + key), flags, _cstr(data, strings + value)))
            return out
    if not data.startswith(NEW_MAGIC, base):
        raise LdCacheError("not an ld.so.cache (unknown magic)")
    if len(data) < base + 48:
        raise LdCacheError("truncated ld.so.cache header")
    nlibs = struct.unpack_from("<I", data, base + 20)[0]
    if base + 48 + nlibs * 24 > len(data):
        raise LdCacheError("truncated ld.so.cache: %d entries do not fit" % nlibs)
    out = []
    for i in range(nlibs):
        flags, key, value, _osv, _hwcap = struct.unpack_from("<iIIIQ", data, base + 48 + i * 24)
        out.append((_cstr(data, base + key if base else key), flags, _cstr(data, base + value if base else value)))
    return out


def _cstr(data, off):
    end = data.find(b"\0", off)
    if end < 0:
        end = len(data)
    return data[off:end].decode("utf-8", "surrogateescape")


def read_ld_so_conf(root="/", path="/etc/ld.so.conf", _depth=0):
    """Directories listed in ld.so.conf (following ``include`` globs), unrooted."""
    dirs = []
    full = _rooted(root, path)
    try:
        lines = read_text(full, 1 << 20).splitlines()
    except OSError:
        return dirs
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include") and _depth < 8:
            for pattern in line.split()[1:]:
                if not pattern.startswith("/"):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for inc in sorted(glob.glob(_rooted(root, pattern))):
                    rel = "/" + os.path.relpath(inc, root) if root and root != "/" else inc
                    dirs.extend(read_ld_so_conf(root, rel, _depth + 1))
        elif line.startswith("hwcap"):
            continue
        else:
            dirs.append(line.split("=", 1)[0].strip())
    return dirs


class SystemLibraries:
    """The system's part of library resolution.

    Either explicit ``library_dirs`` (searched in order, no cache), or a root
    whose ld.so cache is read (falling back to its ld.so.conf directories when
    it has no cache) followed by the default directories.
    """

    def __init__(self, root="/", library_dirs=None):
        self.root = root or "/"
        self.explicit = library_dirs is not None
        self.cache = {}
        self.cache_error = None
        self.source = None
        if library_dirs is not None:
            self.dirs = list(library_dirs)
            self.source = "library_dirs"
            return
        cache_path = _rooted(self.root, "/etc/ld.so.cache")
        try:
            data = read_regular(cache_path, 256 << 20)
            for soname, flags, path in parse_ld_cache(data):
                self.cache.setdefault(soname, []).append((flags, _rooted(self.root, path)))
            self.source = cache_path
            conf_dirs = []
        except (OSError, LdCacheError) as exc:
            self.cache_error = "%s: %s" % (cache_path, exc)
            conf_dirs = read_ld_so_conf(self.root)
            self.source = "ld.so.conf"
        self.dirs = [_rooted(self.root, d) for d in conf_dirs + list(DEFAULT_DIRS)]

    def find(self, name, machine="x86_64"):
        """Path of ``name`` (a DT_NEEDED without '/') or None."""
        want = CACHE_FLAGS.get(machine)
        for flags, path in self.cache.get(name, ()):
            if want is None or flags == want:
                if os.path.exists(path):
                    return path
        for d in self.dirs:
            cand = os.path.join(d, name)
            if os.path.exists(cand):
                return cand
        return None

    def describe(self):
        if self.explicit:
            return "library_dirs %s" % ":".join(self.dirs)
        return "ld.so cache and default dirs under %s" % self.root
