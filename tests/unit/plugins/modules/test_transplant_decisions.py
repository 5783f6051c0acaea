"""site_packages_transplant: the decisions a mutation run found unguarded (issue 14), each checked as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import test_site_packages_transplant as base
from transplant_support import CPTAG, add_dist, module_env, record_state, run_module, site_packages, snapshot

venvs = base.venvs  # the same src/dest pair
_args = base._args
MODULE = "ansible_collections.dflash.deploy.plugins.modules.site_packages_transplant"
_OPENS = """
import json, os, runpy, sys
log = os.environ["_OPEN_LOG"]
seen = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        seen.append(os.fsdecode(args[0]))
sys.addaudithook(hook)
name = sys.argv.pop(1)  # Ansible reads its arguments from argv[1] when there is one
try:
    runpy.run_module(name, run_name="__main__", alter_sys=True)
finally:
    with open(log, "w") as handle:
        json.dump(seen, handle)
"""


def _run_counting_opens(args: dict, tmp_path: Path) -> tuple[dict, list[str]]:
    """Run the module as Ansible would, recording every path it opens (Python's audit hook)."""
    log = tmp_path / "opens.json"
    env = dict(module_env(), _OPEN_LOG=str(log))
    proc = subprocess.run([sys.executable, "-c", _OPENS, MODULE],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), json.loads(log.read_text())


def test_noop_reads_no_file_contents(venvs, tmp_path):
    """The no-op re-run decides from RECORD and stat alone: it opens no file of the payload, in src or dest."""
    src, dest = venvs
    rc, result = run_module(_args(src, dest))
    assert rc == 0 and result["changed"] is True
    again, opened = _run_counting_opens(_args(src, dest), tmp_path)
    assert again["changed"] is False and again["files_copied"] == 0
    payload = [p for p in opened for root in (site_packages(src), site_packages(dest))
               if p.startswith(str(root) + "/") and ".dist-info/" not in p]
    assert payload == []
    assert any(p.endswith(".dist-info/RECORD") for p in opened)  # the hook saw the module's reads


def test_diff_after_lists_the_new_versions(venvs):
    src, dest = venvs
    rc, result = run_module(_args(src, dest), check=True, diff=True)
    assert rc == 0
    assert result["diff"]["before"] == "nvidia-cuda-runtime-cu12==12.8.90\ntorch==2.11.0+cu128\n"
    assert result["diff"]["after"] == "nvidia-cublas==13.1.0\nnvidia-cuda-runtime==13.0.96\ntorch==2.11.0+cu130\n"


def test_check_mode_packed_writes_no_bundle(venvs, tmp_path):
    src = venvs[0]
    bundle = tmp_path / "b.tar"
    before = snapshot(src)
    rc, result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle),
                             "distributions": ["torch"]}, check=True)
    assert rc == 0 and result["changed"] is True, result
    assert not bundle.exists() and list(tmp_path.iterdir()) == [tmp_path / "src", tmp_path / "dest"]
    assert snapshot(src) == before


def test_check_mode_remove_only_changes_nothing(venvs):
    dest = venvs[1]
    before = snapshot(dest)
    rc, result = run_module({"dest": str(dest), "remove": ["requests"]}, check=True)
    assert rc == 0 and result["changed"] is True
    assert result["removed"] == [{"name": "requests", "version": "2.32.0"}]
    assert snapshot(dest) == before


def test_check_mode_bundle_source_changes_nothing(venvs, tmp_path):
    src, dest = venvs
    bundle = tmp_path / "b.tar"
    assert run_module({"state": "packed", "src": str(src), "bundle": str(bundle), "distributions": ["torch"]})[0] == 0
    before = snapshot(dest)
    rc, result = run_module({"bundle": str(bundle), "dest": str(dest)}, check=True)
    assert rc == 0 and result["changed"] is True
    assert [m["to"] for m in result["moved"]] == ["2.11.0+cu130"]
    assert snapshot(dest) == before


def test_verify_source_refuses_a_source_file_that_no_longer_matches_its_record(venvs):
    src, dest = venvs
    lib = site_packages(src) / "torch" / "lib" / "libtorch_cuda.so"
    data = bytearray(lib.read_bytes())
    data[10:14] = b"EVIL"  # same size: only hashing notices
    lib.write_bytes(bytes(data))
    before = snapshot(dest)
    rc, result = run_module(_args(src, dest, verify_source=True))
    assert rc != 0 and "libtorch_cuda.so" in result["msg"], result
    assert snapshot(dest) == before
    rc, result = run_module(_args(src, dest))  # without verify_source the RECORD is trusted
    assert rc == 0 and result["changed"] is True


def test_backup_rotation_keeps_the_newest(venvs):
    src, dest = venvs
    kept = []
    for version in ("2.11.0+cu130", "2.11.1+cu130", "2.11.2+cu130"):
        for old in site_packages(src).glob("torch-*.dist-info"):
            shutil.rmtree(old)
        add_dist(src, "torch", version, {"torch/__init__.py": version.encode(), "torch/v.py": version.encode()},
                 tag=f"{CPTAG}-{CPTAG}-linux_x86_64")
        rc, result = run_module(_args(src, dest, keep_backups=2, link="copy"))
        assert rc == 0 and result["backup_kept"] is True, result
        kept.append(Path(result["backup"]))
    backups = sorted(p.name for p in (dest / ".dflash-transplant" / "backups").iterdir())
    assert backups == sorted(p.name for p in kept[1:])
    assert (kept[2] / "site-packages" / "torch" / "v.py").read_bytes() == b"2.11.1+cu130"


def test_stale_pyc_of_replaced_and_deleted_modules_is_purged(venvs):
    src, dest = venvs
    cache = site_packages(dest) / "torch" / "__pycache__"
    cache.mkdir()
    tag = sys.implementation.cache_tag
    for stem in ("only_128", "__init__", "unrelated"):
        (cache / f"{stem}.{tag}.pyc").write_bytes(b"stale")
    rc, result = run_module(_args(src, dest))
    assert rc == 0, result
    assert sorted(p.name for p in cache.iterdir()) == [f"unrelated.{tag}.pyc"]
    assert record_state(dest)["problems"] == []


def test_bundle_listing_names_every_moved_file(venvs, tmp_path):
    src = venvs[0]
    bundle = tmp_path / "b.tar"
    assert run_module({"state": "packed", "src": str(src), "bundle": str(bundle), "distributions": ["torch"]})[0] == 0
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert "site-packages/torch/only_130.py" in names and not any("nvidia" in n for n in names)
    assert os.path.getsize(bundle) > 200_000


def test_modes_are_kept_but_never_group_or_world_writable_nor_setuid(venvs):
    src, dest = venvs
    sp = site_packages(src)
    (sp / "torch" / "nn" / "__init__.py").chmod(0o777)
    (sp / "torch" / "lib" / "libtorch_cuda.so").chmod(0o4755)
    (sp / "torch" / "_C.py").chmod(0o600)
    rc, result = run_module(_args(src, dest, link="copy"))
    assert rc == 0, result
    out = site_packages(dest) / "torch"
    assert {p: (out / p).stat().st_mode & 0o7777 for p in ("nn/__init__.py", "lib/libtorch_cuda.so", "_C.py")} == {
        "nn/__init__.py": 0o755, "lib/libtorch_cuda.so": 0o755, "_C.py": 0o600}
    record = next(site_packages(dest).glob("torch-*.dist-info")) / "RECORD"  # written by the module itself
    assert record.stat().st_mode & 0o7777 == 0o644
