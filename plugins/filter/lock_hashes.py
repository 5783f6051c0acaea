# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release lock's hashes: the same name and version must be the same bytes.

    {{ lock_text | dflash.deploy.lock_hashes }}
      ->  {"triton==3.6.0": ["fbaa4a30…"], ...}   (normalized name, sha256 hex, sorted)

    {{ lock_text | dflash.deploy.lock_hash_errors(known, wheel_files, take) }}
      ->  []  or one line per package, naming it (and its wheel, from a wheelhouse)

    {{ slurp_results | dflash.deploy.built_locks }}
      ->  [{"source": "release 5c1e…", "lock": "<lock text>"}, ...]   (known sources from built.json)

    {{ file_text | dflash.deploy.fleet_hashes(path) }}
      ->  {"triton==3.6.0": ["fbaa4a30…"], ...}   (the fleet's hashes file; {} when empty or absent)
    {{ file_text | dflash.deploy.fleet_hashes_merge(locks, path) }}
      ->  the file's new text: its hashes and those of each lock, merged (sorted, the same text when nothing is new)

The lock is `uv pip compile --generate-hashes` output: ``name==version \\`` lines followed by
``    --hash=sha256:<hex>`` lines; comments and ``# via`` lines are skipped. ``known`` lists
what this host (or the operator) already knows to be the bytes of a name and version:
``{"source": "release 5c1e…", "lock": "<lock text>"}`` (a built release's lock) or
``{"source": "sglang_venv_pinned_hashes", "hashes": {"name==version": ["<hex>", ...]}}`` (a table: the
operator's pins, the fleet's hashes file, or the collection's hashes of its default versions, which
sglang_venv and sglang_router ship in their vars/main.yml).

A lock is refused when a package in it has no sha256 (uv could not pin it, so `uv pip sync
--require-hashes` would stop later, after the venv was made), or when a name and version
that a known source records comes with a sha256 that no known source records for it:
other bytes under a known name and version (a wheel rebuilt or tampered with in the
wheelhouse, an index that serves another file) and also a file added beside the recorded
ones. With an index, `uv pip compile --generate-hashes` lists every file of the version and
`uv pip sync --require-hashes` installs the most specific one of them, so one wheel added
for the host's platform would be installed although the recorded hash is still listed.
"""
from __future__ import annotations

import json
import re

from ansible.errors import AnsibleFilterError

_NORM = re.compile(r"[-_.]+")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;\\]+)")
_HASH = re.compile(r"--hash[= ]sha256:([0-9A-Fa-f]{64})")


def _key(name: str, version: str) -> str:
    return f"{_NORM.sub('-', name).lower()}=={version.strip().lower()}"


def lock_hashes(text) -> dict:
    """``{"name==version": [sha256 hex, ...]}`` from uv's requirements output (hashes sorted, lower case)."""
    out: dict = {}
    current = None
    for raw in str(text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pin = _PIN.match(line) if not raw[:1].isspace() else None
        if pin:
            current = _key(pin.group(1), pin.group(2))
            out.setdefault(current, set())
        elif not raw[:1].isspace() and not line.startswith("--hash"):
            current = None  # an option line (--index-url ...) or a requirement that is not a pin
        if current is not None:
            out[current].update(h.lower() for h in _HASH.findall(line))
    return {k: sorted(v) for k, v in out.items()}


def _wheel_key(filename: str):
    """``name==version`` of a wheel (or sdist) file name, None for anything else."""
    base = str(filename).rsplit("/", 1)[-1]
    if base.endswith(".whl"):
        parts = base[:-4].split("-")
        return _key(parts[0], parts[1]) if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip"):
        if base.endswith(ext) and "-" in base:
            name, version = base[: -len(ext)].rsplit("-", 1)
            return _key(name, version)
    return None


def _short(hashes) -> str:
    return ", ".join(h[:16] + "…" for h in sorted(hashes)) or "none"


def built_locks(records) -> list:
    """The known sources of the releases built on the host: ``{"source": "release <id>", "lock": ...}``
    from each ``<release>/.dflash-release/built.json`` as ``dflash.deploy.releases_info`` reads them
    (``{"path": ..., "text": ...}``; an unread or unparsable one records nothing; a built.json without
    release_id is named by its release directory)."""
    out = []
    for record in records or []:
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            continue
        try:
            built = json.loads(record["text"])
        except ValueError:
            continue
        if not isinstance(built, dict):
            continue
        release = built.get("release_id") or str(record.get("path", "")).split("/")[-3:][0]
        out.append({"source": f"release {release}", "lock": (built.get("spec") or {}).get("lock") or ""})
    return out


def _recorded(known) -> dict:
    """``{"name==version": (set of sha256 hex, [sources])}`` from the known sources (locks or hash tables)."""
    recorded: dict = {}
    for entry in known or []:
        if not isinstance(entry, dict):
            continue
        source = str(entry.get("source") or "a known lock")
        table = entry.get("hashes") if isinstance(entry.get("hashes"), dict) else lock_hashes(entry.get("lock"))
        for key, hashes in table.items():
            if isinstance(hashes, str):
                hashes = [hashes]
            hashes = {str(h).lower().removeprefix("sha256:") for h in hashes or []}
            if not hashes:
                continue  # a lock from before hashes were kept records no bytes
            norm = _key(*str(key).split("==", 1)) if "==" in str(key) else str(key)
            have, sources = recorded.setdefault(norm, (set(), []))
            have.update(hashes)
            if source not in sources:
                sources.append(source)
    return recorded


def _unvouched(label: str, key: str, hashes: set, have: set, sources: list, take: str | None = None) -> str:
    """The refusal of the hashes of ``key`` that no known source vouches for (one line); ``take``: how the
    operator takes such bytes on purpose (sglang_venv's variables unless given)."""
    take = take or f"sglang_venv_accept_new_hashes=true or by adding it to sglang_venv_pinned_hashes['{key}']"
    return (f"{label} is sha256 {_short(hashes)}, but {' and '.join(sources)} recorded sha256 {_short(have)} for "
            f"the same name and version: sha256 {', '.join(sorted(hashes - have))} is in no record, and bytes no "
            "record vouches for are refused, beside recorded ones too (uv pip sync installs the most specific "
            f"file the lock lists): remove or replace the file, or take it on purpose with {take}")


def lock_hash_errors(text, known=None, wheel_files=None, take=None) -> list:
    """One line per package of the lock that has no sha256, or that lists a sha256 no known source
    records for the same name and version (see the module's docstring). ``take``: how the refusal tells the
    operator to take such bytes on purpose (default: sglang_venv's accept_new_hashes and pinned_hashes)."""
    new = lock_hashes(text)
    recorded = _recorded(known)
    wheels: dict = {}
    for name in wheel_files or []:
        key = _wheel_key(name)
        if key:
            wheels.setdefault(key, []).append(str(name).rsplit("/", 1)[-1])

    def label(key: str) -> str:
        files = sorted(wheels.get(key, []))
        return f"wheel {', '.join(files)} ({key})" if files else key

    errors = []
    for key in sorted(new):
        hashes = set(new[key])
        if not hashes:
            errors.append(f"{label(key)} has no sha256 in the lock (uv pip compile --generate-hashes gave none): "
                          "it cannot be installed with --require-hashes")
        elif key in recorded and not hashes <= recorded[key][0]:
            errors.append(_unvouched(label(key), key, hashes, *recorded[key], take=take))
    return errors


def fleet_hashes(text, path: str = "the fleet's hashes file") -> dict:
    """The table of the fleet's hashes file (``{"hashes": {"name==version": [hex, ...]}}``), {} for an empty
    one; a file that is not one is refused in one line (it may be removed: the next build writes it anew)."""
    if not str(text or "").strip():
        return {}
    try:
        table = json.loads(str(text)).get("hashes")
    except (ValueError, AttributeError):
        table = None
    if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
        raise AnsibleFilterError(f"{path} is not the fleet's hashes file ({{\"hashes\": {{\"name==version\": "
                                 "[sha256, ...]}}): put back the file a build wrote, or remove it to start anew")
    return {_key(*k.split("==", 1)) if "==" in k else k: sorted({str(h).lower() for h in v}) for k, v in table.items()}


def fleet_hashes_merge(text, locks=None, path: str = "the fleet's hashes file") -> str:
    """The fleet's hashes file with the hashes of each lock (uv's output) added, as text (sorted, one newline)."""
    table = {key: set(hashes) for key, hashes in fleet_hashes(text, path).items()}
    for lock in locks or []:
        for key, hashes in lock_hashes(lock).items():
            if hashes:
                table.setdefault(key, set()).update(hashes)
    out = {"hashes": {key: sorted(hashes) for key, hashes in table.items()}}
    return json.dumps(out, indent=1, sort_keys=True) + "\n"


class FilterModule:
    def filters(self):
        return {"lock_hashes": lock_hashes, "lock_hash_errors": lock_hash_errors, "built_locks": built_locks,
                "fleet_hashes": fleet_hashes, "fleet_hashes_merge": fleet_hashes_merge}
