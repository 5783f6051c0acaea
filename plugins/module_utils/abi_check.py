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
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import normalize_name
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.distributions import (
    check_files,
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

    def in_torch(self, path):
        if not self.torch:
            return False
        tdir = os.path.realpath(self.torch["path"]) + os.sep
        return os.path.realpath(path).startswith(tdir)


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
        return pkg, sorted(set(files)), [key]
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


def analyze_file(ctx, path, package, findings):
    """Per-file details; appends findings."""
    site = ctx.site
    rel_pkg = os.path.relpath(path, os.path.join(site, package)) if package else os.path.basename(path)
    load, required, users = classify(package, rel_pkg, ctx.gpu_ccs, ctx.features)
    sev = F.severity_for_load(load, required)
    short = _short(path, site)
    info = {"path": path, "load": load, "required": required}

    def add(kind, detail, fix=None, severity=None, **extra):
        f = F.make(kind, short, detail, severity or sev, load=load, fix=fix, **extra)
        findings.append(f)

    if os.path.islink(path) and not os.path.exists(path):
        add("broken_symlink", "%s is a symlink to %s, which does not exist" % (short, os.readlink(path)),
            fix="reinstall the distribution that owns it")
        return info
    try:
        elf = ctx.open(path)
        summary, _err = ctx.resolver.summary(path)
        if summary is None:
            raise _err
    except ElfError as exc:
        kind = exc.kind
        fix = {"unreadable": "fix the file's permissions or ownership",
               "not_elf": "reinstall the distribution that owns it",
               "corrupt_elf": "reinstall the distribution that owns it (the file is damaged or truncated)"}[kind]
        if "not a regular file" in exc.detail:
            fix = "replace it with the library itself: reinstall the distribution that owns it"
        add(kind, "%s: %s" % (short, exc.detail), fix=fix)
        return info
    info.update({"soname": summary["soname"], "rpath": summary["rpath"], "runpath": summary["runpath"],
                 "machine": summary["machine"]})
    host = ctx.host_identity()
    if tuple(summary["identity"]) != host:
        add("wrong_architecture", "%s is ELF %d-bit %s-endian %s, but this venv's Python is %d-bit %s-endian %s"
            % ((short,) + tuple(summary["identity"]) + host),
            fix="install the distribution's build for %s (%d-bit)" % (host[2], host[0]))
        return info
    if not summary.get("has_sections", True):
        add("symbols_unchecked", "%s has no section headers (the loader needs none): its symbols and versions "
            "were not checked" % short, severity=F.INFO)

    # 1. dependencies, as ld.so after import torch
    closure = ctx.resolver.closure(path)
    direct = closure["needed"].get(path, [])
    info["needed"] = [{"name": d["name"], "path": d["path"], "via": d["via"]} for d in direct]
    resolved_direct = dict((d["name"], d["path"]) for d in direct if d["path"])

    # 2. CUDA major versus torch's
    majors = cuda_majors(summary["needed"])
    info["cuda_major"] = sorted(majors)[0] if len(majors) == 1 else (sorted(majors) or None)
    explained = set()
    torch = ctx.torch
    tmajor = torch.get("cuda_major") if torch else None
    if majors and tmajor is not None:
        for major, names in sorted(majors.items()):
            if major == tmajor:
                continue
            explained.update(names)
            unresolved = [n for n in names if not resolved_direct.get(n)]
            # Name torch first: the kernel distributions pin a torch version, so
            # "the other kernel build" is only a fix if it was made for this torch.
            base = str(torch.get("version") or "").split("+", 1)[0]
            fix = ("install torch %s built for CUDA %d (local tag +cu%d*), or a %s build for CUDA %d made for "
                   "torch %s" % (base, major, major, package, tmajor, base))
            add("cuda_major_mismatch",
                "%s needs %s (CUDA %d) but torch is %s (CUDA %s)%s" % (
                    short, names[0], major, torch.get("version"), torch.get("cuda"),
                    "; %s not found" % ", ".join(unresolved) if unresolved else ""),
                fix=fix, needed=names, torch_cuda=torch.get("cuda"))

    # 3. missing libraries (direct and transitive)
    for miss in closure["missing"]:
        name = miss["name"]
        if name in explained and miss["requester"] == path:
            continue
        via = "" if miss["requester"] == path else " (needed by %s)" % _short(miss["requester"], site)
        if name == "libcuda.so.1":
            add("driver_missing", "%s needs libcuda.so.1, the NVIDIA driver's library, which is not found%s" % (
                short, via), fix="install the NVIDIA driver (in a container: expose the driver libraries), or "
                                 "set system_library_dirs/system_root to the target host's libraries")
        elif TORCH_LIB.match(name) and not torch:
            add("torch_missing", "%s needs %s but torch is not installed in the venv" % (short, name),
                fix="install torch (the version the kernel was built for)")
        else:
            add("library_not_found", "%s needs %s, which the loader cannot find%s" % (short, name, via),
                fix="install the distribution that provides %s or add its directory to LD_LIBRARY_PATH "
                    "in environment" % name, searched=miss["searched"][:12])
    for err in closure["errors"]:
        if err.path != path:
            add("dependency_unreadable", "%s: dependency %s: %s" % (short, _short(err.path, site), err.detail),
                fix="reinstall the distribution that owns it")

    # 4. undefined symbols: Python imports extensions with RTLD_NOW, so every non-weak undefined symbol must be
    #    exported by an object in the load scope (the interpreter, what torch loaded, the file's own dependencies)
    try:
        undefined = elf.undefined_symbols()
    except ElfError as exc:
        add("corrupt_elf", "%s: cannot read dynamic symbols (%s)" % (short, exc.detail))
        undefined = []
    wanted = [n for n in undefined if TORCH_SYMBOL.match(n)]
    info["torch_symbols_needed"] = len(wanted)
    info["symbols_needed"] = len(undefined)
    scope = list(ctx.interpreter_objects())
    for p in ctx.resolver.loaded_paths + closure["objects"]:
        if p != path and p not in scope:
            scope.append(p)
    unresolved_deps = bool(closure["missing"]) or bool(closure["errors"])
    remaining = set(undefined)
    if not ctx.interpreter_objects():
        remaining = set(n for n in remaining if not n.startswith(("Py", "_Py")))
    blind = []  # objects in the scope whose exports cannot be read without section headers
    for p in scope:
        if not remaining:
            break
        try:
            handle = ctx.open(p)
            if not handle.has_sections:
                blind.append(p)
                continue
            remaining -= handle.lookup_defined(remaining)
        except ElfError:
            continue
    if remaining and blind:
        add("symbols_unchecked", "%s: %d undefined symbol(s) not found elsewhere may come from %s, which has no "
            "section headers" % (short, len(remaining), _short(blind[0], site)), severity=F.INFO)
        remaining = set()
    torch_missing = sorted(n for n in remaining if TORCH_SYMBOL.match(n))
    other_missing = sorted(n for n in remaining if not TORCH_SYMBOL.match(n))
    info["torch_symbols_missing"] = len(torch_missing) if torch else None
    info["symbols_missing"] = len(remaining)
    if torch_missing and torch:
        sample = torch_missing[:5]
        abi_hint = any("RKSs" in n for n in torch_missing)
        add("undefined_symbol",
            "%s needs %d c10/at/torch symbol%s that torch %s does not export (e.g. %s)%s" % (
                short, len(torch_missing), "" if len(torch_missing) == 1 else "s", torch.get("version"), sample[0],
                "; old C++ ABI (std::string as Ss)" if abi_hint else ""),
            fix="the extension was built against another torch: install the %s build made for torch %s, or "
                "the torch it was built for" % (package, torch.get("version")),
            symbols=sample, count=len(torch_missing))
    if other_missing and not unresolved_deps:
        # only meaningful when every dependency resolved: otherwise the missing library explains them
        sample = other_missing[:5]
        driver = resolved_direct.get("libcuda.so.1")
        if driver and all(n.startswith("cu") for n in sample):
            fix = "the NVIDIA driver's libcuda.so.1 (%s) is older than the extension needs: update the driver" % driver
        else:
            fix = "a dependency is older than the one the extension was built against: update it or rebuild"
        add("undefined_symbol",
            "%s needs %d symbol%s that no library in its load scope exports (e.g. %s)" % (
                short, len(other_missing), "" if len(other_missing) == 1 else "s", sample[0]),
            fix=fix, symbols=sample, count=len(other_missing))

    # 5. GLIBC/GLIBCXX versions
    try:
        needs = elf.version_needs()
    except (ElfError, ValueError, IndexError) as exc:
        needs = {}
        add("corrupt_elf", "%s: cannot read .gnu.version_r (%s)" % (short, exc))
    info["version_needs"] = dict((k, sorted(v, key=_version_key)[-1:]) for k, v in needs.items() if v)
    for lib, versions in sorted(needs.items()):
        provider = resolved_direct.get(lib)
        if not provider:
            continue
        defs = ctx.version_defs(provider)
        if defs is None:
            continue
        missing = sorted(set(v for v in versions if v not in defs), key=_version_key)
        if missing:
            have = sorted((d for d in defs if d.split("_", 1)[0] == missing[-1].split("_", 1)[0]), key=_version_key)
            add("glibc_version_missing", "%s needs %s from %s but %s provides up to %s" % (
                short, missing[-1], lib, provider, have[-1] if have else "none"),
                fix="use a build made for this host's older C/C++ runtime, or a newer OS image",
                versions=missing)

    # 6. GPU code
    rng = elf.section_range(".nv_fatbin")
    if rng is not None:
        try:
            entries = scan_fatbin(elf.mm, rng[0], rng[0] + rng[1])
        except FatbinError as exc:
            entries = None
            add("corrupt_elf", "%s: .nv_fatbin unreadable (%s)" % (short, exc))
        if entries is not None:
            archs = architectures(entries)
            info["archs"] = archs
            targets = users if users is not None else ctx.gpu_ccs
            if targets:
                bad = [cc for cc in sorted(set(targets)) if not usable_code(entries, cc)]
                for cc in bad:
                    major_minor = format_cc(cc)
                    fix = "install a build with sm_%d%d code" % cc
                    if load == "lazy" and not required:
                        fix += ", or keep the feature that loads it unused (e.g. another attention backend)"
                    add("no_gpu_code", "%s has no code for compute capability %s (has %s)" % (
                        short, major_minor, ", ".join(archs) or "nothing"), fix=fix,
                        compute_capability=major_minor)
    else:
        info["archs"] = []
    return info


def check(venv, packages=("sgl_kernel",), gpu_ccs=None, environment=None, system_root="/",
          system_library_dirs=None, features=(), max_files=None):
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
    env = environment or {}
    system = SystemLibraries(system_root or "/", system_library_dirs)
    resolver = Resolver(system, split_path_list(env.get("LD_LIBRARY_PATH")))
    result["system"] = {"source": system.source, "library_dirs": system.dirs if system.explicit else None,
                        "cache_error": system.cache_error}
    if torch:
        report = simulate_torch_import(resolver, torch["path"], site, torch.get("cuda_major"))
        result["torch_import"] = {
            "loaded": len(resolver.loaded_paths),
            "preloaded": [_short(p, site) for p in report["preloaded"]],
            "missing": ["%s needs %s" % (_short(m["requester"], site), m["name"]) for m in report["missing"]],
        }
    if gpu_ccs is None:
        findings.append(F.make("arch_check_skipped", None,
                               "no GPU compute capability known: the SM architecture check was skipped",
                               severity=F.INFO))
    ctx = Context(site, resolver, torch, gpu_ccs, features, v["python"])
    owners_map = None
    try:
        for name in packages:
            if not _PACKAGE_NAME.match(name) or ".." in name:
                findings.append(F.make("package_not_found", name, "%r is not an import or distribution name (packages "
                                       "are names inside the venv, not paths)" % name,
                                       fix="name the package, e.g. sgl_kernel"))
                continue
            found = find_package_files(site, dists, name)
            if found is None:
                findings.append(F.make("package_not_found", name, "%s is not installed in %s" % (name, venv),
                                       fix="install the distribution that provides %s" % name))
                continue
            pkg, files, owners = found
            result["packages"][name] = {"import_name": pkg, "distributions": owners, "files": len(files)}
            if len(owners) > 1:
                if owners_map is None:
                    owners_map = import_owners(site, dists)
                entry = owners_map.get(pkg)
                if entry:
                    findings.append(F.make(
                        "owner_conflict", pkg,
                        "%s is claimed by %s; the files on disk match %s" % (
                            pkg, " and ".join(entry["distributions"]),
                            " and ".join(entry["on_disk"]) or "neither RECORD"),
                        severity=F.WARNING, fix="uninstall the look-alike distribution",
                        distributions=entry["distributions"], on_disk=entry["on_disk"]))
            for key in owners:
                state = check_files(site, dists[key])
                if state["missing_count"] or state["broken_symlink_count"]:
                    missing_libs = [p for p in state["missing_files"] if is_library_name(p)]
                    sev = F.WARNING
                    for p in missing_libs:
                        rel = os.path.relpath(os.path.join(site, p), os.path.join(site, pkg))
                        load, req, _u = classify(pkg, rel, gpu_ccs, features)
                        if F.severity_for_load(load, req) == F.ERROR:
                            sev = F.ERROR
                    findings.append(F.make(
                        "record_missing_file", dists[key]["dist_info"],
                        "RECORD of %s %s lists %d missing file%s (e.g. %s)" % (
                            dists[key]["name"], dists[key]["version"],
                            state["missing_count"] + state["broken_symlink_count"],
                            "" if state["missing_count"] + state["broken_symlink_count"] == 1 else "s",
                            (state["missing_files"] + state["broken_symlinks"])[0]),
                        severity=sev, fix="reinstall %s" % dists[key]["name"]))
            if not files:
                findings.append(F.make("package_not_found", name, "%s has no compiled extension files" % name,
                                       severity=F.INFO))
            for path in files[:max_files] if max_files else files:
                if not os.path.lexists(path):
                    continue
                info = analyze_file(ctx, path, pkg, findings)
                info["package"] = name
                result["files"].append(info)
    finally:
        ctx.close()
    result["findings"] = F.sort_findings(findings)
    result["compatible"] = not F.errors(findings)
    result["msg"] = F.message(result["findings"])
    result["elapsed"] = round(time.monotonic() - t0, 3)
    return result
