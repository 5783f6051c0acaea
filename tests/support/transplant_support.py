"""Helpers for the site_packages_transplant tests: synthetic venvs and dists, tree snapshots, RECORD checks."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UV = Path(os.environ.get("DFLASH_UV", REPO / ".tools" / "uv" / "bin" / "uv"))
COLLECTIONS = REPO / ".collections"
PYVER = "%d.%d" % sys.version_info[:2]
CPTAG = "cp%d%d" % sys.version_info[:2]


def make_venv(path: Path, python: str = sys.executable) -> Path:
    """A real (uv) venv at path."""
    subprocess.run([str(UV), "venv", "--quiet", "--python", python, str(path)], check=True)
    return path


def site_packages(venv: Path) -> Path:
    return next(Path(venv, "lib").glob("python3.*/site-packages"))


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def add_dist(venv: Path, name: str, version: str, files: dict, scripts: dict | None = None,
             tag: str = "py3-none-any", record_extra: list | None = None, write_record: bool = True,
             mtime: int | None = None) -> Path:
    """Install a synthetic distribution: files {relpath: bytes}, scripts {name: body} into bin/."""
    sp = site_packages(venv)
    norm = name.replace("-", "_")
    dist_info = "%s-%s.dist-info" % (norm, version)
    meta = {
        dist_info + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\n" % (name, version)).encode(),
        dist_info + "/WHEEL": ("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: %s\n" % tag).encode(),
        dist_info + "/INSTALLER": b"uv\n",
    }
    rows = []
    for rel, data in list(files.items()) + list(meta.items()):
        target = sp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if mtime is not None:
            os.utime(target, (mtime, mtime))
        rows.append((rel, record_hash(data), len(data)))
    for script, body in (scripts or {}).items():
        data = ("#!%s/bin/python\n%s" % (venv, body)).encode()
        target = Path(venv, "bin", script)
        target.write_bytes(data)
        target.chmod(0o755)
        rows.append(("../../../bin/" + script, record_hash(data), len(data)))
    rows.extend(record_extra or [])
    rows.append((dist_info + "/RECORD", "", ""))
    if write_record:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        (sp / dist_info / "RECORD").write_text(out.getvalue())
    return sp / dist_info


def snapshot(root: Path, skip_state: bool = False) -> dict:
    """path -> (kind, size, sha256, mode) of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if skip_state and ".dflash-transplant" in dirnames:
            dirnames.remove(".dflash-transplant")
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                out[rel] = ("dir", st.st_mode & 0o7777)
            elif not stat.S_ISREG(st.st_mode):  # a FIFO or device: never opened
                out[rel] = ("special", stat.S_IFMT(st.st_mode), st.st_mode & 0o7777)
            else:
                with open(full, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
                out[rel] = ("file", st.st_size, digest, st.st_mode & 0o7777)
    return out


def record_state(venv: Path) -> dict:
    """Verify every RECORD in venv: {'problems': [...], 'owners': {path: [dists]}, 'dists': {name: version}}."""
    sp = site_packages(venv)
    problems = []
    owners = {}
    dists = {}
    for info in sorted(sp.glob("*.dist-info")):
        meta = (info / "METADATA").read_text()
        name = next(line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Name:"))
        version = next(line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Version:"))
        dists[name] = version
        record = info / "RECORD"
        if not record.exists():
            problems.append("%s: no RECORD" % info.name)
            continue
        for row in csv.reader(io.StringIO(record.read_text())):
            if not row:
                continue
            path, hash_value = row[0], row[1] if len(row) > 1 else ""
            owners.setdefault(os.path.normpath(path), []).append(name)
            full = os.path.normpath(sp / path)
            if not os.path.isfile(full):
                problems.append("%s: missing %s" % (name, path))
                continue
            if hash_value:
                with open(full, "rb") as handle:
                    if record_hash(handle.read()) != hash_value:
                        problems.append("%s: hash mismatch %s" % (name, path))
    return {"problems": problems, "owners": owners, "dists": dists}


def leftovers(venv: Path) -> list:
    """Temp files, journal or backup dirs a finished run must not leave behind."""
    found = []
    for dirpath, dirnames, filenames in os.walk(venv):
        for name in dirnames + filenames:
            if ".dflash-tmp" in name or name.startswith("backup-") or name.startswith("journal.json") \
                    or name.startswith("plan-"):
                found.append(os.path.join(dirpath, name))
    return found


def module_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(COLLECTIONS) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_module(args: dict, env_extra: dict | None = None, check: bool = False, diff: bool = False,
               timeout: float = 120) -> tuple[int, dict]:
    """Run the module file as Ansible would (args file), return (rc, result)."""
    payload = {"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check, _ansible_diff=diff)}
    env = module_env()
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-m", "ansible_collections.dflash.deploy.plugins.modules.site_packages_transplant"],
        input=json.dumps(payload), capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {
            "stderr": proc.stderr[-4000:]} if proc.stderr.strip() else {}
    except (ValueError, IndexError):
        result = {"raw_stdout": proc.stdout, "stderr": proc.stderr}
    return proc.returncode, result
