"""python_api on the real wheels' Python files: sglang 0.5.9 beside sglang-kernel 0.4.2 names the kernels 0.5.9
imports that 0.4.2 lacks (the server's ImportError on a GPU host); sglang 0.5.11 beside 0.4.2 has no error.
And the fixtures (the lab's sglang and sgl_kernel) mirror these wheels' sampling names: the fixture
sglang-kernel 0.4.x exports the real 0.4.2's, the fixture samplers import what the real ones import.

The wheels are downloaded once by tools/real_wheels.py (pip download, about 340 MB, almost all of it
sglang-kernel's compiled code) into build/real-wheels and reduced to their .py files and dist-info there;
later runs read them from build/.  A failed download fails the test: set DFLASH_SKIP_REAL_WHEELS=1 to skip it
on purpose (a machine without the package index).
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi

REPO = Path(__file__).resolve().parents[5]
CASE_059 = "sglang-0.5.9+sglang-kernel-0.4.2"
CASE_0511 = "sglang-0.5.11+sglang-kernel-0.4.2"


@pytest.fixture(scope="module")
def cases():
    if os.environ.get("DFLASH_SKIP_REAL_WHEELS") == "1":
        pytest.skip("DFLASH_SKIP_REAL_WHEELS=1: the real-wheel python_api test is switched off")
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "real_wheels.py"), "--print"], cwd=REPO,
                          capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        pytest.fail("tools/real_wheels.py could not fetch the real wheels (set DFLASH_SKIP_REAL_WHEELS=1 to skip "
                    "this test on purpose):\n%s%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    return {Path(line).name: line for line in proc.stdout.split()}


def check(path):
    return abi.check(path, packages=["sglang"], gpu_ccs=[(9, 0)], python_api=True)


def missing(result, severity):
    return sorted((f["path"], f["name"]) for f in result["findings"]
                  if f["kind"] == "missing_python_name" and f["severity"] == severity)


def test_sglang_059_beside_sglang_kernel_042(cases):
    result = check(cases[CASE_059])
    assert result["compatible"] is False
    errors = missing(result, "error")
    assert ("sglang/srt/layers/sampler.py:22", "min_p_sampling_from_probs") in errors
    assert ("sglang/srt/layers/quantization/awq.py:63", "awq_marlin_repack") in errors
    assert errors == [
        ("sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py:40", "scaled_fp4_quant"),
        ("sglang/srt/layers/quantization/awq.py:63", "awq_marlin_moe_repack"),
        ("sglang/srt/layers/quantization/awq.py:63", "awq_marlin_repack"),
        ("sglang/srt/layers/sampler.py:22", "min_p_sampling_from_probs"),
        ("sglang/srt/layers/sampler.py:22", "top_k_top_p_sampling_from_probs"),
    ]
    # the first one the server meets is the one its start died with on the H200:
    # ImportError: cannot import name 'awq_marlin_moe_repack' from 'sgl_kernel'
    assert result["msg"] == (
        "sglang 0.5.9 imports awq_marlin_moe_repack from sgl_kernel (sglang/srt/layers/quantization/awq.py:63), "
        "which sglang-kernel 0.4.2 does not define: install the sglang-kernel version sglang pins, or sglang built "
        "for sglang-kernel 0.4.2 (and 4 more errors: awq_marlin_repack, scaled_fp4_quant, "
        "min_p_sampling_from_probs, top_k_top_p_sampling_from_probs)")
    summary = result["python_api"]["sglang"]
    assert summary["unparsed"] == [] and summary["truncated"] is False and summary["start_modules"] > 400


def test_sglang_0511_beside_sglang_kernel_042(cases):
    result = check(cases[CASE_0511])
    assert missing(result, "error") == []
    assert result["compatible"] is True
    # what is left are XPU code paths, imported only inside functions: warnings
    assert missing(result, "warning") == [
        ("sglang/srt/layers/attention/xpu_backend.py:23", "flash_mla_decode"),
        ("sglang/srt/layers/attention/xpu_backend.py:23", "flash_mla_get_workspace_size"),
        ("sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe.py:895", "fused_experts"),
        ("sglang/srt/layers/quantization/unquant.py:573", "fused_experts"),
    ]
    summary = result["python_api"]["sglang"]
    assert summary["unparsed"] == [] and summary["truncated"] is False and summary["start_modules"] > 500


# --- the fixtures mirror these wheels' sampling names (the lab's sglang and sgl_kernel are the fixtures) --------

FIXTURES = REPO / "tests" / "fixtures"


def _cuda_imports(path):
    """{module: sorted names} of the ``from M import ...`` statements under a top-level ``if is_cuda():``."""
    out = {}
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Call) and \
                getattr(node.test.func, "id", None) == "is_cuda":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    out.setdefault(stmt.module, []).extend(a.name for a in stmt.names)
    return {m: sorted(names) for m, names in out.items()}


def _imported_from(path, module):
    """The names a module's top-level ``from <module> import ...`` statements take."""
    return sorted(a.name for node in ast.parse(Path(path).read_text()).body
                  if isinstance(node, ast.ImportFrom) and node.module == module for a in node.names)


def _all(path):
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            return sorted(ast.literal_eval(node.value))
    raise AssertionError("%s has no __all__" % path)


def _site(case_dir):
    return Path(case_dir) / "lib" / "python3.12" / "site-packages"


def test_fixture_sglang_kernel_0_4_exports_the_real_sampling_names(cases):
    # the real 0.4.2's sgl_kernel/__init__.py takes top_k_renorm_prob and top_p_renorm_prob from .sampling; the
    # fixture's __init__ star-imports its sampling.py, so that module's __all__ is what it exports
    real = _imported_from(_site(cases[CASE_0511]) / "sgl_kernel" / "__init__.py", "sgl_kernel.sampling")
    assert real == ["top_k_renorm_prob", "top_p_renorm_prob"]
    assert _all(FIXTURES / "python" / "sgl_kernel" / "sampling.py") == real


def test_fixture_sglang_samplers_import_what_the_real_ones_import(cases):
    real_0511 = _cuda_imports(_site(cases[CASE_0511]) / "sglang" / "srt" / "layers" / "sampler.py")
    assert real_0511 == {"flashinfer.sampling": ["min_p_sampling_from_probs", "top_k_top_p_sampling_from_probs"],
                         "sgl_kernel": ["top_k_renorm_prob", "top_p_renorm_prob"]}
    assert _cuda_imports(FIXTURES / "dflash_src" / "python" / "sglang" / "srt" / "layers" / "sampler.py") == real_0511
    real_059 = _cuda_imports(_site(cases[CASE_059]) / "sglang" / "srt" / "layers" / "sampler.py")
    assert real_059 == {"sgl_kernel": ["min_p_sampling_from_probs", "top_k_renorm_prob",
                                       "top_k_top_p_sampling_from_probs", "top_p_renorm_prob"]}
    assert _cuda_imports(FIXTURES / "python" / "sglang" / "srt" / "layers" / "sampler.py") == real_059
    # what 0.5.11 takes from flashinfer.sampling, the fixture flashinfer defines (the real flashinfer-python
    # 0.6.3 and 0.6.8.post1 define both in flashinfer/sampling.py)
    fixture_flashinfer = _all(FIXTURES / "python" / "flashinfer" / "sampling.py")
    assert set(real_0511["flashinfer.sampling"]) <= set(fixture_flashinfer)
