#!/usr/bin/env python3
"""make galaxy-import: the built tarball through galaxy-importer, as Galaxy, Galaxy NG and Automation Hub import it.

The importer runs in a venv of its own (build/galaxy-importer/venv, from requirements/galaxy-importer.txt:
its requirements would move the toolchain's pins), made with uv when missing or when its pins changed. The
tarball is `make collection`'s (tools/collection_check.build). The importer reads MANIFEST.json, renders
every plugin's documentation with its own ansible-doc, finds the content and checks the changelog; the run
fails on a non-zero exit, on any WARNING or ERROR line of its log, or on a result without the documentation
of every module, role and filter.

Its ansible-lint pass is left to `make lint` (the checkout) and `make collection` (the installed copy): run
on the importer's unpacked copy, which it places under a placeholder namespace, ansible-lint cannot find
the playbooks the AWX example imports by their collection names (dflash.deploy.deploy_dflash and three
more) and prints one line for each; on Galaxy those four lines are warnings, and the import passes.

galaxy.yml names no `repository` yet (the owners have not named the collection's home): Galaxy refuses
the tarball as built ("'repository' is required"). Until it does, this checks a copy of the tarball whose
MANIFEST.json names REPOSITORY_STANDIN, and says so on every run: the one field that copy adds is
the one the importer cannot prove.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collection_check  # noqa: E402  (the tarball as make collection builds it)

REPO = Path(__file__).resolve().parent.parent
PINS = REPO / "requirements" / "galaxy-importer.txt"
VENV = REPO / "build" / "galaxy-importer" / "venv"
UV = REPO / ".tools" / "uv" / "bin" / "uv"
# A reserved name (RFC 2606): never a real repository, and plainly not one.
REPOSITORY_STANDIN = "https://repository-not-named-yet.invalid/dflash/deploy"


class ImportError_(Exception):
    """The import failed; the message says where."""


def importer_venv() -> Path:
    """build/galaxy-importer/venv, made from PINS when missing or when the pins or interpreter changed."""
    python = subprocess.run(["bash", str(REPO / "tools" / "find_python.sh"), "3.12"], capture_output=True,
                            text=True, check=False).stdout.strip()
    if not python:
        raise ImportError_("no Python 3.12 interpreter for the importer's venv (tools/find_python.sh 3.12)")
    want = f"{hashlib.sha256(PINS.read_bytes()).hexdigest()} {python}"
    stamp = VENV / ".pins"
    if (VENV / "bin" / "python").exists() and stamp.exists() and stamp.read_text() == want:
        return VENV
    print(f"galaxy-import: making {VENV.relative_to(REPO)} from {PINS.relative_to(REPO)}", flush=True)
    for cmd in ([str(UV), "venv", "--quiet", "--clear", "--python", python, str(VENV)],
                [str(UV), "pip", "sync", "--quiet", "--compile-bytecode", "--python", str(VENV / "bin" / "python"),
                 str(PINS)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImportError_(f"{' '.join(cmd)} failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    stamp.write_text(want)
    return VENV


def with_repository(tarball: Path, url: str, out: Path) -> Path:
    """A copy of ``tarball`` whose MANIFEST.json names ``url`` as its repository (members otherwise as they are;
    MANIFEST.json is not among the files FILES.json checksums)."""
    copy = out / tarball.name
    with tarfile.open(tarball) as src, tarfile.open(copy, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name == "MANIFEST.json":
                manifest = json.loads(data)
                manifest["collection_info"]["repository"] = url
                data = json.dumps(manifest, indent=4).encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return copy


def shipped(tarball: Path, work: Path) -> dict[str, set[str]]:
    """The modules, roles and filters the tarball ships, by the importer's content type (filters as
    ``make collection`` names them: the keys of each plugins/filter file's FilterModule.filters())."""
    names = collection_check.members(tarball)
    with tarfile.open(tarball) as tar:
        tar.extractall(work, members=[m for m in tar.getmembers() if m.name.startswith("plugins/filter/")],
                       filter="data")
    return {"module": {Path(n).stem for n in names if n.startswith("plugins/modules/") and n.endswith(".py")
                       and Path(n).stem != "__init__"},
            "role": {n.split("/")[1] for n in names
                     if n.startswith("roles/") and n.endswith("/meta/argument_specs.yml")},
            "filter": set(collection_check.filter_names(work))}


def check_result(result: dict, want: dict[str, set[str]]) -> list[str]:
    """What the importer's result lacks: a module, role or filter (each a name ``want`` holds) it did not find,
    or found without a description."""
    problems = []
    found: dict[str, set[str]] = {}
    for item in result.get("contents", []):
        found.setdefault(item.get("content_type"), set()).add(item.get("name"))
        # a filter file holding several filters is listed under its own name too, with no description of its own
        named = item.get("name") in want.get(item.get("content_type"), ())
        if named and not str(item.get("description") or "").strip():
            problems.append(f"{item['content_type']} {item['name']}: the importer found no description")
    for kind, names in sorted(want.items()):
        missing = sorted(names - found.get(kind, set()))
        if missing:
            problems.append(f"{kind}s the importer did not find: {', '.join(missing)}")
    return problems


def main() -> int:
    try:
        venv = importer_venv()
        with tempfile.TemporaryDirectory(prefix="dflash-galaxy-import.") as tmp:
            work = Path(tmp)
            tarball = collection_check.build(work / "built")
            galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
            if not galaxy.get("repository"):
                (work / "standin").mkdir()
                tarball = with_repository(tarball, REPOSITORY_STANDIN, work / "standin")
                print("galaxy-import: galaxy.yml names no repository: Galaxy refuses the tarball as built "
                      f"('repository' is required); checking a copy whose MANIFEST.json names {REPOSITORY_STANDIN}",
                      flush=True)
            env = dict(os.environ, PATH=f"{venv / 'bin'}:/usr/bin:/bin", HOME=str(work),
                       GALAXY_IMPORTER_RUN_ANSIBLE_LINT="false", ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"))
            env.pop("ANSIBLE_CONFIG", None)
            env.pop("ANSIBLE_COLLECTIONS_PATH", None)
            proc = subprocess.run([str(venv / "bin" / "python"), "-m", "galaxy_importer.main", str(tarball)],
                                  cwd=work, env=env, capture_output=True, text=True, check=False)
            log = proc.stdout + proc.stderr
            noisy = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))
                     or "Traceback" in line]
            if proc.returncode != 0 or noisy or "Importer processing completed successfully" not in log:
                raise ImportError_(f"galaxy-importer rc {proc.returncode}:\n  " + "\n  ".join(
                    noisy or log.strip().splitlines()[-15:]))
            result = json.loads((work / "importer_result.json").read_text())
            problems = check_result(result, shipped(tarball, work / "shipped"))
            if problems:
                raise ImportError_("the importer's result:\n  " + "\n  ".join(problems))
    except (ImportError_, collection_check.CollectionError) as exc:
        sys.exit(f"galaxy-import: {exc}")
    kinds: dict[str, int] = {}
    for item in result["contents"]:
        kinds[item["content_type"]] = kinds.get(item["content_type"], 0) + 1
    meta = result["metadata"]
    print(f"galaxy-import: galaxy-importer passed {meta['namespace']}.{meta['name']} {meta['version']} with no "
          f"warning; its contents: {', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}; every module, role "
          f"and filter found with its description; requires_ansible {result.get('requires_ansible')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
