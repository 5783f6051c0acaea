#!/usr/bin/env python3
"""Carry wheels in less space: their members unpacked and xz-compressed, rebuilt on the machine.

A wheel is a zip of deflated members; xz over the unpacked members of many wheels together is
about half the size (48 wheels: 48 MiB as wheels, 23 MiB as one .tar.xz), which is what lets the
real sglang stack travel in one call under the 64 MiB limit.

  python3 wheel_transport.py pack WHEEL... --out carry.tar.xz     # here
  python3 wheel_transport.py unpack carry.tar.xz... --out DIR      # on the machine

The archive holds one folder per wheel, named as the wheel file, with its members. `unpack`
rebuilds each wheel (deflate, dist-info last) and checks every member against the wheel's own
RECORD (sha256 and size) before it writes the wheel: the rebuilt wheel's members are the
published wheel's, byte for byte. Standard library only.
"""
from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import lzma
import os
import sys
import tarfile
import zipfile


def pack(wheels: list[str], out: str) -> None:
    with lzma.open(out, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for path in wheels:
            name = os.path.basename(path)
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if info.is_dir():
                        continue
                    data = z.read(info)
                    ti = tarfile.TarInfo(f"{name}/{info.filename}")
                    ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
                    tar.addfile(ti, io.BytesIO(data))
            print(f"packed {name}", flush=True)


def _record(members: dict[str, bytes]) -> tuple[str, dict[str, tuple[str, str]]]:
    rec = [n for n in members if n.endswith(".dist-info/RECORD")]
    if len(rec) != 1:
        raise SystemExit(f"expected one RECORD, found {rec}")
    rows = {}
    for row in csv.reader(io.StringIO(members[rec[0]].decode("utf-8"))):
        if row and row[0]:
            rows[row[0]] = (row[1] if len(row) > 1 else "", row[2] if len(row) > 2 else "")
    return rec[0], rows


def _check(wheel: str, members: dict[str, bytes]) -> None:
    rec, rows = _record(members)
    for name, data in members.items():
        if name == rec:
            continue
        if name not in rows:
            raise SystemExit(f"{wheel}: {name} is not in RECORD")
        digest, size = rows[name]
        algo, _, want = digest.partition("=")
        got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
        if got != want or (size and int(size) != len(data)):
            raise SystemExit(f"{wheel}: {name} does not match RECORD")
    missing = [n for n in rows if n not in members and n != rec]
    if missing:
        raise SystemExit(f"{wheel}: RECORD names {len(missing)} members not carried, e.g. {missing[:3]}")


def unpack(archives: list[str], out: str) -> None:
    os.makedirs(out, exist_ok=True)
    wheels: dict[str, dict[str, bytes]] = {}
    for archive in archives:
        with tarfile.open(archive, "r:xz") as tar:
            for ti in tar:
                if not ti.isfile():
                    continue
                wheel, _, member = ti.name.lstrip("./").partition("/")
                wheels.setdefault(wheel, {})[member] = tar.extractfile(ti).read()
    for wheel, members in sorted(wheels.items()):
        _check(wheel, members)
        order = sorted(members, key=lambda n: (".dist-info/" in n, n.endswith("/RECORD"), n))
        tmp = os.path.join(out, f".{wheel}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            for name in order:
                zi = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
                zi.external_attr = 0o644 << 16
                z.writestr(zi, members[name], zipfile.ZIP_DEFLATED)
        os.replace(tmp, os.path.join(out, wheel))
        print(f"rebuilt {wheel}: {len(members)} members match its RECORD", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("wheels", nargs="+")
    p.add_argument("--out", required=True)
    u = sub.add_parser("unpack")
    u.add_argument("archives", nargs="+")
    u.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "pack":
        pack(a.wheels, a.out)
    else:
        unpack(a.archives, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
