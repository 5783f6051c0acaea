# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The import statements of one module that run on a CUDA host, read from its AST.

Every ``import`` and ``from ... import`` statement counts, at module level and
inside functions and classes (a function's import runs when the server calls
it: ``launch_server.run_server`` imports the HTTP server that way), except
those under a branch that guards.py evaluates false.  Relative imports are
made absolute by the rule of ``importlib.util.resolve_name``.  An import in
the body of a ``try`` whose handlers catch ImportError (``ImportError``,
``ModuleNotFoundError``, ``Exception``, ``BaseException`` or a bare
``except``) is *protected*: when it fails the module goes on; one in such a
handler is a *fallback*: it runs only when an import before it failed.

Standard library only; Python 3.8 syntax.
"""

import ast
from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.guards import branches

CATCHES_IMPORT_ERROR = frozenset(("ImportError", "ModuleNotFoundError", "Exception", "BaseException"))


@dataclass(frozen=True)
class ImportSite:
    """One imported module: ``names`` are the from-import's names (empty for ``import a.b``; ``*`` for a star).

    ``module`` is absolute, or None when a relative import climbs above the top-level package.
    ``in_function``: the statement is in a function body, so it runs when the function is called, not when
    the module is imported (a class body runs at import).  ``fallback``: it is in the handler of an
    ``except ImportError``, so it runs only when an import before it failed.
    """

    module: Optional[str]
    names: Tuple[str, ...]
    line: int
    protected: bool = False
    in_function: bool = False
    fallback: bool = False


def resolve_relative(module, is_package, level, target):
    """The absolute name of ``from <level dots><target> import`` in ``module``, or None past the top.

    ``importlib.util.resolve_name``: the package of a module is its parent, of a
    package itself; each dot past the first climbs one package up.
    """
    if level == 0:
        return target
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level - 1 > len(parts) - 1 or not parts:
        return None
    base = parts[:len(parts) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def catches_import_error(handler):
    """Whether an ``except`` clause catches ImportError (a bare ``except``, a listed base class, a tuple of them)."""
    kind = handler.type
    if kind is None:
        return True
    candidates = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    for node in candidates:
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if name in CATCHES_IMPORT_ERROR:
            return True
    return False


def _sites_of(node, where, flags):
    if isinstance(node, ast.Import):
        return [ImportSite(alias.name, (), node.lineno, *flags) for alias in node.names]
    absolute = resolve_relative(where[0], where[1], node.level or 0, node.module or "")
    return [ImportSite(absolute, tuple(alias.name for alias in node.names), node.lineno, *flags)]


def _children(node):
    """The statement lists under a compound statement (bodies, handlers, match cases), in source order."""
    for _name, value in ast.iter_fields(node):
        if isinstance(value, list) and value and isinstance(value[0], (ast.stmt, ast.excepthandler)):
            yield value
        elif isinstance(value, list) and value and hasattr(value[0], "pattern"):  # match cases (3.10+)
            for case in value:
                yield case.body


def _walk(stmts, where, flags, out):
    """``where``: (module, is_package) of the file; ``flags``: (protected, in_function, fallback) here."""
    protected, in_function, fallback = flags
    for node in stmts:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.extend(_sites_of(node, where, flags))
        elif isinstance(node, (ast.If, ast.While)):
            body, orelse = branches(node.test)
            if body:
                _walk(node.body, where, flags, out)
            if orelse:
                _walk(node.orelse, where, flags, out)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            catching = [catches_import_error(h) for h in node.handlers]
            _walk(node.body, where, (protected or any(catching), in_function, fallback), out)
            for handler, catches in zip(node.handlers, catching):
                _walk(handler.body, where, (protected, in_function, fallback or catches), out)
            _walk(node.orelse, where, flags, out)
            _walk(node.finalbody, where, flags, out)
        else:
            # a function's body runs when it is called: a try around the def does not guard it
            define = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            inner = (False, True, False) if define else flags
            for stmts_below in _children(node):
                _walk(stmts_below, where, inner, out)


def import_sites(tree, module, is_package=False):
    """Every ImportSite of the parsed module ``module`` (a package's ``__init__`` when ``is_package``), in
    source order, leaving out the branches a CUDA host does not take."""
    out = []
    _walk(tree.body, (module, is_package), (False, False, False), out)
    return tuple(out)
