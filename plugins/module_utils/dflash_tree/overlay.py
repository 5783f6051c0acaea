# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a DFlash-capable sglang tree in place of a release's sglang/, as a WHOLE tree.

The tar holds ``sglang/...``. Afterwards ``<site-packages>/sglang`` holds exactly the tree's
files: files the base release installed that the tree lacks are removed, so no stale module of
the older release is left to register a model architecture twice. One change line per file
that differs:

  add <path>      the release lacks it
  replace <path>  the release has another version of it (the base's, or an older tree's)
  remove <path>   the base release installed it and the tree does not have it
  drift <path>    it was put there by an earlier run and has been edited since
  stale <path>    an earlier run left the release without it and it is back (edited in
                  by hand, or a file-by-file copy): drift too, removed again

and ``record`` / ``manifest`` when the sglang dist-info's RECORD or the manifest of the tree's
files was (or would be) rewritten: both describe what is there afterwards. Files are written
under a temporary name and renamed over (uv hardlinks venv files from its cache: an existing
inode is never written to). A change first removes the verified marker, so a release whose
files changed is verified again before it runs; an interrupted run is finished by the next
one. Standard library only.
"""

from __future__ import annotations

import glob
import hashlib
import os
import tarfile
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.dflash_tree.tree import PKG, skipped, tree_files
from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular, read_text
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import record as R

NEW_SUFFIX = ".dflash-new"
# The manifest is one line per file of the tree (sglang 0.5.11: about 2,000).
MAX_MANIFEST_BYTES = 64 << 20
_CHUNK = 1 << 20


class OverlayError(Exception):
    """A tar or a site-packages the overlay refuses; the message is the one line to show."""


@dataclass(frozen=True)
class TreeFile:
    """One file of the tree: its place in the tar (``index`` of the member), sha256 (hex) and size."""

    index: int
    sha256: str
    size: int

    @property
    def record_hash(self):
        return R.hex_to_record_hash(self.sha256)


@dataclass(frozen=True)
class Plan:
    """What the overlay does: the change lines, the files to write and remove, and the new RECORD and
    manifest texts (None when they already say what they would say)."""

    lines: tuple
    writes: tuple
    removals: tuple
    record_path: str | None
    record_text: str | None
    manifest_text: str | None


@dataclass(frozen=True)
class Result:
    plan: Plan
    files: int
    marker_removed: bool

    @property
    def changes(self):
        return list(self.plan.lines)

    @property
    def changed(self):
        return bool(self.plan.lines)


def check_member(member):
    """The member's path relative to the tar's root ('/'-separated), or OverlayError when it is refused."""
    name = os.path.normpath(member.name)
    if name.startswith(("/", "..")) or not (name == PKG or name.startswith(PKG + "/")):
        raise OverlayError("the tar holds %s, outside %s/: refused" % (member.name, PKG))
    if not (member.isfile() or member.isdir()):
        raise OverlayError("the tar holds %s, neither a file nor a directory: refused" % member.name)
    return name.replace(os.sep, "/")


def read_tree(tar):
    """{relative path: TreeFile} of the tree's files in the open tar; every member is checked first.

    A later member of the same name wins, as it would when unpacked."""
    members = tar.getmembers()
    names = [check_member(member) for member in members]
    tree = {}
    for index, (member, rel) in enumerate(zip(members, names)):
        if not member.isfile() or not rel.startswith(PKG + "/") or skipped(rel):
            continue
        digest = hashlib.sha256()
        handle = tar.extractfile(member)
        chunk = handle.read(_CHUNK)
        while chunk:
            digest.update(chunk)
            chunk = handle.read(_CHUNK)
        tree[rel] = TreeFile(index, digest.hexdigest(), member.size)
    if not tree:
        raise OverlayError("the tar holds no %s/ files" % PKG)
    return tree


def parse_manifest(text):
    """{relative path: sha256 hex} of a manifest's ``<hex>  <path>`` lines."""
    previous = {}
    for line in text.splitlines():
        digest, dummy, rel = line.partition("  ")
        if rel:
            previous[rel] = digest
    return previous


def format_manifest(tree):
    return "".join("%s  %s\n" % (tree[rel].sha256, rel) for rel in sorted(tree))


def _read_optional(path, limit):
    try:
        return read_text(path, limit)
    except OSError:
        return None


def _is_regular(path):
    try:
        return os.path.isfile(path) and not os.path.islink(path)
    except OSError:
        return False


def _file_sha256(path):
    return R.record_hash_to_hex(R.hash_file(path)[0])[1]


def find_record(site):
    """The sglang dist-info's RECORD in site, or None."""
    found = sorted(glob.glob(os.path.join(glob.escape(site), PKG + "-*.dist-info", "RECORD")))
    return found[0] if found else None


