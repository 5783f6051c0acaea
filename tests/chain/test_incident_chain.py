"""The incident's failure chain, reproduced for real.

Every venv here is made by uv from the fixture index served over HTTP on
loopback; every server and import runs in a private mount namespace whose
ld.so cache holds the fixture NVIDIA driver but no CUDA toolkit (isolation.py),
like a GPU host that has only a driver. Each test asserts one cause.
"""
from __future__ import annotations

import json
import shutil

DFLASH_ARGS = ("--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16")


def overlay_dflash(fixture_build, venv, whole=True):
    """The DFlash-capable sglang tree (fixture 0.5.11's sglang/) over PyPI's 0.5.9: as a whole tree (what
    dflash_overlay does), or file by file (``whole=False``: the incident's ``cp -a``, stale files stay)."""
    src = fixture_build / "dflash-src" / "python" / "sglang"
    assert (src / "srt" / "speculative" / "dflash_worker.py").is_file()
    if whole:
        shutil.rmtree(venv.site / "sglang")
    shutil.copytree(src, venv.site / "sglang", dirs_exist_ok=True)


def python_api_errors(venv):
    """abi_check's python_api errors (missing_python_name) for the venv's sglang, as a CUDA host imports it."""
    from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi  # noqa: PLC0415

    result = abi.check(str(venv.path), packages=["sglang"], gpu_ccs=[(9, 0)], python_api=True)
    return sorted((f["path"], f["name"], f["module"]) for f in result["findings"]
                  if f["kind"] == "missing_python_name" and f["severity"] == "error")


def sampler_errors(venv):
    """The (name, module) of the python_api errors in sglang/srt/layers/sampler.py."""
    return [(name, module) for path, name, module in python_api_errors(venv)
            if path.startswith("sglang/srt/layers/sampler.py:")]


def pypi_sglang_venv(new_venv):
    venv = new_venv("venv_sglang")
    venv.install("sglang[all]==0.5.9")
    return venv


def test_a_pypi_sglang_starts_without_dflash(new_venv, gpu_host, launch, models):
    venv = pypi_sglang_venv(new_venv)
    versions = venv.versions()
    assert versions["sgl-kernel"] == "0.3.21"
    assert versions["torch"] == "2.9.1+cu128"
    assert versions["flashinfer-python"] == "0.6.3"
    assert "sglang-kernel" not in versions

    target, _ = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--attention-backend", "flashinfer")
    assert server.wait_ready(), server.output()
    status, _ = server.get("/health")
    assert status == 200


def test_a2_pypi_sglang_has_no_dflash(new_venv, gpu_host, launch, models):
    """PyPI's 0.5.9 lacks the DFlash modules, so DFLASH is refused outright."""
    venv = pypi_sglang_venv(new_venv)
    target, draft = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--speculative-draft-model-path", str(draft),
                    *DFLASH_ARGS)
    assert not server.wait_ready()
    assert server.proc.returncode != 0
    assert "dflash" in server.output().lower()


def test_b_dflash_overlay_needs_sglang_kernel(new_venv, fixture_build, gpu_host, launch, models):
    venv = pypi_sglang_venv(new_venv)
    overlay_dflash(fixture_build, venv)
    target, draft = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--speculative-draft-model-path", str(draft),
                    *DFLASH_ARGS)
    assert not server.wait_ready()
    assert server.proc.returncode != 0
    assert "sglang-kernel>=0.4.2" in server.output()


def test_c_cu13_kernel_beside_cu128_torch_misses_libcudart13(new_venv, fixture_build, gpu_host, launch, models):
    """The incident's state after `uv pip install sglang-kernel==0.4.2` on the
    training torch: same torch version (no symbol errors), other CUDA."""
    venv = pypi_sglang_venv(new_venv)
    overlay_dflash(fixture_build, venv)
    venv.install("torch==2.11.0+cu128", "flashinfer-python==0.6.8.post1", "flashinfer-cubin==0.6.8.post1",
                 "sglang-kernel==0.4.2")
    versions = venv.versions()
    assert versions["torch"] == "2.11.0+cu128"
    assert versions["sglang-kernel"] == "0.4.2"

    target, draft = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--speculative-draft-model-path", str(draft),
                    *DFLASH_ARGS)
    assert not server.wait_ready()
    out = server.output()
    assert server.proc.returncode != 0
    assert "Could not load any common_ops library" in out
    assert "libcudart.so.13: cannot open shared object file" in out
    assert "undefined symbol" not in out


