# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""abi_check's logic: will the compiled extensions of a package load and run
in this venv, on these GPUs, decided statically from their ELF files.

For every ELF file of the named packages: resolve DT_NEEDED as ld.so would
after ``import torch``; compare the CUDA major of cudart/cublas/nvrtc with
torch's; look up the undefined c10::/at::/torch:: symbols in torch's
libraries (GNU hash, like the loader); match the ``.nv_fatbin`` SM code
against the GPUs' compute capabilities; check the GLIBC_/GLIBCXX_ versions
required against the libraries that will provide them.
"""

from __future__ import annotations

import os
import platform
import re
import struct
import sys
import time

from ansible_collections.dflash.deploy.plugins.module_utils import findings as F
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.cuda_compat import (
    cuda_majors,
    format_cc,
    usable_code,
)
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError, ElfFile
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.fatbin import FatbinError, architectures
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.fatbin import scan as scan_fatbin
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldresolve import (
    Resolver,
    simulate_torch_import,
    split_path_list,
)
from ansible_collections.dflash.deploy.plugins.module_utils.elfload.loadplan import classify
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.closure import missing_names
from ansible_collections.dflash.deploy.plugins.module_utils.pyapi.modpath import find_module
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import normalize_name
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import (
    check_files,
    file_owners,
    import_owners,
    scan,
)
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.torch_facts import torch_facts
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import VenvError, locate

TORCH_SYMBOL = re.compile(r"^_Z(?:T[VIS])?N[rVKRO]*(?:3c10|2at|5torch|6caffe2)")
TORCH_LIB = re.compile(r"^lib(torch|c10|shm|caffe2)")
_SO = re.compile(r"\.so(\.\d+)*$")


def is_library_name(path):
    return bool(_SO.search(os.path.basename(path)))


def _version_key(v):
    prefix, _unused, num = v.partition("_")
    return prefix, tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.]", num))


def _short(path, site):
    try:
        rel = os.path.relpath(path, site)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class Context:
    def __init__(self, site, resolver, torch, gpu_ccs, features, python=None):
        self.site = site
        self.python = python
        self._interp = None
        self.resolver = resolver
        self.torch = torch
        self.gpu_ccs = gpu_ccs
        self.features = features or ()
        self.handles = {}
        self.verdefs = {}

    def interpreter_objects(self):
        """The venv interpreter (and libpython if it links one): the start of the global symbol scope."""
        if self._interp is None:
            self._interp = []
            if self.python and os.path.exists(self.python):
                exe = os.path.realpath(self.python)
                self._interp.append(exe)
                summary, _err = self.resolver.summary(exe)
                for name in (summary or {}).get("needed", ()):
                    if name.startswith("libpython"):
                        found, _via = self.resolver.search(name, summary)
                        if found:
                            self._interp.append(found)
        return self._interp

    def host_identity(self):
        """(class bits, byte order, machine) the venv's interpreter has (the loader's reference)."""
        if getattr(self, "_identity", None) is None:
            identity = None
            if self.python and os.path.exists(self.python):
                summary, _err = self.resolver.summary(os.path.realpath(self.python))
                identity = (summary or {}).get("identity")
            if identity is None:
                machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
                identity = (struct.calcsize("P") * 8, sys.byteorder, machine)
            self._identity = tuple(identity)
        return self._identity

    def open(self, path):
        h = self.handles.get(path)
        if h is None:
            h = ElfFile(path)
            self.handles[path] = h
        return h

    def close(self):
        for h in self.handles.values():
            h.close()
        self.handles = {}

    def version_defs(self, path):
        if path not in self.verdefs:
            try:
                self.verdefs[path] = self.open(path).version_defs()
            except ElfError:
                self.verdefs[path] = None
        return self.verdefs[path]


def find_package_files(site, dists, name):
    """(import package name, [ELF candidate paths], [owning distribution keys]) or None."""
    key = normalize_name(name)
    candidates = []
    if key in dists and not os.path.isdir(os.path.join(site, name)):
        dist = dists[key]
        files = []
        for p, _h, _s in dist.get("record", ()):
            if p.startswith("..") or not is_library_name(p):
                continue
            files.append(os.path.normpath(os.path.join(site, p)))
        pkg = dist["top_level"][0] if dist.get("top_level") else name
        # the other distributions claiming its import name too (the look-alike), as when named by import name
        owners = sorted({key} | {k for k, d in dists.items() if pkg in d.get("top_level", ())})
        return pkg, sorted(set(files)), owners
    pkg_dir = os.path.join(site, name)
    owners = sorted(k for k, d in dists.items() if name in d.get("top_level", ()))
    if os.path.isdir(pkg_dir):
        for root, dirs, files in os.walk(pkg_dir):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if is_library_name(f):
                    candidates.append(os.path.join(root, f))
        return name, candidates, owners
    single = [os.path.join(site, f) for f in sorted(os.listdir(site))
              if f.startswith(name + ".") and is_library_name(f)]
    if single or owners:
        return name, single, owners
    return None


_OPEN_FIXES = {"unreadable": "fix the file's permissions or ownership",
               "not_elf": "reinstall the distribution that owns it",
               "corrupt_elf": "reinstall the distribution that owns it (the file is damaged or truncated)"}


class _FileCheck:
    """The checks of one ELF file, in the order the loader meets the problems.

    Each step appends findings and fills ``info``; ``open`` says whether the
    file is an ELF object of this host's architecture worth the other steps.
    """

    def __init__(self, ctx, path, package, findings):
        self.ctx = ctx
        self.path = path
        self.package = package
        self.findings = findings
        site = ctx.site
        rel_pkg = os.path.relpath(path, os.path.join(site, package)) if package else os.path.basename(path)
        self.load, self.required, self.users = classify(package, rel_pkg, ctx.gpu_ccs, ctx.features)
        self.severity = F.severity_for_load(self.load, self.required)
        self.short = _short(path, site)
        self.info = {"path": path, "load": self.load, "required": self.required}
        self.elf = self.summary = self.closure = None
        self.resolved_direct = {}

    def add(self, kind, detail, fix=None, severity=None, **extra):
        self.findings.append(F.make(kind, self.short, detail, severity or self.severity, load=self.load, fix=fix,
                                    **extra))

    def open(self):
        """Readable ELF for this host's machine: False (with a finding) when the other steps cannot run."""
        path, short = self.path, self.short
        if os.path.islink(path) and not os.path.exists(path):
            self.add("broken_symlink", "%s is a symlink to %s, which does not exist" % (short, os.readlink(path)),
                     fix="reinstall the distribution that owns it")
            return False
        try:
            self.elf = self.ctx.open(path)
            summary, err = self.ctx.resolver.summary(path)
            if summary is None:
                raise err
        except ElfError as exc:
            fix = _OPEN_FIXES[exc.kind]
            if "not a regular file" in exc.detail:
                fix = "replace it with the library itself: reinstall the distribution that owns it"
            self.add(exc.kind, "%s: %s" % (short, exc.detail), fix=fix)
            return False
        self.summary = summary
        self.info.update({"soname": summary["soname"], "rpath": summary["rpath"], "runpath": summary["runpath"],
                          "machine": summary["machine"]})
        host = self.ctx.host_identity()
        if tuple(summary["identity"]) != host:
            self.add("wrong_architecture",
                     "%s is ELF %d-bit %s-endian %s, but this venv's Python is %d-bit %s-endian %s"
                     % ((short,) + tuple(summary["identity"]) + host),
                     fix="install the distribution's build for %s (%d-bit)" % (host[2], host[0]))
            return False
        if not summary.get("has_sections", True):
            self.add("symbols_unchecked", "%s has no section headers (the loader needs none): its symbols and "
                     "versions were not checked" % short, severity=F.INFO)
        return True

    def dependencies(self):
        """1. DT_NEEDED resolved as ld.so does after ``import torch``."""
        self.closure = self.ctx.resolver.closure(self.path)
        direct = self.closure["needed"].get(self.path, [])
        self.info["needed"] = [{"name": d["name"], "path": d["path"], "via": d["via"]} for d in direct]
        self.resolved_direct = dict((d["name"], d["path"]) for d in direct if d["path"])

    def cuda_major(self):
        """2. The CUDA major the file was built for versus torch's; returns the NEEDED names it explains."""
        majors = cuda_majors(self.summary["needed"])
        self.info["cuda_major"] = sorted(majors)[0] if len(majors) == 1 else (sorted(majors) or None)
        explained = set()
        torch = self.ctx.torch
        tmajor = torch.get("cuda_major") if torch else None
        if not majors or tmajor is None:
            return explained
        for major, names in sorted(majors.items()):
            if major == tmajor:
                continue
            explained.update(names)
            unresolved = [n for n in names if not self.resolved_direct.get(n)]
            # Name torch first: the kernel distributions pin a torch version, so
            # "the other kernel build" is only a fix if it was made for this torch.
            base = str(torch.get("version") or "").split("+", 1)[0]
            fix = ("install torch %s built for CUDA %d (local tag +cu%d*), or a %s build for CUDA %d made for "
                   "torch %s" % (base, major, major, self.package, tmajor, base))
            self.add("cuda_major_mismatch",
                     "%s needs %s (CUDA %d) but torch is %s (CUDA %s)%s" % (
                         self.short, names[0], major, torch.get("version"), torch.get("cuda"),
                         "; %s not found" % ", ".join(unresolved) if unresolved else ""),
                     fix=fix, needed=names, torch_cuda=torch.get("cuda"))
        return explained

    def missing_libraries(self, explained):
        """3. Libraries the loader cannot find, direct and transitive (those the CUDA step explained aside)."""
        path, short, site = self.path, self.short, self.ctx.site
        for miss in self.closure["missing"]:
            name = miss["name"]
            if name in explained and miss["requester"] == path:
                continue
            via = "" if miss["requester"] == path else " (needed by %s)" % _short(miss["requester"], site)
            if name == "libcuda.so.1":
                self.add("driver_missing", "%s needs libcuda.so.1, the NVIDIA driver's library, which is not found%s"
                         % (short, via), fix="install the NVIDIA driver (in a container: expose the driver "
                                             "libraries), or set system_library_dirs/system_root to the target "
                                             "host's libraries")
            elif TORCH_LIB.match(name) and not self.ctx.torch:
                self.add("torch_missing", "%s needs %s but torch is not installed in the venv" % (short, name),
                         fix="install torch (the version the kernel was built for)")
            else:
                self.add("library_not_found", "%s needs %s, which the loader cannot find%s" % (short, name, via),
                         fix="install the distribution that provides %s or add its directory to LD_LIBRARY_PATH "
                             "in environment" % name, searched=miss["searched"][:12])
        for err in self.closure["errors"]:
            if err.path != path:
                self.add("dependency_unreadable", "%s: dependency %s: %s" % (short, _short(err.path, site),
                                                                             err.detail),
                         fix="reinstall the distribution that owns it")

    def _load_scope(self):
        scope = list(self.ctx.interpreter_objects())
        for p in self.ctx.resolver.loaded_paths + self.closure["objects"]:
            if p != self.path and p not in scope:
                scope.append(p)
        return scope

    def _unresolved_symbols(self, undefined):
        """The undefined symbols no object in the load scope exports (an empty set when a scope object
        without section headers could hold them: an info finding says so)."""
        remaining = set(undefined)
        if not self.ctx.interpreter_objects():
            remaining = set(n for n in remaining if not n.startswith(("Py", "_Py")))
        blind = []  # objects in the scope whose exports cannot be read without section headers
        for p in self._load_scope():
            if not remaining:
                break
            try:
                handle = self.ctx.open(p)
                if not handle.has_sections:
                    blind.append(p)
                    continue
                remaining -= handle.lookup_defined(remaining)
            except ElfError:
                continue
        if remaining and blind:
            self.add("symbols_unchecked", "%s: %d undefined symbol(s) not found elsewhere may come from %s, which "
                     "has no section headers" % (self.short, len(remaining), _short(blind[0], self.ctx.site)),
                     severity=F.INFO)
            remaining = set()
        return remaining

    def undefined_symbols(self):
        """4. Python imports extensions with RTLD_NOW, so every non-weak undefined symbol must be exported by
        an object in the load scope (the interpreter, what torch loaded, the file's own dependencies)."""
        short, torch = self.short, self.ctx.torch
        try:
            undefined = self.elf.undefined_symbols()
        except ElfError as exc:
            self.add("corrupt_elf", "%s: cannot read dynamic symbols (%s)" % (short, exc.detail))
            undefined = []
        self.info["torch_symbols_needed"] = len([n for n in undefined if TORCH_SYMBOL.match(n)])
        self.info["symbols_needed"] = len(undefined)
        unresolved_deps = bool(self.closure["missing"]) or bool(self.closure["errors"])
        remaining = self._unresolved_symbols(undefined)
        torch_missing = sorted(n for n in remaining if TORCH_SYMBOL.match(n))
        other_missing = sorted(n for n in remaining if not TORCH_SYMBOL.match(n))
        self.info["torch_symbols_missing"] = len(torch_missing) if torch else None
        self.info["symbols_missing"] = len(remaining)
        if torch_missing and torch:
            sample = torch_missing[:5]
            abi_hint = any("RKSs" in n for n in torch_missing)
            self.add("undefined_symbol",
                     "%s needs %d c10/at/torch symbol%s that torch %s does not export (e.g. %s)%s" % (
                         short, len(torch_missing), "" if len(torch_missing) == 1 else "s", torch.get("version"),
                         sample[0], "; old C++ ABI (std::string as Ss)" if abi_hint else ""),
                     fix="the extension was built against another torch: install the %s build made for torch %s, "
                         "or the torch it was built for" % (self.package, torch.get("version")),
                     symbols=sample, count=len(torch_missing))
        if other_missing and not unresolved_deps:
            # only meaningful when every dependency resolved: otherwise the missing library explains them
            sample = other_missing[:5]
            driver = self.resolved_direct.get("libcuda.so.1")
            if driver and all(n.startswith("cu") for n in sample):
                fix = ("the NVIDIA driver's libcuda.so.1 (%s) is older than the extension needs: update the driver"
                       % driver)
            else:
                fix = "a dependency is older than the one the extension was built against: update it or rebuild"
            self.add("undefined_symbol",
                     "%s needs %d symbol%s that no library in its load scope exports (e.g. %s)" % (
                         short, len(other_missing), "" if len(other_missing) == 1 else "s", sample[0]),
                     fix=fix, symbols=sample, count=len(other_missing))

    def symbol_versions(self):
        """5. GLIBC_/GLIBCXX_ versions required versus those the resolved providers define."""
        try:
            needs = self.elf.version_needs()
        except (ElfError, ValueError, IndexError) as exc:
            needs = {}
            self.add("corrupt_elf", "%s: cannot read .gnu.version_r (%s)" % (self.short, exc))
        self.info["version_needs"] = dict((k, sorted(v, key=_version_key)[-1:]) for k, v in needs.items() if v)
        for lib, versions in sorted(needs.items()):
            provider = self.resolved_direct.get(lib)
            if not provider:
                continue
            defs = self.ctx.version_defs(provider)
            if defs is None:
                continue
            missing = sorted(set(v for v in versions if v not in defs), key=_version_key)
            if missing:
                have = sorted((d for d in defs if d.split("_", 1)[0] == missing[-1].split("_", 1)[0]),
                              key=_version_key)
                self.add("glibc_version_missing", "%s needs %s from %s but %s provides up to %s" % (
                    self.short, missing[-1], lib, provider, have[-1] if have else "none"),
                    fix="use a build made for this host's older C/C++ runtime, or a newer OS image",
                    versions=missing)

    def gpu_code(self):
        """6. The SM code in ``.nv_fatbin`` versus the compute capabilities of the GPUs that load the file."""
        rng = self.elf.section_range(".nv_fatbin")
        if rng is None:
            self.info["archs"] = []
            return
        try:
            entries = scan_fatbin(self.elf.mm, rng[0], rng[0] + rng[1])
        except FatbinError as exc:
            self.add("corrupt_elf", "%s: .nv_fatbin unreadable (%s)" % (self.short, exc))
            return
        archs = architectures(entries)
        self.info["archs"] = archs
        targets = self.users if self.users is not None else self.ctx.gpu_ccs
        if not targets:
            return
        for cc in [cc for cc in sorted(set(targets)) if not usable_code(entries, cc)]:
            major_minor = format_cc(cc)
            fix = "install a build with sm_%d%d code" % cc
            if self.load == "lazy" and not self.required:
                fix += ", or keep the feature that loads it unused (e.g. another attention backend)"
            self.add("no_gpu_code", "%s has no code for compute capability %s (has %s)" % (
                self.short, major_minor, ", ".join(archs) or "nothing"), fix=fix, compute_capability=major_minor)


