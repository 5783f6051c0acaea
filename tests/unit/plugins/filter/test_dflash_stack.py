"""dflash_stack: the kernel stack a DFlash-capable sglang declares, picked out of its own requirements."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.filter.dflash_stack import dflash_stack

STACK = ["sglang-kernel", "sgl-kernel", "flashinfer-python", "flashinfer-cubin", "torch"]

# sglang 0.5.11's Requires-Dist, as its METADATA spells it (a part of it).
REAL_0_5_11 = [
    "IPython",
    "apache-tvm-ffi<0.2,>=0.1.5",
    "flashinfer_python==0.6.8.post1",
    "flashinfer_cubin==0.6.8.post1",
    "sglang-kernel==0.4.2",
    "torch==2.11.0",
    'torchcodec==0.11.1; sys_platform != "linux"',
    "torchaudio==2.11.0",
    "transformers==5.6.0",
]


def test_the_stack_of_sglang_0_5_11_from_its_metadata():
    assert dflash_stack(REAL_0_5_11, STACK) == [
        "flashinfer-python==0.6.8.post1", "flashinfer-cubin==0.6.8.post1", "sglang-kernel==0.4.2", "torch==2.11.0"]


def test_names_are_normalised_markers_dropped_extras_left_out():
    reqs = ["Torch (>=2.9.1) ; python_version >= '3.10'", 'flashinfer-cubin==0.6.3; extra == "all"',
            "SGL_Kernel == 0.3.21", "not a requirement!", "", None]
    assert dflash_stack(reqs, STACK) == ["torch>=2.9.1", "sgl-kernel==0.3.21"]
    assert dflash_stack(reqs, ["Torch"]) == ["torch>=2.9.1"]


def test_nothing_listed_nothing_returned():
    assert dflash_stack(REAL_0_5_11, []) == []
    assert dflash_stack(None, STACK) == []
    assert dflash_stack(["torch==2.11.0", "torch==2.11.0"], STACK) == ["torch==2.11.0"]
