# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resolve DT_NEEDED the way glibc's ld.so does, inside a Python process that
has already imported torch.

Search order for a name without '/', as in ld.so(8):

1. an object already loaded under that SONAME (or requested by that name):
   after ``import torch`` that is torch/lib and the CUDA libraries torch
   pulled in from the venv's ``nvidia/*/lib``;
2. DT_RPATH of the requesting object and of the objects that loaded it (only
   when the requester has no DT_RUNPATH);
3. LD_LIBRARY_PATH (from the environment the service will run with);
4. DT_RUNPATH of the requesting object;
5. the system: ld.so cache and default directories (or an explicit list).

``$ORIGIN`` expands to the directory of the requesting object.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re

from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import ElfError, read_summary
from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_text


def split_path_list(value):
    """Directories of a ':'-separated list ('' entries mean the current directory to ld.so; dropped)."""
    if not value:
        return []
    return [p for p in value.replace(";", ":").split(":") if p]


def expand_tokens(entry, origin, machine="x86_64"):
    lib = "lib64" if machine in ("x86_64", "aarch64", "ppc64", "s390") else "lib"
    for token, val in (("${ORIGIN}", origin), ("$ORIGIN", origin), ("${LIB}", lib), ("$LIB", lib),
                       ("${PLATFORM}", machine), ("$PLATFORM", machine)):
        entry = entry.replace(token, val)
    return os.path.normpath(entry)


class Resolver:
    """Library resolution state for one (simulated) process.

    ``loaded``: name -> path of objects already in the process (torch's).
    """

    def __init__(self, system, ld_library_path=None, cwd="/"):
        self.system = system
        self.cwd = cwd
        self.ld_library_path = list(ld_library_path or [])
        self.loaded = {}
        self.loaded_paths = []
        self._summaries = {}

    # -- reading ---------------------------------------------------------
    def summary(self, path):
        """read_summary(path) cached by path; returns (summary, None) or (None, ElfError)."""
        key = path
        if key not in self._summaries:
            try:
                self._summaries[key] = (read_summary(path), None)
            except ElfError as exc:
                self._summaries[key] = (None, exc)
        return self._summaries[key]

    # -- search ------------------------------------------------------------
    def search(self, name, requester, chain=(), extra_loaded=None):
        """(path, via) for a DT_NEEDED ``name`` of ``requester`` (a summary dict); (None, searched) if absent."""
        machine = requester.get("machine", "x86_64")
        if "/" in name:
            # the loader's rule: a name with a slash is a path, after $ORIGIN-style expansion, and a relative
            # one is taken from the process's working directory (systemd's default is /), not the requester's
            path = expand_tokens(name, os.path.dirname(requester["path"]), machine) if "$" in name else name
            if not os.path.isabs(path):
                path = os.path.normpath(os.path.join(self.cwd, path))
            return (path, "path") if os.path.exists(path) else (None, [path])
        if extra_loaded and name in extra_loaded:
            return extra_loaded[name], "loaded"
        if name in self.loaded:
            return self.loaded[name], "loaded by torch"
        searched = []
        want = requester.get("identity")

        def try_dirs(dirs, origin, via):
            for d in dirs:
                d = expand_tokens(d, origin, machine)
                searched.append(d)
                cand = os.path.join(d, name)
                if os.path.exists(cand):
                    summary, _err = self.summary(cand)
                    if want and summary is not None and summary.get("identity") not in (None, want):
                        # the loader skips an object of another class, byte order or machine and searches on
                        searched.append("%s (skipped: ELF %d-bit %s-endian %s)" % ((cand,) + summary["identity"]))
                        continue
                    return cand, via
            return None

        if not requester.get("runpath"):
            for obj in (requester,) + tuple(chain):
                if obj.get("rpath"):
                    hit = try_dirs(split_path_list(obj["rpath"]), os.path.dirname(obj["path"]), "rpath")
                    if hit:
                        return hit
        hit = try_dirs(self.ld_library_path, "", "LD_LIBRARY_PATH")
        if hit:
            return hit
        if requester.get("runpath"):
            hit = try_dirs(split_path_list(requester["runpath"]), os.path.dirname(requester["path"]), "runpath")
            if hit:
                return hit
        path = self.system.find(name, machine)
        if path:
            return path, "system"
        searched.append(self.system.describe())
        return None, searched

    # -- closures ------------------------------------------------------------
    def closure(self, path, commit=False):
        """Load ``path`` and its dependencies (breadth first, like ld.so).

        Returns dict: objects (paths in load order), needed ({path: [{name,
        path, via}]}), missing ([{requester, name, searched}]), errors
        ([ElfError] for dependencies that cannot be read).  With ``commit``
        the objects join ``loaded`` (what torch's import leaves behind).
        """
        result = {"objects": [], "needed": {}, "missing": [], "errors": []}
        root, err = self.summary(path)
        if err is not None:
            result["errors"].append(err)
            return result
        local = {}
        if root.get("soname"):
            local[root["soname"]] = path
        queue = [(root, ())]
        seen = set([os.path.realpath(path)])
        result["objects"].append(path)
        while queue:
            obj, chain = queue.pop(0)
            deps = []
            for name in obj["needed"]:
                found, via = self.search(name, obj, chain, local)
                if found is None:
                    result["missing"].append({"requester": obj["path"], "name": name, "searched": via})
                    deps.append({"name": name, "path": None, "via": None})
                    continue
                deps.append({"name": name, "path": found, "via": via})
                local.setdefault(name, found)
                real = os.path.realpath(found)
                if real in seen:
                    continue
                seen.add(real)
                dep, derr = self.summary(found)
                if derr is not None:
                    result["errors"].append(derr)
                    continue
                if dep.get("soname"):
                    local.setdefault(dep["soname"], found)
                result["objects"].append(found)
                if via != "loaded by torch":
                    queue.append((dep, (obj,) + chain))
            result["needed"][obj["path"]] = deps
        if commit:
            for name, p in local.items():
                self.loaded.setdefault(name, p)
            for p in result["objects"]:
                if p not in self.loaded_paths:
                    self.loaded_paths.append(p)
        return result