def test_d_kernel_built_for_other_torch_has_undefined_symbols(new_venv, gpu_host, run_isolated, fixture_build):
    """sglang-kernel 0.4.2 (built against torch 2.11.0) beside torch 2.9.1:
    the CUDA 13 libraries are present, so the only failure is the C++ ABI."""
    venv = new_venv("kernel_vs_torch291")
    venv.install("torch==2.9.1+cu128", "sglang-kernel==0.4.2", "nvidia-cuda-runtime", "nvidia-cublas",
                 "nvidia-cuda-nvrtc")
    env = gpu_host()
    env["LD_LIBRARY_PATH"] = str(venv.site / "nvidia" / "cu13" / "lib")
    proc = run_isolated([venv.python, "-c", "import sgl_kernel"], env)
    assert proc.returncode != 0
    assert "Could not load any common_ops library" in proc.stderr
    assert "undefined symbol: _ZN" in proc.stderr
    assert "cannot open shared object file" not in proc.stderr


def test_e_cu130_stack_serves_dflash(new_venv, fixture_build, gpu_host, launch, models):
    venv = new_venv("venv_sglang211")
    venv.install("sglang==0.5.9", no_deps=True)
    overlay_dflash(fixture_build, venv)
    venv.install("torch==2.11.0+cu130", "sglang-kernel==0.4.2", "flashinfer-python==0.6.8.post1",
                 "flashinfer-cubin==0.6.8.post1")
    versions = venv.versions()
    assert versions["torch"] == "2.11.0+cu130"
    assert versions["nvidia-cuda-runtime"].startswith("13.")
    assert "sgl-kernel" not in versions

    target, draft = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--speculative-draft-model-path", str(draft),
                    "--served-model-name", "qwen3-8b-dflash", "--attention-backend", "flashinfer", *DFLASH_ARGS)
    assert server.wait_ready(), server.output()
    status, body = server.get("/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["qwen3-8b-dflash"]
    _, info = server.get("/get_server_info")
    assert "DFLASH" in info


def test_e2_sglang_0_5_9_beside_sglang_kernel_0_4_2_fails_at_start(new_venv, gpu_host, launch, models):
    """Real 0.5.9 on a GPU host imports min_p_sampling_from_probs from sgl_kernel (its sampler, under
    `if is_cuda():`), which sglang-kernel 0.4.2 does not define: the cu130 stack without the DFlash tree."""
    venv = new_venv("venv_059_042")
    venv.install("sglang==0.5.9", no_deps=True)
    venv.install("torch==2.11.0+cu130", "sglang-kernel==0.4.2", "flashinfer-python==0.6.8.post1",
                 "flashinfer-cubin==0.6.8.post1")
    target, _ = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--attention-backend", "flashinfer")
    assert not server.wait_ready()
    out = server.output()
    assert server.proc.returncode != 0
    assert "ImportError: cannot import name 'min_p_sampling_from_probs' from 'sgl_kernel'" in out, out
    # abi_check's python_api sees it without a GPU, as on the real wheels: real 0.5.9's sampler.py:22 imports
    # min_p_sampling_from_probs and top_k_top_p_sampling_from_probs from sgl_kernel, and the real sglang-kernel
    # 0.4.2 defines neither (tests/unit/plugins/module_utils/pyapi/test_python_api_real.py)
    assert sampler_errors(venv) == [("min_p_sampling_from_probs", "sgl_kernel"),
                                    ("top_k_top_p_sampling_from_probs", "sgl_kernel")]


def test_e3_file_by_file_overlay_leaves_a_stale_duplicate(new_venv, fixture_build, gpu_host, launch, models):
    venv = new_venv("venv_stale")
    venv.install("sglang==0.5.9", no_deps=True)
    overlay_dflash(fixture_build, venv, whole=False)
    venv.install("torch==2.11.0+cu130", "sglang-kernel==0.4.2", "flashinfer-python==0.6.8.post1",
                 "flashinfer-cubin==0.6.8.post1")
    assert (venv.site / "sglang" / "srt" / "models" / "mimo_v2_flash.py").is_file()
    target, draft = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--speculative-draft-model-path", str(draft),
                    *DFLASH_ARGS)
    assert not server.wait_ready()
    assert "AssertionError: Duplicated model implementation for MiMoV2FlashForCausalLM" in server.output()


