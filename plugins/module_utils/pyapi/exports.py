# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The names a module defines at module level, read from its AST (what
``from module import name`` can find in the module's namespace).

A name is bound at module level by ``def``, ``class``, assignment targets
(also in ``for``, ``with ... as``, ``except ... as``, ``:=`` and augmented or
annotated assignments with a value), ``import a.b`` (binds ``a``),
``import a as b`` and ``from m import a as b``, and ``global`` in a function
(the function binds it when called).  Every branch counts, whatever its guard:
a name bound on another platform only is still taken as defined, so the check
never reports a name the module might define.

A module whose namespace cannot be read from its text is *dynamic*: it has a
module-level ``__getattr__`` (PEP 562 answers any name), writes to
``globals()``/``vars()``/``sys.modules``, or calls ``exec``.  Star imports
(``from m import *``) are listed for the caller to follow (closure.py).

Standard library only; Python 3.8 syntax.
"""

import ast
from collections import deque
from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.imports import resolve_relative

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class ExportTable:
    """What one module defines.

    ``names``: bound at module level; ``all_names``: the literal ``__all__``
    (None when there is none, or it is not a list of strings); ``stars``:
    absolute modules of its star imports (None for one climbing past the top);
    ``dynamic``: why its namespace cannot be known from the text, or None.
    """

    names: frozenset
    all_names: Optional[frozenset]
    stars: Tuple[Optional[str], ...]
    dynamic: Optional[str]


def _strings(node):
    """The strings of a list/tuple literal of string constants, or None."""
    if isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _module_level_nodes(tree):
    """Every node executed in the module's own scope (function, class, lambda and comprehension bodies left out;
    the defined names themselves are kept by the caller)."""
    stack = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPES):
            # decorators, default values and base classes run in the module's scope; bodies do not
            inner = list(getattr(node, "decorator_list", ())) + list(getattr(node, "bases", ()))
            args = getattr(node, "args", None)
            if isinstance(args, ast.arguments):
                inner += [d for d in list(args.defaults) + list(args.kw_defaults) if d is not None]
            stack.extend(reversed(inner))
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _is_sys_modules(node):
    return (isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def _subscript_key(node):
    """The key expression of a subscript (Python 3.8 wraps it in ast.Index)."""
    key = node.slice
    return getattr(key, "value", key) if type(key).__name__ == "Index" else key


def _constant_key(node):
    key = _subscript_key(node)
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _guarded_by_membership(node, key, parents):
    """Whether ``node`` lies in the body of an ``if <key> in globals():`` (a write that only replaces a name
    the module already has, as sgl_kernel's debug wrappers do)."""
    wanted = ast.dump(key)
    child, parent = node, parents.get(node)
    while parent is not None:
        test = getattr(parent, "test", None)
        if isinstance(parent, ast.If) and child in parent.body and isinstance(test, ast.Compare) \
                and len(test.ops) == 1 and isinstance(test.ops[0], ast.In) and ast.dump(test.left) == wanted \
                and _is_namespace_call(test.comparators[0]):
            return True
        child, parent = parent, parents.get(parent)
    return False


def _is_namespace_call(node):
    """``globals()`` or ``vars()`` without arguments: the module's namespace itself."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "vars")
            and not node.args and not node.keywords)


_READING_METHODS = frozenset(("get", "keys", "items", "values", "copy", "__contains__"))


def _adds_names(call, parents):
    """Whether this use of ``globals()``/``vars()`` can add names the text does not show: reading it, a
    membership test, a write under a constant key (exports.py counts that name) or one guarded by
    ``if key in globals():`` cannot; anything else (``.update``, a computed key, passing it on) can."""
    parent = parents.get(call)
    if isinstance(parent, ast.Compare) and call in parent.comparators:
        return False
    if isinstance(parent, ast.Attribute) and parent.attr in _READING_METHODS:
        return False
    if isinstance(parent, ast.Subscript) and parent.value is call:
        if not isinstance(parent.ctx, ast.Store) or _constant_key(parent) is not None:
            return False
        return not _guarded_by_membership(parent, _subscript_key(parent), parents)
    return True


def _scan(tree):
    """One pass over every node, in ``ast.walk``'s order (breadth first): the names of the ``global``
    statements, and the nodes the namespace checks read (calls of a plain name, subscripts written to)."""
    global_names, found = [], []
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend(item for item in value if isinstance(item, ast.AST))
        if isinstance(node, ast.Global):
            global_names.extend(node.names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            found.append(node)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            found.append(node)
    return global_names, found


def _parents(tree):
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _dynamic_reason(tree, found):
    """Why the module's namespace is not readable from its text (anywhere in the file), or None; ``found``:
    _scan's nodes. The parent map is built only for a file that calls ``globals()``/``vars()``."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
            return "module-level __getattr__ (PEP 562)"
    parents = None
    for node in found:
        if isinstance(node, ast.Call):
            if node.func.id == "exec":
                return "exec() call"
            if node.func.id == "setattr" and node.args and _is_sys_modules_item(node.args[0]):
                return "setattr() on a sys.modules entry"
            if _is_namespace_call(node):
                parents = _parents(tree) if parents is None else parents
                if _adds_names(node, parents):
                    return "%s() written to" % node.func.id
        elif _is_sys_modules(node.value):
            return "assignment to sys.modules"
    return None


def _namespace_constant_keys(found):
    """Names written as ``globals()["name"] = ...`` (``found``: _scan's nodes)."""
    return [_constant_key(node) for node in found
            if isinstance(node, ast.Subscript) and _is_namespace_call(node.value) and _constant_key(node) is not None]


def _is_sys_modules_item(node):
    return isinstance(node, ast.Subscript) and _is_sys_modules(node.value)


def _all_literal(tree):
    """The literal ``__all__`` (assigned, ``+=``, ``.extend``/``.append``ed) as a list, or None."""
    names = None
    for node in tree.body:
        value = None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            value = _strings(node.value)
            if value is None:
                return None
            names = value
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            value = _strings(node.value)
            if value is None or names is None:
                return None
            names = names + value
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and isinstance(node.value.func.value, ast.Name)
              and node.value.func.value.id == "__all__" and names is not None):
            call = node.value
            if call.func.attr == "append" and len(call.args) == 1 and isinstance(call.args[0], ast.Constant):
                names = names + [call.args[0].value]
            elif call.func.attr == "extend" and len(call.args) == 1 and _strings(call.args[0]) is not None:
                names = names + _strings(call.args[0])
            else:
                return None
    return names


def export_table(tree, module, is_package=False):
    """The ExportTable of the parsed module ``module`` (``is_package`` for a package's ``__init__``)."""
    names = set()
    stars = []
    for node in _module_level_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".", 1)[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    stars.append(resolve_relative(module, is_package, node.level or 0, node.module or ""))
                else:
                    names.add(alias.asname or alias.name)
        elif type(node).__name__ in ("MatchAs", "MatchStar") and getattr(node, "name", None):
            names.add(node.name)
    global_names, found = _scan(tree)
    names.update(global_names)
    names.update(_namespace_constant_keys(found))
    all_names = _all_literal(tree)
    return ExportTable(frozenset(names), None if all_names is None else frozenset(all_names), tuple(stars),
                       _dynamic_reason(tree, found))


def star_names(table):
    """The names ``from module import *`` binds from this module's own namespace (its stars aside): ``__all__``
    when it is a literal, every name not starting with an underscore when there is no ``__all__``, None
    (unknown) when ``__all__`` is computed."""
    if table.all_names is not None:
        return table.all_names
    if "__all__" in table.names:
        return None
    return frozenset(n for n in table.names if not n.startswith("_"))
