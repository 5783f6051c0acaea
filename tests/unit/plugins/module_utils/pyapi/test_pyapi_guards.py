"""pyapi/guards.py: platform guards evaluated as on a CUDA host."""
from __future__ import annotations

import ast

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.guards import branches, evaluate


def value_of(expr):
    return evaluate(ast.parse(expr, mode="eval").body)


@pytest.mark.parametrize("expr", ["is_cuda()", "_is_cuda", "is_cuda_alike()", "_is_cuda_alike", "utils.is_cuda()",
                                  "not _is_hip", "_is_cuda and not is_npu()", "_is_hip or _is_cuda", "True", "1"])
def test_true_on_cuda(expr):
    assert value_of(expr) is True


@pytest.mark.parametrize("expr", ["is_hip()", "_is_hip", "is_xpu()", "_is_xpu", "is_npu()", "_is_npu", "is_cpu()",
                                  "_is_cpu", "is_musa()", "_is_musa", "is_mps()", "_is_mps", "TYPE_CHECKING",
                                  "typing.TYPE_CHECKING", "not is_cuda()", "_is_cuda and _is_hip",
                                  "_is_hip or _is_npu", "unknown() and _is_hip", "False", "None"])
def test_false_on_cuda(expr):
    assert value_of(expr) is False


@pytest.mark.parametrize("expr", ["is_flashinfer_available()", "_use_aiter", "torch.version.hip is not None",
                                  "not _use_aiter", "_is_cuda and is_sm90_supported()", "_is_hip or unknown",
                                  "is_cuda(1)", "is_cuda(device=0)", "os.environ.get('X')", "x == 1"])
def test_unknown(expr):
    assert value_of(expr) is None


def test_branches():
    assert branches(ast.parse("_is_cuda", mode="eval").body) == (True, False)
    assert branches(ast.parse("_is_hip", mode="eval").body) == (False, True)
    assert branches(ast.parse("_use_aiter", mode="eval").body) == (True, True)