def test_e4_sglang_0_5_11_serves_dflash_upstream(new_venv, gpu_host, launch, models):
    """The first release with DFlash upstream, its own pins (sglang-kernel 0.4.2, flashinfer 0.6.8.post1,
    torch 2.11.0), the cu130 build of torch: no overlay at all."""
    venv = new_venv("venv_0511")
    venv.install("sglang==0.5.11", "torch==2.11.0+cu130")
    versions = venv.versions()
    assert versions["sglang"] == "0.5.11" and versions["sglang-kernel"] == "0.4.2" and "sgl-kernel" not in versions
    target, draft = models
    server = launch(venv, gpu_host(), "--model-path", str(target), "--speculative-draft-model-path", str(draft),
                    "--served-model-name", "qwen3-8b-dflash", *DFLASH_ARGS)
    assert server.wait_ready(), server.output()
    status, body = server.get("/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["qwen3-8b-dflash"]
    # its sampler takes from sgl_kernel only what sglang-kernel 0.4.2 exports (min_p and top_k_top_p sampling
    # come from flashinfer.sampling, as in the real 0.5.11), so python_api finds nothing missing, as it finds
    # nothing missing for the real 0.5.11 beside the real 0.4.2 (test_python_api_real.py)
    assert sampler_errors(venv) == []
    assert python_api_errors(venv) == []


CTX_PROBE = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
rc = cuda.cuInit(0)
if rc:
    print("cuInit", rc); sys.exit(1)
dev = ctypes.c_int()
rc = cuda.cuDeviceGet(ctypes.byref(dev), 0)
if rc:
    print("cuDeviceGet", rc); sys.exit(1)
ctx = ctypes.c_void_p()
rc = cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
print("cuCtxCreate", rc)
sys.exit(1 if rc else 0)
"""


def test_f_dead_gpu_fails_context_creation(gpu_host, run_isolated):
    healthy = run_isolated(["python3", "-c", CTX_PROBE], gpu_host())
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    dead = run_isolated(["python3", "-c", CTX_PROBE], gpu_host(faults={1: "dead"}))
    assert dead.returncode == 1
    assert dead.stdout.startswith("cuCtxCreate ")
    assert dead.stdout.split()[1] != "0"


def test_f_missing_device_nodes_fail_cuinit(gpu_host, run_isolated):
    proc = run_isolated(["python3", "-c", CTX_PROBE], gpu_host(nodes=False))
    assert proc.returncode == 1
    assert proc.stdout.startswith("cuInit ")


def test_isolation_hides_the_toolkit_only_inside(system_cache, run_isolated, gpu_host):
    """The premise of the chain: outside, this machine resolves libcudart.so.13
    from the toolkit; inside the namespace it does not, and the driver does."""
    probe = "import ctypes\nfor n in ('libcudart.so.13', 'libcuda.so.1'):\n" \
            "    try:\n        ctypes.CDLL(n); print(n, 'ok')\n    except OSError as e:\n        print(n, 'missing')\n"
    inside = run_isolated(["python3", "-c", probe], gpu_host())
    assert "libcudart.so.13 missing" in inside.stdout
    assert "libcuda.so.1 ok" in inside.stdout
