#!/usr/bin/env python3
"""The GPU kit in one command: the real wheels a GPU validation run needs, packed to travel.

    make gpu-kit                      # = python3 tools/gpu_kit.py
    python3 tools/gpu_kit.py --lock   # record the sha256 of each pinned wheel in tests/gpu/kit/*.txt

The GPU machine (docs/validation.md) has torch 2.11.0+cu130 and Python 3.12 but no network, and a
call to it carries at most 8 git-ignored paths of 64 MiB in all. What real SGLang 0.5.11 with
DFlash needs beyond the machine's own venv is listed, pinned ``name==version --hash=sha256:...``,
in ``tests/gpu/kit/<set>.txt``: one pip requirements file per *set*, a set being what one
``pip download`` call can take (sglang 0.5.11 and 0.5.9, or two huggingface-hub versions, cannot
share a call). Lines ``# kit: KEY VALUE`` in a set's file say where it goes:

  ``# kit: group G``       the carry folder ``.gpu-carry/kit/G/`` (``base`` always travels; another
                           group travels beside it for the steps that need it: ``surge``, ``overlay``)
  ``# kit: archive A``     the archive ``.gpu-carry/kit/G/A`` (tests/gpu/wheel_transport.py pack)
  ``# kit: reduce D ARGS`` distribution D's wheel goes through tests/gpu/reduce_wheel.py ARGS first

For each set, in the file's order: the wheels already in ``.gpu-carry/cache/<set>/`` whose sha256
is the pinned one are kept; only the others are downloaded (``pip download --no-deps
--only-binary=:all:``, CPython 3.12, manylinux x86_64, the index pip is configured with; pip checks
the pinned hashes itself); kernel wheels are reduced into ``.gpu-carry/cache/reduced/<set>/``; the
archive is packed unless the one there was packed from the same wheels (a stamp in
``.gpu-carry/cache/stamps/``). Then the carry is checked: ``base`` alone and ``base`` with each other
group must fit in one call (64 MiB, 8 paths), else the run fails naming the call and its size.
A second run with nothing changed downloads, reduces and packs nothing ("up to date").

The pip that runs is ``$PIP`` (a command line) when set, else ``python3 -m pip``.
On the machine: ``tests/gpu/device.sh`` (docs/validation.md).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "gpu"     # reduce_wheel.py, wheel_transport.py
KIT_LISTS = SCRIPTS / "kit"
CARRY = REPO / ".gpu-carry"
CACHE = CARRY / "cache"
KIT_OUT = CARRY / "kit"
CALL_LIMIT = 64 * 2**20      # bytes one call to the GPU machine may carry
CALL_PATHS = 8               # paths one call may carry
BASE_GROUP = "base"
PYTHON_VERSION = "3.12"      # the machine's /opt/torch/.venv and /usr/bin/python3: 3.12.3
# manylinux x86_64, newest first: sglang 0.5.11 is manylinux_2_34; pip takes --platform literally
PLATFORMS = tuple(f"manylinux_2_{m}_x86_64" for m in range(34, 16, -1)) + ("manylinux2014_x86_64",)

_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_DIRECTIVES = ("group", "archive", "reduce")


class KitError(Exception):
    """A problem with the kit's lists or files; its text is the one line printed."""


@dataclass
class Pin:
    name: str                      # canonical (PEP 503)
    version: str
    hashes: list[str] = field(default_factory=list)   # sha256 hex digests

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass
class KitSet:
    name: str
    group: str
    archive: str
    pins: list[Pin]
    reduce: dict[str, list[str]] = field(default_factory=dict)   # canonical name -> reduce_wheel.py args


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Requirement lines with backslash continuations joined, comments kept as their own lines."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, (buf + line).strip()))
        buf = ""
    if buf:
        out.append((start, buf.strip()))
    return out


