# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a successful bundle transplant left in place, recorded so that a re-run answers from it.

After a bundle run that succeeded (changed or not, never in check mode) the module writes
``<dest>/.dflash-release/transplant.json`` (the release contract's ``transplant`` file; the
release fingerprint leaves that directory out, so the record never invalidates a verification):

- the bundle as it was opened (real path, device, inode, size, mtime and ctime in nanoseconds,
  from ``fstat`` before anything was read from it) and its manifest's sha256;
- the options that select what moves (``distributions``, ``remove``) and the destination's Python;
- the RECORD paths of every selected distribution, the names of every dist-info directory in
  site-packages, and one sha256 over the ``release_fingerprint`` line (``fingerprint.line_of``, the
  same as ``entry(...).line()``: kind, permission bits, owner, group, size, mtime in nanoseconds,
  link target) of each of those files, of every directory above them up to the venv root (a
  directory's mtime is not in its line), and of every dist-info's ``METADATA``;
- what a run with nothing to do reports (the selected distributions, the warnings it repeats).

A re-run whose bundle, options and Python are the same takes that answer when the files still
have those lstat facts and site-packages still holds the same dist-info directories: ``check``
lstats them (no hashing, no reading the bundle or any RECORD). Anything else (the bundle replaced
or touched, another option, a file edited, removed, re-owned or replaced by a link, a directory
replaced by a link, a distribution added, removed or renamed, no record or an unreadable one) is a
miss, and the module takes its full path, which repairs and records again. Like that path's own
no-change answer (size and mtime), it cannot see a write that keeps the size and puts the old
mtime back; ``audit.yml`` compares hashes for that.

Any run that changes the destination forgets the record first (``forget``). Standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.fingerprint import line_of, stat_line
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import resolve
from ansible_collections.dflash.deploy.plugins.module_utils.release.contract import META_DIR, TRANSPLANT
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.journal import write_atomic

FORMAT = "dflash-transplant-converged"
FORMAT_VERSION = 1
MAX_RECORD_BYTES = 64 << 20  # about 2 MB for torch + nvidia + triton (32,000 paths)
_SEP = "\0"  # between paths: a RECORD path never holds a NUL


@dataclass(frozen=True)
class Answer:
    """What the re-run reports: the selected distributions as ``unchanged``, and the repeated warnings."""

    unchanged: list
    warnings: list


def record_path(venv_root):
    return os.path.join(venv_root, META_DIR, TRANSPLANT)


def identity(st):
    """The facts of a bundle file that any write or replacement changes (ctime cannot be set back)."""
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


def options(distributions, remove):
    return {"distributions": list(distributions or []), "remove": list(remove or [])}


def _dest(venv):
    """The destination as the plan sees it: where it is, and the Python its wheels' tags were checked against."""
    return {"root": venv.root, "site_packages": venv.site_packages,
            "python": list(venv.version) if venv.version else None, "freethreaded": bool(venv.freethreaded)}


def dist_infos(site_packages):
    """Names of the dist-info directories in site-packages, sorted (what ``list_dists`` reads)."""
    with os.scandir(site_packages) as entries:
        return sorted(e.name for e in entries if e.name.endswith(".dist-info") and e.is_dir())


def _line(root, rel):
    try:
        return line_of(root + "/" + rel, rel)
    except OSError as exc:
        return ("%s\0missing %s\n" % (rel, exc.errno)).encode("utf-8", "surrogateescape")


class NotInPlace(Exception):
    """A file is not what the run placed (see ``build``): nothing is recorded."""


def _expected(st, want):
    """Does an lstat result show the file as the full path's no-change check wants it (size, mtime seconds)?"""
    if not stat.S_ISREG(st.st_mode):
        return False
    size, mtime_ns = want
    return (size is None or st.st_size == size) and (mtime_ns is None or st.st_mtime_ns // 1000000000 ==
                                                     mtime_ns // 1000000000)


def tree_digest(venv, paths, infos, expect=None):
    """sha256 over the fingerprint lines of the RECORD paths, the directories above them and each METADATA.

    Every path is taken relative to the venv root, so a script in ``bin/`` and the directories up to
    ``lib/`` are described like any other; a missing path gives a line of its own. With ``expect``
    ({RECORD path: (size or None, mtime_ns or None)}) each file must also be a regular file with
    that size and mtime second, or NotInPlace is raised.
    """
    root = venv.root.rstrip("/")
    prefix = root + "/"
    sp = venv.site_packages
    sp_rel = sp[len(prefix):] if sp.startswith(prefix) else None
    if sp_rel is None:
        raise ValueError("site-packages %s is not under %s" % (sp, root))
    digest = hashlib.sha256()
    dirs = set()
    for path in paths:
        full = sp + "/" + path if path[:3] != "../" else resolve(sp, path)
        if not full.startswith(prefix):
            raise ValueError("%s lies outside %s" % (path, root))
        rel = full[len(prefix):]
        if expect is None:
            digest.update(_line(root, rel))
        else:
            try:
                st = os.lstat(full)
            except OSError as exc:
                raise NotInPlace("%s: %s" % (path, exc.strerror or exc)) from exc
            if not _expected(st, expect[path]):
                raise NotInPlace("%s is not the file placed" % path)
            digest.update(stat_line(prefix + rel, rel, st))
        parent = rel.rpartition("/")[0]
        while parent and parent not in dirs:
            dirs.add(parent)
            parent = parent.rpartition("/")[0]
    for name in infos:
        digest.update(_line(root, sp_rel + "/" + name + "/METADATA"))
        dirs.add(sp_rel + "/" + name)
    for rel in sorted(dirs):
        digest.update(_line(root, rel))
    return digest.hexdigest()


def _expectations(selected):
    """{RECORD path: (size, mtime_ns)} as the full path's no-change check compares them: a script (rewritten)
    and a RECORD (written anew) only need to be regular files."""
    expect = {}
    for src in selected:
        record = src.dist_info + "/RECORD"
        for e in src.entries:
            sfile = src.files.get(e.path)
            if sfile is None:
                raise NotInPlace("%s of %s is in its RECORD but not in the source" % (e.path, src.name))
            if e.is_script or e.path == record:
                expect[e.path] = (None, None)
            else:
                expect[e.path] = (sfile.size, sfile.mtime_ns)
    return expect


def build(venv, bundle, distributions, remove, selected, warnings):
    """The record (a dict) of a run that left ``selected`` (SourceDists) in place from ``bundle`` (a Bundle).

    Its facts are read after the run; every file must still have the size and mtime second the bundle
    gives it (what the full path's no-change check compares), so a file changed by someone else in the
    meantime is never vouched for: NotInPlace, and nothing is recorded.
    """
    paths = [e.path for src in selected for e in src.entries]
    infos = dist_infos(venv.site_packages)
    digest = tree_digest(venv, paths, infos, _expectations(selected))
    return {
        "format": FORMAT, "version": FORMAT_VERSION,
        "bundle": dict(identity(bundle.stat), path=bundle.path, manifest_sha256=bundle.manifest_sha256),
        "options": options(distributions, remove),
        "dest": _dest(venv),
        "unchanged": [{"name": src.name, "version": src.version} for src in selected],
        "warnings": list(warnings),
        "dist_infos": infos,
        "paths": _SEP.join(paths),
        "files": {"count": len(paths), "sha256": digest},
    }


def _meta_dir(venv_root, make):
    """The release's metadata directory, made when asked; None when it is not a real directory."""
    path = os.path.join(venv_root, META_DIR)
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT or not make:
            return None
        os.mkdir(path, 0o755)
        st = os.lstat(path)
    return path if stat.S_ISDIR(st.st_mode) else None


def write(venv, data):
    """Write the record; False (nothing written) when it cannot be, which only costs the next run its shortcut."""
    try:
        directory = _meta_dir(venv.root, make=True)
        if directory is None:
            return False
        write_atomic(os.path.join(directory, TRANSPLANT), json.dumps(data, sort_keys=True).encode("utf-8"),
                     do_fsync=False)
    except (OSError, ValueError):
        return False
    return True


def forget(venv_root):
    """Remove the record before the destination changes; True unless a record is left behind.

    Best effort: a record that stays could only vouch again for files whose lstat facts are all
    back to what it recorded (a rollback from the backup's hardlinks), which is then the truth.
    """
    try:
        directory = _meta_dir(venv_root, make=False)
        if directory is not None:
            os.unlink(os.path.join(directory, TRANSPLANT))
    except OSError as exc:
        return exc.errno == errno.ENOENT
    return True


def load(venv_root):
    """The record as written, or None (missing, a link, unreadable, another format)."""
    directory = _meta_dir(venv_root, make=False)
    if directory is None:
        return None
    try:
        data = json.loads(read_regular(os.path.join(directory, TRANSPLANT), MAX_RECORD_BYTES,
                                       nofollow=True).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
        return None
    return data


def check(venv, bundle, distributions, remove):
    """(Answer, "") when the record vouches for the destination as it is now, else (None, why not)."""
    data = load(venv.root)
    if data is None:
        return None, "no record of a previous run"
    try:
        return _check(data, venv, bundle, distributions, remove)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return None, "the record does not parse (%s)" % exc


def _check(data, venv, bundle, distributions, remove):
    if data["options"] != options(distributions, remove):
        return None, "other options (distributions, remove) than the recorded run's"
    if data["dest"] != _dest(venv):
        return None, "the destination venv is not the recorded one"
    recorded = data["bundle"]
    try:
        real = os.path.realpath(bundle)
        st = os.stat(real)
    except OSError as exc:
        return None, "bundle %s: %s" % (bundle, exc.strerror or exc)
    fields = ("dev", "ino", "size", "mtime_ns", "ctime_ns")
    if real != recorded["path"] or identity(st) != {k: recorded[k] for k in fields}:
        return None, "the bundle is not the file the recorded run read"
    try:
        infos = dist_infos(venv.site_packages)
    except OSError as exc:
        return None, "site-packages: %s" % (exc.strerror or exc)
    if infos != data["dist_infos"]:
        return None, "site-packages holds other distributions than after the recorded run"
    paths = data["paths"].split(_SEP) if data["paths"] else []
    files = data["files"]
    if len(paths) != files["count"] or tree_digest(venv, paths, infos) != files["sha256"]:
        return None, "files changed since the recorded run"
    unchanged = [{"name": str(d["name"]), "version": str(d["version"])} for d in data["unchanged"]]
    return Answer(unchanged=unchanged, warnings=[str(w) for w in data["warnings"]]), ""
