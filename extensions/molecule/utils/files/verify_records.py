"""Check every installed file of a venv against its distribution's RECORD (sha256 and size).

    verify_records.py VENV     -> "ok N distributions, M files" (exit 0) or the mismatches (exit 1)

Files the DFlash overlay wrote (listed with their sha256 in the release's
.dflash-release/dflash-overlay.sha256) are checked against that manifest instead.

Standard library only: it runs on the lab hosts' system Python.
"""
import base64
import csv
import glob
import hashlib
import os
import sys


def main(venv: str) -> int:
    sites = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if len(sites) != 1:
        print(f"no single site-packages under {venv}: {sites}")
        return 1
    site = sites[0]
    overlaid = {}
    manifest = os.path.join(venv, ".dflash-release", "dflash-overlay.sha256")
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as fh:
            for line in fh:
                digest, sep, rel = line.rstrip("\n").partition("  ")
                overlaid[os.path.normpath(os.path.join(site, rel))] = digest
    for path, digest in overlaid.items():
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                print(f"{path}: differs from the overlay manifest")
                return 1
    bad, files, dists = [], 0, 0
    for record in sorted(glob.glob(os.path.join(site, "*.dist-info", "RECORD"))):
        dists += 1
        with open(record, newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                if len(row) < 3 or not row[1]:
                    continue  # RECORD itself, .pyc files: no hash recorded
                path = os.path.normpath(os.path.join(site, row[0]))
                if path in overlaid:
                    continue  # checked against the overlay manifest above
                algo, sep, want = row[1].partition("=")
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError as exc:
                    bad.append(f"{row[0]}: {exc.strerror}")
                    continue
                got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
                files += 1
                if got != want or (row[2] and int(row[2]) != len(data)):
                    bad.append(f"{row[0]}: content differs from {os.path.basename(os.path.dirname(record))}/RECORD")
    if bad:
        print("\n".join(bad))
        return 1
    print(f"ok {dists} distributions, {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