def parse_set(name: str, text: str) -> KitSet:
    """One set's requirements file: exact pins only, each name once, the kit directives present."""
    directives: dict[str, str] = {}
    reduce: dict[str, list[str]] = {}
    pins: list[Pin] = []
    seen: set[str] = set()
    for no, line in _logical_lines(text):
        where = f"tests/gpu/kit/{name}.txt:{no}"
        if not line:
            continue
        if line.startswith("#"):
            body = line[1:].strip()
            if not body.startswith("kit:"):
                continue
            key, _, value = body[4:].strip().partition(" ")
            value = value.strip()
            if key not in _DIRECTIVES or not value:
                raise KitError(f"{where}: '# kit: {key} ...' is not one of {', '.join(_DIRECTIVES)} with a value")
            if key == "reduce":
                dist, *args = shlex.split(value)
                reduce[canonical(dist)] = args
            elif key in directives:
                raise KitError(f"{where}: '# kit: {key}' given twice")
            else:
                directives[key] = value
            continue
        req, *opts = line.split()
        spec, sep, version = req.partition("==")
        if not sep or not _NAME_RE.match(spec) or not version or any(c in version for c in "<>=!~*,;[ "):
            raise KitError(f"{where}: '{req}' is not an exact pin name==version")
        hashes = []
        for opt in opts:
            if not opt.startswith("--hash=sha256:") or not re.fullmatch(r"[0-9a-f]{64}", opt[14:]):
                raise KitError(f"{where}: '{opt}' is not --hash=sha256:<64 hex digits>")
            hashes.append(opt[14:])
        cname = canonical(spec)
        if cname in seen:
            raise KitError(f"{where}: {cname} is pinned twice in set {name}: one download call takes one "
                           "version of a name (put the other in a set of its own)")
        seen.add(cname)
        pins.append(Pin(cname, version, hashes))
    for key in ("group", "archive"):
        if key not in directives:
            raise KitError(f"tests/gpu/kit/{name}.txt: no '# kit: {key} ...' line")
    if not directives["archive"].endswith(".tar.xz") or "/" in directives["archive"]:
        raise KitError(f"tests/gpu/kit/{name}.txt: archive {directives['archive']!r} is not a file name *.tar.xz")
    if not pins:
        raise KitError(f"tests/gpu/kit/{name}.txt: no pinned wheel")
    missing = sorted(set(reduce) - seen)
    if missing:
        raise KitError(f"tests/gpu/kit/{name}.txt: '# kit: reduce' names {', '.join(missing)}, "
                       "which the set does not pin")
    return KitSet(name, directives["group"], directives["archive"], pins, reduce)


def plan_sets(sets: list[KitSet]) -> dict[str, list[KitSet]]:
    """Sets by group (base first); refuses two sets packing into one archive and a kit without base."""
    archives: dict[str, str] = {}
    for s in sets:
        if s.archive in archives:
            raise KitError(f"sets {archives[s.archive]} and {s.name} both pack into {s.archive}")
        archives[s.archive] = s.name
    groups: dict[str, list[KitSet]] = {}
    for s in sorted(sets, key=lambda s: (s.group != BASE_GROUP, s.group)):
        groups.setdefault(s.group, []).append(s)
    if sets and BASE_GROUP not in groups:
        raise KitError(f"no set is in group {BASE_GROUP}, the group every call carries")
    return groups


def load_sets(folder: Path | None = None) -> list[KitSet]:
    folder = folder or KIT_LISTS
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise KitError(f"no set lists in {folder}")
    return [parse_set(f.stem, f.read_text()) for f in files]


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    """(canonical name, version) of a wheel file name, None for anything else."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return None
    return canonical(parts[0]), parts[1]


def match_cache(pins: list[Pin], cached: dict[str, str]) -> tuple[dict[str, str], list[Pin]]:
    """Which pins the cache already holds: ({spec: file name}, [pins to download]).

    ``cached`` maps each wheel file in the set's cache to its sha256. A file counts for a pin when its
    name and version are the pin's and, if the pin records hashes, its sha256 is one of them.
    """
    have: dict[str, str] = {}
    missing: list[Pin] = []
    for pin in pins:
        hit = sorted(f for f, digest in cached.items()
                     if wheel_name_version(f) == (pin.name, pin.version) and (not pin.hashes or digest in pin.hashes))
        if hit:
            have[pin.spec] = hit[0]
        else:
            missing.append(pin)
    return have, missing


def carry_calls(sizes: dict[str, dict[str, int]]) -> list[tuple[str, list[str], int]]:
    """The calls the kit is made for: base alone, then base with each other group.

    ``sizes`` maps group -> {archive file name: bytes}. Returns (label, carry paths, bytes).
    """
    base = sizes.get(BASE_GROUP, {})
    calls = [(BASE_GROUP, [f".gpu-carry/kit/{BASE_GROUP}"], sum(base.values()))]
    for group in sorted(g for g in sizes if g != BASE_GROUP):
        calls.append((f"{BASE_GROUP}+{group}", [f".gpu-carry/kit/{BASE_GROUP}", f".gpu-carry/kit/{group}"],
                      sum(base.values()) + sum(sizes[group].values())))
    return calls


def check_calls(calls: list[tuple[str, list[str], int]], limit: int | None = None,
                max_paths: int | None = None) -> list[str]:
    """One line per call that would carry more than a call may (64 MiB, 8 paths unless given)."""
    limit = CALL_LIMIT if limit is None else limit
    max_paths = CALL_PATHS if max_paths is None else max_paths
    errors = []
    for label, paths, total in calls:
        if total > limit:
            errors.append(f"a call carrying {label} would carry {total / 2**20:.1f} MiB, over the "
                          f"{limit / 2**20:.0f} MiB one call may carry")
        if len(paths) > max_paths:
            errors.append(f"a call carrying {label} would carry {len(paths)} paths, over {max_paths}")
    return errors


def pack_stamp(inputs: list[tuple[str, str]]) -> dict:
    """What an archive is packed from: its wheels' names and sha256, in packing order."""
    return {"wheels": [{"file": f, "sha256": d} for f, d in inputs]}