def analyze_file(ctx, path, package, findings):
    """Per-file details; appends findings."""
    check = _FileCheck(ctx, path, package, findings)
    if check.open():
        check.dependencies()
        explained = check.cuda_major()
        check.missing_libraries(explained)
        check.undefined_symbols()
        check.symbol_versions()
        check.gpu_code()
    return check.info


def _record_missing_files(site, dist, pkg, gpu_ccs, features):
    """A finding when the distribution's RECORD lists files that are not on disk (an error when one of them is a
    library the GPUs load at import or a configured feature needs), else None."""
    state = check_files(site, dist)
    count = state["missing_count"] + state["broken_symlink_count"]
    if not count:
        return None
    sev = F.WARNING
    for p in [p for p in state["missing_files"] if is_library_name(p)]:
        rel = os.path.relpath(os.path.join(site, p), os.path.join(site, pkg))
        load, req, _u = classify(pkg, rel, gpu_ccs, features)
        if F.severity_for_load(load, req) == F.ERROR:
            sev = F.ERROR
    return F.make("record_missing_file", dist["dist_info"],
                  "RECORD of %s %s lists %d missing file%s (e.g. %s)" % (
                      dist["name"], dist["version"], count, "" if count == 1 else "s",
                      (state["missing_files"] + state["broken_symlinks"])[0]),
                  severity=sev, fix="reinstall %s" % dist["name"])


