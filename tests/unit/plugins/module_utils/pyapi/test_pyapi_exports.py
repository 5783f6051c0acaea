"""pyapi/exports.py: the names a module defines, read from its text; what makes it dynamic."""
from __future__ import annotations

import ast
import textwrap

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.exports import export_table, star_names


def table(src, module="x", is_package=True):
    return export_table(ast.parse(textwrap.dedent(src)), module, is_package)


def test_module_level_bindings():
    t = table("""
        import os.path
        import numpy as np
        from .sampling import top_k_renorm_prob, top_p_renorm_prob as renorm
        def kernel(): local_only = 1
        async def akernel(): pass
        class Op:
            inside_class = 1
        a = b = 1
        c, (d, e) = 1, (2, 3)
        f: int = 1
        g += 1
        for h in range(3): pass
        with open("x") as i: pass
        try:
            import j
        except ImportError as k:
            pass
        if _is_hip:
            hip_only = 1
        (m := 2)
        def setter():
            global set_later
            set_later = 1
        globals()["by_key"] = 1
        [comp for comp in range(3)]
    """)
    for name in ("os", "np", "top_k_renorm_prob", "renorm", "kernel", "akernel", "Op", "a", "b", "c", "d", "e",
                 "f", "g", "h", "i", "j", "k", "hip_only", "m", "setter", "set_later", "by_key"):
        assert name in t.names, name
    for name in ("local_only", "inside_class", "top_p_renorm_prob", "comp", "path"):
        assert name not in t.names, name
    assert t.dynamic is None and t.stars == () and t.all_names is None


def test_all_literal_and_its_changes():
    t = table("""
        __all__ = ["a", "b"]
        __all__ += ("c",)
        __all__.append("d")
        __all__.extend(["e"])
    """)
    assert t.all_names == frozenset("abcde")
    assert star_names(t) == frozenset("abcde")


def test_computed_all_makes_the_star_unknown():
    t = table("""
        from .x import names
        __all__ = list(names)
        public = 1
    """)
    assert t.all_names is None
    assert star_names(t) is None


def test_star_names_without_all_are_the_public_ones():
    t = table("public = 1\n_private = 2\nimport os\n")
    assert star_names(t) == frozenset(("public", "os"))


def test_stars_are_resolved():
    t = table("from .allreduce import *\nfrom torch import *\nfrom .... import *\n", module="sgl_kernel")
    assert t.stars == ("sgl_kernel.allreduce", "torch", None)


@pytest.mark.parametrize("src,reason", [
    ("def __getattr__(name):\n    return name\n", "__getattr__"),
    ("exec('x = 1')\n", "exec"),
    ("globals().update(dict(a=1))\n", "globals"),
    ("for n in names:\n    globals()[n] = 1\n", "globals"),
    ("vars()[name] = 1\n", "vars"),
    ("import sys\nsys.modules[__name__] = object()\n", "sys.modules"),
    ("import sys\nsetattr(sys.modules[__name__], 'x', 1)\n", "setattr"),
])
def test_dynamic_modules(src, reason):
    assert reason in table(src).dynamic


@pytest.mark.parametrize("src", [
    # sgl_kernel 0.4.2 wraps names it already has: no name is added
    "for _name in NAMES:\n    if _name in globals():\n        globals()[_name] = wrap(globals()[_name])\n",
    "x = globals().get('y')\n",
    "if 'y' in globals():\n    pass\n",
    "globals()['constant'] = 1\n",
    "setattr(obj, 'x', 1)\n",
    "def f():\n    def __getattr__(name):\n        return name\n",
])
def test_not_dynamic(src):
    assert table(src).dynamic is None


def test_table_is_frozen():
    t = table("a = 1\n")
    with pytest.raises(AttributeError):
        t.names = frozenset()