def new_record_text(old_text, tree):
    """RECORD text with its sglang/ rows replaced by the tree's files (sha256, size), the tree's first."""
    kept = [e for e in R.parse_record(old_text, validate=False) if not e.path.startswith(PKG + "/")]
    rows = [R.RecordEntry(rel, tree[rel].record_hash, tree[rel].size) for rel in sorted(tree)]
    return R.format_record(rows + kept)


def plan(tree, site, manifest):
    """The Plan that makes site/sglang equal the tree, with the manifest at ``manifest``; reads only."""
    current_manifest = _read_optional(manifest, MAX_MANIFEST_BYTES)
    previous = parse_manifest(current_manifest or "")
    have = tree_files(site) if os.path.isdir(os.path.join(site, PKG)) else []
    lines, writes, removals = [], [], []
    for rel in sorted(tree):
        want = tree[rel].sha256
        dest = os.path.join(site, rel)
        if _is_regular(dest):
            if _file_sha256(dest) == want:
                continue
            kind = "drift" if previous.get(rel) == want else "replace"
        else:
            kind = "add"
        lines.append("%s %s" % (kind, rel))
        writes.append(rel)
    for rel in have:
        if rel not in tree:
            lines.append("%s %s" % ("stale" if previous else "remove", rel))
            removals.append(rel)
    record_path = find_record(site)
    record_text = None
    if record_path is not None:
        try:
            old = R.decode_record(read_regular(record_path, R.MAX_RECORD_BYTES), record_path)
            text = new_record_text(old, tree)
        except OSError as exc:
            raise OverlayError("cannot read %s: %s" % (record_path, exc.strerror or exc)) from exc
        except R.RecordError as exc:
            raise OverlayError("%s: %s" % (record_path, exc)) from None
        if text != old:
            record_text = text
            lines.append("record")
    manifest_text = format_manifest(tree)
    if manifest_text == current_manifest:
        manifest_text = None
    else:
        lines.append("manifest")
    return Plan(tuple(lines), tuple(writes), tuple(removals), record_path, record_text, manifest_text)


def write_atomic(dest, data, mode=0o644):
    """Write dest as a new inode: a temporary name beside it, renamed over."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + NEW_SUFFIX
    if os.path.lexists(tmp):
        os.unlink(tmp)
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def drop_bytecode(site, rel):
    """Remove the cached bytecode of a .py file that was replaced or removed."""
    if rel.endswith(".py"):
        base = os.path.join(site, os.path.dirname(rel), "__pycache__", os.path.basename(rel)[:-3] + ".")
        for pyc in glob.glob(glob.escape(base) + "*.pyc"):
            os.unlink(pyc)


def tidy(site):
    """Bytecode of modules that are gone, and directories the tree does not have and that are empty now."""
    top = os.path.join(site, PKG)
    for dirpath, _dirs, names in os.walk(top, topdown=False):
        if os.path.basename(dirpath) == "__pycache__":
            src_dir = os.path.dirname(dirpath)
            for name in names:
                stem = name.split(".", 1)[0]
                if name.endswith(".pyc") and not os.path.isfile(os.path.join(src_dir, stem + ".py")):
                    os.unlink(os.path.join(dirpath, name))
        if dirpath != top and not os.listdir(dirpath):
            os.rmdir(dirpath)


def apply(the_plan, tar, tree, site, manifest, marker=None):
    """Carry the plan out; True when the marker was removed. Nothing is done for a plan without lines."""
    if not the_plan.lines:
        return False
    marker_removed = bool(marker) and os.path.lexists(marker)
    if marker_removed:
        os.unlink(marker)
    members = tar.getmembers()
    for rel in the_plan.writes:
        write_atomic(os.path.join(site, rel), tar.extractfile(members[tree[rel].index]).read())
        drop_bytecode(site, rel)
    for rel in the_plan.removals:
        os.unlink(os.path.join(site, rel))
        drop_bytecode(site, rel)
    tidy(site)
    if the_plan.record_text is not None:
        write_atomic(the_plan.record_path, the_plan.record_text.encode("utf-8"))
    if the_plan.manifest_text is not None:
        write_atomic(manifest, the_plan.manifest_text.encode("utf-8"))
    return marker_removed


def overlay(tar_path, site, manifest, marker=None, check_mode=False):
    """Make site/sglang the tree of the tar at tar_path (check_mode: say what would change, write nothing)."""
    if not os.path.isdir(site):
        raise OverlayError("site-packages %s does not exist" % site)
    try:
        tar = tarfile.open(tar_path)
    except (OSError, tarfile.TarError) as exc:
        raise OverlayError("cannot read the tar %s: %s" % (tar_path, getattr(exc, "strerror", None) or exc)) from exc
    with tar:
        tree = read_tree(tar)
        the_plan = plan(tree, site, manifest)
        removed = False if check_mode else apply(the_plan, tar, tree, site, manifest, marker)
    return Result(the_plan, len(tree), removed)
