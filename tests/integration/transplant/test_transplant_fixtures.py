"""The issue's proofs on the fixture packages (uv venvs from the offline wheelhouse).

- torch 2.11.0+cu128 -> 2.11.0+cu130 with its CUDA 13 runtime: `import torch` works in the
  destination afterwards and every file has exactly one owner;
- removing sgl-kernel beside sglang-kernel leaves `sgl_kernel` importable and sglang-kernel's
  RECORD verifying.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from transplant_support import leftovers, record_state, run_module, site_packages, snapshot


def _python(venv, code, extra_lib=()):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(p) for p in extra_lib] + [env.get("LD_LIBRARY_PATH", "")])
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env,
                          check=False, timeout=120)


def _pip_list(uv_bin, venv):
    out = subprocess.run([str(uv_bin), "pip", "list", "--python", str(venv / "bin" / "python"), "--format", "json"],
                         capture_output=True, text=True, check=True)
    import json
    return {p["name"]: p["version"] for p in json.loads(out.stdout)}


def test_torch_cu128_to_cu130(make_venv, uv_bin):
    src = make_venv(["torch==2.11.0+cu130"], name="ref")
    dest = make_venv(["torch==2.11.0+cu128"], name="target")
    assert "2.11.0+cu128" in _python(dest, "import torch; print(torch.__version__)").stdout
    src_before = snapshot(src)
    args = {"src": str(src), "dest": str(dest), "distributions": ["torch", "triton", "nvidia-*"],
            "remove": ["nvidia-*-cu12"]}
    rc, result = run_module(args, diff=True)
    assert rc == 0, result
    assert {m["name"]: (m["from"], m["to"]) for m in result["moved"]}["torch"] == ("2.11.0+cu128", "2.11.0+cu130")
    removed = sorted(r["name"] for r in result["removed"])
    assert removed == ["nvidia-cublas-cu12", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12"]
    assert "torch==2.11.0+cu128" in result["diff"]["before"] and "torch==2.11.0+cu130" in result["diff"]["after"]
    # import torch works: its RPATH finds nvidia/cu13/lib, which arrived with the CUDA 13 runtime
    out = _python(dest, "import torch; print(torch.__version__, torch.version.cuda)")
    assert out.returncode == 0, out.stderr
    assert "2.11.0+cu130" in out.stdout
    state = record_state(dest)
    assert state["problems"] == []
    assert {p: o for p, o in state["owners"].items() if len(o) > 1} == {}
    packages = _pip_list(uv_bin, dest)
    assert packages["torch"] == "2.11.0+cu130" and not any(n.endswith("-cu12") for n in packages)
    check = subprocess.run([str(uv_bin), "pip", "check", "--python", str(dest / "bin" / "python")],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    sp = site_packages(dest)
    assert not (sp / "nvidia" / "cuda_runtime").exists() and (sp / "nvidia" / "cu13" / "lib").is_dir()
    assert leftovers(dest) == [] and snapshot(src) == src_before
    rc, again = run_module(args)
    assert rc == 0 and again["changed"] is False, again


def test_remove_sgl_kernel_beside_sglang_kernel(make_venv, uv_bin, fixture_build):
    dest = make_venv(["torch==2.11.0+cu130"], name="kernels")
    for req in ("sgl-kernel==0.3.21", "sglang-kernel==0.4.2"):  # sglang-kernel last: its files win on disk
        subprocess.run([str(uv_bin), "pip", "install", "--quiet", "--python", str(dest / "bin" / "python"),
                        "--no-index", "--find-links", str(fixture_build / "wheelhouse"), "--no-deps", req], check=True)
    before = record_state(dest)
    assert before["owners"]["sgl_kernel/__init__.py"] == ["sgl-kernel", "sglang-kernel"]
    rc, result = run_module({"dest": str(dest), "remove": ["sgl-kernel"]})
    assert rc == 0, result
    assert result["removed"] == [{"name": "sgl-kernel", "version": "0.3.21"}]
    assert "sgl_kernel/__init__.py" in result["kept_shared"]
    assert result["files_removed"] == 1  # sgl_kernel/sparse_flash_attn.py, the only file it alone owned
    sp = site_packages(dest)
    assert not (sp / "sgl_kernel" / "sparse_flash_attn.py").exists()
    assert (sp / "sgl_kernel" / "speculative.py").exists()
    state = record_state(dest)
    assert state["problems"] == [], state["problems"]  # sglang-kernel's RECORD verifies
    assert "sgl-kernel" not in state["dists"] and state["dists"]["sglang-kernel"] == "0.4.2"
    assert {p: o for p, o in state["owners"].items() if len(o) > 1} == {}
    driver_lib = fixture_build / "driver" / "lib"
    libs = [sp / "nvidia" / "cu13" / "lib", driver_lib]
    out = _python(dest, "import sgl_kernel; print('sgl_kernel ok')", extra_lib=libs)
    assert out.returncode == 0 and "sgl_kernel ok" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("link", ["copy"])
def test_bundle_into_fresh_venv(make_venv, uv_bin, tmp_path, link):
    """Stage torch + runtime as a bundle, install it into an empty venv, import torch there."""
    src = make_venv(["torch==2.11.0+cu130"], name="ref2")
    dest = make_venv([], name="fresh")
    bundle = tmp_path / "torch-cu130.tar"
    rc, result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle),
                             "distributions": ["torch", "triton", "nvidia-*"]})
    assert rc == 0, result
    rc, result = run_module({"bundle": str(bundle), "dest": str(dest), "link": link})
    assert rc == 0, result
    out = _python(dest, "import torch; print(torch.__version__)")
    assert out.returncode == 0 and "2.11.0+cu130" in out.stdout, out.stderr
    assert record_state(dest)["problems"] == []
