# Capture the DFlash-capable sglang tree of a working venv: its WHOLE installed
# sglang/ package (a DFlash-capable sglang is a whole tree, not the files that
# differ from PyPI's), written as a reproducible tar of sglang/... plus a
# pyproject.toml declaring what the tree needs:
#   - the tree's version (sglang/_version.py, else sglang/version.py);
#   - its requirements: the venv's sglang METADATA Requires-Dist when that
#     dist-info describes this tree (same version), else the kernel stack the
#     tree runs with there (sglang-kernel, sgl-kernel, flashinfer-python,
#     flashinfer-cubin, torch, transformers at their installed versions, local
#     tags dropped; 0.5.11's models need transformers 5.6.0, 0.5.9 pins 4.57.1):
#     a tree copied over another release leaves a dist-info that no longer
#     describes the code.
# usage: python3 capture_dflash_sources.py VENV OUT_TAR  -> JSON on stdout
import email.parser
import glob
import io
import json
import os
import re
import sys
import tarfile

STACK = ("sglang-kernel", "sgl-kernel", "flashinfer-python", "flashinfer-cubin", "torch", "transformers")


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_metadata(dist_info):
    """Name, Version and Requires-Dist of a METADATA file, read as the email headers it is (core metadata
    spec): a field may continue over indented lines, some of them whitespace only (real sglang 0.5.11's
    License), and only a truly empty line ends the headers."""
    try:
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8") as fh:
            headers = email.parser.HeaderParser().parse(fh)
    except OSError:
        return None
    return {"Name": headers.get("Name"), "Version": headers.get("Version"),
            "Requires-Dist": [str(r).strip() for r in headers.get_all("Requires-Dist", [])]}


def installed(site):
    out = {}
    for dist_info in glob.glob(os.path.join(site, "*.dist-info")):
        meta = read_metadata(dist_info)
        if meta and meta["Name"]:
            out[norm(meta["Name"])] = meta
    return out


VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)


def tree_version(pkg):
    """The tree's version: a top-level literal in sglang/_version.py (what a built sglang, 0.5.11 on,
    writes; its version.py imports it and only holds an indented fallback), else in sglang/version.py."""
    for name in ("_version.py", "version.py"):
        try:
            with open(os.path.join(pkg, name), encoding="utf-8") as fh:
                match = VERSION_RE.search(fh.read())
        except OSError:
            continue
        if match:
            return match.group(1)
    raise SystemExit("%s declares no __version__ (_version.py, version.py)" % pkg)


def toml_list(items):
    return "[\n" + "".join("  %s,\n" % json.dumps(i) for i in items) + "]"


def main():
    venv, out = sys.argv[1], sys.argv[2]
    sites = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if not sites:
        raise SystemExit("%s has no lib/python3*/site-packages" % venv)
    site = sites[0]
    pkg = os.path.join(site, "sglang")
    if not os.path.isdir(pkg):
        raise SystemExit("%s has no sglang package" % site)
    dists = installed(site)
    version = tree_version(pkg)
    sglang = dists.get("sglang")
    if sglang and sglang["Version"] == version:
        requires, declared = sglang["Requires-Dist"], "the sglang %s METADATA of the reference venv" % version
    else:
        requires = ["%s==%s" % (name, dists[name]["Version"].split("+", 1)[0]) for name in STACK if name in dists]
        declared = "the kernel stack the tree runs with in the reference venv (its sglang dist-info says %s)" % (
            sglang["Version"] if sglang else "nothing")
    pyproject = (
        "# Written by capture_dflash_sources.py: the DFlash-capable sglang tree captured from %s.\n"
        "# Requirements: %s.\n"
        "[project]\nname = \"sglang\"\nversion = %s\ndependencies = %s\n"
    ) % (venv, declared, json.dumps(version), toml_list(requires))
    files = []
    for root, dirs, names in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith(".pyc"):
                files.append(os.path.relpath(os.path.join(root, name), site))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        entries = [("pyproject.toml", pyproject.encode("utf-8"))]
        for rel in files:
            with open(os.path.join(site, rel), "rb") as fh:
                entries.append((rel, fh.read()))
        for rel, data in entries:
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    with open(out + ".tmp", "wb") as fh:
        fh.write(buf.getvalue())
    os.rename(out + ".tmp", out)
    print(json.dumps({"files": len(files), "version": version, "requires": requires, "tar": out}))


if __name__ == "__main__":
    main()