def _owner_conflict(pkg, owners_map):
    entry = owners_map.get(pkg)
    if not entry:
        return None
    return F.make("owner_conflict", pkg, "%s is claimed by %s; the files on disk match %s" % (
        pkg, " and ".join(entry["distributions"]), " and ".join(entry["on_disk"]) or "neither RECORD"),
        severity=F.WARNING, fix="uninstall the look-alike distribution",
        distributions=entry["distributions"], on_disk=entry["on_disk"])


# The modules each process of a package's server imports at start (python_api); a package not named here
# starts from itself.  SGLang's start-up imports much of its code inside functions (launch_server's
# run_server() imports the HTTP server; the scheduler process's TP worker imports the model runner in its
# __init__), so the modules its processes start from are named; the imports that the rest of the code makes
# only inside functions are checked too, as warnings.
ENTRY_MODULES = {"sglang": (
    "sglang.launch_server",                          # python -m sglang.launch_server
    "sglang.srt.entrypoints.http_server",            # its run_server(), the default HTTP mode
    "sglang.srt.managers.scheduler",                 # the scheduler process (run_scheduler_process)
    "sglang.srt.model_executor.model_runner",        # the scheduler's TP worker, when it starts
    "sglang.srt.managers.detokenizer_manager",       # the detokenizer process
)}


