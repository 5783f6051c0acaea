# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a DFlash-capable sglang tree in place of a release's sglang/, as a WHOLE tree.

usage: dflash_overlay.py TAR SITE_PACKAGES MANIFEST [VERIFIED_MARKER]
TAR holds sglang/... ; DRY=1 reports without writing. Afterwards SITE_PACKAGES/sglang
holds exactly the tree's files: files the base release installed that the tree
lacks are removed, so no stale module of the older release is left to register
a model architecture twice. One output line per file that differs:

  add <path>      the release lacks it
  replace <path>  the release has another version of it (the base's, or an older tree's)
  remove <path>   the base release installed it and the tree does not have it
  drift <path>    it was put there by an earlier run and has been edited since
  stale <path>    an earlier run left the release without it and it is back (edited in
                  by hand, or a file-by-file copy): drift too, removed again

and "record" / "manifest" when the sglang dist-info's RECORD or the manifest of the
tree's files was (or would be) rewritten: both describe what is there afterwards.
Files are written under a temporary name and renamed over (uv hardlinks venv files
from its cache: an existing inode is never written to). A change first removes
VERIFIED_MARKER, so a release whose files changed is verified again before it runs;
an interrupted run is finished by the next one. Standard library only.
"""

import base64
import csv
import glob
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile

PKG = "sglang"


def sha256_hex(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_hash(hexdigest):
    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(hexdigest)).rstrip(b"=").decode("ascii")


def list_files(root, sub):
    """Regular files under root/sub, relative to root, without __pycache__ and .pyc."""
    out = []
    for dirpath, dirs, names in os.walk(os.path.join(root, sub)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".pyc"):
                continue
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) or os.path.islink(path):
                out.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return sorted(out)


def read_manifest(path):
    previous = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                digest, _sep, rel = line.rstrip("\n").partition("  ")
                if rel:
                    previous[rel] = digest
    return previous


def write_atomic(dest, data, mode=0o644):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + ".dflash-new"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def drop_bytecode(site, rel):
    if rel.endswith(".py"):
        base = os.path.join(site, os.path.dirname(rel), "__pycache__", os.path.basename(rel)[:-3] + ".")
        for pyc in glob.glob(glob.escape(base) + "*.pyc"):
            os.unlink(pyc)


def new_record(site, tree_rows):
    """(the sglang dist-info's RECORD, its text, its text with the sglang/ rows replaced by the tree's), or Nones."""
    found = sorted(glob.glob(os.path.join(site, PKG + "-*.dist-info", "RECORD")))
    if not found:
        return None, None, None
    path = found[0]
    with open(path, newline="", encoding="utf-8") as fh:
        old = fh.read()
    kept = [row for row in csv.reader(io.StringIO(old)) if row and not row[0].startswith(PKG + "/")]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in tree_rows + kept:
        writer.writerow(row)
    return path, old, buf.getvalue()


def main(argv):
    if len(argv) < 4:
        print(__doc__.split("\n\n", maxsplit=1)[0], file=sys.stderr)
        return 2
    tar_file, site, manifest = argv[1], argv[2], argv[3]
    marker = argv[4] if len(argv) > 4 else ""
    dry = os.environ.get("DRY", "0") == "1"
    if not os.path.isdir(site):
        print("site-packages %s does not exist" % site, file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="dflash-overlay.")
    try:
        with tarfile.open(tar_file) as tar:
            for member in tar.getmembers():
                name = os.path.normpath(member.name)
                if name.startswith(("/", "..")) or not (name == PKG or name.startswith(PKG + "/")):
                    print("the tar holds %s, outside %s/: refused" % (member.name, PKG), file=sys.stderr)
                    return 2
                if not (member.isfile() or member.isdir()):
                    print("the tar holds %s, neither a file nor a directory: refused" % member.name,
                          file=sys.stderr)
                    return 2
            tar.extractall(work)  # every member checked above
        tree = {rel: sha256_hex(os.path.join(work, rel)) for rel in list_files(work, PKG)}
        if not tree:
            print("the tar holds no %s/ files" % PKG, file=sys.stderr)
            return 2
        previous = read_manifest(manifest)
        have = list_files(site, PKG) if os.path.isdir(os.path.join(site, PKG)) else []
        lines, writes, removals = [], [], []
        for rel, want in sorted(tree.items()):
            dest = os.path.join(site, rel)
            if os.path.isfile(dest) and not os.path.islink(dest):
                if sha256_hex(dest) == want:
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
        tree_rows = []
        for rel, digest in sorted(tree.items()):
            tree_rows.append([rel, record_hash(digest), str(os.path.getsize(os.path.join(work, rel)))])
        record_path, record_old, record_text = new_record(site, tree_rows)
        record_changed = record_path is not None and record_old != record_text
        manifest_text = "".join("%s  %s\n" % (digest, rel) for rel, digest in sorted(tree.items()))
        try:
            with open(manifest, encoding="utf-8") as fh:
                manifest_changed = fh.read() != manifest_text
        except OSError:
            manifest_changed = True
        if record_changed:
            lines.append("record")
        if manifest_changed:
            lines.append("manifest")
        for line in lines:
            print(line)
        if dry or not lines:
            return 0
        if marker and os.path.lexists(marker):
            os.unlink(marker)
        for rel in writes:
            with open(os.path.join(work, rel), "rb") as fh:
                write_atomic(os.path.join(site, rel), fh.read())
            drop_bytecode(site, rel)
        for rel in removals:
            os.unlink(os.path.join(site, rel))
            drop_bytecode(site, rel)
        # Bytecode of modules that are gone, and directories the tree does not have and that are empty now.
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
        if record_changed:
            write_atomic(record_path, record_text.encode("utf-8"))
        if manifest_changed:
            write_atomic(manifest, manifest_text.encode("utf-8"))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
