"""pkg_probe and abi_check on hostile or broken venvs: a one-line answer, never a hang, a traceback or a wrong verdict.

Numbers refer to the cases of the attack run (docs/modules/site_packages_transplant.md, threat model).
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import abi_native as N
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.module_utils import abi_check as abi
from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import distributions as D
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import requirements as R
from ansible_collections.dflash.deploy.plugins.module_utils.site_packages_transplant import _os_message
from ansible_collections.dflash.deploy.plugins.modules import abi_check, pkg_probe


def run_module(mod, args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def _venv(tmp_path, version="3.11.7"):
    venv = tmp_path / "venv"
    site = venv / "lib" / ("python%s" % ".".join(version.split(".")[:2])) / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("version_info = %s\n" % version)
    return venv, site


def _dist(site, name, version, files=(), requires=(), metadata=None):
    di = site / ("%s-%s.dist-info" % (name.replace("-", "_"), version) if version else "%s.dist-info" % name)
    di.mkdir()
    if metadata is None:
        metadata = "Metadata-Version: 2.1\nName: %s\n%s" % (name, "Version: %s\n" % version if version else "")
        metadata += "".join("Requires-Dist: %s\n" % r for r in requires)
    (di / "METADATA").write_text(metadata)
    rows = []
    for rel in files:
        rows.append("%s,," % rel)
    (di / "RECORD").write_text("\n".join(rows + ["%s/RECORD,," % di.name]) + "\n")
    return di


# -- 10. special files where files are expected ------------------------------------------------------------------

def test_10_probe_never_reads_dev_zero_or_a_fifo(tmp_path):
    venv, site = _venv(tmp_path)
    di = _dist(site, "zeros", "1.0", files=["shared/__init__.py", "shared/z.py"])
    (di / "METADATA").unlink()
    (di / "METADATA").symlink_to("/dev/zero")
    (di / "top_level.txt").write_text("shared\n")
    other = _dist(site, "other", "1.0", files=["shared/__init__.py", "shared/z.py"])
    (other / "top_level.txt").write_text("shared\n")
    for di_ in (di, other):  # both claim shared/z.py with a size and a hash, so its content gets hashed
        (di_ / "RECORD").write_text("shared/z.py,sha256=AAAA,5\nshared/__init__.py,sha256=AAAA,3\n")
    (site / "shared").mkdir()
    (site / "shared" / "z.py").symlink_to("/dev/zero")
    os.mkfifo(site / "shared" / "__init__.py")
    fifo_meta = _dist(site, "fifo", "2.0")
    (fifo_meta / "METADATA").unlink()
    os.mkfifo(fifo_meta / "METADATA")
    res = probe(str(venv))
    assert res["distributions"]["zeros"]["version"] == "1.0"  # from the dist-info name
    assert any("METADATA: is a character device" in p for p in res["problems"])
    assert any("METADATA: is a FIFO" in p for p in res["problems"])
    assert res["import_owners_detail"]["shared"]["on_disk"] == []


def test_10_abi_check_refuses_a_fifo_library(tmp_path):
    venv, site = _venv(tmp_path)
    _dist(site, "pkg", "1.0", files=["pkg/__init__.py", "pkg/ext.so", "pkg/good.so"])
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("")
    os.mkfifo(site / "pkg" / "ext.so")
    dep = N.build_lib(tmp_path / "build" / "libdep.so", "int dep(void){return 1;}", soname="libdep.so")
    N.build_lib(site / "pkg" / "good.so", "int dep(void); int g(void){return dep();}", libs=[dep],
                rpath="$ORIGIN")
    os.mkfifo(site / "pkg" / "libdep.so")  # the DT_NEEDED target, found through $ORIGIN, is a FIFO
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=[(9, 0)])
    details = " | ".join(str(f.get("detail")) for f in result["findings"])
    assert "ext.so" in details and "FIFO" in details, details
    assert "libdep.so" in details, details


# -- 11. a METADATA with a million Requires-Dist lines --------------------------------------------------------------

@pytest.mark.parametrize("lines", [50_000, 1_500_000])
def test_11_huge_requirement_lists_refused_with_a_message(tmp_path, lines):
    venv, site = _venv(tmp_path)
    meta = "Metadata-Version: 2.1\nName: bomb\nVersion: 1\n" + "Requires-Dist: a\n" * lines
    _dist(site, "bomb", "1", metadata=meta)
    res = probe(str(venv))
    assert res["distributions"]["bomb"]["requires"] == []
    assert any("Requires-Dist lines, more than the 10000 read; requirements not checked" in p
               for p in res["problems"]), res["problems"]


# -- 13. messages ---------------------------------------------------------------------------------------------------

def test_13_distribution_without_version_is_installed(tmp_path):
    venv, site = _venv(tmp_path)
    _dist(site, "noversion", None)
    _dist(site, "user", "1.0", requires=["noversion", "noversion>=2"])
    got = R.check_with_packaging(D.scan(str(site)), "3.11.7")
    assert [(u["requirement"], u["problem"]) for u in got] == [
        ("noversion>=2", "installed without a version: >=2 cannot be checked")]


@pytest.mark.parametrize("mod", [pkg_probe, abi_check])
@pytest.mark.parametrize("args,match", [
    ({"environment": {"LD_LIBRARY_PATH": "/a\x00/b"}}, "holds a NUL byte"),
    ({"environment": {"A=B": "1"}}, "not a valid variable name"),
    ({"import_timeout": -5}, "import_timeout must be a positive number of seconds"),
    ({"import_timeout": 0}, "import_timeout must be a positive number of seconds"),
])
def test_13_bad_options_named(tmp_path, capsys, mod, args, match):
    venv, _site = _venv(tmp_path)
    res = run_module(mod, dict(args, venv=str(venv)), capsys)
    assert res["failed"] is True and match in res["msg"], res["msg"]


def test_13_out_of_space_message_without_a_file_name():
    msg = _os_message(OSError(errno.ENOSPC, "No space left on device"), "/opt/venv")
    assert msg == ("no space left on the destination filesystem of /opt/venv; the run was rolled back and "
                   "nothing was changed")
    msg = _os_message(OSError(errno.ENOSPC, "No space left on device", "/opt/venv/x"), "/opt/venv")
    assert "(/opt/venv/x)" in msg and "None" not in msg


# -- 12. the loader's rules: ELF identity, names with a slash, no section headers, package names ------------------

def _elf_header_only(path: Path, bits: int, endian: str, machine: int = 62):
    """A minimal ET_DYN ELF (null section + .shstrtab) of the given class and byte order."""
    import struct
    e = "<" if endian == "little" else ">"
    strtab = b"\0.shstrtab\0"
    ehsize, shentsize = (64, 64) if bits == 64 else (52, 40)
    shoff = ehsize + len(strtab)
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1 if endian == "little" else 2, 1]) + b"\0" * 9
    if bits == 64:
        hdr = struct.pack(e + "HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, ehsize, 0, 0, shentsize, 2, 1)
        null = b"\0" * shentsize
        sec = struct.pack(e + "IIQQQQIIQQ", 1, 3, 0, 0, ehsize, len(strtab), 0, 0, 1, 0)
    else:
        hdr = struct.pack(e + "HHIIIIIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, ehsize, 0, 0, shentsize, 2, 1)
        null = b"\0" * shentsize
        sec = struct.pack(e + "IIIIIIIIII", 1, 3, 0, 0, ehsize, len(strtab), 0, 0, 1, 0)
    path.write_bytes(ident + hdr + strtab + null + sec)
    return path


def _patch_machine(path: Path, machine: int):
    data = bytearray(path.read_bytes())
    data[18:20] = machine.to_bytes(2, "little")
    path.write_bytes(bytes(data))


def _loader_loads(path: Path, cwd=None) -> tuple[bool, str]:
    import subprocess
    code = ("import ctypes, sys\ntry:\n    ctypes.CDLL(sys.argv[1])\n    print('loaded')\n"
            "except OSError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=cwd,
                         check=True).stdout.strip()
    return out == "loaded", out


def _pkg_venv(tmp_path, files, version="3.11.7"):
    venv, site = _venv(tmp_path, version)
    _dist(site, "pkg", "1.0", files=["pkg/__init__.py"] + ["pkg/" + f for f in files])
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("")
    return venv, site


@pytest.mark.parametrize("kind", ["elf32", "big-endian", "aarch64"])
def test_12_elf_of_another_class_byte_order_or_machine(tmp_path, kind):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    lib = site / "pkg" / "ext.so"
    if kind == "elf32":
        _elf_header_only(lib, 32, "little", machine=3)
    elif kind == "big-endian":
        _elf_header_only(lib, 64, "big")
    else:
        N.build_lib(lib, "int f(void){return 0;}")
        _patch_machine(lib, 183)
    ok, why = _loader_loads(lib)
    assert not ok, why  # the real loader refuses it ...
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=[(9, 0)])
    assert result["compatible"] is False  # ... and so does abi_check, by name
    assert result["findings"][0]["kind"] == "wrong_architecture", result["findings"]
    assert "this venv's Python is 64-bit little-endian x86_64" in result["findings"][0]["detail"]


def test_12_loader_skips_a_dependency_of_another_machine(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    bad_dir, good_dir = tmp_path / "bad", tmp_path / "good"
    dep = N.build_lib(good_dir / "libdep.so", "int dep(void){return 1;}", soname="libdep.so")
    bad_dir.mkdir()
    shutil.copy(dep, bad_dir / "libdep.so")
    _patch_machine(bad_dir / "libdep.so", 183)
    lib = N.build_lib(site / "pkg" / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep],
                      rpath="%s:%s" % (bad_dir, good_dir))
    ok, why = _loader_loads(lib)
    assert ok, why  # ld.so passes over bad/libdep.so and takes good/libdep.so
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=[(9, 0)])
    needed = result["files"][0]["needed"]
    assert [(d["name"], d["path"]) for d in needed if d["name"] == "libdep.so"] == [
        ("libdep.so", str(good_dir / "libdep.so"))]
    assert not [f for f in result["findings"] if f["severity"] == "error"], result["findings"]


def test_12_needed_name_with_a_slash_is_relative_to_the_working_directory(tmp_path):
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldcache import SystemLibraries
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload.ldresolve import Resolver
    work = tmp_path / "work"
    dep = N.build_lib(work / "sub" / "libdep.so", "int dep(void){return 1;}")  # no SONAME: NEEDED is the path
    lib = tmp_path / "elsewhere" / "ext.so"
    lib.parent.mkdir()
    N.run(["gcc", "-shared", "-fPIC", "-o", str(lib), "-x", "c", "-", "-x", "none", "sub/libdep.so"], cwd=work,
          input="int dep(void); int f(void){return dep();}\n")
    from ansible_collections.dflash.deploy.plugins.module_utils.elfload.elf import read_summary
    summary = read_summary(str(lib))
    assert summary["needed"][0] == "sub/libdep.so"
    assert _loader_loads(lib, cwd=work)[0] and not _loader_loads(lib, cwd=tmp_path)[0]
    for cwd, expect in ((str(work), str(dep)), (str(tmp_path), None)):
        found, _via = Resolver(SystemLibraries("/"), cwd=cwd).search("sub/libdep.so", summary)
        assert found == expect


def test_12_library_without_section_headers_loads_and_is_checked(tmp_path):
    venv, site = _pkg_venv(tmp_path, ["ext.so"])
    dep = N.build_lib(tmp_path / "build" / "libdep.so", "int dep(void){return 1;}", soname="libdep.so")
    lib = N.build_lib(site / "pkg" / "ext.so", "int dep(void); int f(void){return dep();}", libs=[dep],
                      rpath=str(dep.parent))
    data = bytearray(lib.read_bytes())
    data[0x28:0x30] = b"\0" * 8  # e_shoff
    data[0x3C:0x40] = b"\0" * 4  # e_shnum, e_shstrndx: what sstrip leaves
    lib.write_bytes(bytes(data))
    ok, why = _loader_loads(lib)
    assert ok, why
    result = abi.check(str(venv), packages=["pkg"], gpu_ccs=[(9, 0)])
    assert result["compatible"] is True, result["msg"]
    assert [d["path"] for d in result["files"][0]["needed"] if d["name"] == "libdep.so"] == [str(dep)]
    assert "symbols_unchecked" in [f["kind"] for f in result["findings"]]


@pytest.mark.parametrize("name", ["../../../../usr/lib/x86_64-linux-gnu", "/usr/lib", "pkg/../..", "a b"])
def test_12_packages_are_names_not_paths(tmp_path, name):
    venv, _site = _pkg_venv(tmp_path, [])
    result = abi.check(str(venv), packages=[name], gpu_ccs=[(9, 0)])
    assert result["files"] == []
    assert result["findings"][0]["kind"] == "package_not_found"
    assert "not an import or distribution name" in result["findings"][0]["detail"]


def test_10_fifo_pyvenv_cfg_and_torch_files(tmp_path):
    """The same cause elsewhere: pyvenv.cfg, torch/version.py and torch/__init__.py are read as regular files only."""
    venv, site = _venv(tmp_path)
    (venv / "pyvenv.cfg").unlink()
    os.mkfifo(venv / "pyvenv.cfg")
    (venv / "bin").mkdir()
    os.symlink(sys.executable, venv / "bin" / "python")
    _dist(site, "torch", "2.11.0", files=["torch/__init__.py", "torch/version.py"])
    (site / "torch").mkdir()
    os.mkfifo(site / "torch" / "__init__.py")
    os.mkfifo(site / "torch" / "version.py")
    res = probe(str(venv))
    assert res["distributions"]["torch"]["version"] == "2.11.0"
    assert "torch: torch/version.py unreadable: is a FIFO, not a regular file" in res["problems"]
    result = abi.check(str(venv), packages=["torch"], gpu_ccs=[(9, 0)])
    assert result["torch"]["version"] == "2.11.0"
