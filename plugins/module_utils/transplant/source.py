# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where transplanted distributions come from: another venv, or a bundle.

Both give the same view: for each selected distribution its name, version,
dist-info directory, WHEEL tags, RECORD entries and, per file, where the
bytes are (a path, or an offset into the bundle tar) with size, mode and
mtime.  Loading stats files but never hashes them.  Standard library only.
"""


import hashlib
import os
from stat import S_ISLNK, S_ISREG

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import kind_of, read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import (
    MAX_SMALL_FILE_BYTES,
    list_dists,
    name_matches,
    normalize_name,
    parse_wheel_tags,
    read_wheel_tags,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import (
    BIN_PREFIX,
    RecordError,
    decode_record,
    hash_file,
    parse_record,
    read_record,
    resolve,
)
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.bundle import Bundle, BundleError


class SourceError(Exception):
    pass


class SourceFile:
    __slots__ = ("path", "size", "mode", "mtime_ns", "src", "member", "offset")

    def __init__(self, path, size, mode, mtime_ns, src=None, member=None, offset=None):
        self.path = path
        self.size = size
        self.mode = mode
        self.mtime_ns = mtime_ns
        self.src = src
        self.member = member
        self.offset = offset


class SourceDist:
    def __init__(self, name, version, dist_info, wheel_tags, entries, files):
        self.name = name
        self.version = version
        self.dist_info = dist_info
        self.wheel_tags = wheel_tags
        self.entries = entries  # list of RecordEntry, RECORD order
        self.files = files  # RECORD path -> SourceFile

    @property
    def key(self):
        return normalize_name(self.name)


def select(names, patterns, what):
    """Indices of names matching patterns; every pattern must match something."""
    chosen = []
    for pattern in patterns:
        hits = [n for n in names if name_matches(n, [pattern])]
        if not hits:
            raise SourceError("%s has no distribution matching %r" % (what, pattern))
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def _check_unique(dists, what):
    seen = {}
    for dist in dists:
        if dist.key in seen:
            raise SourceError("%s has two dist-info directories for %s: %s and %s"
                              % (what, dist.name, seen[dist.key], dist.dist_info))
        seen[dist.key] = dist.dist_info


class VenvSource:
    kind = "venv"

    def __init__(self, venv):
        self.venv = venv
        self.prefixes = sorted(set([venv.root, os.path.realpath(venv.root)]))
        self.label = venv.root

    def load(self, patterns, verify_hashes=False):
        src_root = os.path.realpath(self.venv.root)
        inside = set()
        installed = list_dists(self.venv.site_packages)
        names = [d.name for d in installed]
        wanted = set(normalize_name(n) for n in select(names, patterns, "source venv %s" % self.venv.root))
        chosen = [d for d in installed if d.key in wanted]
        result = []
        for dist in chosen:
            record = dist.file("RECORD")
            if not os.path.isfile(record):
                raise SourceError("source %s %s has no RECORD (%s): its files are unknown, refusing"
                                  % (dist.name, dist.version, record))
            try:
                entries = read_record(record)
            except RecordError as exc:
                raise SourceError("source %s %s: RECORD refused: %s" % (dist.name, dist.version, exc)) from exc
            tags = []
            try:
                tags = read_wheel_tags(dist.file("WHEEL"))
            except OSError:
                pass
            files = {}
            site_packages = self.venv.site_packages
            for entry in entries:
                path = entry.path
                full = site_packages + "/" + path if path[:3] != "../" else resolve(site_packages, path)
                try:
                    st = os.lstat(full)  # a symlink is refused, never taken for what it points to
                except OSError:
                    raise SourceError("source %s %s: %s is in RECORD but missing"
                                      % (dist.name, dist.version, full)) from None
                mode = st.st_mode
                if not S_ISREG(mode):
                    raise SourceError("source %s %s: %s is %s, not a regular file; refusing"
                                      % (dist.name, dist.version, full,
                                         "a symbolic link" if S_ISLNK(mode) else kind_of(mode)))
                parent = full.rpartition("/")[0]
                if parent not in inside:
                    real = os.path.realpath(parent)
                    if not (real == src_root or real.startswith(src_root + "/")):
                        raise SourceError("source %s %s: %s lies in %s, outside the source venv (a symlinked "
                                          "directory); refusing" % (dist.name, dist.version, path, real))
                    inside.add(parent)
                if verify_hashes and entry.hash:
                    actual = hash_file(full, entry.hash.partition("=")[0])[0]
                    if actual != entry.hash:
                        raise SourceError("source %s %s: %s does not match its RECORD hash"
                                          % (dist.name, dist.version, path))
                files[path] = SourceFile(path, st.st_size, mode & 0o7777, st.st_mtime_ns, full)
            _check_own_dist_info(dist.name, dist.dist_info, entries)
            result.append(SourceDist(dist.name, dist.version, dist.dist_info, tags, entries, files))
        _check_unique(result, "source venv %s" % self.venv.root)
        return result

    def read(self, source_file):
        return read_regular(source_file.src, source_file.size, nofollow=True)


class BundleSource:
    kind = "bundle"

    def __init__(self, path):
        # opened by its real path: members are later read with O_NOFOLLOW
        self.bundle = Bundle(os.path.realpath(path))
        self.path = path
        venv = self.bundle.source_venv
        self.prefixes = [venv] if venv else []
        self.label = path

    def load(self, patterns, verify_hashes=False):
        dists = self.bundle.distributions
        names = [d["name"] for d in dists]
        if patterns:
            wanted = set(normalize_name(n) for n in select(names, patterns, "bundle %s" % self.path))
        else:
            wanted = set(normalize_name(n) for n in names)
        result = []
        for dist in dists:
            if normalize_name(dist["name"]) not in wanted:
                continue
            files = {}
            for item in dist["files"]:
                if item["member"] not in self.bundle.members:
                    raise SourceError("bundle %s: %s is listed but missing" % (self.path, item["member"]))
                files[item["path"]] = SourceFile(item["path"], item["size"], item["mode"],
                                                 int(item["mtime"]) * 1000000000, src=self.path,
                                                 member=item["member"], offset=self.bundle.offset(item["member"]))
            record = dist["dist_info"] + "/RECORD"
            if record not in files:
                raise SourceError("bundle %s: %s has no RECORD" % (self.path, dist["dist_info"]))
            try:
                entries = parse_record(decode_record(self.bundle.read_member(files[record].member),
                                                     "RECORD of %s" % dist["dist_info"]))
            except (RecordError, BundleError) as exc:
                raise SourceError("bundle %s: RECORD of %s refused: %s" % (self.path, dist["dist_info"], exc)) from exc
            _check_own_dist_info(dist["name"], dist["dist_info"], entries)
            tags = self._wheel_tags(dist)
            result.append(SourceDist(dist["name"], dist["version"], dist["dist_info"], tags, entries, files))
        _check_unique(result, "bundle %s" % self.path)
        return result

    def _wheel_tags(self, dist):
        """Tags from the bundled WHEEL file (checked against its manifest sha256), not from the manifest's list."""
        item = next((f for f in dist["files"] if f["path"] == dist["dist_info"] + "/WHEEL"), None)
        if item is None:
            if dist.get("wheel_tags"):
                raise SourceError("bundle %s: the manifest gives %s wheel tags but the bundle holds no WHEEL file"
                                  % (self.path, dist["name"]))
            return []
        try:
            data = self.bundle.read_member(item["member"], MAX_SMALL_FILE_BYTES)
        except BundleError as exc:
            raise SourceError(str(exc)) from exc
        if hashlib.sha256(data).hexdigest() != item["sha256"]:
            raise SourceError("bundle %s: checksum mismatch in %s" % (self.path, item["member"]))
        tags = parse_wheel_tags(data.decode("utf-8", "replace"))
        if sorted(tags) != sorted(dist.get("wheel_tags") or []):
            raise SourceError("bundle %s: the manifest's wheel tags for %s (%s) are not the bundled WHEEL's (%s)"
                              % (self.path, dist["name"], ", ".join(dist.get("wheel_tags") or []) or "none",
                                 ", ".join(tags) or "none"))
        return tags

    def verify(self, dists, workers):
        self.bundle.verify(set(d.dist_info for d in dists), workers)

    def read(self, source_file):
        return self.bundle.read_member(source_file.member)


