"""Build small real ELF objects for the pkg_probe/abi_check tests (gcc, nvcc), cached per session.

Imported by the tests as a plain module (pytest puts this directory on sys.path).
"""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

_ROOT = Path(tempfile.mkdtemp(prefix="dflash-abi-native-"))
atexit.register(shutil.rmtree, _ROOT, True)

KERNEL_CU = r"""
__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }
extern "C" void launch(float *x) { k<<<1, 32>>>(x); }
"""


def root() -> Path:
    return _ROOT


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def build_lib(out: Path, source: str, soname: str | None = None, libs=(), lib_dirs=(), rpath=None,
              runpath=False, version_script: str | None = None, extra_objects=(), extra=()) -> Path:
    """gcc -shared a C source into ``out``; ``libs`` are paths linked by their SONAME."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(out.name.replace(".", "_") + ".c")
    src.write_text(source)
    cmd = ["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *map(str, extra_objects)]
    if soname:
        cmd.append("-Wl,-soname," + soname)
    if version_script:
        vs = out.with_name(out.name.replace(".", "_") + ".map")
        vs.write_text(version_script)
        cmd.append("-Wl,--version-script=" + str(vs))
    for lib in libs:
        cmd.append(str(lib))
    for d in lib_dirs:
        cmd.append("-L" + str(d))
    if rpath:
        cmd.append("-Wl,-rpath," + rpath)
        cmd.append("-Wl,--enable-new-dtags" if runpath else "-Wl,--disable-new-dtags")
    cmd.extend(extra)
    run(cmd)
    return out


@functools.cache
def fatbin(gencode: str) -> Path:
    """nvcc -fatbin for one -gencode value, cached."""
    d = _ROOT / "fatbins"
    d.mkdir(exist_ok=True)
    cu = d / "k.cu"
    if not cu.exists():
        cu.write_text(KERNEL_CU)
    out = d / (gencode.replace("=", "_").replace(",", "_") + ".fatbin")
    run(["nvcc", "-fatbin", "-gencode", gencode, "-o", str(out), str(cu)])
    return out


def fatbin_object(name: str, gencodes, pad: int = 0) -> Path:
    """An object file whose .nv_fatbin section holds one blob per gencode (8-aligned, optional zero padding)."""
    d = _ROOT / "objs"
    d.mkdir(exist_ok=True)
    lines = ['.section .nv_fatbin, "a"']
    for g in gencodes:
        lines += [".balign 8", '.incbin "%s"' % fatbin(g)]
        if pad:
            lines.append(".zero %d" % pad)
    asm = d / (name + ".S")
    asm.write_text("\n".join(lines) + "\n")
    obj = d / (name + ".o")
    run(["gcc", "-c", "-o", str(obj), str(asm)])
    return obj


ARCHS = {
    "sm_80": "arch=compute_80,code=sm_80",
    "sm_86": "arch=compute_86,code=sm_86",
    "sm_90": "arch=compute_90,code=sm_90",
    "sm_90a": "arch=compute_90a,code=sm_90a",
    "compute_90": "arch=compute_90,code=compute_90",
    "sm_100a": "arch=compute_100a,code=sm_100a",
    "sm_100f": "arch=compute_100f,code=sm_100f",
    "sm_120": "arch=compute_120,code=sm_120",
    "sm_120a": "arch=compute_120a,code=sm_120a",
}


def have_nvcc() -> bool:
    return shutil.which("nvcc") is not None


def as_nobody(cmd, **kw):
    """Run a command as uid/gid 65534 (root cannot be denied reads by chmod)."""
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd],
                          capture_output=True, text=True, check=False, **kw)


def _starts_as_nobody(python) -> str:
    """Why ``python`` cannot start as uid 65534 ("" when it can, or when setpriv itself is the trouble:
    the tests then say so themselves)."""
    res = as_nobody([python, "-c", ""])
    if res.returncode == 0 or "setpriv" in res.stderr:
        return ""
    return "%s cannot start as nobody here: %s" % (python, (res.stderr.strip().splitlines() or ["?"])[-1])


@functools.cache
def nobody_python() -> str:
    """An interpreter that starts as uid 65534, for the tests that run the collection's code as nobody:
    the running one when it can, else the system's python3 (what a managed host runs modules with; a
    pyenv Python keeps its libpython under /root, mode 0700, and cannot start as anyone else). The
    code under test is standard library only, so either runs it. "" when neither starts."""
    for python in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(python) and not _starts_as_nobody(python):
            return python
    return ""


def python_as_nobody_fails() -> str:
    """Why no interpreter here can start as nobody ("" when nobody_python() found one). The tests that
    run code as nobody skip then: nothing of theirs would run."""
    return "" if nobody_python() else _starts_as_nobody(sys.executable)


def chmod_tree(path, mode):
    for dirpath, _dirs, files in os.walk(path):
        os.chmod(dirpath, mode | 0o111)
        for f in files:
            os.chmod(os.path.join(dirpath, f), mode)