def _dist_label(dists, keys):
    """'sglang-kernel 0.4.2' (or two joined by 'or') for distribution keys."""
    return " or ".join("%s %s" % (dists[k]["name"], dists[k]["version"]) for k in keys if k in dists) or "?"


def _dist_names(dists, keys):
    return " or ".join(dists[k]["name"] for k in keys if k in dists) or "?"


def missing_name_finding(dists, miss, order=0):
    """The missing_python_name finding of one pyapi MissingName (a warning when the import is protected)."""
    where = "%s:%d" % (miss.importer, miss.line)
    importer = _dist_label(dists, miss.importer_owners)
    exporter = _dist_label(dists, miss.exporter_owners)
    if miss.submodule:
        detail = "%s imports %s.%s (%s), which %s does not have" % (importer, miss.module, miss.name, where, exporter)
    else:
        detail = "%s imports %s from %s (%s), which %s does not define" % (
            importer, miss.name, miss.module, where, exporter)
    if miss.protected:
        detail += " (under try/except ImportError: the server goes on without it)"
    elif miss.fallback:
        detail += " (in an except ImportError handler: it runs only when an import before it fails)"
    elif miss.lazy:
        detail += " (imported only when a function runs, not at server start)"
    fix = "install the %s version %s pins, or %s built for %s" % (
        _dist_names(dists, miss.exporter_owners), _dist_names(dists, miss.importer_owners),
        _dist_names(dists, miss.importer_owners), exporter)
    severity = F.WARNING if miss.protected or miss.fallback or miss.lazy else F.ERROR
    return F.make("missing_python_name", where, detail, severity, fix=fix, module=miss.module, name=miss.name,
                  distributions=list(miss.exporter_owners), load="lazy" if miss.lazy else "import", order=order)


