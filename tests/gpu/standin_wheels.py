#!/usr/bin/env python3
"""Complete a carried wheelhouse so that `uv pip compile --no-index` resolves real sglang.

sglang 0.5.11 declares some 70 requirements whose full closure (torch and its CUDA wheels,
flashinfer-cubin, nvidia-cutlass-dsl, flash-attn-4, torchao, datasets, ...) is several GB: it
cannot travel to a machine with no network. The serving path of this validation imports only
part of it. This script walks the requirement closure from the root requirement over the REAL
wheels in the wheelhouse and, for every name no real wheel provides, writes a stand-in: a wheel
holding only a dist-info (name, a version the collected specifiers accept, no requirements, no
code). With --reference-venv, a name the reference venv holds at an accepted version gets that
version and is listed under "bundle": the reference venv's real distribution (with its own
requirement closure) is then put in its place by the CUDA bundle (stage_artifacts.yml packs the
listed distributions, cuda_overlay transplants them, replacing the stand-in). The other stand-ins
stay as they are ("absent": nothing of them is importable) and are listed so the record says so.

  python3 standin_wheels.py --wheelhouse DIR --root sglang==0.5.11 [--reference-venv VENV] \
      --out DIR --json FILE

Standard library and `packaging` only.
"""
from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import json
import os
import re
import sys
import zipfile
from email.parser import Parser
from importlib import metadata as md

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

# The host the release is built for: CPython 3.12 on Linux x86_64.
ENV = dict(default_environment(), python_version="3.12", python_full_version="3.12.3",
           sys_platform="linux", platform_system="Linux", platform_machine="x86_64", os_name="posix",
           implementation_name="cpython", platform_python_implementation="CPython")


def requires_of(meta_text: str) -> list[str]:
    return Parser().parsestr(meta_text).get_all("Requires-Dist") or []


def applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate(dict(ENV, extra=e)) for e in (extras or {""}))


def real_wheels(house: str) -> dict[str, list[tuple[str, list[str]]]]:
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for path in glob.glob(os.path.join(house, "*.whl")):
        name, version, _build, _tags = parse_wheel_filename(os.path.basename(path))
        with zipfile.ZipFile(path) as z:
            meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            text = z.read(meta[0]).decode("utf-8")
        if "Summary: stand-in" in text:
            continue
        out.setdefault(canonicalize_name(name), []).append((str(version), requires_of(text)))
    return out


def reference(venv: str | None) -> dict[str, tuple[str, list[str]]]:
    if not venv:
        return {}
    sp = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    return {canonicalize_name(d.metadata["Name"]): (d.version, d.requires or []) for d in md.distributions(path=sp)}


def closure(root: str, real: dict) -> tuple[dict[str, list[SpecifierSet]], set[str]]:
    specs: dict[str, list[SpecifierSet]] = {}
    seen: set[tuple[str, frozenset]] = set()
    todo = [(Requirement(root), set())]
    while todo:
        req, parent_extras = todo.pop()
        if not applies(req, parent_extras):
            continue
        name = canonicalize_name(req.name)
        specs.setdefault(name, []).append(req.specifier)
        key = (name, frozenset(req.extras))
        if key in seen or name not in real:
            continue
        seen.add(key)
        for _version, requires in real[name]:
            for line in requires:
                todo.append((Requirement(line), set(req.extras)))
    # a name no real wheel provides, or none at a version every requirement on it accepts
    return specs, {n for n in specs if not any(accepted(v, specs[n]) for v, _r in real.get(n, []))}


def accepted(version: str, sets: list[SpecifierSet]) -> bool:
    v = Version(version)
    return all(s.contains(v, prereleases=True) for s in sets)


def pick(sets: list[SpecifierSet]) -> str | None:
    cands = {"0.0.1", "1.0.0", "999.0.0"}
    for s in sets:
        for sp in s:
            v = sp.version.rstrip(".*")
            cands.add(v)
            if re.fullmatch(r"[0-9.]+", v):
                cands.add(v + ".1")
    for v in sorted(cands, key=Version):
        if accepted(v, sets):
            return v
    return None


