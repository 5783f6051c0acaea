# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A release's fingerprint, and whether its verification marker still vouches for it.

A verified release records in ``.dflash-release/verified.json`` the fingerprint of the tree
verification saw. A later deploy or rollback trusts the marker only while the tree still has
that fingerprint: then what was verified is what is there, and verification need not run again.

The fingerprint is what the filesystem itself records about every entry under the release
(``lstat``; links are never followed): relative path, type, permission bits, owner, group,
size, modification time in nanoseconds, and a link's target. Any write through the filesystem
changes it: an edited, added, removed, renamed or re-owned file, a ``chmod``, a replaced link.
Change time and inode number are left out on purpose: uv installs wheels by hard-linking its
cache, so a later build of another release changes the link count, and with it the change time,
of this release's files without touching their bytes. What it cannot see is a write by root that
keeps the size and puts the old modification time back; ``audit.yml`` compares file hashes
for that. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.release.contract import META_DIR

MARKER_DIR = META_DIR
MAX_MARKER_BYTES = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One lstat'ed entry of the tree; ``path`` is relative to the root, '/'-separated."""

    path: str
    kind: str  # 'f' file, 'd' directory, 'l' link, 'o' anything else (FIFO, socket, device)
    mode: int
    uid: int
    gid: int
    size: int
    mtime_ns: int
    link: str = ""

    def line(self) -> bytes:
        """The entry as one line of the digest; a path's bytes are kept as they are (surrogateescape)."""
        fields = (self.kind, "%o" % self.mode, str(self.uid), str(self.gid), str(self.size), str(self.mtime_ns))
        text = "%s\0%s\0%s\n" % (self.path, " ".join(fields), self.link)
        return text.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Fingerprint:
    sha256: str
    files: int
    bytes: int


def entry_kind(st_mode: int) -> str:
    if stat.S_ISREG(st_mode):
        return "f"
    if stat.S_ISDIR(st_mode):
        return "d"
    if stat.S_ISLNK(st_mode):
        return "l"
    return "o"


def entry(root: str, rel: str) -> Entry:
    """The Entry for ``rel`` under ``root``, read with lstat (a link is described, not followed)."""
    full = os.path.join(root, rel)
    st = os.lstat(full)
    kind = entry_kind(st.st_mode)
    return Entry(path=rel, kind=kind, mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid,
                 size=st.st_size if kind != "d" else 0, mtime_ns=st.st_mtime_ns if kind != "d" else 0,
                 link=os.readlink(full) if kind == "l" else "")


def line_of(full: str, rel: str) -> bytes:
    """``entry(root, rel).line()`` for ``full`` (root + '/' + rel), without building the Entry.

    For callers that describe tens of thousands of known paths (site_packages_transplant's record of what
    it placed): the same lstat, the same fields, the same line. Raises OSError as ``entry`` does.
    """
    return stat_line(full, rel, os.lstat(full))


def stat_line(full: str, rel: str, st) -> bytes:
    """``line_of`` for an lstat result the caller already holds (a link's target is read from ``full``)."""
    mode = st.st_mode
    kind = entry_kind(mode)
    if kind == "d":
        size = mtime_ns = 0
    else:
        size, mtime_ns = st.st_size, st.st_mtime_ns
    text = "%s\0%s %o %d %d %d %d\0%s\n" % (rel, kind, stat.S_IMODE(mode), st.st_uid, st.st_gid, size, mtime_ns,
                                            os.readlink(full) if kind == "l" else "")
    return text.encode("utf-8", "surrogateescape")


def walk(root: str, exclude=(MARKER_DIR,)):
    """Every entry below ``root`` in a fixed order (names sorted as bytes), depth first.

    Directories are descended only when they are real directories (``DirEntry.is_dir(follow_symlinks=
    False)``): a link to a directory is one entry, its target. A directory's own modification time is
    left out (adding and removing entries shows as the entries themselves). Top-level names in
    ``exclude`` are skipped: the marker directory holds the marker, which cannot contain its own digest.
    """
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
            names = sorted((d.name for d in it), key=os.fsencode)
        children = []
        for name in names:
            if not rel_dir and name in exclude:
                continue
            rel = rel_dir + "/" + name if rel_dir else name
            item = entry(root, rel)
            yield item
            if item.kind == "d":
                children.append(rel)
        stack.extend(reversed(children))


def fingerprint(root: str, exclude=(MARKER_DIR,)) -> Fingerprint:
    """sha256 over every entry's line, with the count of regular files and their bytes."""
    digest = hashlib.sha256()
    files = size = 0
    for item in walk(root, exclude):
        digest.update(item.line())
        if item.kind == "f":
            files += 1
            size += item.size
    return Fingerprint(sha256=digest.hexdigest(), files=files, bytes=size)


def parse_marker(data: bytes):
    """(marker dict, '') or (None, why it is no marker)."""
    try:
        marker = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, "verified.json does not parse (%s)" % exc
    if not isinstance(marker, dict):
        return None, "verified.json is not a JSON object"
    return marker, ""


def marker_errors(marker, release_id: str, tree_sha256: str, inputs_sha256: str | None = None) -> list:
    """Why the marker does not vouch for this release as it is now ([] when it does).

    It must name the release it sits in (a marker copied from another release verifies nothing), carry
    the fingerprint of the tree as it is now (anything written since was never verified) and, when the
    caller gives the digest of its verification inputs, the same inputs (the GPUs, the driver, the
    imports and requirements asked for).
    """
    if not isinstance(marker, dict):
        return ["it was never verified (no readable verified.json)"]
    named = marker.get("release_id")
    if named != release_id:
        return ["its verified.json names release %s: a marker copied from another release verifies nothing"
                % named]
    recorded = marker.get("fingerprint")
    if not isinstance(recorded, str) or not recorded:
        return ["its verified.json records no fingerprint (written by an older deploy): verify it again"]
    if recorded != tree_sha256:
        return ["its files changed since it was verified (fingerprint %s, verified %s)"
                % (tree_sha256[:12], recorded[:12])]
    if inputs_sha256 is not None and marker.get("inputs") != inputs_sha256:
        return ["it was verified for other inputs (GPUs, driver, imports or requirements)"]
    return []


def files_changed(marker, release_id: str, tree_sha256: str) -> bool:
    """Did the release's files change since its marker was written (a running server should restart)?

    True without a marker of this release (it was removed because something was written, or was copied
    from elsewhere) and when the recorded fingerprint differs. A marker of an older deploy, which recorded
    no fingerprint, says nothing either way: False, so that upgrading the collection restarts nothing.
    """
    if not isinstance(marker, dict) or marker.get("release_id") != release_id:
        return True
    recorded = marker.get("fingerprint")
    return isinstance(recorded, str) and recorded != tree_sha256