def check_python_api(site, dists, pkg, owners):
    """python_api's findings and summary for the import package ``pkg`` (its claimants ``owners``)."""
    by_path, by_top = file_owners(dists)

    def owners_of(rel, top):
        return by_path.get(rel) or by_top.get(top) or ()

    entries = [e for e in ENTRY_MODULES.get(pkg, ()) if find_module(site, e) is not None] or [pkg]
    walked = missing_names(site, entries, owners, owners_of)
    found = [missing_name_finding(dists, m, i) for i, m in enumerate(walked.missing)]
    if walked.unparsed or walked.truncated:
        what = []
        if walked.unparsed:
            first = walked.unparsed[0]
            what.append("%d file%s not parsed (e.g. %s: %s)" % (
                len(walked.unparsed), "" if len(walked.unparsed) == 1 else "s", first.rel, first.reason))
        if walked.truncated:
            what.append("the walk stopped at %d modules" % walked.modules)
        found.append(F.make("python_api_incomplete", pkg, "python_api: the imports of %s were not all checked: %s"
                            % (pkg, "; ".join(what)), severity=F.INFO,
                            fix="run the module with a Python that parses the package's sources"))
    summary = {"entries": entries, "modules": walked.modules, "start_modules": walked.start,
               "missing": len(walked.missing),
               "unparsed": [u.rel for u in walked.unparsed[:5]], "truncated": walked.truncated}
    return found, summary


