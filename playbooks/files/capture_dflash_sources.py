# Capture the DFlash sources from a working venv: the files of the installed
# sglang package that its own RECORD does not vouch for (added, or changed
# since PyPI's wheel), written as a reproducible tar of sglang/... .
# usage: python3 capture_dflash_sources.py VENV OUT_TAR  -> JSON on stdout
import base64
import csv
import glob
import hashlib
import io
import json
import os
import sys
import tarfile


def record_hashes(site):
    found = glob.glob(os.path.join(site, "sglang-*.dist-info", "RECORD"))
    if not found:
        raise SystemExit("no sglang-*.dist-info/RECORD in %s: sglang is not installed there" % site)
    hashes = {}
    with open(found[0], newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh):
            if len(row) >= 2 and row[1].startswith("sha256="):
                hashes[row[0]] = row[1][len("sha256="):]
    return hashes


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")


def main():
    venv, out = sys.argv[1], sys.argv[2]
    sites = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if not sites:
        raise SystemExit("%s has no lib/python3*/site-packages" % venv)
    site = sites[0]
    hashes = record_hashes(site)
    overlay = []
    for root, dirs, files in os.walk(os.path.join(site, "sglang")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, site)
            if hashes.get(rel) != digest(path):
                overlay.append(rel)
    if not overlay:
        raise SystemExit("sglang in %s matches its RECORD: no DFlash sources were overlaid there" % venv)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for rel in overlay:
            with open(os.path.join(site, rel), "rb") as fh:
                data = fh.read()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    with open(out + ".tmp", "wb") as fh:
        fh.write(buf.getvalue())
    os.rename(out + ".tmp", out)
    print(json.dumps({"files": overlay, "tar": out}))


if __name__ == "__main__":
    main()
