# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Platform guards of ``if`` statements, evaluated as on a CUDA host.

SGLang chooses its kernels with tests such as ``if is_cuda():``,
``if _is_cuda:`` or ``elif _is_hip:``; on a CPU-only machine every such
branch is skipped, so an import under it fails only on the GPU host.  The
rule, kept small on purpose:

* ``is_cuda()``, ``is_cuda_alike()`` and the names ``_is_cuda``,
  ``_is_cuda_alike`` (also as an attribute, ``utils.is_cuda()``) are true;
* the same forms for ``hip``, ``xpu``, ``npu``, ``cpu``, ``musa`` and ``mps``
  are false, and so is ``TYPE_CHECKING`` (``typing.TYPE_CHECKING`` is false
  at run time);
* constants are what ``bool()`` makes of them; ``not``, ``and``, ``or``
  combine three-valued (false and anything is false, true or anything is
  true);
* anything else is unknown (None): both branches are taken as reachable.

Standard library only; Python 3.8 syntax (the modules run on host Pythons).
"""

import ast

TRUE_PLATFORMS = ("cuda", "cuda_alike")
FALSE_PLATFORMS = ("hip", "xpu", "npu", "cpu", "musa", "mps")


def _platform_names():
    table = {"TYPE_CHECKING": False}
    for platforms, value in ((TRUE_PLATFORMS, True), (FALSE_PLATFORMS, False)):
        for platform in platforms:
            table["is_" + platform] = value
            table["_is_" + platform] = value
    return table


CUDA_HOST = _platform_names()


def _name_of(node):
    """The name a Name or Attribute node ends in (``is_cuda`` of ``utils.is_cuda``), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def evaluate(test, table=None):
    """True, False or None (unknown) for the test expression of an ``if``/``elif``/``while``.

    Mirrors how Python takes a branch: the body runs when the test is true, the
    ``else`` when it is false (``and``/``or`` short-circuit, ``not`` negates).
    """
    table = CUDA_HOST if table is None else table
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        name = _name_of(test.func)
        return table.get(name) if name and name.startswith(("is_", "_is_")) else None
    if isinstance(test, (ast.Name, ast.Attribute)):
        name = _name_of(test)
        return table.get(name)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = evaluate(test.operand, table)
        return None if value is None else not value
    if isinstance(test, ast.BoolOp):
        values = [evaluate(v, table) for v in test.values]
        decisive = isinstance(test.op, ast.Or)  # True decides an `or`, False an `and`
        if decisive in values:
            return decisive
        if all(v is not None for v in values):
            return not decisive
        return None
    return None


def branches(test, table=None):
    """(body reachable, else reachable) for an ``if`` test: an unknown test leaves both reachable."""
    value = evaluate(test, table)
    return value is not False, value is not True