class _Package:
    """One entry of ``packages``: its files found, its distributions' state, then every file analysed."""

    def __init__(self, ctx, dists, venv, result, max_files, python_api=False):
        self.ctx = ctx
        self.dists = dists
        self.venv = venv
        self.result = result
        self.max_files = max_files
        self.python_api = python_api
        self._owners_map = None

    def owners_map(self):
        if self._owners_map is None:
            self._owners_map = import_owners(self.ctx.site, self.dists)
        return self._owners_map

    def check(self, name):
        findings, site, ctx = self.result["findings"], self.ctx.site, self.ctx
        if not _PACKAGE_NAME.match(name) or ".." in name:
            findings.append(F.make("package_not_found", name, "%r is not an import or distribution name (packages "
                                   "are names inside the venv, not paths)" % name,
                                   fix="name the package, e.g. sgl_kernel"))
            return
        found = find_package_files(site, self.dists, name)
        if found is None:
            findings.append(F.make("package_not_found", name, "%s is not installed in %s" % (name, self.venv),
                                   fix="install the distribution that provides %s" % name))
            return
        pkg, files, owners = found
        self.result["packages"][name] = {"import_name": pkg, "distributions": owners, "files": len(files)}
        if len(owners) > 1:
            findings.extend(f for f in [_owner_conflict(pkg, self.owners_map())] if f)
        for key in owners:
            findings.extend(f for f in [_record_missing_files(site, self.dists[key], pkg, ctx.gpu_ccs,
                                                              ctx.features)] if f)
        if not files:
            findings.append(F.make("package_not_found", name, "%s has no compiled extension files" % name,
                                   severity=F.INFO))
        for path in files[:self.max_files] if self.max_files else files:
            if not os.path.lexists(path):
                continue
            info = analyze_file(ctx, path, pkg, findings)
            info["package"] = name
            self.result["files"].append(info)
        if self.python_api:
            found, summary = check_python_api(site, self.dists, pkg, owners)
            findings.extend(found)
            self.result.setdefault("python_api", {})[name] = summary


