# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RECORD files of installed distributions: parse, validate, hash, verify, write.

A RECORD line is ``path,algo=urlsafe-b64-digest-without-padding,size`` with
``path`` relative to site-packages.  Two kinds of path leave site-packages,
both through the venv root (``../../../``, site-packages being
``lib/pythonX.Y/site-packages``): scripts directly in the venv's ``bin/``
(``../../../bin/name``), and the wheel data scheme's files elsewhere under the
venv (``../../../share/man/man1/isympy.1``, ``../../../include/...``).
Nothing may leave the venv.

Standard library only.
"""


import base64
import csv
import hashlib
import io
import os
import posixpath

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import open_regular, read_regular

VENV_PREFIX = "../../../"
# The transplant module's own state directory in the venv root: no RECORD may place files there.
STATE_DIRNAME = ".dflash-transplant"
BIN_PREFIX = VENV_PREFIX + "bin/"
_READ_CHUNK = 1 << 20


class RecordError(Exception):
    """A RECORD that cannot be trusted: unreadable, malformed or escaping."""


class RecordEntry:
    """One RECORD line; ``path`` is normalized (posix, no ``./``)."""

    __slots__ = ("path", "hash", "size")

    def __init__(self, path, hash_value=None, size=None):
        self.path = path
        self.hash = hash_value or None
        self.size = size

    @property
    def is_script(self):
        return self.path.startswith(BIN_PREFIX)

    @property
    def is_venv_data(self):
        """A data-scheme file under the venv root, outside site-packages and bin/."""
        return is_venv_data(self.path)

    def as_tuple(self):
        return (self.path, self.hash, self.size)

    def __eq__(self, other):
        return isinstance(other, RecordEntry) and self.as_tuple() == other.as_tuple()

    def __hash__(self):
        return hash(self.as_tuple())

    def __repr__(self):
        return "RecordEntry(%r, %r, %r)" % self.as_tuple()


def is_venv_data(path):
    """True for a normalized path under the venv root that is not a bin/ script."""
    return path.startswith(VENV_PREFIX) and not path.startswith(BIN_PREFIX)


def normalize_record_path(raw):
    """Validate one RECORD path and return its normalized form.

    Allowed: a relative path inside site-packages; ``../../../bin/<name>`` (a
    script directly in the venv's bin/); ``../../../<dir>/...`` (a data-scheme
    file elsewhere in the venv, e.g. ``share/man``).  Refused: empty, absolute,
    NUL or backslash, any path that leaves the venv, and any other ``..``.
    """
    if not raw or "\x00" in raw or "\\" in raw:
        raise RecordError("empty path, or NUL or backslash in path %r" % (raw,))
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise RecordError("absolute path %r" % (raw,))
    if raw[0] != "." and "/." not in raw and "//" not in raw and raw[-1] != "/":
        # no "." or ".." component and nothing to collapse: normpath would return raw itself
        return raw
    path = posixpath.normpath(raw)
    if path in (".", ""):
        raise RecordError("path %r names site-packages itself" % (raw,))
    if path.startswith("../") or path == "..":
        if path.startswith(BIN_PREFIX):
            name = path[len(BIN_PREFIX):]
            if name and "/" not in name and name not in (".", ".."):
                return path
        rest = path[len(VENV_PREFIX):] if path.startswith(VENV_PREFIX) else ""
        top = rest.split("/", 1)[0]
        if rest and "/" in rest and top not in ("..", ".", "bin", "lib", "lib64", STATE_DIRNAME):
            return path
        raise RecordError("path %r escapes site-packages (only scripts in the venv's bin/ and data files "
                          "elsewhere in the venv may)" % (raw,))
    return path


def parse_record(text, validate=True):
    """Parse RECORD text into a list of RecordEntry (duplicates refused)."""
    entries = []
    seen = set()
    if '"' in text or "\r" in text or "\x00" in text:
        try:
            rows = list(csv.reader(io.StringIO(text)))
        except csv.Error as exc:
            raise RecordError("RECORD is not CSV: %s" % exc) from None
    else:  # nothing quoted, one line per row: what csv.reader returns, without its per-row cost
        rows = [line.split(",") for line in text.split("\n")]
    for lineno, row in enumerate(rows, 1):
        fields = len(row)
        if not row or (fields == 1 and not row[0].strip()):
            continue
        if fields > 3:
            raise RecordError("RECORD line %d has %d fields" % (lineno, fields))
        raw = row[0]
        path = normalize_record_path(raw) if validate else posixpath.normpath(raw)
        hash_value = row[1] if fields > 1 else ""
        size_text = row[2] if fields > 2 else ""
        if hash_value and "=" not in hash_value:
            raise RecordError("RECORD line %d: malformed hash %r" % (lineno, hash_value))
        try:
            size = int(size_text) if size_text else None
        except ValueError:
            raise RecordError("RECORD line %d: malformed size %r" % (lineno, size_text)) from None
        if size is not None and size < 0:
            raise RecordError("RECORD line %d: negative size" % lineno)
        if path in seen:
            raise RecordError("RECORD lists %r twice" % (path,))
        seen.add(path)
        entries.append(RecordEntry(path, hash_value, size))
    return entries


# RECORD of the largest real distributions (torch: 11,678 files) is about 1.5 MB.
MAX_RECORD_BYTES = 64 << 20


def decode_record(data, what, strict=True):
    """RECORD bytes as text.  Strict: UTF-8 (what installers write) or RecordError naming the place.

    Not strict: undecodable bytes become the surrogates Python uses for such file names
    (``surrogateescape``), so the paths still name the files on disk.
    """
    if not strict:
        return data.decode("utf-8", "surrogateescape")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RecordError("%s is not UTF-8 (byte 0x%02x on line %d)" % (what, data[exc.start], line)) from None


def read_record(path, strict=True):
    """Entries of the RECORD file at path (a regular file, bounded); RecordError names the file."""
    try:
        data = read_regular(path, MAX_RECORD_BYTES)
    except OSError as exc:
        raise RecordError("cannot read %s: %s" % (path, exc.strerror or exc)) from exc
    try:
        return parse_record(decode_record(data, path, strict))
    except RecordError as exc:
        msg = str(exc)
        raise RecordError(msg if msg.startswith(path) else "%s: %s" % (path, msg)) from None


def format_record(entries):
    """RECORD text for entries, in the given order (csv, ``\\n`` line ends)."""
    fields = "".join([e.path + (e.hash or "") for e in entries])
    if not ("," in fields or '"' in fields or "\r" in fields or "\n" in fields):
        # nothing to quote: exactly what csv.writer writes
        return "".join(["%s,%s,%s\n" % (e.path, e.hash or "", "" if e.size is None else e.size) for e in entries])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for entry in entries:
        writer.writerow((entry.path, entry.hash or "", "" if entry.size is None else entry.size))
    return out.getvalue()


def digest_to_record_hash(algo, digest):
    return "%s=%s" % (algo, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii"))


def record_hash_to_hex(value):
    """``sha256=<b64>`` -> ``("sha256", hex)``."""
    algo, dummy, b64 = value.partition("=")
    pad = "=" * (-len(b64) % 4)
    try:
        return algo, base64.urlsafe_b64decode(b64 + pad).hex()
    except (ValueError, TypeError):
        raise RecordError("malformed hash %r" % (value,)) from None


def hex_to_record_hash(hex_digest, algo="sha256"):
    return digest_to_record_hash(algo, bytes.fromhex(hex_digest))


def hash_bytes(data, algo="sha256"):
    return digest_to_record_hash(algo, hashlib.new(algo, data).digest())


def hash_file(path, algo="sha256", nofollow=True):
    """(record hash, size) of a regular file (a FIFO or device is refused), read in large chunks.

    ``nofollow=False`` hashes what a symlink points to (pkg_probe compares installed files as Python sees them).
    """
    hasher = hashlib.new(algo)
    size = 0
    with os.fdopen(open_regular(path, nofollow=nofollow), "rb") as handle:
        while True:
            chunk = handle.read(_READ_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            hasher.update(chunk)
    return digest_to_record_hash(algo, hasher.digest()), size


def resolve(site_packages, record_path):
    """Absolute file system path of a (normalized) RECORD path."""
    if not record_path.startswith("../"):
        return site_packages + "/" + record_path  # already normalized: no join/normpath per file
    return os.path.normpath(os.path.join(site_packages, record_path))
