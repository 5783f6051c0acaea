# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host's releases were built from, and which ones the instances run (``releases_info``).

One read instead of a find and a read per release: the lock check needs every built release's
lock, the change report the releases the instances run now, and the build whether this one is
built. Under ``<base>``:

- ``built``: every ``releases/<id>/.dflash-release/built.json`` that is a regular file (a link
  is not a record), sorted, as ``{"path", "text"}``; ``text`` is None when it cannot be read;
- ``running``: what each ``instances/<name>/current`` points at, each once (a relative target is
  taken from the link's directory);
- ``running_built``: those releases' built.json records, the readable ones that are JSON objects;
- ``release_built``: the release directory's built.json exists (a link counts).

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
MAX_BUILT_BYTES = 64 << 20  # a bound on the read, not an expected size: a record is a lock and a few fields


@dataclass(frozen=True)
class Releases:
    built: tuple  # ({"path": str, "text": str or None}, ...)
    running: tuple  # (str, ...)
    running_built: tuple  # (dict, ...)
    release_built: bool

    def as_dict(self):
        return {"built": [dict(b) for b in self.built], "running": list(self.running),
                "running_built": [dict(r) for r in self.running_built], "release_built": self.release_built}


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


def read_record(path):
    """A built.json as a dict, or None when it cannot be read or is not a JSON object."""
    text = read_text(path)
    try:
        record = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_releases(base_dir, release_dir):
    """The releases under ``base_dir`` and whether ``release_dir`` is built (see the docstring above)."""
    running = running_releases(base_dir)
    records = [read_record(os.path.join(r, BUILT)) for r in running]
    return Releases(
        built=tuple(built_records(base_dir)),
        running=tuple(running),
        running_built=tuple(r for r in records if r is not None),
        release_built=os.path.lexists(os.path.join(release_dir, BUILT)),
    )