def _check_own_dist_info(name, dist_info, entries):
    if "/" in dist_info or not dist_info.endswith(".dist-info"):
        raise SourceError("%s: bad dist-info directory name %r" % (name, dist_info))
    for entry in entries:
        if ".dist-info" not in entry.path:
            continue
        top = entry.path.split("/", 1)[0]
        if top.endswith(".dist-info") and top != dist_info:
            raise SourceError("%s: RECORD claims %s inside another distribution's metadata" % (name, entry.path))
        if entry.path == dist_info:
            raise SourceError("%s: RECORD claims its dist-info directory as a file" % name)


def rewrite_script(data, src_prefixes, dest_root):
    """Point a script's interpreter line(s) at the destination venv.

    Handles ``#!<venv>/bin/python``, the ``#!/bin/sh`` + ``'''exec' <venv>/bin/python``
    form used for long paths, and the wheel placeholder ``#!python``.
    Returns the (possibly unchanged) bytes.
    """
    if not data.startswith(b"#!"):
        return data
    lines = data.split(b"\n", 3)
    head = lines[:3]
    rest = lines[3:]
    dest_bin = (dest_root.rstrip("/") + "/bin/").encode("utf-8")
    if head[0].strip() in (b"#!python", b"#!pythonw") or head[0].startswith(b"#!python "):
        head[0] = b"#!" + dest_bin + b"python" + head[0][len(head[0].split(b" ")[0]):]
    for prefix in src_prefixes:
        old = (prefix.rstrip("/") + "/bin/").encode("utf-8")
        head = [line.replace(old, dest_bin) for line in head]
    return b"\n".join(head + rest)


def is_script(path):
    return path.startswith(BIN_PREFIX)
