"""pydist/distributions.py, pydist/requirements.py, findings.py, pydist/torch_facts.py on synthetic site-packages."""
from __future__ import annotations

import base64
import hashlib
import tempfile
from pathlib import Path

import abi_native as N
import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import distributions as D
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import requirements as R
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.torch_facts import parse_version_py


def h(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def add_dist(site: Path, name, version, files: dict, requires=(), installer="uv", top_level=None):
    di = site / ("%s-%s.dist-info" % (name.replace("-", "_"), version))
    di.mkdir(parents=True)
    meta = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)
    meta += "".join("Requires-Dist: %s\n" % r for r in requires) + "\nLong description: not a header\n"
    (di / "METADATA").write_text(meta)
    (di / "INSTALLER").write_text(installer + "\n")
    if top_level:
        (di / "top_level.txt").write_text("\n".join(top_level) + "\n")
    rows = []
    for rel, data in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        rows.append("%s,%s,%d" % (rel, h(data), len(data)))
    rows.append("%s/RECORD,," % di.name)
    (di / "RECORD").write_text("\n".join(rows) + "\n")
    return di


@pytest.fixture
def site(tmp_path):
    s = tmp_path / "site-packages"
    s.mkdir()
    add_dist(s, "nvidia-cuda-runtime-cu12", "12.8.90", {"nvidia/__init__.py": b"",
                                                        "nvidia/cuda_runtime/lib/libcudart.so.12": b"A"})
    add_dist(s, "nvidia-cublas-cu12", "12.8.4.1", {"nvidia/__init__.py": b"",
                                                   "nvidia/cublas/lib/libcublas.so.12": b"B"})
    add_dist(s, "sglang-kernel", "0.4.2", {"sgl_kernel/__init__.py": b"new = 1\n", "sgl_kernel/x.so": b"N"})
    add_dist(s, "sgl-kernel", "0.3.21", {"sgl_kernel/__init__.py": b"old = 1\n", "sgl_kernel/x.so": b"O"})
    add_dist(s, "sglang", "0.5.9", {"sglang/__init__.py": b"", "sglang_cli.py": b""},
             requires=["torch==2.9.1", "sgl-kernel==0.3.21", "flashinfer-python==0.6.3",
                       "flashinfer-cubin==0.6.3; extra == \"all\"", "uvloop; sys_platform == \"win32\"",
                       "numpy; python_version < \"3.0\""])
    add_dist(s, "torch", "2.11.0+cu130", {"torch/__init__.py": b"", "torch/version.py":
                                          b"__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"})
    return s


def test_scan_and_owners(site):
    dists = D.scan(str(site))
    assert set(dists) == {"nvidia-cuda-runtime-cu12", "nvidia-cublas-cu12", "sglang-kernel", "sgl-kernel", "sglang",
                          "torch"}
    assert dists["sglang"]["top_level"] == ["sglang", "sglang_cli"]
    assert dists["sglang"]["installer"] == "uv" and len(dists["sglang"]["requires"]) == 6
    owners = D.import_owners(str(site), dists)
    # the last writer (sgl-kernel) matches the disk; nvidia shares only empty __init__.py files
    assert owners == {"sgl_kernel": {"distributions": ["sgl-kernel", "sglang-kernel"], "shared_files": 2,
                                     "on_disk": ["sgl-kernel"]}}


def test_record_problems(site):
    (site / "sglang" / "__init__.py").unlink()
    (site / "sglang_cli.py").unlink()
    (site / "sglang_cli.py").symlink_to(site / "gone")
    dists = D.scan(str(site))
    state = D.check_files(str(site), dists["sglang"])
    assert state == {"missing_files": ["sglang/__init__.py"], "missing_count": 1, "broken_symlinks": ["sglang_cli.py"],
                     "broken_symlink_count": 1}


