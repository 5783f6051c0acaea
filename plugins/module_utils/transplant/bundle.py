# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Transplant bundles: one uncompressed tar plus a manifest.

A bundle moves to a host as a single transfer and unpacks at disk speed: the
tar is not compressed, so every member's bytes lie at a fixed offset and are
copied out with ``copy_file_range`` straight from the tar file.  Members::

    site-packages/<RECORD path>     files inside site-packages
    bin/<name>                      scripts RECORD places in the venv's bin/
    venv/<path>                     data-scheme files elsewhere in the venv (share/, include/)
    MANIFEST.json                   written last

The manifest lists every distribution (name, version, dist-info, WHEEL tags)
and every file (RECORD path, member, size, sha256, mode, mtime).  A bundle is
verified before anything changes: the manifest parses, every member is a
regular file at the listed size with the listed sha256, nothing else is in
the tar, and each distribution's own RECORD agrees with the manifest.
Standard library only.
"""


import hashlib
import io
import json
import os
import re
import tarfile

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import open_regular
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import (
    BIN_PREFIX,
    VENV_PREFIX,
    RecordError,
    decode_record,
    normalize_record_path,
    parse_record,
    record_hash_to_hex,
)
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.fastcopy import run_parallel

MAX_MANIFEST_BYTES = 256 << 20  # one line per file: torch + nvidia + triton make about 5 MB
MAX_METADATA_MEMBER_BYTES = 64 << 20  # a RECORD or WHEEL read into memory
FORMAT = "dflash-transplant-bundle"
FORMAT_VERSION = 1
MANIFEST = "MANIFEST.json"
_BUF = 1 << 20


class BundleError(Exception):
    pass


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def member_name(record_path):
    if record_path.startswith(BIN_PREFIX):
        return "bin/" + record_path[len(BIN_PREFIX):]
    if record_path.startswith(VENV_PREFIX):
        return "venv/" + record_path[len(VENV_PREFIX):]
    return "site-packages/" + record_path


class _HashingReader:
    def __init__(self, handle):
        self.handle = handle
        self.hasher = hashlib.sha256()
        self.size = 0

    def read(self, size=-1):
        data = self.handle.read(size if size and size > 0 else _BUF)
        self.hasher.update(data)
        self.size += len(data)
        return data


def pack(out_path, source_venv_root, python_version, dists):
    """Write a bundle to out_path (temp file + rename).

    ``dists``: iterable of dicts ``{"name", "version", "dist_info", "wheel_tags",
    "files": [{"path", "src", "size", "mode", "mtime"}]}``.  Returns the manifest.
    """
    tmp = "%s.tmp-%d" % (out_path, os.getpid())
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "source": {"venv": source_venv_root, "python": list(python_version)},
        "distributions": [],
    }
    try:
        os.unlink(tmp)
    except OSError:
        pass
    # a new file, never opened through a link planted at the temp name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as out, \
                tarfile.TarFile(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, copybufsize=_BUF) as tar:
            for dist in dists:
                entry = {k: dist[k] for k in ("name", "version", "dist_info", "wheel_tags")}
                entry["files"] = []
                for item in dist["files"]:
                    info = tarfile.TarInfo(member_name(item["path"]))
                    info.size = item["size"]
                    info.mode = item["mode"] & 0o7777
                    info.mtime = int(item["mtime"])
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    with os.fdopen(open_regular(item["src"], nofollow=True), "rb") as handle:
                        reader = _HashingReader(handle)
                        tar.addfile(info, reader)
                    if reader.size != item["size"]:
                        raise BundleError("%s changed while packing" % item["src"])
                    entry["files"].append({
                        "path": item["path"], "member": info.name, "size": item["size"],
                        "sha256": reader.hasher.hexdigest(), "mode": info.mode, "mtime": info.mtime,
                    })
                manifest["distributions"].append(entry)
            data = json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
        os.rename(tmp, out_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return manifest


class Bundle:
    """A bundle opened for reading: member offsets from the tar headers, and the manifest."""

    def __init__(self, path):
        self.path = path
        self.members = {}
        try:
            fd = open_regular(path)  # a FIFO or a device is refused, not read forever
        except OSError as exc:
            raise BundleError("%s is not a readable uncompressed tar bundle: %s" % (path, exc.strerror or exc)) \
                from exc
        try:
            with os.fdopen(fd, "rb") as handle:
                # the file as opened, before anything is read from it: a later change shows in its identity
                self.stat = os.fstat(handle.fileno())
                self.file_size = self.stat.st_size
                with tarfile.open(fileobj=handle, mode="r:") as tar:
                    for info in tar:
                        if info.name in self.members:
                            raise BundleError("bundle %s holds %s twice" % (path, info.name))
                        if info.offset_data + info.size > self.file_size:
                            raise BundleError("bundle %s is truncated: %s declares %d bytes past its end"
                                              % (path, info.name, info.offset_data + info.size - self.file_size))
                        self.members[info.name] = info
        except (tarfile.TarError, OSError) as exc:
            raise BundleError("%s is not a readable uncompressed tar bundle: %s" % (path, exc)) from exc
        info = self.members.get(MANIFEST)
        if info is None or not info.isreg():
            raise BundleError("bundle %s has no %s" % (path, MANIFEST))
        data = self.read_member(MANIFEST, MAX_MANIFEST_BYTES)
        # the digest the roles read with `tar -xOf <bundle> MANIFEST.json | sha256sum`
        self.manifest_sha256 = hashlib.sha256(data).hexdigest()
        try:
            self.manifest = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleError("bundle %s: manifest does not parse: %s" % (path, exc)) from exc
        self._check_manifest_shape()

    def _check_manifest_shape(self):
        """Every field has the type and range the module writes; the manifest only lists and checksums files."""
        man = self.manifest
        if not isinstance(man, dict) or man.get("format") != FORMAT or man.get("version") != FORMAT_VERSION:
            raise BundleError("bundle %s: not a %s v%d manifest" % (self.path, FORMAT, FORMAT_VERSION))

        def bad(what):
            return BundleError("bundle %s: malformed manifest (%s)" % (self.path, what))

        source = man.get("source", {})
        if not isinstance(source, dict) or not isinstance(source.get("venv", ""), (str, type(None))):
            raise bad("source must be an object with a string venv")
        dists = man.get("distributions")
        if not isinstance(dists, list):
            raise bad("distributions must be a list")
        try:
            for dist in dists:
                if not isinstance(dist, dict):
                    raise bad("a distribution is not an object")
                for key in ("name", "version", "dist_info"):
                    if not isinstance(dist.get(key), str):
                        raise BundleError("bundle %s: distribution field %s is not a string" % (self.path, key))
                tags = dist.get("wheel_tags", [])
                if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                    raise bad("wheel_tags of %s must be a list of strings, not %r" % (dist["name"], tags))
                if not isinstance(dist.get("files"), list):
                    raise bad("files of %s must be a list" % dist["name"])
                for item in dist["files"]:
                    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                        raise bad("a file entry of %s has no string path" % dist["name"])
                    path = normalize_record_path(item["path"])
                    if path != item["path"] or item.get("member") != member_name(path):
                        raise BundleError("bundle %s: bad file entry %r" % (self.path, item["path"]))
                    if not _is_int(item.get("size")) or item["size"] < 0 or not isinstance(item.get("sha256"), str) \
                            or not _SHA256.match(item["sha256"]):
                        raise BundleError("bundle %s: bad size or sha256 for %s" % (self.path, item["path"]))
                    if not _is_int(item.get("mode")) or not 0 <= item["mode"] <= 0o7777:
                        raise bad("mode of %s must be an integer permission, not %r" % (path, item.get("mode")))
                    if not _is_int(item.get("mtime")) or not 0 <= item["mtime"] < 1 << 40:
                        raise bad("mtime of %s must be integer seconds, not %r" % (path, item.get("mtime")))
        except RecordError as exc:
            raise BundleError("bundle %s: %s" % (self.path, exc)) from exc

    @property
    def source_venv(self):
        return self.manifest.get("source", {}).get("venv")

    @property
    def distributions(self):
        return self.manifest["distributions"]

    def offset(self, member):
        return self.members[member].offset_data

    def read_member(self, member, limit=MAX_METADATA_MEMBER_BYTES):
        """A member's bytes, for the small ones read into memory (manifest, RECORD, WHEEL)."""
        info = self.members[member]
        if info.size > limit:
            raise BundleError("bundle %s: %s declares %d bytes, more than the %d read into memory"
                              % (self.path, member, info.size, limit))
        with open(self.path, "rb") as handle:
            handle.seek(info.offset_data)
            data = handle.read(info.size)
        if len(data) != info.size:
            raise BundleError("bundle %s is truncated in %s" % (self.path, member))
        return data

    def verify(self, dist_infos=None, workers=4):
        """Raise BundleError unless the selected distributions (all if None) verify."""
        listed = set([MANIFEST])
        checks = []
        for dist in self.distributions:
            for item in dist["files"]:
                listed.add(item["member"])
            if dist_infos is not None and dist["dist_info"] not in dist_infos:
                continue
            for item in dist["files"]:
                info = self.members.get(item["member"])
                if info is None:
                    raise BundleError("bundle %s: %s is listed but missing" % (self.path, item["member"]))
                if not info.isreg():
                    raise BundleError("bundle %s: %s is not a regular file" % (self.path, item["member"]))
                if info.size != item["size"]:
                    raise BundleError("bundle %s: %s has %d bytes, manifest says %d"
                                      % (self.path, item["member"], info.size, item["size"]))
                checks.append((info.offset_data, info.size, item["sha256"], item["member"]))
            self._check_record(dist)
        extra = sorted(set(self.members) - listed)
        if extra:
            raise BundleError("bundle %s holds members the manifest does not list: %s"
                              % (self.path, ", ".join(extra[:5])))
        checks.sort(key=lambda c: -c[1])
        bad = []
        fd = os.open(self.path, os.O_RDONLY)
        try:
            def check(item):
                offset, size, want, member = item
                hasher = hashlib.sha256()
                done = 0
                while done < size:
                    chunk = os.pread(fd, min(_BUF * 4, size - done), offset + done)
                    if not chunk:
                        break
                    hasher.update(chunk)
                    done += len(chunk)
                if done != size or hasher.hexdigest() != want:
                    bad.append(member)
            run_parallel(checks, check, workers)
        finally:
            os.close(fd)
        if bad:
            raise BundleError("bundle %s: checksum mismatch in %s" % (self.path, ", ".join(sorted(bad)[:5])))

    def _check_record(self, dist):
        record_path = dist["dist_info"] + "/RECORD"
        files = {item["path"]: item for item in dist["files"]}
        if record_path not in files:
            raise BundleError("bundle %s: %s has no RECORD" % (self.path, dist["dist_info"]))
        try:
            entries = parse_record(decode_record(self.read_member(files[record_path]["member"]),
                                                 "RECORD of %s" % dist["dist_info"]))
        except RecordError as exc:
            raise BundleError("bundle %s: RECORD of %s: %s" % (self.path, dist["dist_info"], exc)) from exc
        if set(e.path for e in entries) != set(files):
            raise BundleError("bundle %s: RECORD of %s and the manifest list different files"
                              % (self.path, dist["dist_info"]))
        for entry in entries:
            if entry.hash and entry.hash.startswith("sha256="):
                if record_hash_to_hex(entry.hash)[1] != files[entry.path]["sha256"]:
                    raise BundleError("bundle %s: RECORD hash of %s disagrees with the manifest"
                                      % (self.path, entry.path))
