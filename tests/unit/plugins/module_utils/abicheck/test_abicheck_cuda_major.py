"""abicheck/cuda_major.py: the CUDA major a file was built for against torch's."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.cuda_major import built_for, cuda_major

CU128 = {"version": "2.9.1+cu128", "cuda": "12.8", "cuda_major": 12}


def test_built_for_is_the_major_the_majors_or_none():
    assert built_for({}) is None
    assert built_for({13: ["libcudart.so.13"]}) == 13
    assert built_for({13: ["libcublas.so.13"], 12: ["libcudart.so.12"]}) == [12, 13]


def test_nothing_to_compare_without_cuda_libraries_or_a_cuda_torch():
    needed = ["libcudart.so.13", "libc.so.6"]
    for torch in (None, {"version": "2.9.1+cpu", "cuda": None, "cuda_major": None}):
        result = cuda_major(needed, {}, torch, "pkg", "pkg/ext.so")
        assert (result.built_for, result.explained, result.problems) == (13, frozenset(), ())
    result = cuda_major(["libc.so.6"], {}, CU128, "pkg", "pkg/ext.so")
    assert (result.built_for, result.problems) == (None, ())


def test_the_same_major_is_fine():
    result = cuda_major(["libcudart.so.12", "libcublas.so.12"], {}, CU128, "pkg", "pkg/ext.so")
    assert (result.built_for, result.explained, result.problems) == (12, frozenset(), ())


def test_another_major_names_torch_first_and_explains_its_libraries():
    needed = ["libcudart.so.13", "libcublas.so.13", "libcufft.so.11"]
    result = cuda_major(needed, {"libcublas.so.13": "/x/libcublas.so.13"}, CU128, "sgl_kernel", "sgl_kernel/x.so")
    assert result.explained == frozenset(["libcudart.so.13", "libcublas.so.13"])  # cufft's major is not CUDA's
    (problem,) = result.problems
    assert problem.kind == "cuda_major_mismatch"
    assert problem.detail == ("sgl_kernel/x.so needs libcudart.so.13 (CUDA 13) but torch is 2.9.1+cu128 (CUDA 12.8); "
                              "libcudart.so.13 not found")
    assert problem.fix == ("install torch 2.9.1 built for CUDA 13 (local tag +cu13*), or a sgl_kernel build for "
                           "CUDA 12 made for torch 2.9.1")
    assert dict(problem.extra) == {"needed": ["libcudart.so.13", "libcublas.so.13"], "torch_cuda": "12.8"}


def test_every_library_found_adds_no_not_found_part():
    resolved = {"libcudart.so.13": "/x/libcudart.so.13"}
    (problem,) = cuda_major(["libcudart.so.13"], resolved, CU128, "pkg", "pkg/ext.so").problems
    assert problem.detail.endswith("(CUDA 12.8)")