def _torch_import(resolver, torch, site):
    """Load torch's libraries into the resolver as ``import torch`` does; what it loaded and missed."""
    report = simulate_torch_import(resolver, torch["path"], site, torch.get("cuda_major"))
    return {
        "loaded": len(resolver.loaded_paths),
        "preloaded": [_short(p, site) for p in report["preloaded"]],
        "missing": ["%s needs %s" % (_short(m["requester"], site), m["name"]) for m in report["missing"]],
    }


def _finish(result, t0):
    result["findings"] = F.sort_findings(result["findings"])
    result["compatible"] = not F.errors(result["findings"])
    result["msg"] = F.message(result["findings"])
    result["elapsed"] = round(time.monotonic() - t0, 3)
    return result


def check(venv, packages=("sgl_kernel",), gpu_ccs=None, environment=None, system_root="/",
          system_library_dirs=None, features=(), max_files=None, python_api=False):
    """The static verdict. Returns dict: compatible, msg, torch, files, findings, elapsed, ..."""
    t0 = time.monotonic()
    findings = []
    result = {"compatible": False, "torch": None, "files": [], "findings": findings, "packages": {}}
    try:
        v = locate(venv)
    except VenvError as exc:
        findings.append(F.make("venv_invalid", venv, exc.detail, fix="create the venv first or fix the path"))
        result["msg"] = F.message(findings)
        result["elapsed"] = round(time.monotonic() - t0, 3)
        return result
    site = v["site_packages"]
    result["site_packages"] = site
    dists = scan(site)
    torch = torch_facts(site, dists)
    result["torch"] = torch
    system = SystemLibraries(system_root or "/", system_library_dirs)
    resolver = Resolver(system, split_path_list((environment or {}).get("LD_LIBRARY_PATH")))
    result["system"] = {"source": system.source, "library_dirs": system.dirs if system.explicit else None,
                        "cache_error": system.cache_error}
    if torch:
        result["torch_import"] = _torch_import(resolver, torch, site)
    if gpu_ccs is None:
        findings.append(F.make("arch_check_skipped", None,
                               "no GPU compute capability known: the SM architecture check was skipped",
                               severity=F.INFO))
    ctx = Context(site, resolver, torch, gpu_ccs, features, v["python"])
    try:
        package = _Package(ctx, dists, venv, result, max_files, python_api)
        for name in packages:
            package.check(name)
    finally:
        ctx.close()
    return _finish(result, t0)