# torch's __init__ preloads CUDA libraries from site-packages/nvidia (order matters: it stops at
# the first one it cannot find).  Read from torch's own __init__.py when possible; this is 2.11's list.
DEFAULT_TORCH_PRELOADS = (
    ("cublas", "libcublasLt.so.*[0-9]"), ("cublas", "libcublas.so.*[0-9]"), ("cudnn", "libcudnn.so.*[0-9]"),
    ("cuda_nvrtc", "libnvrtc.so.*[0-9]"), ("cuda_nvrtc", "libnvrtc-builtins.so.*[0-9]"),
    ("cuda_runtime", "libcudart.so.*[0-9]"), ("cuda_cupti", "libcupti.so.*[0-9]"), ("cufft", "libcufft.so.*[0-9]"),
    ("curand", "libcurand.so.*[0-9]"), ("nvjitlink", "libnvJitLink.so.*[0-9]"),
    ("cusparse", "libcusparse.so.*[0-9]"), ("cusparselt", "libcusparseLt.so.*[0-9]"),
    ("cusolver", "libcusolver.so.*[0-9]"), ("nccl", "libnccl.so.*[0-9]"),
    ("nvshmem", "libnvshmem_host.so.*[0-9]"), ("cufile", "libcufile.so.*[0-9]"),
)
TORCH_MAIN_LIBRARIES = ("libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so", "libtorch.so")
_PAIR = re.compile(r"""\(\s*["']([\w.+-]+)["']\s*,\s*["'](lib[^"']+)["']\s*\)""")


def torch_preload_plan(torch_dir):
    """(pairs, always): torch's (folder, pattern) preload list and whether it preloads even when its
    libraries loaded fine (torch >= 2.6 does, once libcudart is in the process)."""
    try:
        text = read_text(os.path.join(torch_dir, "__init__.py"), 16 << 20)
    except OSError:
        return list(DEFAULT_TORCH_PRELOADS), False
    pairs = [(a, b) for a, b in _PAIR.findall(text) if "*" in b or "?" in b]
    always = '"libcudart.so" not in _maps' in text or "'libcudart.so' not in _maps" in text
    return (pairs or list(DEFAULT_TORCH_PRELOADS)), always


def torch_entry_points(torch_dir):
    """The objects ``import torch`` opens: libtorch_global_deps (RTLD_GLOBAL), torch/_C and its main libraries."""
    out = []
    gd = os.path.join(torch_dir, "lib", "libtorch_global_deps.so")
    if os.path.exists(gd):
        out.append(gd)
    out.extend(sorted(glob.glob(os.path.join(torch_dir, "_C.*.so")) + glob.glob(os.path.join(torch_dir, "_C.so"))))
    for name in TORCH_MAIN_LIBRARIES:
        p = os.path.join(torch_dir, "lib", name)
        if os.path.exists(p):
            out.append(p)
    return out


def _preload_candidates(site_packages, folder, pattern, cuda_major):
    dirs = [os.path.join(site_packages, "nvidia", folder, "lib")]
    if cuda_major:
        dirs.append(os.path.join(site_packages, "nvidia", "cu%s" % cuda_major, "lib"))
    dirs.append(os.path.join(site_packages, folder, "lib"))
    out = []
    for d in dirs:
        out.extend(sorted(glob.glob(os.path.join(d, pattern))))
    return out


def simulate_torch_import(resolver, torch_dir, site_packages, cuda_major=None):
    """Fill ``resolver.loaded`` with what ``import torch`` loads; returns a report dict.

    Follows torch's own rules: its libraries load through their RPATH; CUDA
    libraries are preloaded from ``nvidia/*/lib`` when that fails (all torch
    versions) or always once libcudart is loaded (torch >= 2.6), in the
    order of torch's list, stopping at the first one that is absent.
    """
    report = {"entry_points": [], "missing": [], "errors": [], "preloaded": []}
    entries = torch_entry_points(torch_dir)
    report["entry_points"] = entries
    pairs, always = torch_preload_plan(torch_dir)
    first = [resolver.closure(entry, commit=False) for entry in entries]
    missing_names = set(m["name"] for r in first for m in r["missing"])
    failed = any(any(fnmatch.fnmatch(n, pat) for _f, pat in pairs) for n in missing_names)
    if failed:
        # torch's except-branch preloads before retrying
        for folder, pattern in pairs:
            cands = _preload_candidates(site_packages, folder, pattern, cuda_major)
            if cands:
                _preload(resolver, cands[0], report)
    for entry in entries:
        res = resolver.closure(entry, commit=True)
        report["missing"].extend(res["missing"])
        report["errors"].extend(str(e) for e in res["errors"])
    if always and not failed and any(n.startswith("libcudart.so") for n in resolver.loaded):
        for folder, pattern in pairs:
            cands = _preload_candidates(site_packages, folder, pattern, cuda_major)
            if not cands:
                break
            _preload(resolver, cands[0], report)
    return report


def _preload(resolver, path, report):
    res = resolver.closure(path, commit=True)
    summary, _err = resolver.summary(path)
    names = [os.path.basename(path)]
    if summary and summary.get("soname"):
        names.append(summary["soname"])
    for n in names:
        resolver.loaded.setdefault(n, path)
    report["preloaded"].append(path)
    return res