def test_requirements_with_packaging(site):
    dists = D.scan(str(site))
    got = R.check_with_packaging(dists, "3.11.7")
    assert sorted((u["requirement"], u["installed"], u["problem"]) for u in got) == [
        ("flashinfer-python==0.6.3", None, "missing"), ("torch==2.9.1", "2.11.0+cu130", "conflict")]


def test_requirements_without_packaging(site, monkeypatch):
    monkeypatch.setattr(R, "HAS_PACKAGING", False)
    res = R.check(D.scan(str(site)), "3.11", uv=None, python=None)
    assert res["method"] is None and "packaging" in res["error"] and res["unsatisfied"] == []


def test_uv_output_parsing():
    text = ("Found 2 incompatibilities\nThe package `sglang` requires `torch==2.9.1`, but `2.11.0+cu130` is installed\n"
            "The package `sglang` requires `flashinfer-python==0.6.3`, but it's not installed\n")
    got = R.parse_uv_check(text, {"sglang": {"name": "sglang", "version": "0.5.9"}})
    assert got == [
        {"distribution": "sglang", "version": "0.5.9", "requirement": "torch==2.9.1", "installed": "2.11.0+cu130",
         "problem": "conflict"},
        {"distribution": "sglang", "version": "0.5.9", "requirement": "flashinfer-python==0.6.3", "installed": None,
         "problem": "missing"}]


def test_version_py_and_tags():
    assert parse_version_py("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip = None\n") == {
        "__version__": "2.11.0+cu130", "cuda": "13.0", "hip": None}
    assert D.local_tag("2.11.0+cu130") == "cu130" and D.local_tag("2.11.0") is None
    assert D.normalize_name("SGLang_Kernel") == "sglang-kernel"


def test_findings_message_order():
    fs = [F.make("no_gpu_code", "b.so", "b has no code", fix="rebuild"),
          F.make("cuda_major_mismatch", "a.so", "a needs libcudart.so.12", fix="install cu13 build"),
          F.make("owner_conflict", "x", "two owners", severity=F.WARNING)]
    assert F.message(fs) == "a needs libcudart.so.12: install cu13 build (and 1 more error)"
    assert F.message(fs[2:]) == "compatible (1 warning: two owners)"
    assert F.message([]) == "compatible"
    with pytest.raises(ValueError):
        F.make("no_such_kind", None, "")


def test_unreadable_metadata_as_unprivileged_user():
    """Root is not denied by chmod: read as uid 65534 from a world-traversable directory."""
    base = Path(tempfile.mkdtemp(prefix="dflash-perm-"))
    try:
        base.chmod(0o755)
        venv = base / "venv"
        site = venv / "lib" / "python3.11" / "site-packages"
        site.mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("version_info = 3.11.7\n")
        di = add_dist(site, "secret", "1.0", {"secret/__init__.py": b"x = 1\n"})
        (di / "METADATA").chmod(0o600)
        N.chmod_tree(base, 0o755)
        (di / "METADATA").chmod(0o600)
        so = site / "secret" / "ext.so"
        N.build_lib(so, "int f(void){return 0;}")
        so.chmod(0o600)
        code = ("import json, sys; sys.path.insert(0, %r)\n"
                "from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe\n"
                "from ansible_collections.dflash.deploy.plugins.module_utils.abi_check import check\n"
                "p = probe(%r); a = check(%r, packages=['secret'], gpu_ccs=[(12, 0)])\n"
                "print(json.dumps([p['problems'], p['distributions']['secret'], a['findings'][0]]))\n") % (
                    str(N.COLLECTIONS), str(venv), str(venv))
        if N.python_as_nobody_fails():
            pytest.skip(N.python_as_nobody_fails())
        res = N.as_nobody([N.nobody_python(), "-c", code])
        assert res.returncode == 0, res.stderr
        import json
        problems, dist, finding = json.loads(res.stdout)
        assert any(p.endswith("METADATA: Permission denied") for p in problems)
        assert dist["name"] == "secret" and dist["version"] == "1.0"
        assert finding["kind"] == "unreadable" and finding["detail"] == "secret/ext.so: Permission denied"
    finally:
        import shutil
        shutil.rmtree(base, ignore_errors=True)