def is_up_to_date(stamp: dict | None, inputs: list[tuple[str, str]], archive_sha256: str | None) -> bool:
    """An archive needs no packing when it is the one packed from exactly these wheels."""
    return (stamp is not None and archive_sha256 is not None and stamp.get("archive_sha256") == archive_sha256
            and stamp.get("wheels") == pack_stamp(inputs)["wheels"])


def with_hashes(text: str, digests: dict[str, str]) -> str:
    """A set's file with ``--hash=sha256:`` written after each pin found in ``digests`` (spec -> sha256)."""
    out = []
    for _, line in _logical_lines(text):
        if line and not line.startswith("#"):
            req = line.split()[0]
            spec = canonical(req.partition("==")[0]) + "==" + req.partition("==")[2]
            if spec in digests:
                line = f"{req} \\\n    --hash=sha256:{digests[spec]}"
        out.append(line)
    return "\n".join(out) + "\n"


# -- the side effects ----------------------------------------------------------------------------

def log(msg: str) -> None:
    print(f"gpu-kit: {msg}", flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Digests:
    """sha256 of files, remembered by (size, mtime) in .gpu-carry/cache/digests.json between runs."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.known = json.loads(path.read_text())
        except (OSError, ValueError):
            self.known = {}

    def __call__(self, f: Path) -> str:
        st = f.stat()
        key = str(f.relative_to(CARRY))
        got = self.known.get(key)
        if got and got["size"] == st.st_size and got["mtime_ns"] == st.st_mtime_ns:
            return got["sha256"]
        digest = sha256(f)
        self.known[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        return digest

    def save(self) -> None:
        text = json.dumps(self.known, indent=1, sort_keys=True) + "\n"
        if not self.path.is_file() or self.path.read_text() != text:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(text)


def pip_command() -> list[str]:
    return shlex.split(os.environ["PIP"]) if os.environ.get("PIP") else ["python3", "-m", "pip"]


def download(s: KitSet, pins: list[Pin], dest: Path, lock: bool) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    req = CACHE / f"{s.name}.download.txt"
    hashed = all(p.hashes for p in pins)   # pip checks hashes for every line or for none
    lines = [p.spec + ("".join(f" --hash=sha256:{h}" for h in p.hashes) if hashed else "") for p in pins]
    req.write_text("\n".join(lines) + "\n")
    cmd = pip_command() + ["download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
                           "--python-version", PYTHON_VERSION, "--implementation", "cp",
                           "-d", str(dest), "-r", str(req)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    if not lock and any(not p.hashes for p in pins):
        raise KitError(f"set {s.name}: {', '.join(p.spec for p in pins if not p.hashes)} has no recorded "
                       "sha256: run `python3 tools/gpu_kit.py --lock` once and commit the lists")
    log(f"{s.name}: downloading {len(pins)} wheel(s): {', '.join(p.spec for p in pins)}")
    started = time.monotonic()
    rc = subprocess.run(cmd).returncode
    if rc:
        raise KitError(f"set {s.name}: pip download failed (rc {rc}): {shlex.join(cmd)}")
    log(f"{s.name}: downloaded in {time.monotonic() - started:.1f} s")


def build(lock: bool = False) -> int:
    started = time.monotonic()
    sets = load_sets()
    groups = plan_sets(sets)
    digests = Digests(CACHE / "digests.json")
    work = {"downloaded": 0, "reduced": 0, "packed": 0}
    wanted: dict[Path, None] = {}
    try:
        for group, members in groups.items():
            for s in members:
                have = fetch(s, digests, work, lock)
                inputs: list[Path] = []
                for pin in s.pins:
                    wheel = CACHE / s.name / have[pin.spec]
                    if pin.name in s.reduce:
                        wheel = reduce(s, wheel, digests, work)
                    inputs.append(wheel)
                archive = KIT_OUT / group / s.archive
                wanted[archive] = None
                pack(s, inputs, archive, digests, work)
        for stale in sorted(p for p in KIT_OUT.glob("*/*") if p not in wanted):
            log(f"removing {stale.relative_to(REPO)}: no set packs it")
            stale.unlink()
        for folder in KIT_OUT.glob("*"):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    finally:
        digests.save()
    sizes = {g: {s.archive: (KIT_OUT / g / s.archive).stat().st_size for s in members}
             for g, members in groups.items()}
    for group, archives in sizes.items():
        for name, size in archives.items():
            log(f"  .gpu-carry/kit/{group}/{name}: {size / 2**20:.1f} MiB")
    calls = carry_calls(sizes)
    for label, paths, total in calls:
        log(f"call {label}: {total / 2**20:.1f} MiB of {CALL_LIMIT / 2**20:.0f}, carry {' '.join(paths)}")
    errors = check_calls(calls)
    for e in errors:
        log(f"FAILED: {e}")
    if errors:
        return 1
    if not any(work.values()):
        log(f"up to date: nothing downloaded, reduced or packed ({time.monotonic() - started:.1f} s)")
    else:
        log(f"done: {work['downloaded']} downloaded, {work['reduced']} reduced, {work['packed']} packed "
            f"({time.monotonic() - started:.1f} s)")
    return 0


def fetch(s: KitSet, digests: Digests, work: dict, lock: bool) -> dict[str, str]:
    """The set's pinned wheels in its cache folder, downloading only those missing: {spec: file name}."""
    src = CACHE / s.name
    src.mkdir(parents=True, exist_ok=True)

    def cached() -> dict[str, str]:
        return {f.name: digests(f) for f in src.glob("*.whl")}

    have, missing = match_cache(s.pins, cached())
    if missing:
        download(s, missing, src, lock)
        work["downloaded"] += len(missing)
        have, missing = match_cache(s.pins, cached())
        if missing:
            raise KitError(f"set {s.name}: after pip download, no wheel in {src.relative_to(REPO)} "
                           f"is {', '.join(p.spec for p in missing)} with the pinned sha256")
    else:
        log(f"{s.name}: {len(have)} wheel(s) in the cache, none to download")
    if lock:
        text = (KIT_LISTS / f"{s.name}.txt").read_text()
        new = with_hashes(text, {spec: digests(src / f) for spec, f in have.items()})
        if new != text:
            (KIT_LISTS / f"{s.name}.txt").write_text(new)
            log(f"{s.name}: recorded the sha256 of {len(have)} wheel(s) in tests/gpu/kit/{s.name}.txt")
    return have


def reduce(s: KitSet, wheel: Path, digests: Digests, work: dict) -> Path:
    out = CACHE / "reduced" / s.name
    reduced = out / wheel.name
    note = out / (wheel.name + ".reduced.json")
    try:
        info = json.loads(note.read_text())
        fresh = (info["source_sha256"] == digests(wheel) and reduced.is_file()
                 and info["reduced_sha256"] == digests(reduced))
    except (OSError, ValueError, KeyError):
        fresh = False
    if fresh:
        log(f"{s.name}: {wheel.name} already reduced ({reduced.stat().st_size / 2**20:.1f} MiB)")
        return reduced
    log(f"{s.name}: reducing {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB)")
    cmd = [sys.executable, str(SCRIPTS / "reduce_wheel.py"), str(wheel), "--out", str(out)]
    rc = subprocess.run(cmd + s.reduce[canonical(wheel_name_version(wheel.name)[0])]).returncode
    if rc:
        raise KitError(f"set {s.name}: reduce_wheel.py failed (rc {rc}) on {wheel.name}")
    work["reduced"] += 1
    return reduced


def pack(s: KitSet, inputs: list[Path], archive: Path, digests: Digests, work: dict) -> None:
    stamp_path = CACHE / "stamps" / f"{archive.parent.name}-{archive.name}.json"
    pairs = [(w.name, digests(w)) for w in inputs]
    try:
        stamp = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        stamp = None
    current = digests(archive) if archive.is_file() else None
    if is_up_to_date(stamp, pairs, current):
        log(f"{s.name}: {archive.relative_to(REPO)} is up to date ({len(inputs)} wheels)")
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.tmp")
    log(f"{s.name}: packing {len(inputs)} wheel(s) into {archive.relative_to(REPO)}")
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    import wheel_transport  # noqa: E402  (tests/gpu/wheel_transport.py, standard library only)
    wheel_transport.pack([str(w) for w in inputs], str(tmp))
    os.replace(tmp, archive)
    new = pack_stamp(pairs)
    new["archive_sha256"] = digests(archive)
    stamp_path.parent.mkdir(parents=True, exist_ok=True)
    stamp_path.write_text(json.dumps(new, indent=1) + "\n")
    work["packed"] += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lock", action="store_true",
                    help="download pins without a recorded sha256 and write their sha256 into tests/gpu/kit/*.txt")
    opts = ap.parse_args(argv)
    try:
        return build(lock=opts.lock)
    except KitError as e:
        log(f"FAILED: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
