"""The incident's failures, on the fixture packages in uv venvs: each asserts the finding kind and the one-line message,
and the static verdict is compared with a real import (fixture driver on LD_LIBRARY_PATH)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi
from ansible_collections.dflash.deploy.plugins.module_utils.host.imports import import_one, service_env
from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.requirements import check_with_uv

# make_venv's venvs are of this interpreter's version (python3.11 under make unit, 3.12 under make test-matrix)
SITE_PYTHON = "python%d.%d" % sys.version_info[:2]

BLACKWELL = [(12, 0)]


@pytest.fixture
def driver(fixture_build):
    d = fixture_build / "driver"
    return {"LD_LIBRARY_PATH": str(d / "lib"), "DFLASH_FIXTURE_GPU_CONFIG": str(d / "etc" / "ct200.conf")}


def kinds(result, severity="error"):
    return sorted(set(f["kind"] for f in result["findings"] if f["severity"] == severity))


def real_import_ok(venv, env):
    return import_one(str(venv / "bin" / "python"), "sgl_kernel", timeout=60, env=service_env(env))


def test_good_cu130_stack_is_compatible_and_imports(make_venv, driver):
    venv = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver)
    assert r["compatible"] is True, r["msg"]
    assert r["msg"].startswith("compatible (2 warnings: sgl_kernel/flash_ops.abi3.so has no code for compute "
                               "capability 12.0 (has sm_80, sm_86, sm_90))")
    assert kinds(r, "warning") == ["no_gpu_code"]
    assert r["torch"]["version"] == "2.11.0+cu130" and r["torch"]["cuda_major"] == 13
    assert real_import_ok(venv, driver)["ok"] is True


def test_cu12_kernel_in_cu13_env(make_venv, driver):
    venv = make_venv(["torch==2.11.0+cu130", "sgl-kernel==0.3.21"])
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver)
    assert r["compatible"] is False
    assert r["findings"][0]["kind"] == "cuda_major_mismatch"
    assert r["msg"].startswith("sgl_kernel/sm100/common_ops.abi3.so needs libcudart.so.12 (CUDA 12) but torch is "
                               "2.11.0+cu130 (CUDA 13.0); libcudart.so.12, libcublas.so.12, libcublasLt.so.12, "
                               "libnvrtc.so.12 not found: install torch 2.11.0 built for CUDA 12 (local tag "
                               "+cu12*), or a sgl_kernel build for CUDA 13 made for torch 2.11.0")
    real = real_import_ok(venv, driver)
    assert real["ok"] is False and "libcudart.so.12: cannot open shared object file" in real["error"]


def test_cu13_kernel_in_cu12_env(make_venv, driver):
    venv = make_venv(["torch==2.11.0+cu128", "sglang-kernel==0.4.2"])
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver)
    assert r["findings"][0]["kind"] == "cuda_major_mismatch"
    assert r["msg"].startswith("sgl_kernel/sm100/common_ops.abi3.so needs libcudart.so.13 (CUDA 13) but torch is "
                               "2.11.0+cu128 (CUDA 12.8)")
    assert r["msg"].endswith("not found: install torch 2.11.0 built for CUDA 13 (local tag +cu13*), "
                             "or a sgl_kernel build for CUDA 12 made for torch 2.11.0")
    assert real_import_ok(venv, driver)["ok"] is False


def test_kernel_built_against_other_torch(make_venv, driver):
    venv = make_venv(["torch==2.11.0+cu128", "sgl-kernel==0.3.21"])
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver)
    assert kinds(r) == ["undefined_symbol"]
    assert r["msg"].startswith("sgl_kernel/sm100/common_ops.abi3.so needs 7 c10/at/torch symbols that torch "
                               "2.11.0+cu128 does not export (e.g. _ZN2at4cuda22getChosenWorkspaceSizeEv): the "
                               "extension was built against another torch")
    real = real_import_ok(venv, driver)
    assert real["ok"] is False and "undefined symbol: _ZN" in real["error"]
    # and with the torch it was built for, it is fine
    ok = make_venv(["torch==2.9.1+cu128", "sgl-kernel==0.3.21"])
    assert abi.check(str(ok), gpu_ccs=BLACKWELL, environment=driver)["compatible"] is True


def test_no_code_for_the_gpu(make_venv, driver):
    venv = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver, features=["fa3"])
    assert kinds(r) == ["no_gpu_code"]
    assert r["msg"] == ("sgl_kernel/flash_ops.abi3.so has no code for compute capability 12.0 (has sm_80, sm_86, "
                        "sm_90): install a build with sm_120 code")
    old = abi.check(str(venv), gpu_ccs=[(7, 5)], environment=driver)
    assert old["msg"].startswith("sgl_kernel/sm100/common_ops.abi3.so has no code for compute capability 7.5")
    skipped = abi.check(str(venv), gpu_ccs=None, environment=driver)
    assert skipped["compatible"] is True and "arch_check_skipped" in kinds(skipped, "info")


def test_look_alike_owning_sgl_kernel(make_venv, driver):
    venv = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    _install(venv, ["sgl-kernel==0.3.21"])
    p = probe(str(venv))
    assert p["import_owners"] == {"sgl_kernel": ["sgl-kernel", "sglang-kernel"]}
    assert p["import_owners_detail"]["sgl_kernel"]["on_disk"] == ["sgl-kernel"]
    assert "import sgl_kernel is owned by sgl-kernel, sglang-kernel; files on disk match sgl-kernel" in p["problems"]
    # pkg_probe speaks abi_check's vocabulary: the same line is a structured finding
    assert {"kind": "owner_conflict", "path": "sgl_kernel", "severity": "warning",
            "detail": "import sgl_kernel is owned by sgl-kernel, sglang-kernel; files on disk match sgl-kernel"} \
        in p["findings"]
    assert p["problems"] == [f["detail"] for f in p["findings"]]
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver)
    conflict = [f for f in r["findings"] if f["kind"] == "owner_conflict"]
    assert conflict[0]["detail"] == ("sgl_kernel is claimed by sgl-kernel and sglang-kernel; the files on disk "
                                     "match sgl-kernel")
    assert r["findings"][0]["kind"] == "cuda_major_mismatch"
    # named by its distribution, the kernel package still shows the look-alike beside it
    by_dist = abi.check(str(venv), packages=["sglang-kernel"], gpu_ccs=BLACKWELL, environment=driver)
    assert by_dist["packages"]["sglang-kernel"]["distributions"] == ["sgl-kernel", "sglang-kernel"]
    assert [f["detail"] for f in by_dist["findings"] if f["kind"] == "owner_conflict"] == [conflict[0]["detail"]]


def test_sglang_requirements_unsatisfied(make_venv, uv_bin):
    venv = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    _install(venv, ["sglang==0.5.9"])
    p = probe(str(venv))
    assert p["requirements_check"] == {"method": "packaging", "error": None}
    got = sorted((u["distribution"], u["requirement"], u["installed"], u["problem"]) for u in p["unsatisfied"])
    assert got == [("sglang", "flashinfer-python==0.6.3", None, "missing"),
                   ("sglang", "sgl-kernel==0.3.21", None, "missing"),
                   ("sglang", "torch==2.9.1", "2.11.0+cu130", "conflict")]
    # the same answer from the real tool
    uv_found, err = check_with_uv(str(uv_bin), str(venv / "bin" / "python"), {})
    assert err is None
    assert sorted((u["distribution"], u["requirement"], u["installed"], u["problem"]) for u in uv_found) == got
    assert p["torch"]["version"] == "2.11.0+cu130" and p["torch"]["local"] == "cu130"


def replace_file(path, data):
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _install(venv, reqs):
    from pathlib import Path
    repo = Path(__file__).resolve().parents[4]
    uv = Path(os.environ.get("DFLASH_UV", repo / ".tools" / "uv" / "bin" / "uv"))
    wh = Path(os.environ.get("DFLASH_FIXTURE_OUT", repo / "build" / "fixtures")) / "wheelhouse"
    subprocess.run([str(uv), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "--no-index",
                    "--find-links", str(wh), "--no-deps", *reqs], check=True)


def test_driver_missing(make_venv):
    venv = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    libdirs = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"]
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, system_library_dirs=libdirs)
    assert kinds(r) == ["driver_missing"]
    assert r["msg"].startswith("sgl_kernel/sm100/common_ops.abi3.so needs libcuda.so.1, the NVIDIA driver's library, "
                               "which is not found: install the NVIDIA driver")


def test_missing_and_broken_files(make_venv, driver):
    venv = make_venv(["torch==2.11.0+cu130", "sglang-kernel==0.4.2"])
    sk = venv / "lib" / SITE_PYTHON / "site-packages" / "sgl_kernel"
    # uv hardlinks venv files to its cache: replace files (write + rename), never write them in place
    replace_file(sk / "spatial_ops.abi3.so", b"this is not an ELF file\n")
    os.remove(sk / "flash_ops.abi3.so")
    os.symlink("/nonexistent/flashmla.so", sk / "flashmla_ops.abi3.so.tmp")
    os.replace(sk / "flashmla_ops.abi3.so.tmp", sk / "flashmla_ops.abi3.so")
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver)
    assert r["compatible"] is True  # all three load lazily, none is configured
    by_kind = dict((f["kind"], f) for f in r["findings"])
    assert by_kind["not_elf"]["detail"].startswith("sgl_kernel/spatial_ops.abi3.so: no ELF magic")
    assert by_kind["broken_symlink"]["severity"] == "warning"
    assert by_kind["record_missing_file"]["detail"].startswith("RECORD of sglang-kernel 0.4.2 lists 2 missing files")
    data = (sk / "sm100" / "common_ops.abi3.so").read_bytes()
    replace_file(sk / "sm100" / "common_ops.abi3.so", data[: len(data) // 3])
    r = abi.check(str(venv), gpu_ccs=BLACKWELL, environment=driver)
    assert r["findings"][0]["kind"] == "corrupt_elf"
    assert r["msg"].startswith("sgl_kernel/sm100/common_ops.abi3.so: truncated")
    p = probe(str(venv))
    d = p["distributions"]["sglang-kernel"]
    assert d["missing_count"] == 1 and d["broken_symlink_count"] == 1


def test_bad_venv_paths(tmp_path):
    r = abi.check(str(tmp_path / "nope"))
    assert r["findings"][0]["kind"] == "venv_invalid" and r["msg"].startswith("venv %s does not exist" % (
        tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    r = abi.check(str(tmp_path / "plain"))
    assert "is not a venv" in r["msg"]
    r = abi.check(str(tmp_path / "plain"), packages=[])
    assert r["compatible"] is False


def test_driver_older_than_the_extension(make_venv, driver, fixture_build):
    """An extension that calls a driver function the installed libcuda.so.1 lacks fails at import (RTLD_NOW)."""
    import abi_native as N
    venv = make_venv(["torch==2.11.0+cu130"])
    site = venv / "lib" / SITE_PYTHON / "site-packages"
    lib = fixture_build / "driver" / "lib"
    ext = N.build_lib(site / "drvext" / "ops.so",
                      "int cuInit(unsigned); int cuMemAddressFree(unsigned long long, unsigned long);\n"
                      "int f(void){ return cuInit(0) + cuMemAddressFree(0, 0); }\n",
                      libs=[lib / "libcuda.so.1"], extra=["-Wl,-z,now"])
    r = abi.check(str(venv), packages=["drvext"], gpu_ccs=BLACKWELL, environment=driver)
    assert kinds(r) == ["undefined_symbol"]
    assert r["msg"] == ("drvext/ops.so needs 1 symbol that no library in its load scope exports (e.g. "
                        "cuMemAddressFree): the NVIDIA driver's libcuda.so.1 (%s) is older than the extension needs: "
                        "update the driver" % (lib / "libcuda.so.1"))
    real = subprocess.run([sys.executable, "-c", "import ctypes, os; ctypes.CDLL(%r, mode=os.RTLD_NOW)" % str(ext)],
                          env=dict(os.environ, **driver), capture_output=True, text=True, check=False)
    assert "undefined symbol: cuMemAddressFree" in real.stderr