def test_single_module_and_top_level_extension_owned_twice(tmp_path):
    """Import names that are one file (six.py) or one extension at the top (fast.cpython-*.so) count too."""
    site = tmp_path / "site-packages"
    site.mkdir()
    ext = "fast.cpython-311-x86_64-linux-gnu.so"
    add_dist(site, "six-old", "1", {"six.py": b"old = 1\n"}, top_level=["six"])
    add_dist(site, "six", "2", {"six.py": b"new = 2\n"}, top_level=["six"])
    add_dist(site, "fast-a", "1", {ext: b"A", "LICENSE.txt": b"MIT"}, top_level=["fast"])
    add_dist(site, "fast-b", "1", {ext: b"B", "LICENSE.txt": b"MIT", "fast.txt": b"notes"}, top_level=["fast"])
    owners = D.import_owners(str(site), D.scan(str(site)))
    assert owners == {"six": {"distributions": ["six", "six-old"], "shared_files": 1, "on_disk": ["six"]},
                      "fast": {"distributions": ["fast-a", "fast-b"], "shared_files": 1, "on_disk": ["fast-b"]}}


def test_record_digest_is_the_wheels_contents_whatever_the_installer_wrote_about_itself():
    from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import record_digest
    wheel = [("triton/__init__.py", "sha256=AAA", 546), ("triton-3.6.0.dist-info/METADATA", "sha256=BBB", 90),
             ("triton-3.6.0.dist-info/RECORD", "", None)]
    by_uv = wheel + [("triton-3.6.0.dist-info/INSTALLER", "sha256=uv", 2),
                     ("../../../bin/triton", "sha256=venvpath1", 300)]
    by_pip = [("triton-3.6.0.dist-info/REQUESTED", "sha256=x", 0), ("triton-3.6.0.dist-info/INSTALLER", "sha256=p", 4),
              ("triton/__pycache__/__init__.cpython-311.pyc", "sha256=C", 700),
              ("../../../bin/triton", "sha256=venvpath2", 300)] + list(reversed(wheel))
    assert record_digest(by_uv) == record_digest(by_pip) == record_digest(wheel)
    planted = by_uv + [("zz_planted.pth", "", 60)]  # uv lists a file the wheel's RECORD did not, with no hash
    assert record_digest(planted) != record_digest(by_uv)
    assert record_digest([("triton/__init__.py", "sha256=AAB", 546)] + wheel[1:]) != record_digest(wheel)
    assert record_digest([]) is None and record_digest([("../../../bin/x", "sha256=1", 1)]) is None


SUFFIXES_312 = [".py", ".pyc", ".cpython-312-x86_64-linux-gnu.so", ".abi3.so", ".so"]
RECORD_PATHS = ["black/__init__.py", "blib2to3/pgen2/driver.py", "_black_version.py",
                "85cae5375ceb5d1ca6c6__mypyc.cpython-312-x86_64-linux-gnu.so",
                "datadir/only.bin", "../../bin/black", "black-26.10.1.dist-info/RECORD", "LICENSE", "./setup.py"]


def test_top_level_inferred_the_python_3_12_way():
    # every file counts: a top-level extension module, a directory without .py, a suffixless file
    assert D.top_level_from_record(RECORD_PATHS, rule=312, suffixes=SUFFIXES_312) == [
        "85cae5375ceb5d1ca6c6__mypyc", "LICENSE", "_black_version", "black", "blib2to3", "datadir", "setup"]


def test_top_level_inferred_the_older_way_counts_only_py_files():
    assert D.top_level_from_record(RECORD_PATHS, rule=38, suffixes=SUFFIXES_312) == [
        "_black_version", "black", "blib2to3", "setup"]


def test_an_extension_module_of_another_python_is_no_import_name_here():
    assert D.top_level_from_record(["m.cpython-311-x86_64-linux-gnu.so"], rule=312, suffixes=SUFFIXES_312) == []
