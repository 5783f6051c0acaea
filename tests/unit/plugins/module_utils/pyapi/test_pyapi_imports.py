"""pyapi/imports.py: the import statements a CUDA host runs, with try/except and function context."""
from __future__ import annotations

import ast
import textwrap

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.imports import (
    ImportSite,
    import_sites,
    resolve_relative,
)


def sites(src, module="pkg.mod", is_package=False):
    return import_sites(ast.parse(textwrap.dedent(src)), module, is_package)


@pytest.mark.parametrize("module,is_package,level,target,expected", [
    ("a.b.c", False, 0, "x.y", "x.y"),
    ("a.b.c", False, 1, "d", "a.b.d"),
    ("a.b.c", False, 2, "d", "a.d"),
    ("a.b.c", False, 1, "", "a.b"),
    ("a.b.c", False, 3, "d", None),       # beyond the top-level package
    ("a.b", True, 1, "d", "a.b.d"),       # a package's __init__: its own package
    ("a.b", True, 2, "", "a"),
    ("a.b", True, 3, "d", None),
    ("a", False, 1, "d", None),           # a top-level module has no package
])
def test_resolve_relative(module, is_package, level, target, expected):
    assert resolve_relative(module, is_package, level, target) == expected


def test_cuda_branches_followed_hip_branch_not():
    got = sites("""
        import os
        if is_cuda():
            from sgl_kernel import min_p_sampling_from_probs, top_k_renorm_prob
        if _is_cuda:
            from sgl_kernel import awq_marlin_repack
        elif _is_hip:
            from aiter import hip_only
        else:
            from cpu_only import thing
        if not _is_hip:
            import cuda_side
        if TYPE_CHECKING:
            from typing_only import T
    """)
    assert [(s.module, s.names, s.line) for s in got] == [
        ("os", (), 2),
        ("sgl_kernel", ("min_p_sampling_from_probs", "top_k_renorm_prob"), 4),
        ("sgl_kernel", ("awq_marlin_repack",), 6),
        ("cuda_side", (), 12),
    ]


def test_unknown_condition_keeps_both_branches():
    got = sites("""
        if _use_aiter:
            from aiter import a
        else:
            from sgl_kernel import b
        while flag():
            import w
    """)
    assert [s.module for s in got] == ["aiter", "sgl_kernel", "w"]


def test_try_except_import_error_is_protected_and_its_handler_a_fallback():
    got = sites("""
        try:
            from flashinfer import fp4
        except ImportError:
            from sgl_kernel import scaled_fp4_quant
        try:
            from a import b
        except (ValueError, ModuleNotFoundError):
            pass
        try:
            from c import d
        except:
            pass
        try:
            from e import f
        except builtins.Exception:
            pass
        try:
            from g import h
        except ValueError:
            pass
        else:
            from i import j
        finally:
            from k import m
    """)
    flags = {s.module: (s.protected, s.fallback) for s in got}
    assert flags == {"flashinfer": (True, False), "sgl_kernel": (False, True), "a": (True, False),
                     "c": (True, False), "e": (True, False), "g": (False, False), "i": (False, False),
                     "k": (False, False)}


def test_function_bodies_are_followed_and_marked():
    got = sites("""
        class C:
            from at_class import x
            def method(self):
                if _is_hip:
                    from hip import y
                from in_method import z
        async def f():
            from in_async import w
        try:
            def g():
                from in_g import v
        except ImportError:
            pass
    """)
    assert [(s.module, s.in_function, s.protected) for s in got] == [
        ("at_class", False, False), ("in_method", True, False), ("in_async", True, False), ("in_g", True, False)]


def test_relative_and_star_imports():
    got = sites("""
        from . import sibling
        from ..up import thing
        from .x import *
        from .... import too_far
    """, module="pkg.sub.mod")
    assert [(s.module, s.names) for s in got] == [
        ("pkg.sub", ("sibling",)), ("pkg.up", ("thing",)), ("pkg.sub.x", ("*",)), (None, ("too_far",))]


def test_match_cases_are_read():
    got = sites("""
        match mode:
            case "a":
                from m import a
            case _:
                import n
    """)
    assert [s.module for s in got] == ["m", "n"]


def test_site_is_frozen():
    site = ImportSite("m", ("a",), 1)
    with pytest.raises(AttributeError):
        site.module = "other"
