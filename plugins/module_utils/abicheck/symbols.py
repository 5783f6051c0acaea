# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does the load scope export every symbol the file leaves undefined, above all the c10::/at::/torch::
symbols the installed libtorch/libc10 must provide?

Python opens extensions with ``dlopen(RTLD_NOW)``, so every non-weak undefined symbol is bound at
load time, or the load fails (``undefined symbol: ...``).  The loader looks in the global scope
(the executable and its DT_NEEDED, then what was opened RTLD_GLOBAL: torch's libraries) and then
in the file's own local scope (its dependencies, breadth first).  Lookups go through each object's
GNU hash table and version information as ld.so's do (elfload/elf.py ``lookup_defined``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.abicheck.problem import Problem, short_path
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError

# Itanium C++ ABI names in the c10/at/torch/caffe2 namespaces (functions, vtables, typeinfo)
TORCH_SYMBOL = re.compile(r"^_Z(?:T[VIS])?N[rVKRO]*(?:3c10|2at|5torch|6caffe2)")
SAMPLE = 5  # symbols named per finding


@dataclass(frozen=True)
class Lookup:
    """``remaining``: undefined symbols no object of the scope exports; ``blind``: objects of the scope whose
    exports cannot be read (no section headers)."""

    remaining: frozenset[str]
    blind: tuple[str, ...] = ()


@dataclass(frozen=True)
class SymbolCheck:
    """How many symbols the file leaves undefined (``needed``, ``torch_needed`` of them torch's), how many
    no object exports (``missing``; ``torch_missing``, None without torch to compare with), ``problems``."""

    torch_needed: int
    needed: int
    torch_missing: int | None
    missing: int
    problems: tuple[Problem, ...] = ()

    def report(self):
        """The counts a playbook registers, in the order they are reported."""
        return {"torch_symbols_needed": self.torch_needed, "symbols_needed": self.needed,
                "torch_symbols_missing": self.torch_missing, "symbols_missing": self.missing}


def is_torch_symbol(name):
    return bool(TORCH_SYMBOL.match(name))


def load_scope(interpreter, loaded, objects, path):
    """The objects searched for the file's symbols, in the loader's order: the interpreter (and libpython),
    what ``import torch`` loaded, then the file's own closure; the file itself left out (its own
    definitions never stand in for a versioned reference to a dependency)."""
    scope = list(interpreter)
    for p in list(loaded) + list(objects):
        if p != path and p not in scope:
            scope.append(p)
    return scope


def look_up(process, scope, undefined):
    """The ``undefined`` names that no object of ``scope`` exports.  Without the venv's interpreter to read,
    Python's own symbols (Py*, _Py*) are taken as present."""
    remaining = set(undefined)
    if not process.interpreter_objects():
        remaining = set(n for n in remaining if not n.startswith(("Py", "_Py")))
    blind = []  # objects in the scope whose exports cannot be read without section headers
    for p in scope:
        if not remaining:
            break
        try:
            handle = process.open(p)
            if not handle.has_sections:
                blind.append(p)
                continue
            remaining -= handle.lookup_defined(remaining)
        except ElfError:
            continue
    return Lookup(frozenset(remaining), tuple(blind))


def unchecked(short, lookup, site):
    """The info problem when symbols found nowhere else may come from an object without section headers."""
    return Problem("symbols_unchecked", "%s: %d undefined symbol(s) not found elsewhere may come from %s, which "
                   "has no section headers" % (short, len(lookup.remaining), short_path(lookup.blind[0], site)),
                   severity=F.INFO)


def torch_symbols_missing(short, names, torch, package):
    """c10/at/torch symbols the installed torch does not export: the extension was built against another
    torch (``RKSs``: the pre-C++11 ABI's std::string)."""
    sample = names[:SAMPLE]
    abi_hint = any("RKSs" in n for n in names)
    return Problem("undefined_symbol",
                   "%s needs %d c10/at/torch symbol%s that torch %s does not export (e.g. %s)%s" % (
                       short, len(names), "" if len(names) == 1 else "s", torch.get("version"),
                       sample[0], "; old C++ ABI (std::string as Ss)" if abi_hint else ""),
                   fix="the extension was built against another torch: install the %s build made for torch %s, "
                       "or the torch it was built for" % (package, torch.get("version")),
                   extra=(("symbols", sample), ("count", len(names))))


def other_symbols_missing(short, names, driver):
    """Other symbols no library of the scope exports: an older dependency, or an older driver when every
    sampled name is a driver API call (cu*) and libcuda.so.1 (``driver``) was found."""
    sample = names[:SAMPLE]
    if driver and all(n.startswith("cu") for n in sample):
        fix = ("the NVIDIA driver's libcuda.so.1 (%s) is older than the extension needs: update the driver"
               % driver)
    else:
        fix = "a dependency is older than the one the extension was built against: update it or rebuild"
    return Problem("undefined_symbol",
                   "%s needs %d symbol%s that no library in its load scope exports (e.g. %s)" % (
                       short, len(names), "" if len(names) == 1 else "s", sample[0]),
                   fix=fix, extra=(("symbols", sample), ("count", len(names))))


def undefined_symbols(process, elf, path, short, deps, package):
    """Look every non-weak undefined symbol of ``elf`` up in its load scope (``deps``: its Dependencies).
    Symbols other than torch's are reported only when every dependency resolved: otherwise the missing
    library explains them."""
    problems = []
    try:
        undefined = elf.undefined_symbols()
    except ElfError as exc:
        problems.append(Problem("corrupt_elf", "%s: cannot read dynamic symbols (%s)" % (short, exc.detail)))
        undefined = []
    torch = process.torch
    scope = load_scope(process.interpreter_objects(), process.resolver.loaded_paths, deps.objects, path)
    lookup = look_up(process, scope, undefined)
    remaining = lookup.remaining
    if remaining and lookup.blind:
        problems.append(unchecked(short, lookup, process.site))
        remaining = frozenset()
    torch_missing = sorted(n for n in remaining if is_torch_symbol(n))
    other_missing = sorted(n for n in remaining if not is_torch_symbol(n))
    if torch_missing and torch:
        problems.append(torch_symbols_missing(short, torch_missing, torch, package))
    if other_missing and not deps.incomplete:
        problems.append(other_symbols_missing(short, other_missing, deps.resolved().get("libcuda.so.1")))
    return SymbolCheck(torch_needed=len([n for n in undefined if is_torch_symbol(n)]), needed=len(undefined),
                       torch_missing=len(torch_missing) if torch else None, missing=len(remaining),
                       problems=tuple(problems))
