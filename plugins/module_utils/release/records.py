# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host's releases were built from, and which ones the instances run (``releases_info``).

One read instead of a find and a read per release: the lock check needs every built release's
lock, the change report the releases the instances run now, the build whether this one is
built, the prune every release and the ones an instance still uses, and the audit each
instance's ``current``. Under ``<base>``:

- ``built``: every ``releases/<id>/.dflash-release/built.json`` that is a regular file (a link
  is not a record), sorted, as ``{"path", "text"}``; ``text`` is None when it cannot be read;
- ``running``: what each ``instances/<name>/current`` points at, each once (a relative target is
  taken from the link's directory);
- ``running_built``: those releases' built.json records, the readable ones that are JSON objects;
- ``release_built``: the release directory's built.json exists (a link counts);
- ``releases``: every real directory in ``releases/`` (not a link, not a hidden name), sorted, as
  ``{"path", "mtime"}``: what the prune chooses from, as ``find`` listed it before;
- ``instances``: each real directory in ``instances/``, sorted, with its ``current`` and
  ``previous`` links (``{"path", "target", "resolved"}``: the link, its text, its realpath), or
  None where there is no link;
- ``in_use``: the release every link in an instance directory resolves to (``readlink -f``: a
  relative ``previous`` protects the release it names as surely as an absolute one; any link,
  whatever the instance's state), each once, sorted; one that resolves into ``releases/`` is
  spelled as ``releases`` spells it (a ``<base>`` that is a symlink resolves elsewhere).

Files are opened as regular files only (``fileio``): a FIFO or a device in a record's place is
no record, never a hang. Nothing is changed. Standard library only.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.release import contract

BUILT = os.path.join(contract.META_DIR, contract.BUILT)
LINKS = ("current", "previous")
MAX_BUILT_BYTES = 64 << 20  # a bound on the read, not an expected size: a record is a lock and a few fields


@dataclass(frozen=True)
class Releases:
    built: tuple  # ({"path": str, "text": str or None}, ...)
    running: tuple  # (str, ...)
    running_built: tuple  # (dict, ...)
    release_built: bool
    releases: tuple = ()  # ({"path": str, "mtime": float}, ...)
    instances: tuple = ()  # ({"name", "path", "current": link or None, "previous": link or None}, ...)
    in_use: tuple = ()  # (str, ...)

    def as_dict(self):
        return {"built": [dict(b) for b in self.built], "running": list(self.running),
                "running_built": [dict(r) for r in self.running_built], "release_built": self.release_built,
                "releases": [dict(r) for r in self.releases],
                "instances": [{k: (dict(v) if isinstance(v, dict) else v) for k, v in i.items()}
                              for i in self.instances],
                "in_use": list(self.in_use)}


def read_text(path):
    """The file's UTF-8 text, or None when it cannot be read (an unreadable record counts as no record)."""
    try:
        return read_regular(path, MAX_BUILT_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def built_records(base_dir):
    """Each release's built.json: regular files only, never followed through a link."""
    releases = os.path.join(base_dir, "releases")
    try:
        names = sorted(os.listdir(releases))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(releases, name, BUILT)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        out.append({"path": path, "text": read_text(path)})
    return out


def running_releases(base_dir):
    """The targets of the instances' current links (a relative target is taken from the link's directory)."""
    instances = os.path.join(base_dir, "instances")
    try:
        names = sorted(os.listdir(instances))
    except OSError:
        return []
    out = []
    for name in names:
        link = os.path.join(instances, name, "current")
        try:
            target = os.readlink(link)
        except OSError:  # no link there, or not a link
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(link), target))
        if target not in out:
            out.append(target)
    return out


def _real_dirs(parent):
    """The real directories in ``parent`` (lstat: a link to a directory is not one), sorted by name."""
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out.append((name, path, st))
    return out


def release_dirs(base_dir):
    """Every release directory: real directories only, hidden names left out (a staging leftover)."""
    return [{"path": path, "mtime": st.st_mtime}
            for name, path, st in _real_dirs(os.path.join(base_dir, "releases")) if not name.startswith(".")]


def _links(directory):
    """The symbolic links directly in ``directory``, sorted by name."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if os.path.islink(os.path.join(directory, n))]


def read_link(path):
    """A link as ``{"path", "target", "resolved"}``: its text and its realpath (what ``readlink -f``
    names); None when ``path`` is not a symbolic link."""
    try:
        target = os.readlink(path)
    except OSError:  # no link there, or not a link
        return None
    return {"path": path, "target": target, "resolved": os.path.realpath(path)}


def instance_links(base_dir):
    """Each instance directory with its current and previous links, and the releases every link in
    an instance directory resolves to (see the docstring above)."""
    base_dir = os.path.normpath(base_dir)
    releases = os.path.join(base_dir, "releases")
    real_releases = os.path.realpath(releases)
    instances, in_use = [], []
    for name, path, _st in _real_dirs(os.path.join(base_dir, "instances")):
        instances.append({"name": name, "path": path,
                          **{link: read_link(os.path.join(path, link)) for link in LINKS}})
        for link in _links(path):
            resolved = os.path.realpath(link)
            if os.path.dirname(resolved) == real_releases:
                resolved = os.path.join(releases, os.path.basename(resolved))
            if resolved not in in_use:
                in_use.append(resolved)
    return instances, sorted(in_use)


def read_record(path):
    """A built.json as a dict, or None when it cannot be read or is not a JSON object."""
    text = read_text(path)
    try:
        record = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_releases(base_dir, release_dir=None):
    """The releases under ``base_dir`` and whether ``release_dir`` is built (see the docstring above;
    no ``release_dir``: not built)."""
    running = running_releases(base_dir)
    records = [read_record(os.path.join(r, BUILT)) for r in running]
    instances, in_use = instance_links(base_dir)
    return Releases(
        built=tuple(built_records(base_dir)),
        running=tuple(running),
        running_built=tuple(r for r in records if r is not None),
        release_built=bool(release_dir) and os.path.lexists(os.path.join(release_dir, BUILT)),
        releases=tuple(release_dirs(base_dir)),
        instances=tuple(instances),
        in_use=tuple(in_use),
    )