def _member(name: str) -> zipfile.ZipInfo:
    """A member with a fixed time: the same stand-in is the same bytes in every run, as the release's
    recorded hashes require (sglang_venv refuses other bytes under a recorded name and version)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def write_standin(out: str, name: str, version: str, why: str) -> str:
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             f"Summary: stand-in for the GPU validation ({why}); holds no code\n"),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests/gpu/standin_wheels.py\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    rec = []
    path = os.path.join(out, f"{dist}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rec.append(f"{n},sha256={digest},{len(data)}")
            z.writestr(_member(n), data)
        z.writestr(_member(f"{info}/RECORD"), "\n".join(rec + [f"{info}/RECORD,,"]) + "\n")
    return path


def bundle_closure(names: list[str], ref: dict, real: dict) -> list[str]:
    """names and what they require in the reference venv, less what the wheelhouse holds for real."""
    seen: set[str] = set()
    todo = [(n, "") for n in names]
    done: set[tuple[str, str]] = set()
    while todo:
        name, extra = todo.pop()
        name = canonicalize_name(name)
        if (name, extra) in done or name not in ref or name in real:
            continue
        done.add((name, extra))
        seen.add(name)
        for line in ref[name][1]:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(dict(ENV, extra=extra)):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return sorted(seen)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheelhouse", required=True)
    ap.add_argument("--root", required=True, action="append", help="a requirement to resolve (repeatable)")
    ap.add_argument("--reference-venv")
    ap.add_argument("--bundle-also", action="append", default=["torch"],
                    help="reference distributions bundled in any case (default: torch)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    real = real_wheels(a.wheelhouse)
    ref = reference(a.reference_venv)
    specs: dict[str, list[SpecifierSet]] = {}
    missing: set[str] = set()
    for root in a.root:
        s, m = closure(root, real)
        for k, v in s.items():
            specs.setdefault(k, []).extend(v)
        missing |= m
    standins, bundled, errors = [], [], []
    for name in sorted(missing):
        sets = specs[name]
        if name in ref and accepted(ref[name][0], sets):
            version, kind = ref[name][0], "bundle"
            bundled.append(name)
        else:
            version, kind = pick(sets), "absent"
            if version is None:
                # the union of every real wheel's requirements can contradict itself where the
                # resolver only needs one of them (transformers 4.57.1 and 5.6.0 both carried):
                # with a real version present, the resolver decides
                if name not in real:
                    errors.append(f"{name}: no version accepts {' and '.join(map(str, sets))}")
                continue
        write_standin(a.out, name, version, "replaced by the reference venv's" if kind == "bundle"
                      else "not on the serving path, not carried")
        standins.append({"name": name, "version": version, "kind": kind,
                         "specifiers": sorted({str(s) for s in sets if str(s)})})
    result = {
        "roots": a.root,
        "real": {n: [v for v, _r in vs] for n, vs in sorted(real.items()) if n in specs},
        "real_unused": sorted(n for n in real if n not in specs),
        "standins": standins,
        "bundle": bundle_closure(sorted(set(bundled + a.bundle_also)), ref, real) if ref else [],
        "errors": errors,
    }
    with open(a.json, "w") as fh:
        json.dump(result, fh, indent=1)
    kinds = {k: [s["name"] for s in standins if s["kind"] == k] for k in ("bundle", "absent")}
    print(f"real wheels in the closure: {len(result['real'])}; stand-ins: {len(kinds['bundle'])} replaced by the "
          f"reference venv's, {len(kinds['absent'])} absent ({', '.join(kinds['absent'])}); bundle: "
          f"{len(result['bundle'])} distributions", flush=True)
    for e in errors:
        print("ERROR", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
