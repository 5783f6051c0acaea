# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The import closure of a package's entry modules, and the names it takes
from other distributions that those do not define.

From the entry modules, every module the package's own distribution owns
that an import reaches is read (imports.py: the statements a CUDA host runs),
and so are the parent packages of each (``import a.b.c`` runs ``a`` and
``a.b`` first).  Modules of other distributions are not followed; the names
imported from them are checked instead, the way ``from X import name``
resolves (``_handle_fromlist``): ``name`` is an attribute of X's namespace
(exports.py), else the submodule ``X.name`` is imported.  A star import in
X is followed within X's top-level package.  Whenever X's namespace cannot
be known from its files (an extension module, a namespace package, a module
that is dynamic, a star import that cannot be followed, a file that does not
parse), nothing is reported: the check names only what certainly fails.

Standard library only; Python 3.8 syntax.
"""

import ast
import warnings
from dataclasses import dataclass
from typing import Tuple

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.exports import export_table, star_names
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.imports import import_sites
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.modpath import SOURCE, find_module

MAX_SOURCE_BYTES = 16 << 20   # the largest .py file read (real sglang's largest is under 1 MiB)
MAX_MODULES = 20000           # modules followed at most (real sglang 0.5.11 has about 2,000 files)
MAX_DEPTH = 100               # import chains read recursively up to this depth, the rest afterwards


@dataclass(frozen=True)
class MissingName:
    """``from module import name`` (or ``import module.name``) at ``importer``:``line``, where ``module``
    (file ``exporter``, of the distributions ``exporter_owners``) has no such name or submodule.
    ``submodule``: the statement imports ``module.name`` as a module.  ``protected``: inside a try whose
    handlers catch ImportError.  ``lazy``: the statement does not run when the server starts (it is in a
    function body, or in a module that only such a statement imports).  ``fallback``: it is in an
    ``except ImportError`` handler."""

    importer: str
    line: int
    module: str
    name: str
    exporter: str
    importer_owners: Tuple[str, ...]
    exporter_owners: Tuple[str, ...]
    protected: bool
    submodule: bool
    lazy: bool = False
    fallback: bool = False


@dataclass(frozen=True)
class Context:
    """How a module or statement is reached: ``start`` (when the server starts, not when a function is
    called), ``protected`` (an import on the way is inside a try catching ImportError: the failure is
    caught there) and ``fallback`` (an import on the way is in such an ``except`` handler)."""

    start: bool = True
    protected: bool = False
    fallback: bool = False

    def rank(self):
        """Stronger is worse for the server: at start beats lazily, unguarded beats guarded."""
        return (self.start, not (self.protected or self.fallback))

    def through(self, site, start=None):
        """The context of what ``site`` (an ImportSite) imports from a module reached in this one."""
        return Context(self.start if start is None else start, self.protected or site.protected,
                       self.fallback or site.fallback)


START = Context()


@dataclass(frozen=True)
class Unparsed:
    """A file of the closure that was not read: ``rel`` path and why."""

    rel: str
    reason: str


@dataclass(frozen=True)
class ClosureResult:
    """``modules``: how many modules of the package were read, ``start`` of them when the server starts;
    ``missing`` and ``unparsed`` in the order met; ``truncated``: True when MAX_MODULES stopped the walk."""

    modules: int
    start: int
    missing: Tuple[MissingName, ...]
    unparsed: Tuple[Unparsed, ...]
    truncated: bool


def parse_file(path, limit=MAX_SOURCE_BYTES):
    """The AST of a source file (bytes, so a PEP 263 coding line is honoured), or the reason it has none."""
    try:
        data = read_regular(path, limit)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    try:
        with warnings.catch_warnings():  # "invalid escape sequence" and the like are the package's business
            warnings.simplefilter("ignore")
            return ast.parse(data, path), None
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return None, "%s: %s" % (type(exc).__name__, exc)


class _Walk:
    def __init__(self, site, own, owners, max_modules):
        self.site = site
        self.own = frozenset(own)
        self.owners = owners            # rel path, top-level name -> frozenset of distribution keys
        self.max_modules = max_modules
        self.found = {}                 # module name -> ModuleFile or None
        self.parsed = {}                # rel -> (import sites, ExportTable), (None, None) when unparsed
        self.missing = {}               # (importer, line, module, name) -> MissingName, in the order met
        self.unparsed = []
        self.imported = {}              # module name -> Context.rank() of the strongest way it was reached
        self.deferred = []              # (module, Context) past MAX_DEPTH, read after the current chain
        self.later = []                 # (importer, ImportSite, Context): imports in function bodies
        self.truncated = False

    def module(self, name):
        if name not in self.found:
            self.found[name] = find_module(self.site, name)
        return self.found[name]

    def owners_of(self, mf):
        return frozenset(self.owners(mf.rel, mf.name.split(".", 1)[0]))

    def is_own(self, mf):
        return bool(self.owners_of(mf) & self.own)

    def is_foreign(self, mf):
        owners = self.owners_of(mf)
        return bool(owners) and not owners & self.own

    def facts(self, mf):
        """(import sites, ExportTable) of a source module, read once (its AST is not kept: the closure of a
        real server is about a thousand files); (None, None) when it does not parse."""
        if mf.rel not in self.parsed:
            tree, reason = parse_file(mf.path)
            if tree is None:
                self.unparsed.append(Unparsed(mf.rel, reason))
                self.parsed[mf.rel] = (None, None)
            else:
                self.parsed[mf.rel] = (import_sites(tree, mf.name, mf.is_package),
                                       export_table(tree, mf.name, mf.is_package))
        return self.parsed[mf.rel]

    def table(self, mf):
        return self.facts(mf)[1] if mf.kind == SOURCE else None

    def enter(self, name, ctx, depth):
        """Import ``name`` as Python does: its parent packages first (``import a.b`` runs ``a``), each of the
        package's own modules not imported yet read at once, depth first, before the importer goes on.  A
        module reached again in a stronger Context (unguarded where it was guarded) is read again in it."""
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            before = self.imported.get(prefix)
            if before is not None and before >= ctx.rank():
                continue
            mf = self.module(prefix)
            if mf is None or not self.is_own(mf):
                return
            if before is None and len(self.imported) >= self.max_modules:
                self.truncated = True
                return
            self.imported[prefix] = ctx.rank()
            if depth >= MAX_DEPTH:
                self.deferred.append((prefix, ctx))
            else:
                self.visit(prefix, ctx, depth + 1)

    def star_exports(self, name, top, seen):
        """The names ``from <name> import *`` binds, followed within the package ``top`` (None: unknown).

        The import statement's rule (language reference, 7.11): ``__all__`` when the module defines it,
        else every name in its namespace not starting with an underscore (its own star imports included).
        """
        if name is None or name.split(".", 1)[0] != top:
            return None
        if name in seen:  # a cycle adds nothing new
            return frozenset()
        mf = self.module(name)
        table = self.table(mf) if mf is not None and mf.kind == SOURCE else None
        if table is None or table.dynamic:
            return None
        own = star_names(table)
        if own is None or table.all_names is not None:
            return own
        out = set(own)
        for star in table.stars:
            below = self.star_exports(star, top, seen | {name})
            if below is None:
                return None
            out.update(n for n in below if not n.startswith("_"))
        return frozenset(out)

    def defines(self, mf, name):
        """Whether ``from <mf> import name`` finds ``name``: True, False, or None (cannot be known).

        ``importlib._bootstrap._handle_fromlist``: an attribute of the module, else (a package) the
        submodule ``<mf>.name`` is imported; the attribute comes from the module's own bindings or
        ``__all__`` or a star import it makes.
        """
        if mf.is_package and self.module(mf.name + "." + name) is not None:
            return True
        if mf.kind != SOURCE:
            return None
        table = self.table(mf)
        if table is None or table.dynamic:
            return None
        if name in table.names or (table.all_names is not None and name in table.all_names):
            return True
        unknown = False
        for star in table.stars:
            names = self.star_exports(star, mf.name.split(".", 1)[0], frozenset((mf.name,)))
            if names is None:
                unknown = True
            elif name in names:
                return True
        return None if unknown else False

    def has_submodule(self, parent, child):
        """False only when ``parent`` certainly has no submodule ``child``: submodules are searched on the
        package's ``__path__`` (``importlib._bootstrap._find_and_load_unlocked``), so a package that sets
        ``__path__``, is dynamic, is a namespace package or is no package is not judged (None)."""
        if not parent.is_package or parent.kind != SOURCE:
            return None
        if self.module(parent.name + "." + child) is not None:
            return True
        table = self.table(parent)
        if table is None or table.dynamic or "__path__" in table.names:
            return None
        return False

    def report(self, importer, parent, name, submodule, line, ctx):
        """Record a missing name; met again in a stronger context, it keeps its place and takes that one."""
        key = (importer.rel, line, parent.name, name)
        before = self.missing.get(key)
        if before is not None and Context(not before.lazy, before.protected, before.fallback).rank() >= ctx.rank():
            return
        self.missing[key] = MissingName(
            importer.rel, line, parent.name, name, parent.rel, tuple(sorted(self.owners_of(importer))),
            tuple(sorted(self.owners_of(parent))), ctx.protected, submodule, not ctx.start, ctx.fallback)

    def check_chain(self, importer, site, ctx):
        """Walk ``a``, ``a.b``, ... of the imported module, parents first as ``_find_and_load`` imports them;
        report a foreign package that lacks the next submodule.  Returns the ModuleFile of the whole module,
        or None when it was not found."""
        parts = site.module.split(".")
        parent = None
        for i in range(1, len(parts) + 1):
            mf = self.module(".".join(parts[:i]))
            if mf is None:
                if parent is not None and self.is_foreign(parent) and self.has_submodule(parent, parts[i - 1]) \
                        is False:
                    self.report(importer, parent, parts[i - 1], True, site.line, ctx)
                return None
            parent = mf
        return parent

    def handle(self, importer, site, ctx, depth):
        """One import statement of ``importer`` (``ctx``: the statement's own context): the package's own
        modules are read, the names taken from another distribution checked."""
        target = self.check_chain(importer, site, ctx)
        if target is None:
            return
        if self.is_own(target):
            self.enter(site.module, ctx, depth)
            for imported in site.names:
                if imported != "*" and self.module(site.module + "." + imported) is not None:
                    self.enter(site.module + "." + imported, ctx, depth)
        elif self.is_foreign(target):
            for imported in site.names:
                if imported != "*" and self.defines(target, imported) is False:
                    self.report(importer, target, imported, False, site.line, ctx)

    def visit(self, name, ctx, depth):
        mf = self.module(name)
        sites = self.facts(mf)[0] if mf is not None and mf.kind == SOURCE else None
        for site in sites or ():
            if not site.module:
                continue
            if ctx.start and site.in_function:
                # runs when the function is called: after the start closure is whole
                self.later.append((mf, site, ctx.through(site, start=False)))
            else:
                self.handle(mf, site, ctx.through(site), depth)

    def drain(self):
        while self.deferred:
            name, ctx = self.deferred.pop(0)
            self.visit(name, ctx, 0)

    def run(self, entries):
        """The modules imported at start, depth first from each entry in turn (Python's order, so the first
        missing name met is the one the server stops at); then the imports made inside functions."""
        for entry in entries:
            self.enter(entry, START, 0)
            self.drain()
        start_modules = sum(1 for rank in self.imported.values() if rank[0])
        done = 0
        while done < len(self.later):  # reading a lazy module adds its own function-body imports
            importer, site, ctx = self.later[done]
            done += 1
            self.handle(importer, site, ctx, 0)
            self.drain()
        return ClosureResult(len(self.imported), start_modules, tuple(self.missing.values()),
                             tuple(self.unparsed), self.truncated)


def missing_names(site, entries, own, owners, max_modules=MAX_MODULES):
    """Walk the import closure of ``entries`` (dotted module names) in the site-packages ``site``.

    ``own``: the distribution keys whose modules are followed; ``owners(rel, top_level)``: the distribution
    keys that own the file ``rel`` (its RECORD, else the claimants of its top-level import name).
    Returns a ClosureResult.
    """
    return _Walk(site, own, owners, max_modules).run(entries)
