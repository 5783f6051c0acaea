#!/usr/bin/env python3
"""Rebuild a wheel keeping only named members, with a regenerated RECORD.

Real kernel wheels are far larger than what can travel to a GPU host
(sglang-kernel 0.4.2 is 326 MB, sgl-kernel 0.3.21 536 MB), while what a test
needs is their Python files and one or two of their libraries. This keeps:

  * every file of the wheel's ``*.dist-info`` directory except RECORD,
  * with ``--keep-python``, every ``*.py`` member,
  * every member matching one of the ``--keep`` patterns (fnmatch on the
    member's path inside the wheel, e.g. ``sgl_kernel/sm90/common_ops.abi3.so``),

and drops everything else. Kept members are copied byte for byte (same name,
date, permissions, compression). RECORD is regenerated (sha256, urlsafe
base64 without padding, and sizes, as the wheel spec says), so installers and
RECORD-driven tools see a consistent distribution. The wheel keeps its name,
version and tags: it installs as the real distribution, minus the removed
files.

What was removed is written, exactly (path and size of each member), to

  * ``<name>.dist-info/REDUCED.json`` inside the new wheel (listed in RECORD),
  * ``<wheel filename>.reduced.json`` beside the new wheel,

together with the source wheel's sha256, so nobody mistakes the result for
the published wheel.

Usage:
  python3 tests/gpu/reduce_wheel.py SRC.whl --out DIR --keep-python \
      --keep 'sgl_kernel/sm90/common_ops.abi3.so'
"""
from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dist_info_dir(names: list[str]) -> str:
    dirs = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(dirs) != 1:
        raise SystemExit(f"expected exactly one .dist-info directory, found {sorted(dirs)}")
    return dirs.pop()


def reduce_wheel(src: Path, out_dir: Path, keep: list[str], keep_python: bool) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    dst = out_dir / src.name
    if dst.resolve() == src.resolve():
        raise SystemExit("--out must not be the source wheel's directory")
    kept, removed, unmatched = [], [], set(keep)
    with zipfile.ZipFile(src) as zin:
        infos = [i for i in zin.infolist() if not i.is_dir()]
        di = dist_info_dir([i.filename for i in infos])
        record_name = f"{di}/RECORD"
        note_name = f"{di}/REDUCED.json"
        rows: list[list[str]] = []
        with zipfile.ZipFile(dst, "w") as zout:
            for info in infos:
                name = info.filename
                if name == record_name:
                    continue
                hits = [p for p in keep if fnmatch.fnmatchcase(name, p)]
                unmatched.difference_update(hits)
                if name.startswith(di + "/") or hits or (keep_python and name.endswith(".py")):
                    data = zin.read(info)
                    zout.writestr(info, data, compress_type=info.compress_type)
                    rows.append([name, record_hash(data), str(len(data))])
                    kept.append({"path": name, "size": info.file_size})
                else:
                    removed.append({"path": name, "size": info.file_size})
            if unmatched:
                raise SystemExit(f"--keep pattern(s) matched nothing: {sorted(unmatched)}")
            note = {
                "source_wheel": src.name,
                "source_sha256": file_sha256(src),
                "reduced_by": "tests/gpu/reduce_wheel.py (dflash.deploy)",
                "kept_patterns": (["*.py"] if keep_python else []) + list(keep) + [f"{di}/*"],
                "kept_count": len(kept),
                "kept_bytes": sum(k["size"] for k in kept),
                "removed_count": len(removed),
                "removed_bytes": sum(r["size"] for r in removed),
                "removed": removed,
            }
            note_bytes = (json.dumps(note, indent=1) + "\n").encode()
            zout.writestr(zipfile.ZipInfo(note_name, date_time=(2026, 11, 30, 0, 0, 0)), note_bytes,
                          compress_type=zipfile.ZIP_DEFLATED)
            rows.append([note_name, record_hash(note_bytes), str(len(note_bytes))])
            rows.append([record_name, "", ""])
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            rec_info = zipfile.ZipInfo(record_name, date_time=(2026, 11, 30, 0, 0, 0))
            rec_info.external_attr = 0o644 << 16
            zout.writestr(rec_info, buf.getvalue().encode(), compress_type=zipfile.ZIP_DEFLATED)
    note["reduced_wheel"] = str(dst)
    note["reduced_wheel_size"] = dst.stat().st_size
    note["reduced_sha256"] = file_sha256(dst)
    note["source_wheel_size"] = src.stat().st_size
    note["kept"] = kept
    (out_dir / (src.name + ".reduced.json")).write_text(json.dumps(note, indent=1) + "\n")
    return note


def check_record(path: Path) -> None:
    """Re-read the new wheel and verify every RECORD line against the member."""
    with zipfile.ZipFile(path) as zf:
        di = dist_info_dir(zf.namelist())
        rows = list(csv.reader(io.StringIO(zf.read(f"{di}/RECORD").decode())))
        listed = {r[0] for r in rows}
        members = {n for n in zf.namelist() if not n.endswith("/")}
        if listed != members:
            raise SystemExit(f"RECORD and members differ: {sorted(listed ^ members)[:10]}")
        for name, digest, size in rows:
            if name.endswith("/RECORD"):
                continue
            data = zf.read(name)
            if record_hash(data) != digest or int(size) != len(data):
                raise SystemExit(f"RECORD mismatch for {name}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keep", action="append", default=[], help="fnmatch pattern of members to keep")
    ap.add_argument("--keep-python", action="store_true", help="keep every *.py member")
    opts = ap.parse_args(argv)
    note = reduce_wheel(opts.wheel, opts.out, opts.keep, opts.keep_python)
    check_record(Path(note["reduced_wheel"]))
    print(f"{opts.wheel.name}: {note['source_wheel_size'] / 2**20:.1f} MiB -> "
          f"{note['reduced_wheel_size'] / 2**20:.1f} MiB; kept {note['kept_count']} members "
          f"({note['kept_bytes'] / 2**20:.1f} MiB unpacked), removed {note['removed_count']} "
          f"({note['removed_bytes'] / 2**20:.1f} MiB unpacked); note: {note['reduced_wheel']}.reduced.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
